//! Bad input is refused with the line and field at fault, and nothing is
//! changed silently: values a JSON parse would alter, invalid UTF-8, a
//! byte-order mark, empty names.

use super::cli::{self, fails, ok};

fn one(dir: &std::path::Path, name: &str, body: &[u8]) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p
}

#[test]
fn a_payload_that_json_would_change_is_refused_with_line_and_field() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    ok(&store, &["init"]);
    let big = one(
        tmp.path(),
        "big.jsonl",
        b"{\"tenant\":\"t\",\"kind\":\"k\",\"text\":\"x\"}\n{\"tenant\":\"t\",\"kind\":\"k\",\"text\":\"y\",\"data\":{\"id\":1234567890123456789}}\n",
    );
    let msg = fails(&store, &["ingest", big.to_str().unwrap()]);
    assert!(msg.contains("line 2") && msg.contains("data.id"), "{msg}");
    let dup = one(
        tmp.path(),
        "dup.jsonl",
        b"{\"tenant\":\"t\",\"kind\":\"k\",\"text\":\"x\",\"data\":{\"a\":1,\"a\":2}}\n",
    );
    let msg = fails(&store, &["ingest", dup.to_str().unwrap()]);
    assert!(
        msg.contains("line 1") && msg.contains("data.a") && msg.contains("twice"),
        "{msg}"
    );
    // exact values within range go through unchanged
    let fine = one(
        tmp.path(),
        "fine.jsonl",
        b"{\"external_id\":\"f\",\"tenant\":\"t\",\"kind\":\"k\",\"text\":\"x\",\"data\":{\"id\":9007199254740992,\"s\":\"1234567890123456789\"}}\n",
    );
    ok(&store, &["ingest", fine.to_str().unwrap()]);
    let r = cli::json(&ok(&store, &["get", "f", "--tenant", "t", "--json"]));
    assert_eq!(r["data"]["id"], 9007199254740992u64);
    assert_eq!(r["data"]["s"], "1234567890123456789");
    assert_eq!(cli::json(&ok(&store, &["stats", "--json"]))["records"], 1);
}

#[test]
fn invalid_utf8_names_its_line_and_a_bom_is_accepted() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let bad = one(
        tmp.path(),
        "bad.jsonl",
        b"{\"tenant\":\"t\",\"kind\":\"k\",\"text\":\"ok\"}\n{\"tenant\":\"t\",\"kind\":\"k\",\"text\":\"caf\xe9\"}\n",
    );
    let msg = fails(&store, &["ingest", bad.to_str().unwrap()]);
    assert!(msg.contains("line 2") && msg.contains("UTF-8"), "{msg}");
    let bom = one(
        tmp.path(),
        "bom.jsonl",
        b"\xEF\xBB\xBF{\"tenant\":\"t\",\"kind\":\"k\",\"text\":\"with a bom\"}\n",
    );
    ok(&store, &["ingest", bom.to_str().unwrap()]);
}

#[test]
fn empty_names_and_oversized_fields_are_named() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    ok(&store, &["init"]);
    let msg = fails(&store, &["recall", "--tenant", "", "--text", "x"]);
    assert!(msg.contains("--tenant") && msg.contains("empty"), "{msg}");
    let msg = fails(&store, &["get", "x", "--tenant", "t", "--principal", ""]);
    assert!(
        msg.contains("--principal") && msg.contains("empty"),
        "{msg}"
    );
    let huge = format!(
        "{{\"tenant\":\"t\",\"kind\":\"k\",\"text\":\"{}\"}}\n",
        "a".repeat(2 << 20)
    );
    let f = one(tmp.path(), "huge.jsonl", huge.as_bytes());
    let msg = fails(&store, &["ingest", f.to_str().unwrap()]);
    assert!(msg.contains("line 1: text:"), "{msg}");
}

