//! `EXPAND` on a small graph whose answers are known: hop ranges count a
//! record at the first hop the walk meets it, `MAX` returns no relation
//! whose far end it did not reach, seeds that are not entities are hop 0
//! themselves, and a seed named by external id under `AS OF` is the
//! version current at the cut.

use std::sync::Arc;

use engram::query::lang::{Params, QueryExt};
use engram::{Engram, ManualClock, Options, Principal, Session};

const T0: i64 = 1_780_000_000_000;

fn ext_ids(s: &Session, text: &str) -> Vec<String> {
    let out = s
        .query(text, &Params::new())
        .unwrap_or_else(|e| panic!("{text}\n{e}"));
    let mut ids: Vec<String> = out
        .rows
        .iter()
        .map(|r| r["external_id"].as_str().unwrap_or("?").to_string())
        .collect();
    ids.sort();
    ids
}

/// A new store whose clock starts at `T0`.
fn clocked_store() -> (tempfile::TempDir, ManualClock, Engram) {
    let tmp = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let db = Engram::open(
        tmp.path().join("s"),
        Options {
            clock: Arc::new(clock.clone()),
            ..Options::default()
        },
    )
    .unwrap();
    (tmp, clock, db)
}

/// Bob works for Acme, Carol works for Acme, Dan knows Bob; Bob is then
/// corrected (renamed Robert) at `T0 + 10 s`.
fn graph() -> (tempfile::TempDir, Engram, String) {
    let (tmp, clock, db) = clocked_store();
    let s = db.session(Principal::admin("t"));
    let lines = r#"{"external_id":"bob","record":"entity","entity_type":"person","name":"Bob"}
{"external_id":"acme","record":"entity","entity_type":"org","name":"Acme"}
{"external_id":"carol","record":"entity","entity_type":"person","name":"Carol"}
{"external_id":"dan","record":"entity","entity_type":"person","name":"Dan"}
{"external_id":"rel1","record":"relation","subject":"bob","predicate":"works_for","object":"acme"}
{"external_id":"rel2","record":"relation","subject":"carol","predicate":"works_for","object":"acme"}
{"external_id":"rel3","record":"relation","subject":"dan","predicate":"knows","object":"bob"}
{"external_id":"e1","kind":"note","text":"an event"}
"#;
    let records = engram::query::parse_jsonl(lines).unwrap();
    s.append(records.into_iter().map(|l| l.record).collect())
        .unwrap();
    clock.advance(10_000);
    let fix = engram::query::parse_jsonl(
        r#"{"external_id":"bob","supersedes":"bob","record":"entity","entity_type":"person","name":"Robert"}"#,
    )
    .unwrap();
    s.append(fix.into_iter().map(|l| l.record).collect())
        .unwrap();
    clock.advance(10_000);
    let cut = engram::time::format_rfc3339(T0 + 5_000);
    drop(s);
    (tmp, db, cut)
}

#[test]
fn a_hop_range_counts_a_record_at_the_first_hop_it_is_met() {
    let (_tmp, db, _) = graph();
    let s = db.session(Principal::admin("t"));
    // rel1 and rel3 are one hop from Robert; met again from Acme and Dan's
    // side they stay at hop 1
    assert_eq!(
        ext_ids(
            &s,
            "FIND ANY EXPAND FROM ENTITY 'Robert' HOPS 2..2 RETURN external_id"
        ),
        ["carol", "rel2"]
    );
    assert_eq!(
        ext_ids(
            &s,
            "FIND ANY EXPAND FROM ENTITY 'Robert' HOPS 1..1 RETURN external_id"
        ),
        ["acme", "dan", "rel1", "rel3"]
    );
}

#[test]
fn max_nodes_returns_no_relation_whose_far_end_it_did_not_reach() {
    let (_tmp, db, _) = graph();
    let s = db.session(Principal::admin("t"));
    assert_eq!(
        ext_ids(
            &s,
            "FIND ANY EXPAND FROM ENTITY 'Acme' HOPS 0..2 MAX 1 RETURN external_id"
        ),
        ["acme"]
    );
    let two = ext_ids(
        &s,
        "FIND ANY EXPAND FROM ENTITY 'Acme' HOPS 0..2 MAX 2 RETURN external_id",
    );
    assert_eq!(two.len(), 3, "{two:?}");
    assert!(two.contains(&"acme".to_string()), "{two:?}");
}

