//! One engine path: a statement equivalent to a recall request returns the
//! same hits and the same manifest (timings aside), over random requests.

use engram::query::lang::{ParamValue, Params, QueryExt};
use engram::retrieval::{Filters, Mode, RecallRequest, Weights};
use engram::{NewRecord, Principal, RecordType, Scope};

use super::common::Rng;

const WORDS: &[&str] = &[
    "checkout", "latency", "catalog", "outage", "invoice", "billing", "refund", "deploy", "cache",
    "timeout",
];
const USERS: &[&str] = &["u1", "u2", "u3"];
const KINDS: &[&str] = &["note", "alert", "user_message"];

/// The statement a recall request means (its implicit graph expansion has
/// no statement form, so requests here leave it out).
fn statement(r: &RecallRequest) -> String {
    let mut where_terms = Vec::new();
    let list = |v: &[String]| {
        v.iter()
            .map(|x| format!("'{x}'"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if !r.filters.users.is_empty() {
        where_terms.push(format!("scope.user IN ({})", list(&r.filters.users)));
    }
    if !r.filters.kinds.is_empty() {
        where_terms.push(format!("kind IN ({})", list(&r.filters.kinds)));
    }
    if !r.filters.record_types.is_empty() {
        let t: Vec<&str> = r.filters.record_types.iter().map(|t| t.name()).collect();
        where_terms.push(format!("record IN ({})", t.join(", ")));
    }
    if let Some(t) = r.filters.occurred_after {
        where_terms.push(format!(
            "occurred_at >= {}",
            engram::time::format_rfc3339(t)
        ));
    }
    let mut s = "FIND ANY".to_string();
    if !where_terms.is_empty() {
        s.push_str(&format!(" WHERE {}", where_terms.join(" AND ")));
    }
    // one retriever (vector or lexical mode) takes k candidates, hybrid 3k
    let top = if r.mode == Mode::Hybrid { r.k * 3 } else { r.k };
    let text = r.text.as_deref().unwrap_or("");
    let mut weights = Vec::new();
    if r.mode != Mode::Lexical {
        // (a client's vector is `$v`; the text is then the lexical one's)
        let q = if r.vector.is_some() { "$v" } else { "$q" };
        s.push_str(&format!(" SIMILAR TO {q} TOP {top} AS vector"));
        weights.push(format!("vector = {}", r.weights.vector));
    }
    if r.mode != Mode::Vector {
        s.push_str(&format!(" MATCH '{text}' TOP {top} AS lexical"));
        weights.push(format!("lexical = {}", r.weights.lexical));
    }
    if r.mode == Mode::Hybrid {
        s.push_str(&format!(" RECENT TOP {top} AS recency"));
        weights.push(format!("recency = {}", r.weights.recency));
        s.push_str(&format!(" AROUND TOP {top} AS episodic"));
        weights.push(format!("episodic = {}", r.weights.episodic));
    }
    // a recall fuses linearly over min-max normalised scores
    s.push_str(&format!(
        " FUSE LINEAR MINMAX WEIGHTS ({}) LIMIT {}",
        weights.join(", "),
        r.k
    ));
    // hits without text are a projection without `text`
    if !r.with_text {
        s.push_str(" RETURN id, external_id, score, ranks");
    }
    s
}

#[test]
fn statements_and_recall_requests_take_one_path() {
    let tmp = tempfile::tempdir().unwrap();
    let clock = engram::ManualClock::new(1_750_000_000_000);
    let db = super::fixture::open(tmp.path(), &clock);
    let s = db.session(Principal::admin("t"));
    let seed = super::common::seed();
    let mut rng = Rng(seed | 1);
    for i in 0..120 {
        let text: Vec<&str> = (0..4).map(|_| *rng.pick(WORDS)).collect();
        let mut r = NewRecord::event(*rng.pick(KINDS), format!("{} {i}", text.join(" ")))
            .with_scope(Scope {
                user: Some(rng.pick(USERS).to_string()),
                ..Scope::default()
            });
        if i % 3 == 0 {
            // hits without text take external ids from memory: some have one
            r = r.with_external_id(format!("ext-{i}"));
        }
        s.append(vec![r]).unwrap();
        clock.advance(60_000);
    }
    // background indexing must not move between the two reads
    db.wait_indexed().unwrap();
    for round in 0..150 {
        let mode = *rng.pick(&[Mode::Hybrid, Mode::Vector, Mode::Lexical]);
        let mut filters = Filters::default();
        if rng.below(2) == 0 {
            filters.users = vec![rng.pick(USERS).to_string()];
        }
        if rng.below(3) == 0 {
            filters.kinds = vec![rng.pick(KINDS).to_string(), rng.pick(KINDS).to_string()];
        }
        if rng.below(4) == 0 {
            filters.record_types = vec![RecordType::Event];
        }
        if rng.below(4) == 0 {
            filters.occurred_after = Some(1_750_000_000_000 + rng.below(120) as i64 * 60_000);
        }
        let text = format!("{} {}", rng.pick(WORDS), rng.pick(WORDS));
        // weights of 0 turn retrievers off, in both forms alike (not both
        // content retrievers, and not the one of a one-retriever mode:
        // refused)
        let mut weights = Weights {
            graph: 0.0,
            ..Weights::default()
        };
        if mode == Mode::Hybrid {
            match rng.below(6) {
                0 => weights.vector = 0.0,
                1 => weights.lexical = 0.0,
                _ => {}
            }
            if rng.below(4) == 0 {
                weights.recency = 0.0;
            }
            if rng.below(4) == 0 {
                weights.episodic = 0.0;
            }
        }
        // sometimes the client's own vector
        let vector = (mode != Mode::Lexical && rng.below(4) == 0).then(|| {
            (0..engram::embed::HASH_EMBEDDER_DIM)
                .map(|_| rng.below(1000) as f32 / 1000.0 - 0.5)
                .collect::<std::sync::Arc<[f32]>>()
        });
        let req = RecallRequest {
            text: Some(text.clone()),
            mode,
            k: 1 + rng.below(8) as usize,
            filters,
            // the language has no graph retriever of a recall's implicit
            // kind (seeds from the text and the other retrievers' hits)
            weights,
            vector,
            with_text: rng.below(3) != 0,
            ..RecallRequest::default()
        };
        let recall = s.recall(&req).unwrap();
        // Without text, the same hits in the same order with the same
        // scores and ranks, and no text.
        let other = s
            .recall(&RecallRequest {
                with_text: !req.with_text,
                ..req.clone()
            })
            .unwrap();
        assert_eq!(recall.hits.len(), other.hits.len());
        for (a, b) in recall.hits.iter().zip(&other.hits) {
            assert_eq!(
                (a.id, &a.external_id, a.score, &a.ranks, &a.found_by),
                (b.id, &b.external_id, b.score, &b.ranks, &b.found_by)
            );
            let (full, bare) = if req.with_text { (a, b) } else { (b, a) };
            assert!(bare.text.is_none());
            assert!(full.text.is_some(), "every event here has text");
        }
        let mut p = Params::new();
        p.insert("q", ParamValue::String(text));
        if let Some(v) = &req.vector {
            p.insert("v", ParamValue::Vector(v.to_vec()));
        }
        let stmt = statement(&req);
        let out = s
            .query(&format!("EXPLAIN {stmt}"), &p)
            .unwrap_or_else(|e| panic!("{stmt}\n{e}"));
        let ids: Vec<String> = recall.hits.iter().map(|h| h.id.to_string()).collect();
        let got: Vec<String> = out
            .rows
            .iter()
            .map(|r| r["id"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(ids, got, "seed {seed} round {round}: {stmt}");
        let m = out.manifest.unwrap().without_timings();
        assert_eq!(
            serde_json::to_value(recall.manifest.without_timings()).unwrap(),
            serde_json::to_value(m).unwrap(),
            "seed {seed} round {round}: manifests differ for {stmt}"
        );
    }
    db.close().unwrap();
}

/// A retriever weighted 0 is turned off: a statement holding one returns
/// exactly what the statement without it returns (rows, scores, ranks),
/// its hits neither results nor re-ordered by `RECENT` nor near `AROUND`;
/// an EXPAND naming it still seeds from it.
#[test]
fn a_retriever_weighted_zero_is_as_if_absent() {
    let tmp = tempfile::tempdir().unwrap();
    let (db, _clock) = super::fixture::build(tmp.path());
    let s = db.session(Principal::admin("t"));
    let rows = |q: &str| {
        let out = s
            .query(q, &Params::default())
            .unwrap_or_else(|e| panic!("{q}\n{e}"));
        format!("{:?}", out.rows)
    };
    let off = "SIMILAR TO 'Acme renews in Q3' AS s";
    for (rest, fusion) in [
        ("MATCH 'billing' AS m RECENT AS r", "FUSE LINEAR"),
        ("MATCH 'billing' AS m RECENT AS r", "FUSE RRF"),
        ("RECENT AS r", "FUSE LINEAR"),
        ("MATCH 'diet' AS m AROUND AS a", "FUSE LINEAR"),
    ] {
        let without = format!("FIND ANY {rest} {fusion} RETURN id, score, ranks");
        let with =
            format!("FIND ANY {off} {rest} {fusion} WEIGHTS (s = 0) RETURN id, score, ranks");
        assert_eq!(rows(&with), rows(&without), "{with}");
    }
    // a similarity search beside retrievers weighted 0 is alone: its
    // nearest neighbours, whatever their similarity (fused with another,
    // those at 0 or below are no match)
    let alone = rows(
        "FIND ANY SIMILAR TO 'Acme renews in Q3' TOP 60 AS v LIMIT 60 RETURN id, score, ranks",
    );
    let beside = rows(
        "FIND ANY SIMILAR TO 'Acme renews in Q3' TOP 60 AS v MATCH 'billing' AS m RECENT AS r \
         WEIGHTS (m = 0, r = 0) LIMIT 60 RETURN id, score, ranks",
    );
    assert_eq!(beside, alone);
    // seeds from a retriever weighted 0, named by an EXPAND
    let off = "SIMILAR TO 'database outage postmortem' TOP 20 AS s";
    let seeded = rows(&format!(
        "FIND ANY {off} EXPAND FROM s HOPS 1 AS g WEIGHTS (s = 0) RETURN id, ranks"
    ));
    let alone = rows(&format!(
        "FIND ANY {off} EXPAND FROM s HOPS 1 AS g RETURN id, ranks"
    ));
    let by = |rows: &str, r: &str| rows.matches(&format!("String(\"{r}\")")).count();
    assert!(by(&seeded, "g") > 0 && by(&seeded, "s") == 0, "{seeded}");
    assert!(by(&alone, "s") > 0, "{alone}");
}