/// A duplicate that carries other vectors than the stored record says it
/// stored none of them (vectors are not part of the content hash); one
/// without vectors says nothing.
#[test]
fn a_duplicate_with_other_vectors_says_they_were_not_stored() {
    use engram::{AppendOutcome, Engram, NewRecord, Options, Principal};
    let tmp = tempfile::tempdir().unwrap();
    let db = Engram::open(tmp.path().join("s"), Options::default()).unwrap();
    let s = db.session(Principal::admin("t"));
    let rec = |v: Vec<f32>| {
        NewRecord::event("note", "the same text")
            .with_external_id("k")
            .with_embedding("m", v)
    };
    s.append(vec![rec(vec![1.0, 0.0, 0.0])]).unwrap();
    let again = s.append(vec![rec(vec![0.0, 1.0, 0.0])]).unwrap().remove(0);
    assert_eq!(again.outcome, AppendOutcome::Duplicate);
    assert!(
        again
            .notes
            .iter()
            .any(|n| n.contains("keeps the vectors it has")),
        "{:?}",
        again.notes
    );
    let plain = s
        .append(vec![
            NewRecord::event("note", "the same text").with_external_id("k"),
        ])
        .unwrap()
        .remove(0);
    assert_eq!(plain.outcome, AppendOutcome::Duplicate);
    assert!(plain.notes.is_empty(), "{:?}", plain.notes);
    db.close().unwrap();
}

/// `replace_access` applies to corrections only: an append without
/// `supersedes` is refused naming it, and a correction (also one whose
/// target is named after its body is parsed, as `correct` does) is not.
#[test]
fn replace_access_applies_to_corrections_only() {
    use engram::{EngineError, Engram, NewRecord, Options, Principal, RecordRef};
    let tmp = tempfile::tempdir().unwrap();
    let db = Engram::open(tmp.path().join("s"), Options::default()).unwrap();
    let s = db.session(Principal::admin("t"));
    let mut r = NewRecord::event("note", "x").with_external_id("k");
    r.access = vec!["secret".into()];
    s.append(vec![r]).unwrap();
    let mut lone = NewRecord::event("note", "y");
    lone.replace_access = true;
    let e = s.append(vec![lone.clone()]).unwrap_err();
    assert!(
        matches!(&e, EngineError::InvalidInput { field, .. } if field == "replace_access"),
        "{e}"
    );
    lone.supersedes = Some(RecordRef::External("k".into()));
    s.append(vec![lone]).unwrap();
    assert!(
        s.get(&RecordRef::External("k".into()))
            .unwrap()
            .access
            .is_empty()
    );
    db.close().unwrap();
}

/// A file whose later line holds `data` past its limit stores nothing (the
/// limit is checked at parse, not after earlier batches were stored), and
/// `--batch-size` past the most one batch holds is refused before the file
/// is read.
#[test]
fn a_file_with_oversized_data_on_a_later_batch_stores_nothing() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    ok(&store, &["init"]);
    let mut body = String::new();
    for i in 0..1500 {
        body.push_str(&format!(
            "{{\"tenant\":\"t\",\"external_id\":\"g{i}\",\"kind\":\"note\",\"text\":\"g\"}}\n"
        ));
    }
    body.push_str(&format!(
        "{{\"tenant\":\"t\",\"kind\":\"note\",\"data\":{{\"x\":\"{}\"}}}}\n",
        "b".repeat((1 << 20) + 10)
    ));
    let f = one(tmp.path(), "p.jsonl", body.as_bytes());
    let msg = fails(&store, &["ingest", f.to_str().unwrap()]);
    assert!(
        msg.contains("line 1501") && msg.contains("nothing was stored"),
        "{msg}"
    );
    assert_eq!(cli::json(&ok(&store, &["stats", "--json"]))["records"], 0);
    let o = cli::at(
        &store,
        &["ingest", f.to_str().unwrap(), "--batch-size", "15000"],
    );
    assert_eq!(o.status.code(), Some(2), "{}", cli::text(&o));
    assert!(cli::text(&o).contains("1 to 10000"), "{}", cli::text(&o));
}

