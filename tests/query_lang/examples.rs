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
    let out = run(&s, fixture::EXAMPLE_1, &none);
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
        .filter(|(r, _)| fixture::found_by(&r["ranks"], "graph"))
        .map(|(_, e)| e.clone())
        .collect();
    assert!(
        graph_found.contains(&"ent_team".to_string()),
        "{graph_found:?}"
    );

    // 2. diet preferences recorded since March, keyword only
    let out = run(&s, fixture::EXAMPLE_2, &none);
    assert_eq!(ext_ids(&s, &out), ["diet/new"]);

    // 3. summaries similar to $qvec in project apollo, min similarity 0.35, valid now
    let mut p = Params::new();
    p.insert("qvec", ParamValue::Vector(vec![1.0, 0.2, 0.0, 0.0]));
    let out = run(&s, fixture::EXAMPLE_3, &p);
    assert_eq!(ext_ids(&s, &out), ["apollo/s1"]);

    // 4. where did "Acme renews in Q3" come from: hits with sources three levels up
    let out = run(&s, fixture::EXAMPLE_4, &none);
    let first = &out.rows[0];
    assert_eq!(first["text"], "Acme renews in Q3");
    let sources = fixture::sources_of(&first["sources"]);
    assert_eq!(
        sources,
        [("acme/sum".to_string(), 1), ("evt_9f2".to_string(), 2)]
    );

    // 5. everything derived from event evt_9f2, superseded versions included
    let all = run(&s, fixture::EXAMPLE_5, &none);
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
    let out = run(&s, fixture::EXAMPLE_6, &none);
    let got = ext_ids(&s, &out);
    let by_graph: Vec<String> = out
        .rows
        .iter()
        .zip(&got)
        .filter(|(r, _)| fixture::found_by(&r["ranks"], "graph"))
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
    // a zero vector is located at its parameter too
    let e = s
        .query("FIND ANY SIMILAR TO $v MODEL 'text-embedding-3-small'", &{
            let mut p = Params::new();
            p.insert("v", ParamValue::Vector(vec![0.0; 4]));
            p
        })
        .unwrap_err();
    let text = e.to_string();
    assert!(text.contains("zero"), "{text}");
    assert!(text.contains('^'), "no caret: {text}");
    db.close().unwrap();
}

/// Under `AS OF t`, attached derivatives are those ingested by `t`, with
/// the status they had then: the store as it was, lineage included.
#[test]
fn attachments_under_as_of_hold_only_what_existed_then() {
    use engram::ManualClock;
    const DAY: i64 = 86_400_000;
    let tmp = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_700_000_000_000);
    let db = fixture::open(tmp.path(), &clock);
    let s = db.session(Principal::admin("t"));
    let lines = |jsonl: &str| -> Vec<engram::NewRecord> {
        engram::query::parse_jsonl(jsonl)
            .unwrap()
            .into_iter()
            .map(|l| l.record)
            .collect()
    };
    s.append(lines(
        r#"{"external_id":"m1","kind":"user_message","text":"billing issue"}
{"external_id":"d0","record":"assertion","kind":"fact","text":"an early fact","sources":["m1"]}"#,
    ))
    .unwrap();
    clock.advance(DAY);
    let then = engram::time::format_rfc3339(1_700_000_000_000 + DAY / 2);
    s.append(lines(
        r#"{"external_id":"d1","record":"assertion","kind":"fact","text":"a later fact","sources":["m1"]}"#,
    ))
    .unwrap();
    let derivatives = |text: &str| -> Vec<String> {
        let out = run(&s, text, &Params::new());
        assert_eq!(out.rows.len(), 1, "{text}");
        out.rows[0]["derivatives"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["external_id"].as_str().unwrap_or("-").to_string())
            .collect()
    };
    assert_eq!(
        derivatives("FIND events WITH DERIVATIVES RETURN external_id, derivatives"),
        ["d0", "d1"]
    );
    assert_eq!(
        derivatives(&format!(
            "FIND events AS OF '{then}' WITH DERIVATIVES RETURN external_id, derivatives"
        )),
        ["d0"],
        "a record ingested after AS OF was attached"
    );
}