#[test]
fn a_seed_that_is_not_an_entity_is_hop_0_itself() {
    let (_tmp, db, _) = graph();
    let s = db.session(Principal::admin("t"));
    assert_eq!(
        ext_ids(&s, "FIND ANY EXPAND FROM 'e1' HOPS 0..1 RETURN external_id"),
        ["e1"]
    );
    // a relation seed: itself and its ends at hop 0, what they touch at 1
    let out = s
        .query(
            "FIND ANY EXPAND FROM 'rel1' HOPS 0..1 AS g RETURN external_id",
            &Params::new(),
        )
        .unwrap();
    assert_eq!(out.rows.len(), 7, "{:?}", out.rows);
    assert_eq!(
        ext_ids(
            &s,
            "FIND ANY EXPAND FROM 'rel1' HOPS 1..1 RETURN external_id"
        ),
        ["carol", "dan", "rel2", "rel3"]
    );
}

#[test]
fn an_external_id_seed_under_as_of_is_the_version_current_at_the_cut() {
    let (_tmp, db, cut) = graph();
    let s = db.session(Principal::admin("t"));
    let at_cut = format!("FIND ANY AS OF '{cut}' EXPAND FROM 'bob' HOPS 0..1 RETURN external_id");
    assert_eq!(ext_ids(&s, &at_cut), ["acme", "bob", "dan", "rel1", "rel3"]);
    // the same as naming the entity by the name it had then
    let by_name =
        format!("FIND ANY AS OF '{cut}' EXPAND FROM ENTITY 'Bob' HOPS 0..1 RETURN external_id");
    assert_eq!(ext_ids(&s, &at_cut), ext_ids(&s, &by_name));
}

/// Seeds named more than once (a retriever, an entity, a record) seed
/// once: the same answer as naming each once. (This guards the answer;
/// the cost of repeats, once quadratic, is not timed in a test.)
#[test]
fn a_seed_named_twice_seeds_once() {
    let (_tmp, db, _) = graph();
    let s = db.session(Principal::admin("t"));
    let once = ext_ids(
        &s,
        "FIND ANY EXPAND FROM ENTITY 'Acme' HOPS 1 AS a \
         EXPAND FROM a, 'rel3' HOPS 0..1 AS b RETURN external_id",
    );
    assert!(once.contains(&"rel2".to_string()), "{once:?}");
    let repeated = ext_ids(
        &s,
        "FIND ANY EXPAND FROM ENTITY ('Acme', 'Acme') HOPS 1 AS a \
         EXPAND FROM a, a, 'rel3', a, 'rel3' HOPS 0..1 AS b RETURN external_id",
    );
    assert_eq!(once, repeated);
}

/// `ID ($ids)` splices a list parameter's ids in, as `ENTITY ($names)`
/// does and as the checker counts them (it was refused: "must be a
/// string").
#[test]
fn an_id_seed_takes_a_list_parameter() {
    use engram::query::lang::ParamValue;
    let (_tmp, db, _) = graph();
    let s = db.session(Principal::admin("t"));
    let id = |e: &str| {
        s.resolve(&engram::RecordRef::External(e.into()))
            .unwrap()
            .to_string()
    };
    let mut params = Params::new();
    params.insert("ids", ParamValue::List(vec![id("rel3"), id("e1")]));
    let out = s
        .query(
            "FIND ANY EXPAND FROM ID ($ids) HOPS 0..1 RETURN external_id",
            &params,
        )
        .unwrap();
    let mut got: Vec<&str> = out
        .rows
        .iter()
        .map(|r| r["external_id"].as_str().unwrap())
        .collect();
    got.sort();
    assert_eq!(
        got,
        ext_ids(
            &s,
            &format!(
                "FIND ANY EXPAND FROM ID ('{}', '{}') HOPS 0..1 RETURN external_id",
                id("rel3"),
                id("e1")
            )
        )
    );
    assert!(got.contains(&"e1") && got.contains(&"rel3"), "{got:?}");
    // bound to no ids: refused, as `ENTITY ($names)` bound to `[]` is
    let mut empty = Params::new();
    empty.insert("ids", ParamValue::List(Vec::new()));
    for text in [
        "FIND ANY EXPAND FROM ID ($ids) RETURN external_id",
        "FIND ANY EXPAND FROM $ids RETURN external_id",
        "FIND ANY EXPAND FROM ENTITY ($ids) RETURN external_id",
    ] {
        let e = s.query(text, &empty).unwrap_err().to_string();
        assert!(e.contains("empty_list"), "{text}: {e}");
    }
}