/// `engram correct` reads one JSON object over any number of lines, and
/// refuses a raw line break inside a string (no JSON) instead of storing
/// it changed; sending the same correction again says nothing new was
/// stored.
#[test]
fn correct_refuses_what_is_not_json_and_says_when_nothing_is_new() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let f = one(
        tmp.path(),
        "c.jsonl",
        b"{\"tenant\":\"t\",\"external_id\":\"c\",\"kind\":\"note\",\"text\":\"first\"}\n",
    );
    ok(&store, &["ingest", f.to_str().unwrap()]);
    let raw = one(
        tmp.path(),
        "raw.json",
        b"{\"kind\":\"note\",\"text\":\"line1\nline2\"}",
    );
    let msg = fails(
        &store,
        &["correct", "c", raw.to_str().unwrap(), "--tenant", "t"],
    );
    assert!(
        msg.contains("not one JSON object") && msg.contains("nothing was stored"),
        "{msg}"
    );
    let pretty = one(
        tmp.path(),
        "pretty.json",
        b"{\n  \"kind\": \"note\",\n  \"text\": \"second\\nline\"\n}\n",
    );
    let first = cli::text(&ok(
        &store,
        &["correct", "c", pretty.to_str().unwrap(), "--tenant", "t"],
    ));
    assert!(first.contains("is superseded by"), "{first}");
    let r = cli::json(&ok(&store, &["get", "c", "--tenant", "t", "--json"]));
    assert_eq!(r["text"], "second\nline");
    let again = cli::text(&ok(
        &store,
        &["correct", "c", pretty.to_str().unwrap(), "--tenant", "t"],
    ));
    assert!(again.contains("nothing new was stored"), "{again}");
    assert_eq!(cli::json(&ok(&store, &["stats", "--json"]))["records"], 2);
}

/// A validity that would end before it starts is refused also when its
/// start is the time the record is stored (no `occurred_at`, no
/// `valid_from`); with a start given, a past validity is history to record.
#[test]
fn a_validity_ending_before_the_record_is_stored_is_refused() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    ok(&store, &["init"]);
    let bad = one(
        tmp.path(),
        "bad.jsonl",
        b"{\"tenant\":\"t\",\"external_id\":\"m4\",\"kind\":\"note\",\"text\":\"x\",\"valid_until\":\"2025-01-01T00:00:00Z\"}\n",
    );
    let msg = fails(&store, &["ingest", bad.to_str().unwrap()]);
    assert!(
        msg.contains("valid_until") && msg.contains("give valid_from"),
        "{msg}"
    );
    assert_eq!(cli::json(&ok(&store, &["stats", "--json"]))["records"], 0);
    let good = one(
        tmp.path(),
        "good.jsonl",
        b"{\"tenant\":\"t\",\"external_id\":\"m5\",\"kind\":\"note\",\"text\":\"x\",\"occurred_at\":\"2024-06-01T00:00:00Z\",\"valid_until\":\"2025-01-01T00:00:00Z\"}\n",
    );
    ok(&store, &["ingest", good.to_str().unwrap()]);
    // An event dated later, with no valid_from, is valid from when it is
    // written (as retrieval reads it): an end before its date but after
    // now is taken, at ingest and by `expire` (both said the end was
    // before its start).
    let planned = one(
        tmp.path(),
        "planned.jsonl",
        b"{\"tenant\":\"t\",\"external_id\":\"m6\",\"kind\":\"meeting\",\"text\":\"x\",\"occurred_at\":\"2099-01-01T00:00:00Z\",\"valid_until\":\"2098-01-01T00:00:00Z\"}\n{\"tenant\":\"t\",\"external_id\":\"m7\",\"kind\":\"meeting\",\"text\":\"y\",\"occurred_at\":\"2099-01-01T00:00:00Z\"}\n",
    );
    ok(&store, &["ingest", planned.to_str().unwrap()]);
    ok(
        &store,
        &[
            "expire",
            "m7",
            "--tenant",
            "t",
            "--at",
            "2098-01-01T00:00:00Z",
        ],
    );
}

