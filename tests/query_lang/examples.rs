//! The six acceptance examples of docs/query-language.md, run against the
//! fixture store with their results asserted.

use engram::query::lang::{ParamValue, Params, QueryExt, QueryOutput};
use engram::{Principal, Session};

use super::fixture;

fn run(s: &Session, text: &str, params: &Params) -> QueryOutput {
    s.query(text, params)
        .unwrap_or_else(|e| panic!("{text}\n{e}"))
}

fn col(out: &QueryOutput, c: &str) -> Vec<String> {
    out.rows
        .iter()
        .map(|r| match &r[c] {
            serde_json::Value::String(s) => s.clone(),
            v => v.to_string(),
        })
        .collect()
}

fn ext_ids(s: &Session, out: &QueryOutput) -> Vec<String> {
    col(out, "id")
        .iter()
        .map(|id| {
            let r = s.get(&engram::RecordRef::Id(id.parse().unwrap())).unwrap();
            r.external_id.unwrap_or_default()
        })
        .collect()
}

#[test]
fn the_six_examples_return_what_the_docs_say() {
    let tmp = tempfile::tempdir().unwrap();
    let (db, _clock) = fixture::build(tmp.path());
    let s = db.session(Principal::admin("t"));
    let none = Params::new();

    // 1. user_18's billing issue, entities two hops out, as of 2025-06-10
    let out = run(
        &s,
        "FIND ANY WHERE scope.user = 'user_18' OR record = entity AS OF 2025-06-10 \
         SIMILAR TO 'billing issue' AS sem MATCH 'billing issue' AS kw \
         EXPAND FROM sem, kw HOPS 2 AS graph LIMIT 20 \
         RETURN id, record, kind, text, score, ranks",
        &none,
    );
    assert_eq!(
        out.columns,
        ["id", "record", "kind", "text", "score", "ranks"]
    );
    let got = ext_ids(&s, &out);
    for want in ["bill/1", "bill/2", "ent_invoice", "ent_team"] {
        assert!(
            got.contains(&want.to_string()),
            "example 1 lacks {want}: {got:?}"
        );
    }
    for not in ["bill/late", "ent_db", "rel_owes"] {
        assert!(
            !got.contains(&not.to_string()),
            "example 1 has {not}: {got:?}"
        );
    }
    let graph_found: Vec<String> = out
        .rows
        .iter()
        .zip(&got)
        .filter(|(r, _)| {
            r["ranks"]
                .as_array()
                .unwrap()
                .iter()
                .any(|x| x["retriever"] == "graph")
        })
        .map(|(_, e)| e.clone())
        .collect();
    assert!(
        graph_found.contains(&"ent_team".to_string()),
        "{graph_found:?}"
    );

    // 2. diet preferences recorded since March, keyword only
    let out = run(
        &s,
        "FIND assertions KIND 'preference' WHERE ingested_at >= 2025-03-01 MATCH 'diet'",
        &none,
    );
    assert_eq!(ext_ids(&s, &out), ["diet/new"]);

    // 3. summaries similar to $qvec in project apollo, min similarity 0.35, valid now
    let mut p = Params::new();
    p.insert("qvec", ParamValue::Vector(vec![1.0, 0.2, 0.0, 0.0]));
    let out = run(
        &s,
        "FIND summaries WHERE scope.label = 'apollo' OR scope.conversation = 'apollo' VALID AT now \
         SIMILAR TO $qvec MODEL 'text-embedding-3-small' MIN 0.35",
        &p,
    );
    assert_eq!(ext_ids(&s, &out), ["apollo/s1"]);

    // 4. where did "Acme renews in Q3" come from: hits with sources three levels up
    let out = run(
        &s,
        "FIND assertions SIMILAR TO 'Acme renews in Q3' AS sem MATCH 'Acme renews in Q3' AS kw \
         WITH SOURCES DEPTH 3 LIMIT 5 RETURN id, text, score, sources",
        &none,
    );
    let first = &out.rows[0];
    assert_eq!(first["text"], "Acme renews in Q3");
    let sources: Vec<(String, u64)> = first["sources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| {
            (
                x["external_id"].as_str().unwrap_or("").to_string(),
                x["depth"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        sources,
        [("acme/sum".to_string(), 1), ("evt_9f2".to_string(), 2)]
    );

    // 5. everything derived from event evt_9f2, superseded versions included
    let all = run(
        &s,
        "TRACE 'evt_9f2' DERIVATIVES DEPTH 5 INCLUDE SUPERSEDED",
        &none,
    );
    let current = run(&s, "TRACE 'evt_9f2' DERIVATIVES DEPTH 5", &none);
    let statuses = col(&all, "status");
    assert_eq!(all.rows.len(), 4, "{:?}", col(&all, "external_id"));
    assert!(statuses.contains(&"superseded".to_string()));
    assert_eq!(current.rows.len(), 3);
    assert!(!col(&current, "status").contains(&"superseded".to_string()));
    let depth1 = run(&s, "TRACE 'evt_9f2' DERIVATIVES DEPTH 1", &none);
    assert!(
        !col(&depth1, "external_id").contains(&"acme/claim".to_string()),
        "depth 1 reaches two levels"
    );

    // 6. who else is involved in this week's outage
    let out = run(
        &s,
        "FIND ANY WHERE record = entity OR occurred_at >= now - 7d \
         SIMILAR TO 'database outage postmortem' TOP 20 AS outage \
         EXPAND FROM outage HOPS 1 VIA ('mentions', 'assigned_to', 'reported_by') AS graph \
         WEIGHTS (outage = 1.0, graph = 1.5) RETURN id, record, kind, text, score, ranks",
        &none,
    );
    let got = ext_ids(&s, &out);
    let by_graph: Vec<String> = out
        .rows
        .iter()
        .zip(&got)
        .filter(|(r, _)| {
            r["ranks"]
                .as_array()
                .unwrap()
                .iter()
                .any(|x| x["retriever"] == "graph")
        })
        .map(|(_, e)| e.clone())
        .collect();
    for who in ["ent_alice", "ent_bob", "ent_carol"] {
        assert!(
            by_graph.contains(&who.to_string()),
            "{who} not reached: {by_graph:?}"
        );
    }
    assert!(
        !by_graph.contains(&"ent_dave".to_string()),
        "followed `likes`: {by_graph:?}"
    );
    db.close().unwrap();
}

#[test]
fn explain_returns_the_manifest_and_errors_point_at_the_text() {
    let tmp = tempfile::tempdir().unwrap();
    let (db, _clock) = fixture::build(tmp.path());
    let s = db.session(Principal::admin("t"));
    let out = run(
        &s,
        "EXPLAIN FIND ANY MATCH 'billing' AS kw LIMIT 3",
        &Params::new(),
    );
    let m = out.manifest.expect("EXPLAIN gives the manifest");
    assert_eq!(m.retrievers[0].retriever, "kw");
    assert!(
        m.eligibility
            .iter()
            .any(|st| st.step == "tenant and access")
    );
    let e = s
        .query("FIND ANY SIMILAR TO $v MODEL 'text-embedding-3-small'", &{
            let mut p = Params::new();
            p.insert("v", ParamValue::Vector(vec![1.0, 2.0]));
            p
        })
        .unwrap_err();
    let text = e.to_string();
    assert!(text.contains("4") && text.contains("dimensions"), "{text}");
    assert!(text.contains('^'), "no caret: {text}");
    db.close().unwrap();
}