/// Under `AS OF`, a seed named by external id whose chain gained a label
/// after the cut is the version current then, for a principal without the
/// label too (the seed vanished: its current version was looked up with
/// the principal's labels, and hidden); as by the name it had then.
#[test]
fn an_external_id_seed_under_as_of_is_found_past_a_label_added_later() {
    let (_tmp, clock, db) = clocked_store();
    let admin = db.session(Principal::admin("t"));
    let lines = r#"{"external_id":"e0","record":"entity","entity_type":"person","name":"Ann"}
{"external_id":"e1","record":"entity","entity_type":"person","name":"Ben"}
{"external_id":"r1","record":"relation","subject":"e0","predicate":"knows","object":"e1"}
"#;
    let records = engram::query::parse_jsonl(lines).unwrap();
    admin
        .append(records.into_iter().map(|l| l.record).collect())
        .unwrap();
    clock.advance(10_000);
    let fix = engram::query::parse_jsonl(
        r#"{"external_id":"e0","supersedes":"e0","record":"entity","entity_type":"person","name":"Ann2","access":["ops"]}"#,
    )
    .unwrap();
    admin
        .append(fix.into_iter().map(|l| l.record).collect())
        .unwrap();
    clock.advance(10_000);
    let cut = engram::time::format_rfc3339(T0 + 5_000);
    let bob = db.session(Principal::user("t", "bob"));
    let by_ext = format!("FIND ANY AS OF '{cut}' EXPAND FROM 'e0' HOPS 0..1 RETURN external_id");
    let by_name =
        format!("FIND ANY AS OF '{cut}' EXPAND FROM ENTITY 'Ann' HOPS 0..1 RETURN external_id");
    assert_eq!(ext_ids(&bob, &by_ext), ["e0", "e1", "r1"]);
    assert_eq!(ext_ids(&bob, &by_ext), ext_ids(&bob, &by_name));
    // now, the chain's current version is hidden from bob: nothing
    let now = "FIND ANY EXPAND FROM 'e0' HOPS 0..1 RETURN external_id";
    assert!(ext_ids(&bob, now).is_empty());
    assert_eq!(ext_ids(&admin, now), ["e0", "e1", "r1"]);
}

/// `WHERE status = active` walks as a statement without a status term
/// does: only naming another status lets the walk pass through a
/// relation of that status (a relation whose validity ended was walked as
/// soon as any status term was written).
#[test]
fn a_status_term_widens_the_walk_only_by_the_statuses_it_names() {
    let tmp = tempfile::tempdir().unwrap();
    let db = Engram::open(tmp.path().join("s"), Options::default()).unwrap();
    let s = db.session(Principal::admin("t"));
    let lines = r#"{"external_id":"A","record":"entity","entity_type":"person","name":"Ann"}
{"external_id":"C","record":"entity","entity_type":"person","name":"Cal"}
{"external_id":"AC","record":"relation","subject":"A","predicate":"knows","object":"C","valid_from":"2020-01-01T00:00:00Z","valid_until":"2022-01-01T00:00:00Z"}
"#;
    let records = engram::query::parse_jsonl(lines).unwrap();
    s.append(records.into_iter().map(|l| l.record).collect())
        .unwrap();
    let q = |filter: &str| {
        ext_ids(
            &s,
            &format!("FIND ANY {filter} EXPAND FROM 'A' HOPS 0..3 RETURN external_id"),
        )
    };
    assert_eq!(q(""), ["A"]);
    assert_eq!(q("WHERE status = active"), ["A"]);
    // a term on another field may select any status: the walk passes
    // through the ended relation, and returns what the filter selects
    assert_eq!(q("WHERE status = active OR kind = 'x'"), ["A", "C"]);
    assert_eq!(q("WHERE status IN (active, historical)"), ["A", "AC", "C"]);
    assert_eq!(q("WHERE status = superseded"), Vec::<String>::new());
}