/// A warning quoting input escapes terminal controls as every other line
/// does: a repeated eval case id holding an ESC sequence was printed raw
/// on stderr.
#[test]
fn a_warning_quoting_input_escapes_terminal_controls() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    ok(&store, &["init"]);
    let case = br#"{"case_id":"c\u001b[2J","query":"x","tenant":"t"}"#;
    let cases = one(
        tmp.path(),
        "cases.jsonl",
        &[&case[..], b"\n", &case[..], b"\n"].concat(),
    );
    let o = ok(&store, &["eval", cases.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("is also the id of line 1"), "{err}");
    assert!(err.contains("c\\u001b[2J"), "{err}");
    assert!(
        !o.stderr.contains(&0x1b) && !o.stdout.contains(&0x1b),
        "{err}"
    );
}

/// A file of the largest records ingests with the default `--batch-size`:
/// a window of lines also ends at 16 MiB of text and data (a thousand-line
/// window of 1 MiB records passed the log's 48 MiB limit on one batch and
/// stored nothing).
#[test]
fn a_file_of_the_largest_records_ingests_in_batches_it_sizes_itself() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    ok(&store, &["init"]);
    let text = "lorem ".repeat(170_000); // about 1 MiB
    let body: String = (0..52)
        .map(|i| format!("{{\"tenant\":\"t\",\"kind\":\"k\",\"external_id\":\"big{i}\",\"text\":\"{i} {text}\"}}\n"))
        .collect();
    assert!(body.len() > 50 << 20);
    let file = one(tmp.path(), "big.jsonl", body.as_bytes());
    let out = cli::text(&ok(&store, &["ingest", file.to_str().unwrap(), "--json"]));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["created"], 52, "{out}");
    assert!(v["batches"].as_u64().unwrap() >= 4, "{out}");
    ok(&store, &["get", "big51", "--tenant", "t"]);
}

/// `correct --json` answers as `POST /v1/records/{ref}/correct` does: the
/// append result beside the new version, so the notes (here, the validity
/// interval the correction inherits) reach a script reading stdout.
#[test]
fn correct_json_carries_the_append_result_and_its_notes() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let f = one(
        tmp.path(),
        "c.jsonl",
        b"{\"tenant\":\"t\",\"external_id\":\"c\",\"kind\":\"note\",\"text\":\"first\",\"valid_from\":\"2020-01-01T00:00:00Z\",\"valid_until\":\"2023-01-01T00:00:00Z\"}\n",
    );
    ok(&store, &["ingest", f.to_str().unwrap()]);
    let fix = one(
        tmp.path(),
        "fix.json",
        b"{\"kind\":\"note\",\"text\":\"second\"}",
    );
    let out = cli::json(&ok(
        &store,
        &[
            "correct",
            "c",
            fix.to_str().unwrap(),
            "--tenant",
            "t",
            "--json",
        ],
    ));
    assert_eq!(out["record"]["text"], "second", "{out}");
    assert_eq!(out["result"]["outcome"], "created", "{out}");
    assert_eq!(out["result"]["id"], out["record"]["id"], "{out}");
    let notes = out["result"]["notes"].to_string();
    assert!(notes.contains("valid"), "{out}");
}

