//! Answers stay bounded whatever the records hold: a history of many
//! large versions, a hit's attached sources, a `TRACE`'s rows carry at
//! most their answer's text budget (16 MiB, counted as JSON writes it),
//! the rest said to be left out.

use engram::query::lang::{Params, QueryExt};
use engram::{Body, ManualClock, NewRecord, Principal};

use crate::common::{ext, open};

const T0: i64 = 1_741_428_861_000;

/// A mebibyte of control characters: six in JSON.
fn big(tag: usize) -> String {
    format!("zebra {tag} {}", "\u{1}".repeat((1 << 20) - 16))
}

#[test]
fn a_history_of_large_versions_leaves_out_the_oldest_content() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("t"));
    s.append(vec![NewRecord::event("note", big(0)).with_external_id("c")])
        .unwrap();
    for v in 1..6 {
        s.append(vec![NewRecord::event("note", big(v)).superseding(ext("c"))])
            .unwrap();
    }
    let h = s.history(&ext("c")).unwrap();
    assert_eq!(h.len(), 6);
    // newest first within 16 MiB: three versions of 6 MiB each
    let kept: Vec<bool> = h.iter().map(|v| v.text.is_some()).collect();
    assert_eq!(kept, [false, false, false, true, true, true]);
    assert!(h[..3].iter().all(|v| v.content_omitted && v.data.is_none()));
    assert!(h[3..].iter().all(|v| !v.content_omitted));
    // (read by id, a version left out comes whole)
    let first = s.get(&engram::RecordRef::Id(h[0].id)).unwrap();
    assert!(first.text.is_some_and(|t| t.starts_with("zebra 0")));
    db.close().unwrap();
}

#[test]
fn attached_sources_and_trace_rows_share_the_answer_text_budget() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("t"));
    let events: Vec<NewRecord> = (0..5)
        .map(|i| NewRecord::event("note", big(i)).with_external_id(format!("e{i}")))
        .collect();
    s.append(events).unwrap();
    let sources = (0..5).map(|i| ext(&format!("e{i}"))).collect();
    s.append(vec![NewRecord {
        body: Body::Summary {
            generator: "g".into(),
        },
        kind: "summary".into(),
        text: Some("zebra digest".into()),
        sources,
        external_id: Some("sum".into()),
        ..NewRecord::default()
    }])
    .unwrap();
    let out = s
        .query(
            "FIND summaries MATCH 'digest' WITH SOURCES DEPTH 1 RETURN id, sources",
            &Params::default(),
        )
        .unwrap();
    let linked = out.rows[0]["sources"].as_array().unwrap().clone();
    assert_eq!(linked.len(), 5);
    let with_text = linked.iter().filter(|l| l["text"].is_string()).count();
    let omitted = linked
        .iter()
        .filter(|l| l["text_omitted"] == serde_json::json!(true))
        .count();
    assert_eq!((with_text, omitted), (3, 2), "{linked:?}");
    let out = s
        .query("TRACE 'sum' SOURCES RETURN id, text", &Params::default())
        .unwrap();
    let texts = out.rows.iter().filter(|r| r["text"].is_string()).count();
    assert_eq!((out.rows.len(), texts), (5, 3));
    db.close().unwrap();
}