/// A derivative past its retention period, before `compact`, is attached
/// as a deleted one is: kind and status `deleted`, no text (its kind and
/// live status were shown).
#[test]
fn an_attached_derivative_past_retention_shows_as_deleted() {
    use engram::ManualClock;
    let tmp = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_700_000_000_000);
    let db = fixture::open(tmp.path(), &clock);
    let s = db.session(Principal::admin("t"));
    s.set_retention("ephemeral", Some(60_000)).unwrap();
    let lines = engram::query::parse_jsonl(
        r#"{"external_id":"m1","kind":"user_message","text":"billing issue"}
{"external_id":"d0","record":"assertion","kind":"fact","text":"a short-lived fact","sources":["m1"],"retention_class":"ephemeral"}"#,
    )
    .unwrap();
    s.append(lines.into_iter().map(|l| l.record).collect())
        .unwrap();
    clock.advance(120_000);
    let out = run(
        &s,
        "FIND events WITH DERIVATIVES RETURN external_id, derivatives",
        &Params::new(),
    );
    assert_eq!(out.rows.len(), 1);
    let d = &out.rows[0]["derivatives"][0];
    assert_eq!(
        (d["kind"].as_str(), d["status"].as_str()),
        (Some("deleted"), Some("deleted")),
        "{d}"
    );
    assert!(d["text"].is_null() && d["external_id"].is_null(), "{d}");
}

/// `RECENT` with `AROUND` and no evidence retriever: recency is what ranks,
/// and the neighbourhood grows around its hits; they are not dropped.
#[test]
fn recent_with_around_keeps_the_recent_hits() {
    use engram::ManualClock;
    let tmp = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_700_000_000_000);
    let db = fixture::open(tmp.path(), &clock);
    let s = db.session(Principal::admin("t"));
    let jsonl: String = (1..=7)
        .map(|i| {
            format!(
                "{{\"external_id\":\"e{i}\",\"kind\":\"msg\",\"scope\":{{\"conversation\":\"c\"}},\"occurred_at\":\"2025-01-01T10:0{i}:00Z\",\"text\":\"turn {i}\"}}\n"
            )
        })
        .collect();
    let lines = engram::query::parse_jsonl(&jsonl).unwrap();
    s.append(lines.into_iter().map(|l| l.record).collect())
        .unwrap();
    let ids = |text: &str| -> Vec<String> {
        let out = run(&s, text, &Params::new());
        col(&out, "external_id")
    };
    let recent = ids("FIND ANY RECENT TOP 2 RETURN external_id");
    assert_eq!(recent, ["e7", "e6"]);
    for fusion in ["", " FUSE LINEAR"] {
        let with = ids(&format!(
            "FIND ANY RECENT TOP 2 AROUND{fusion} RETURN external_id"
        ));
        for e in ["e7", "e6", "e5"] {
            assert!(with.contains(&e.to_string()), "{fusion}: {with:?}");
        }
    }
}

/// A row read `AS OF t` shows the end of validity known at `t`, like its
/// status: an expiry made later is not in it.
#[test]
fn valid_until_under_as_of_is_what_was_known_then() {
    use engram::ManualClock;
    const DAY: i64 = 86_400_000;
    let t0 = 1_700_000_000_000;
    let tmp = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(t0);
    let db = fixture::open(tmp.path(), &clock);
    let s = db.session(Principal::admin("t"));
    s.append(vec![
        engram::NewRecord::event("msg", "the api is down").with_external_id("e1"),
    ])
    .unwrap();
    clock.advance(DAY);
    s.expire(&engram::RecordRef::External("e1".into()), t0 + DAY / 4)
        .unwrap();
    let then = engram::time::format_rfc3339(t0 + DAY / 2);
    let row = |text: &str| {
        let out = run(&s, text, &Params::new());
        assert_eq!(out.rows.len(), 1, "{text}");
        (
            out.rows[0]["status"].as_str().unwrap().to_string(),
            out.rows[0]["valid_until"].clone(),
        )
    };
    let (status, until) = row(&format!(
        "FIND ANY WHERE status IN (active, historical) AS OF '{then}' VALID AT '{then}' RETURN status, valid_until"
    ));
    assert_eq!(status, "active");
    assert!(until.is_null(), "a later expiry shows under AS OF: {until}");
    let (status, until) =
        row("FIND ANY WHERE status IN (active, historical) RETURN status, valid_until");
    assert_eq!(status, "historical");
    assert_eq!(
        until,
        engram::time::format_rfc3339(t0 + DAY / 4).as_str(),
        "now, the expiry shows"
    );
}