/// A bare reference that is a stored record's internal id and an earlier
/// item's external id is refused as ambiguous within a batch, as it is
/// from a later batch, naming the item and the field (within a batch it
/// silently meant the batch's item: a correction of the wrong record).
#[test]
fn an_ambiguous_reference_is_refused_within_a_batch_naming_its_item() {
    use engram::{EngineError, Engram, NewRecord, Options, Principal, RecordRef};
    let tmp = tempfile::tempdir().unwrap();
    let db = Engram::open(tmp.path().join("s"), Options::default()).unwrap();
    let s = db.session(Principal::admin("t"));
    let stored = s
        .append(vec![
            NewRecord::event("note", "base").with_external_id("base"),
        ])
        .unwrap()[0]
        .id
        .to_string();
    let bare = || Some(RecordRef::parse(&stored));
    let fix = |text: &str| NewRecord {
        supersedes: bare(),
        ..NewRecord::event("note", text)
    };
    let lookalike = NewRecord::event("note", "lookalike").with_external_id(stored.as_str());
    let e = s.append(vec![lookalike.clone(), fix("fix")]).unwrap_err();
    assert!(
        matches!(&e, EngineError::AmbiguousReference { item: Some(1), field: Some(f), .. } if f == "supersedes"),
        "{e}"
    );
    assert!(e.to_string().starts_with("item 1: supersedes: "), "{e}");
    let listed = s.list(&engram::ListFilter::default()).unwrap();
    assert_eq!(
        listed.len(),
        1,
        "nothing of the batch was stored: {listed:?}"
    );
    // from a later batch: the same refusal, with its item and field
    s.append(vec![lookalike]).unwrap();
    let e = s
        .append(vec![NewRecord::event("note", "other"), fix("fix2")])
        .unwrap_err();
    assert!(
        matches!(&e, EngineError::AmbiguousReference { item: Some(1), field: Some(f), .. } if f == "supersedes"),
        "{e}"
    );
    db.close().unwrap();
}

/// A line with `replace_access` and no `supersedes` is refused when the
/// file is read, as every line's own fields are: the store found it in
/// its batch, after earlier batches of the file were stored.
#[test]
fn replace_access_without_a_correction_is_refused_before_anything_is_stored() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    ok(&store, &["init"]);
    let mut body = String::new();
    for i in 0..5 {
        body.push_str(&format!(
            "{{\"tenant\":\"t\",\"external_id\":\"g{i}\",\"kind\":\"note\",\"text\":\"g\"}}\n"
        ));
    }
    body.push_str("{\"tenant\":\"t\",\"kind\":\"note\",\"text\":\"x\",\"replace_access\":true}\n");
    let f = one(tmp.path(), "ra.jsonl", body.as_bytes());
    let msg = fails(
        &store,
        &["ingest", f.to_str().unwrap(), "--batch-size", "2"],
    );
    assert!(
        msg.contains("line 6: replace_access: applies to a correction only")
            && msg.contains("nothing was stored"),
        "{msg}"
    );
    assert_eq!(cli::json(&ok(&store, &["stats", "--json"]))["records"], 0);
}

/// `ingest --json` stopped by a refused batch still prints, on stdout, the
/// lines the batches before it stored (ids included) and the error: a
/// script otherwise learned only a count, on stderr.
#[test]
fn ingest_json_reports_what_was_stored_before_a_refused_batch() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    ok(&store, &["init"]);
    let body = "{\"tenant\":\"t\",\"external_id\":\"a\",\"kind\":\"note\",\"text\":\"a\"}\n\
                {\"tenant\":\"t\",\"external_id\":\"b\",\"kind\":\"note\",\"text\":\"b\"}\n\
                {\"tenant\":\"t\",\"kind\":\"note\",\"text\":\"c\",\"supersedes\":\"nowhere\"}\n";
    let f = one(tmp.path(), "partial.jsonl", body.as_bytes());
    let o = cli::at(
        &store,
        &["ingest", f.to_str().unwrap(), "--batch-size", "2", "--json"],
    );
    assert_eq!(o.status.code(), Some(1), "{}", cli::text(&o));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON on stdout");
    assert_eq!(report["created"], 2, "{report}");
    let lines: Vec<u64> = report["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["line"].as_u64().unwrap())
        .collect();
    assert_eq!(lines, [1, 2], "{report}");
    assert!(report["records"][0]["id"].is_string(), "{report}");
    assert!(
        report["error"].as_str().unwrap().contains("line 3"),
        "{report}"
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("line 3"));
}