/// `RETURN side` tells a `TRACE ... BOTH` row's way from the traced record
/// (a source and a derivative at depth 1 read alike without it); a `FIND`
/// asking for it is refused, as for `depth`.
#[test]
fn a_trace_both_row_says_its_side() {
    let tmp = tempfile::tempdir().unwrap();
    let (db, _clock) = fixture::build(tmp.path());
    let s = db.session(Principal::admin("t"));
    let lines = engram::query::parse_jsonl(
        r#"{"external_id":"src","kind":"note","text":"the source"}
{"external_id":"mid","record":"summary","generator":"sum@1","text":"the middle","sources":["src"]}
{"external_id":"top","record":"summary","generator":"sum@1","text":"the top","sources":["mid"]}
"#,
    )
    .unwrap();
    s.append(lines.into_iter().map(|l| l.record).collect())
        .unwrap();
    let out = run(
        &s,
        "TRACE 'mid' BOTH RETURN external_id, depth, side",
        &Params::new(),
    );
    let mut rows: Vec<String> = out
        .rows
        .iter()
        .map(|r| format!("{} {} {}", r["external_id"], r["depth"], r["side"]))
        .collect();
    rows.sort();
    assert_eq!(
        rows,
        [r#""src" 1 "source""#, r#""top" 1 "derivative""#],
        "{rows:?}"
    );
    let e = s
        .query("FIND ANY RETURN id, side", &Params::new())
        .unwrap_err()
        .to_string();
    assert!(e.contains("a TRACE field"), "{e}");
}

/// Without `INCLUDE SUPERSEDED`, a `TRACE` does not walk through the
/// versions it leaves out: the sources and subject only an older version
/// had are not the current record's lineage (they came back at depth 2
/// with no row at depth 1 above them).
#[test]
fn a_trace_does_not_pass_through_the_superseded_versions_it_leaves_out() {
    let tmp = tempfile::tempdir().unwrap();
    let (db, _clock) = fixture::build(tmp.path());
    let s = db.session(Principal::admin("t"));
    let lines = engram::query::parse_jsonl(
        r#"{"external_id":"src/old","kind":"note","text":"the first source"}
{"external_id":"src/new","kind":"note","text":"the second source"}
{"external_id":"who","record":"entity","entity_type":"person","name":"Who"}
{"external_id":"fact","record":"assertion","kind":"fact","text":"a fact","sources":["src/old"],"subject":"who"}
{"external_id":"use","record":"summary","generator":"sum@1","text":"built on the old fact","sources":["fact"]}
{"external_id":"fact","record":"assertion","kind":"fact","text":"the fact, corrected","sources":["src/new"],"supersedes":"fact"}
"#,
    )
    .unwrap();
    s.append(lines.into_iter().map(|l| l.record).collect())
        .unwrap();
    let none = Params::new();
    let rows = |text: &str| {
        let out = run(&s, text, &none);
        let mut v: Vec<String> = out
            .rows
            .iter()
            .map(|r| format!("{} {} {}", r["external_id"], r["status"], r["depth"]))
            .collect();
        v.sort();
        v
    };
    assert_eq!(
        rows("TRACE 'fact' SOURCES"),
        [r#""src/new" "active" 1"#],
        "only the current version's source"
    );
    let all = rows("TRACE 'fact' SOURCES INCLUDE SUPERSEDED");
    assert_eq!(all.len(), 4, "{all:?}");
    for want in [
        r#""fact" "superseded" 1"#,
        r#""src/new" "active" 1"#,
        r#""src/old" "active" 2"#,
        r#""who" "approved" 2"#,
    ] {
        assert!(all.contains(&want.to_string()), "{want}: {all:?}");
    }
    // an older version past its retention period shows `deleted`, and is
    // not walked through either
    let (db2_dir, clock) = (
        tempfile::tempdir().unwrap(),
        engram::ManualClock::new(fixture::JUNE_1),
    );
    let db2 = fixture::open(db2_dir.path(), &clock);
    let s2 = db2.session(Principal::admin("t"));
    s2.set_retention("eph", Some(fixture::DAY)).unwrap();
    let lines = engram::query::parse_jsonl(
        r#"{"external_id":"a","kind":"note","text":"the first source"}
{"external_id":"b","kind":"note","text":"the second source"}
{"external_id":"c","record":"assertion","kind":"fact","text":"a fact","sources":["a"],"retention_class":"eph"}
{"external_id":"c","record":"assertion","kind":"fact","text":"the fact, corrected","sources":["b"],"supersedes":"c"}
"#,
    )
    .unwrap();
    s2.append(lines.into_iter().map(|l| l.record).collect())
        .unwrap();
    clock.advance(2 * fixture::DAY);
    let out = run(&s2, "TRACE 'c' SOURCES", &none);
    let got: Vec<String> = out
        .rows
        .iter()
        .map(|r| format!("{} {}", r["external_id"], r["depth"]))
        .collect();
    assert_eq!(got, [r#""b" 1"#], "{got:?}");
    db2.close().unwrap();
    // downstream of the first source: the old version and what was built
    // on it are reached only through a superseded record
    assert!(rows("TRACE 'src/old' DERIVATIVES").is_empty());
    assert_eq!(
        rows("TRACE 'src/old' DERIVATIVES INCLUDE SUPERSEDED").len(),
        3,
        "the old fact, its correction and the summary"
    );
}
