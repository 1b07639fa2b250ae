//! Smaller things a careful user trips over: each says what is wrong or
//! does what it reports.

use super::cli::{self, fails, ok, snapshot};

fn small_store(root: &std::path::Path) -> std::path::PathBuf {
    let store = root.join("store");
    let f = root.join("e.jsonl");
    std::fs::write(
        &f,
        "{\"external_id\":\"a\",\"tenant\":\"t\",\"kind\":\"k\",\"text\":\"checkout latency alert\",\"retention_class\":\"ephemeral\",\"scope\":{\"user\":\"u\"}}\n{\"external_id\":\"b\",\"tenant\":\"t\",\"kind\":\"k\",\"text\":\"catalog outage\",\"scope\":{\"user\":\"u\"}}\n",
    )
    .unwrap();
    ok(&store, &["ingest", f.to_str().unwrap()]);
    store
}

#[test]
fn vector_mode_without_a_vector_or_embedder_says_why() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = small_store(tmp.path());
    let msg = fails(
        &store,
        &[
            "recall", "--tenant", "t", "--text", "checkout", "--mode", "vector",
        ],
    );
    assert!(msg.contains("needs a built-in embedder"), "{msg}");
    let msg = fails(&store, &["recall", "--tenant", "t", "--vector", "[0,0,0]"]);
    assert!(msg.contains("all components are zero"), "{msg}");
}

#[test]
fn eval_manifests_of_similar_or_repeated_case_ids_do_not_overwrite_each_other() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = small_store(tmp.path());
    let cases = tmp.path().join("cases.jsonl");
    let mut s = String::new();
    for id in ["x/y", "x_y", "x_y", "z"] {
        s.push_str(&format!(
            "{{\"case_id\":\"{id}\",\"tenant\":\"t\",\"query\":\"checkout\",\"relevant\":[\"a\"]}}\n"
        ));
    }
    std::fs::write(&cases, s).unwrap();
    let out = tmp.path().join("out");
    ok(
        &store,
        &[
            "eval",
            cases.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
    );
    let n = std::fs::read_dir(out.join("manifests")).unwrap().count();
    assert_eq!(n, 4, "manifests overwrote each other");
}

#[test]
fn eval_refuses_a_case_without_a_query_before_running_any_and_fails_on_forbidden_hits_in_json() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = small_store(tmp.path());
    let cases = tmp.path().join("cases.jsonl");
    std::fs::write(
        &cases,
        "{\"case_id\":\"ok\",\"tenant\":\"t\",\"query\":\"checkout\",\"relevant\":[\"a\"]}\n\
         {\"case_id\":\"empty\",\"tenant\":\"t\",\"query\":\"\",\"relevant\":[\"a\"]}\n",
    )
    .unwrap();
    let c = cases.to_str().unwrap();
    for extra in [&[][..], &["--config", "base"][..]] {
        let mut args = vec!["eval", c];
        args.extend_from_slice(extra);
        let msg = fails(&store, &args);
        assert!(
            msg.contains("line 2") && msg.contains("query") && msg.contains("nothing was run"),
            "{extra:?}: {msg}"
        );
    }
    // A forbidden hit fails the run, with or without --json.
    std::fs::write(
        &cases,
        "{\"case_id\":\"f\",\"tenant\":\"t\",\"query\":\"checkout\",\"forbidden\":[\"a\"]}\n",
    )
    .unwrap();
    for extra in [&[][..], &["--json"][..]] {
        for cfg in [&[][..], &["--config", "base"][..]] {
            let mut args = vec!["eval", c];
            args.extend_from_slice(extra);
            args.extend_from_slice(cfg);
            fails(&store, &args);
        }
    }
}

#[test]
fn compaction_counts_what_a_legal_hold_keeps() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = small_store(tmp.path());
    ok(
        &store,
        &[
            "retention",
            "--tenant",
            "t",
            "--class",
            "ephemeral",
            "--period",
            "1ms",
        ],
    );
    ok(&store, &["hold", "--tenant", "t", "--scope", "user:u"]);
    std::thread::sleep(std::time::Duration::from_millis(5));
    let r = cli::json(&ok(&store, &["compact", "--json"]));
    // the expiry is recorded (a deletion), its bytes kept by the hold
    assert_eq!(r["held"], 1, "{r}");
    assert_eq!(r["retention_deleted"], 1, "{r}");
    assert_eq!(r["purged"], 0, "{r}");
    fails(&store, &["get", "a", "--tenant", "t"]);
}

#[test]
fn verify_and_backup_change_nothing_in_the_store() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = small_store(tmp.path());
    let before = snapshot(&store);
    ok(&store, &["verify"]);
    ok(&store, &["backup", tmp.path().join("bk").to_str().unwrap()]);
    cli::assert_same(
        &before,
        &snapshot(&store),
        "verify or backup changed the store",
    );
}

/// A hit read `AS OF` a past moment carries the status it had then, as
/// the eligibility it passed did: not today's.
#[test]
fn a_hit_as_of_the_past_has_the_status_it_had_then() {
    use crate::common::{MINUTE, T0, ext, open};
    use engram::retrieval::RecallRequest;
    use engram::{ManualClock, NewRecord, Principal};
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let db = open(tmp.path(), &clock);
    let s = db.session(Principal::admin("t"));
    s.append(vec![
        NewRecord::event("note", "billing email is old@example.com").with_external_id("mail"),
    ])
    .unwrap();
    clock.advance(10 * MINUTE);
    s.append(vec![
        NewRecord::event("note", "billing email is new@example.com").superseding(ext("mail")),
    ])
    .unwrap();
    let status_of_old = |as_of: Option<i64>| {
        let mut q = RecallRequest::text("old@example.com");
        q.as_of = as_of;
        s.recall(&q)
            .unwrap()
            .hits
            .iter()
            .find(|h| h.text.as_deref() == Some("billing email is old@example.com"))
            .map(|h| h.status)
    };
    assert_eq!(status_of_old(Some(T0 + 5 * MINUTE)), Some("active"));
    assert_eq!(status_of_old(None), None, "superseded now: not a hit");
    db.close().unwrap();
}

/// A record valid only from a later moment is not returned before it, at
/// the present or at a later `valid_at` short of it; from that moment on it
/// is, with no write in between, and after a reopen the same. A
/// `valid_from` given equal to `occurred_at` is given all the same (it was
/// read as the default, valid from the ingestion).
#[test]
fn a_record_valid_from_the_future_is_left_out_until_then() {
    use crate::common::{MINUTE, T0, open};
    use engram::retrieval::RecallRequest;
    use engram::{ManualClock, NewRecord, Principal};
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let from = T0 + 30 * MINUTE;
    let db = open(tmp.path(), &clock);
    let s = db.session(Principal::admin("t"));
    let mut later = NewRecord::event("policy", "refunds need two approvals").with_external_id("p");
    later.valid_from = Some(from);
    let mut both =
        NewRecord::event("policy", "refunds over 100 need a receipt").with_external_id("q");
    (both.occurred_at, both.valid_from) = (Some(from), Some(from));
    // an event dated later, with no validity of its own: known now
    let mut planned = NewRecord::event("meeting", "refunds review meeting").with_external_id("m");
    planned.occurred_at = Some(from);
    s.append(vec![
        NewRecord::event("note", "refunds memo").with_external_id("memo"),
        later,
        both,
    ])
    .unwrap();
    s.append(vec![planned]).unwrap();
    let found = |s: &engram::Session, valid_at: Option<i64>| {
        let mut q = RecallRequest::text("refunds");
        q.valid_at = valid_at;
        s.recall(&q)
            .unwrap()
            .hits
            .iter()
            .filter_map(|h| h.external_id.as_deref().map(str::to_string))
            .filter(|e| e != "m")
            .collect::<Vec<_>>()
    };
    let planned_found = s
        .recall(&RecallRequest::text("meeting"))
        .unwrap()
        .hits
        .iter()
        .any(|h| h.external_id.as_deref() == Some("m"));
    assert!(planned_found, "a record about a later event is valid now");
    assert_eq!(found(&s, None), ["memo"], "not valid yet, now");
    assert_eq!(found(&s, Some(from - 1)), ["memo"], "nor just before");
    assert!(
        ["p", "q"]
            .iter()
            .all(|e| found(&s, Some(from)).contains(&e.to_string())),
        "valid from then"
    );
    assert_eq!(
        found(&s, Some(T0 - MINUTE)),
        Vec::<String>::new(),
        "before both"
    );
    clock.advance(30 * MINUTE);
    assert!(
        found(&s, None).contains(&"p".to_string()),
        "valid now (a cached answer expired)"
    );
    clock.set(T0 + MINUTE);
    db.close().unwrap();
    // reopened from its checkpoint: the same
    let db = open(tmp.path(), &clock);
    let s = db.session(Principal::admin("t"));
    assert_eq!(found(&s, None), ["memo"]);
    db.close().unwrap();
}

#[test]
fn verify_of_a_store_in_use_says_nothing_was_checked_not_that_it_failed() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = small_store(tmp.path());
    // another process's hold, as a running server's: this process's open
    let db = engram::Engram::open(&store, engram::Options::default()).unwrap();
    let o = cli::at(&store, &["verify"]);
    let out = cli::text(&o);
    assert!(!o.status.success(), "{out}");
    assert!(
        out.contains("in use") && out.contains("nothing was checked"),
        "{out}"
    );
    assert!(!out.contains("FAILED") && !out.contains("PROBLEM"), "{out}");
    db.close().unwrap();
    ok(&store, &["verify"]);
}

#[test]
fn bench_ingest_checks_every_number_before_any_work() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    for (n, w, b, bw, says) in [
        ("0", "1", "10", "1", "--n must be at least 1"),
        (
            "10",
            "0",
            "10",
            "1",
            "--writers values must be between 1 and 256, not 0",
        ),
        (
            "10",
            "100000",
            "10",
            "1",
            "--writers values must be between 1 and 256, not 100000",
        ),
        ("10", "1", "0", "1", "--batch values must be between 1 and"),
        (
            "10",
            "1",
            "10",
            "300",
            "--batch-writers values must be between 0 and 256, not 300",
        ),
    ] {
        let o = cli::engram(&[
            "bench",
            "ingest",
            "--n",
            n,
            "--writers",
            w,
            "--batch",
            b,
            "--batch-writers",
            bw,
            "--dir",
            dir.to_str().unwrap(),
            "-q",
        ]);
        assert!(!o.status.success());
        assert!(cli::text(&o).contains(says), "{}", cli::text(&o));
        assert!(!dir.exists(), "nothing ran before the refusal");
    }
}

/// A store is not created inside another, also through a symbolic link
/// to one of its directories.
#[test]
fn a_store_is_not_created_inside_another_through_a_link() {
    let tmp = tempfile::tempdir().unwrap();
    let outer = tmp.path().join("s");
    engram::Engram::open(&outer, engram::Options::default())
        .unwrap()
        .close()
        .unwrap();
    let link = tmp.path().join("lnk");
    std::os::unix::fs::symlink(outer.join("derived"), &link).unwrap();
    let Err(e) = engram::Engram::open(link.join("n"), engram::Options::default()) else {
        panic!("a store was created inside another");
    };
    assert!(e.to_string().contains("inside the store at"), "{e}");
    assert!(!outer.join("derived/n").exists());
}

#[test]
fn a_model_on_a_store_without_vector_spaces_is_unknown_model() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = small_store(tmp.path());
    let out = cli::at(
        &store,
        &[
            "query",
            "--tenant",
            "t",
            "--json",
            "FIND ANY SIMILAR TO $p MODEL 'nope'",
            "--param",
            "p=[1,2,3]",
        ],
    );
    assert!(!out.status.success());
    let v = cli::json(&out);
    assert_eq!(v["errors"][0]["code"], "unknown_model", "{v}");
    assert_eq!(v["errors"][0]["column"], 30, "{v}");
}

/// Every case is checked as a recall would check it before any case runs,
/// with or without `--config` (a vector-mode text on a store without an
/// embedder was scored 0 under `--config`, silently); `--out` takes a new
/// or empty directory outside any store, and not with `--config`.
#[test]
fn eval_checks_every_case_first_and_out_is_a_fresh_directory() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = small_store(tmp.path());
    let cases = tmp.path().join("cases.jsonl");
    let c = cases.to_str().unwrap();
    let good =
        "{\"case_id\":\"ok\",\"tenant\":\"t\",\"query\":\"checkout\",\"relevant\":[\"a\"]}\n";
    for bad in [
        "{\"case_id\":\"vec\",\"tenant\":\"t\",\"query\":\"checkout\",\"relevant\":[\"a\"],\"mode\":\"vector\"}\n",
        "{\"case_id\":\"big\",\"tenant\":\"t\",\"query\":\"checkout\",\"relevant\":[\"a\"],\"k\":5000}\n",
    ] {
        std::fs::write(&cases, format!("{good}{bad}")).unwrap();
        for extra in [&[][..], &["--config", "base"][..]] {
            let mut args = vec!["eval", c];
            args.extend_from_slice(extra);
            let out = cli::at(&store, &args);
            let err = String::from_utf8_lossy(&out.stderr).to_string();
            assert!(!out.status.success(), "{extra:?} {bad}: {err}");
            assert!(
                err.contains("line 2") && err.contains("nothing was run"),
                "{extra:?} {bad}: {err}"
            );
            assert!(out.stdout.is_empty(), "{extra:?}: a case ran");
        }
    }
    std::fs::write(&cases, good).unwrap();
    // a configuration that makes a good case unable to run stops the run
    // too (it was scored 0, silently)
    let out = cli::at(
        &store,
        &["eval", c, "--config", "base", "--config", "v:mode=vector"],
    );
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("configuration v") && err.contains("nothing was run"),
        "{err}"
    );
    // --out: not inside the store, not a directory holding files, not
    // with --config
    let inside = store.join("evalout");
    let msg = fails(&store, &["eval", c, "--out", inside.to_str().unwrap()]);
    assert!(msg.contains("inside the store"), "{msg}");
    assert!(!inside.exists());
    let used = tmp.path().join("used");
    std::fs::create_dir_all(&used).unwrap();
    std::fs::write(used.join("old.json"), "{}").unwrap();
    let msg = fails(&store, &["eval", c, "--out", used.to_str().unwrap()]);
    assert!(msg.contains("not empty"), "{msg}");
    let fresh = tmp.path().join("fresh");
    let msg = fails(
        &store,
        &[
            "eval",
            c,
            "--out",
            fresh.to_str().unwrap(),
            "--config",
            "base",
        ],
    );
    assert!(msg.contains("--config"), "{msg}");
    // a store that does not open leaves --out as it was: the same command
    // runs again once it does
    let held = engram::Engram::open(&store, engram::Options::default()).unwrap();
    let msg = fails(&store, &["eval", c, "--out", fresh.to_str().unwrap()]);
    assert!(msg.contains("in use"), "{msg}");
    assert!(!fresh.join("manifests").exists(), "--out was written to");
    // and a compaction says how to compact a store a server holds
    let msg = fails(&store, &["compact"]);
    assert!(msg.contains("POST /v1/compact"), "{msg}");
    held.close().unwrap();
    // flags are blamed as flags, and a file where --out goes is named so
    let msg = fails(&store, &["eval", c, "--k", "1001"]);
    assert!(
        msg.contains("--k must be between 1 and 1000, not 1001"),
        "{msg}"
    );
    let msg = fails(
        &store,
        &["eval", c, "--config", "a", "--config", "a:mode=lexical"],
    );
    assert!(msg.contains("'a' is given twice"), "{msg}");
    let msg = fails(&store, &["eval", c, "--out", c]);
    assert!(msg.contains("a file, not a directory"), "{msg}");
    assert!(!msg.contains("not an Engram store"), "{msg}");
    let gone = tmp.path().join("no-such-backup");
    let msg = fails(&store, &["restore", gone.to_str().unwrap()]);
    assert!(msg.contains("does not exist"), "{msg}");
    ok(&store, &["eval", c, "--out", fresh.to_str().unwrap()]);
    assert!(fresh.join("summary.json").exists());
}

#[test]
fn a_recall_line_asks_for_its_own_manifest() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = small_store(tmp.path());
    let q = tmp.path().join("q.jsonl");
    std::fs::write(
        &q,
        "{\"text\":\"checkout\",\"id\":\"with\",\"explain\":true}\n{\"text\":\"checkout\",\"id\":\"without\"}\n",
    )
    .unwrap();
    let out = ok(
        &store,
        &[
            "recall",
            "--tenant",
            "t",
            "--queries",
            q.to_str().unwrap(),
            "--json",
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(lines[0]["manifest"].is_object(), "{text}");
    assert!(lines[1].get("manifest").is_none(), "{text}");
}

/// A tenant-wide grant gives nobody the label: it lifts a tenant-wide
/// revocation, and says so (it used to report "granted ... to everyone").
#[test]
fn a_tenant_wide_grant_says_it_lifts_a_revocation() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let f = tmp.path().join("e.jsonl");
    std::fs::write(
        &f,
        "{\"external_id\":\"h\",\"tenant\":\"t\",\"kind\":\"k\",\"text\":\"salary table\",\"access\":[\"hr\"]}\n",
    )
    .unwrap();
    ok(&store, &["ingest", f.to_str().unwrap()]);
    let out = |args: &[&str]| String::from_utf8_lossy(&ok(&store, args).stdout).into_owned();
    let said = out(&["revoke", "--tenant", "t", "--label", "hr"]);
    assert!(
        said.contains("from everyone in tenant 't', the admin included"),
        "{said}"
    );
    fails(&store, &["get", "h", "--tenant", "t"]);
    let said = out(&["grant", "--tenant", "t", "--label", "hr"]);
    assert!(
        said.contains("lifted the tenant-wide revocation of label 'hr'"),
        "{said}"
    );
    assert!(!said.contains("to everyone"), "{said}");
    // the admin reads it again; a principal without its own grant does not
    ok(&store, &["get", "h", "--tenant", "t"]);
    fails(&store, &["get", "h", "--tenant", "t", "--principal", "p"]);
}

/// A case that fails while running is an error of that case under
/// `--config` too (one such case ended the whole comparison with nothing
/// printed), and cases naming no relevant id show no recall (they showed
/// recall 1.000; a slice of them showed means of 0).
#[test]
fn eval_reports_a_failing_case_under_config_and_no_recall_without_relevant_ids() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = small_store(tmp.path());
    let cases = tmp.path().join("cases.jsonl");
    let c = cases.to_str().unwrap();
    std::fs::write(
        &cases,
        "{\"case_id\":\"ok\",\"tenant\":\"t\",\"query\":\"checkout\",\"relevant\":[\"a\"]}\n\
         {\"case_id\":\"nomodel\",\"tenant\":\"t\",\"query\":\"checkout\",\"relevant\":[\"a\"],\"vector\":[1,0],\"model\":\"other\"}\n\
         {\"case_id\":\"guard\",\"tenant\":\"t\",\"query\":\"catalog\",\"forbidden\":[\"zz\"],\"slice\":\"guards\"}\n",
    )
    .unwrap();
    let out = cli::at(
        &store,
        &[
            "eval",
            c,
            "--config",
            "base",
            "--config",
            "lex:mode=lexical",
        ],
    );
    let text = cli::text(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("ERROR configuration base: case nomodel (line 2)"),
        "{text}"
    );
    assert!(text.contains("recall@k"), "the table is printed: {text}");
    assert!(text.contains("n/a"), "the guards slice has no mean: {text}");
    let out = cli::at(&store, &["eval", c, "--config", "base", "--json"]);
    let v = cli::json(&out);
    assert_eq!(v[0]["errors"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v[0]["overall"]["cases"], 2, "{v}");
    // without --config
    let out = cli::at(&store, &["eval", c]);
    let text = cli::text(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("guard") && text.contains("recall@10 n/a"),
        "{text}"
    );
    assert!(
        text.contains("slice guards") && text.contains("MRR n/a"),
        "{text}"
    );
}

/// A trace that stops at its depth limit says so (it stopped silently).
#[test]
fn a_trace_past_its_depth_limit_says_it_is_cut() {
    use engram::{AssertionKind, NewRecord, Principal, RecordRef};
    let tmp = tempfile::tempdir().unwrap();
    let db = engram::Engram::open(tmp.path().join("s"), engram::Options::default()).unwrap();
    let s = db.session(Principal::admin("t"));
    let mut prev = s.append(vec![NewRecord::event("k", "root")]).unwrap()[0].id;
    let mut chain = vec![prev];
    for i in 0..40 {
        prev = s
            .append(vec![NewRecord::assertion(
                AssertionKind::Note,
                format!("level {i}"),
                vec![RecordRef::Id(prev)],
            )])
            .unwrap()[0]
            .id;
        chain.push(prev);
    }
    let t = s.trace(&RecordRef::Id(chain[0])).unwrap();
    assert!(t.truncated);
    // the root has no sources: only its derivatives go on
    assert!(!t.cut_at.is_empty() && t.cut_at.iter().all(|c| !c.upstream));
    assert_eq!(t.nodes.len(), engram::trace::TRACE_DEPTH_MAX + 1);
    let t = s.trace(&RecordRef::Id(chain[20])).unwrap();
    assert!(!t.truncated, "20 up and 20 down are within the limit");
    assert_eq!(t.nodes.len(), 41);
    db.close().unwrap();
}

/// A context request with an empty user, conversation or agent is refused
/// as a recall's filter is (it matched nothing, silently).
#[test]
fn a_context_request_with_an_empty_scope_value_is_refused() {
    use engram::context::ContextRequest;
    use engram::{Engram, Options, Principal};
    let tmp = tempfile::tempdir().unwrap();
    let db = Engram::open(tmp.path().join("s"), Options::default()).unwrap();
    let s = db.session(Principal::admin("t"));
    for field in ["user", "conversation", "agent"] {
        let mut r = ContextRequest::new("what now?");
        match field {
            "user" => r.user = Some(String::new()),
            "conversation" => r.conversation = Some(String::new()),
            _ => r.agent = Some(String::new()),
        }
        let e = s.context(&r).unwrap_err().to_string();
        assert!(
            e.contains(field) && e.contains("empty value"),
            "{field}: {e}"
        );
    }
    assert!(s.context(&ContextRequest::new("what now?")).is_ok());
    drop(s);
    db.close().unwrap();
}

/// A recall's `as_of` or `valid_at` before year 1 (or past 9999) is
/// refused by name, as the query language refuses it, not answered as an
/// empty store.
#[test]
fn a_recall_time_outside_the_years_1_to_9999_is_refused() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = small_store(tmp.path());
    for flag in ["--as-of", "--valid-at"] {
        let msg = fails(
            &store,
            &[
                "recall",
                "--tenant",
                "t",
                "--text",
                "checkout",
                flag,
                "0000-12-31T00:00:00Z",
            ],
        );
        assert!(msg.contains("outside years 0001..9999"), "{flag}: {msg}");
        // the first moment accepted is answered (nothing was known then)
        ok(
            &store,
            &[
                "recall",
                "--tenant",
                "t",
                "--text",
                "checkout",
                flag,
                "0001-01-01T00:00:00Z",
            ],
        );
    }
}

/// `--embedder` on a command that writes changes what the store
/// remembers, said on stderr, once; a command that only reads uses it for
/// itself and changes nothing (a query tried with another embedder must
/// not leave the store's vectors behind its choice).
#[test]
fn a_changed_embedder_choice_is_said_once() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = small_store(tmp.path());
    let settings = store.join("settings.snap");
    let note = |args: &[&str]| String::from_utf8_lossy(&ok(&store, args).stderr).to_string();
    let original = std::fs::read(&settings).ok();
    for read in [
        &["--embedder", "hash", "stats"][..],
        &["--embedder", "hash", "trace", "a", "--tenant", "t"],
        &[
            "--embedder",
            "hash",
            "recall",
            "--tenant",
            "t",
            "--text",
            "checkout",
        ],
        &[
            "--embedder",
            "hash",
            "query",
            "--tenant",
            "t",
            "FIND ANY LIMIT 1 RETURN id",
        ],
        &["--embedder", "hash", "review", "list"],
    ] {
        assert!(!note(read).contains("remembers"), "{read:?}");
        assert_eq!(
            std::fs::read(&settings).ok(),
            original,
            "{read:?} changed the settings"
        );
    }
    let first = note(&[
        "--embedder",
        "hash",
        "hold",
        "--tenant",
        "t",
        "--scope",
        "user:u",
    ]);
    assert!(
        first.contains("now remembers the embedder 'hash' (it was 'none')"),
        "{first}"
    );
    assert!(
        !note(&[
            "--embedder",
            "hash",
            "hold",
            "--tenant",
            "t",
            "--scope",
            "user:u",
            "--off"
        ])
        .contains("remembers")
    );
    assert!(!note(&["stats"]).contains("remembers"));
    // a read-only command, a refused open and a backup keep their settings
    let before = std::fs::read(&settings).unwrap();
    let v = cli::at(&store, &["--embedder", "none", "verify"]);
    assert!(v.status.success(), "{}", cli::text(&v));
    assert!(!cli::text(&v).contains("remembers"));
    assert_eq!(
        std::fs::read(&settings).unwrap(),
        before,
        "verify changed the settings"
    );
    let backup = tmp.path().join("backup");
    ok(&store, &["backup", backup.to_str().unwrap()]);
    let b_settings = std::fs::read(backup.join("settings.snap")).unwrap();
    cli::at(&backup, &["--embedder", "none", "verify"]);
    assert_eq!(
        std::fs::read(backup.join("settings.snap")).unwrap(),
        b_settings
    );
    let _held = engram::Engram::open(&store, engram::Options::default()).unwrap();
    fails(&store, &["--embedder", "none", "stats"]);
    assert_eq!(
        std::fs::read(&settings).unwrap(),
        before,
        "a refused open changed the settings"
    );
    let not_a_store = tmp.path().join("plain");
    std::fs::create_dir_all(&not_a_store).unwrap();
    std::fs::write(not_a_store.join("notes.txt"), "x").unwrap();
    cli::at(&not_a_store, &["--embedder", "hash", "stats"]);
    assert!(!not_a_store.join("settings.snap").exists());
}

/// A write command that fails changes nothing, the embedder it was given
/// included; an ingest that stored batches before failing remembers it
/// (those records carry its vectors).
#[test]
fn a_failed_write_leaves_the_embedder_choice_alone() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = small_store(tmp.path());
    let settings = store.join("settings.snap");
    let before = std::fs::read(&settings).ok();
    let fix = tmp.path().join("fix.json");
    std::fs::write(&fix, "{\"kind\":\"k\",\"text\":\"fixed\"}").unwrap();
    for failing in [
        &["--embedder", "hash", "delete", "nosuch", "--tenant", "t"][..],
        &[
            "--embedder",
            "hash",
            "correct",
            "nosuch",
            "--tenant",
            "t",
            fix.to_str().unwrap(),
        ],
        &[
            "--embedder",
            "hash",
            "grant",
            "--tenant",
            "t",
            "--label",
            "",
            "--principal",
            "p",
        ],
    ] {
        let out = cli::at(&store, failing);
        assert!(!out.status.success(), "{failing:?}: {}", cli::text(&out));
        assert!(!cli::text(&out).contains("remembers"), "{failing:?}");
        assert_eq!(
            std::fs::read(&settings).ok(),
            before,
            "{failing:?} failed, yet changed the settings"
        );
    }
    // batch 1 is stored, batch 2 conflicts with it: the records stored
    // carry the embedder's vectors, so the choice is remembered
    let f = tmp.path().join("conflict.jsonl");
    std::fs::write(
        &f,
        "{\"external_id\":\"c\",\"tenant\":\"t\",\"kind\":\"k\",\"text\":\"one\"}\n{\"external_id\":\"c\",\"tenant\":\"t\",\"kind\":\"k\",\"text\":\"two\"}\n",
    )
    .unwrap();
    let out = cli::at(
        &store,
        &[
            "--embedder",
            "hash",
            "ingest",
            f.to_str().unwrap(),
            "--batch-size",
            "1",
        ],
    );
    assert!(!out.status.success(), "{}", cli::text(&out));
    assert!(
        cli::text(&out).contains("now remembers the embedder 'hash'"),
        "{}",
        cli::text(&out)
    );
    assert_ne!(std::fs::read(&settings).ok(), before);
}

/// `eval` counts a relevant record once however it is named (twice, or by
/// its external and internal id), and lists a relevant id that names no
/// readable record with its case.
#[test]
fn eval_counts_a_relevant_record_once_and_lists_an_unknown_id() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = small_store(tmp.path());
    let got = cli::json(&ok(&store, &["get", "a", "--tenant", "t", "--json"]));
    let id = got["id"].as_str().unwrap();
    let cases = tmp.path().join("cases.jsonl");
    std::fs::write(
        &cases,
        format!(
            "{{\"case_id\": \"c\", \"query\": \"checkout latency\", \"tenant\": \"t\", \"relevant\": [\"a\", \"a\", \"{id}\", \"a-typo\"]}}\n"
        ),
    )
    .unwrap();
    let out = cli::json(&ok(&store, &["eval", cases.to_str().unwrap(), "--json"]));
    let case = &out["cases"][0];
    assert_eq!(case["relevant"], 2, "{case}");
    assert_eq!(case["relevant_found"], 1, "{case}");
    assert_eq!(case["unresolved"], serde_json::json!(["a-typo"]), "{case}");
}

/// `verify` of a backup whose log was cut short reports the damage (exit
/// 1), naming the LSN its backup.json records: restore refuses that copy,
/// and a cut end is never a torn write in a backup.
#[test]
fn verify_of_a_backup_cut_short_fails() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = small_store(tmp.path());
    let backup = tmp.path().join("backup");
    ok(&store, &["backup", backup.to_str().unwrap()]);
    ok(&backup, &["verify"]);
    let seg = cli::segments(&backup).pop().unwrap();
    let bytes = std::fs::read(&seg).unwrap();
    std::fs::write(&seg, &bytes[..bytes.len() - 40]).unwrap();
    let msg = fails(&backup, &["verify"]);
    assert!(
        msg.contains("backup.json records LSN 2") && msg.contains("FAILED"),
        "{msg}"
    );
}

/// `get` and `history` mark an expired record historical, as `trace` and
/// retrieval do (they showed it `[active]`).
#[test]
fn get_marks_an_expired_record_historical() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let f = tmp.path().join("e.jsonl");
    std::fs::write(
        &f,
        "{\"external_id\":\"old\",\"tenant\":\"t\",\"kind\":\"k\",\"text\":\"office in Lyon\",\"occurred_at\":\"2025-01-01T00:00:00Z\"}\n",
    )
    .unwrap();
    ok(&store, &["ingest", f.to_str().unwrap()]);
    ok(
        &store,
        &[
            "expire",
            "old",
            "--tenant",
            "t",
            "--at",
            "2025-06-01T00:00:00Z",
        ],
    );
    for cmd in ["get", "history"] {
        let out = cli::text(&ok(&store, &[cmd, "old", "--tenant", "t"]));
        assert!(
            out.contains("[active, historical since 2025-06-01T00:00:00Z]"),
            "{cmd}: {out}"
        );
    }
}

/// A time outside the years 0001..9999 in an eval case or a listing bound
/// is refused before anything runs, naming it (a case used to run and
/// fail on its own, the others still running).
#[test]
fn eval_and_log_refuse_a_time_outside_the_stored_years_up_front() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = small_store(tmp.path());
    let cases = tmp.path().join("cases.jsonl");
    std::fs::write(
        &cases,
        "{\"case_id\": \"ok\", \"query\": \"checkout\", \"tenant\": \"t\", \"relevant\": [\"a\"]}\n{\"case_id\": \"bad\", \"query\": \"checkout\", \"tenant\": \"t\", \"as_of\": \"0000-06-01T00:00:00Z\"}\n",
    )
    .unwrap();
    let msg = fails(&store, &["eval", cases.to_str().unwrap()]);
    assert!(
        msg.contains("line 2") && msg.contains("outside years 0001..9999"),
        "{msg}"
    );
    assert!(!msg.contains("recall@"), "a case ran: {msg}");
    let msg = fails(
        &store,
        &["log", "--tenant", "t", "--since", "0000-01-01T00:00:00Z"],
    );
    assert!(msg.contains("outside years 0001..9999"), "{msg}");
}

/// The machine-readable record says an expired record is historical, as
/// its text header and retrieval do.
#[test]
fn a_record_s_json_says_it_is_historical() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let f = tmp.path().join("e.jsonl");
    std::fs::write(
        &f,
        "{\"external_id\":\"old\",\"tenant\":\"t\",\"kind\":\"k\",\"text\":\"office in Lyon\",\"occurred_at\":\"2025-01-01T00:00:00Z\"}\n{\"external_id\":\"new\",\"tenant\":\"t\",\"kind\":\"k\",\"text\":\"office in Paris\"}\n",
    )
    .unwrap();
    ok(&store, &["ingest", f.to_str().unwrap()]);
    ok(
        &store,
        &[
            "expire",
            "old",
            "--tenant",
            "t",
            "--at",
            "2025-06-01T00:00:00Z",
        ],
    );
    let old = cli::json(&ok(&store, &["get", "old", "--tenant", "t", "--json"]));
    assert_eq!(old["historical"], true, "{old}");
    assert_eq!(old["status"], "active", "{old}");
    let new = cli::json(&ok(&store, &["get", "new", "--tenant", "t", "--json"]));
    assert_eq!(new["historical"], false, "{new}");
}

/// `engram compact` never touches `quarantine/` (log bytes `engram repair`
/// cut, the operator's to inspect), and says when it holds files, since
/// they may hold content deleted since.
#[test]
fn compact_names_the_quarantine_it_leaves() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let f = tmp.path().join("a.jsonl");
    std::fs::write(&f, "{\"tenant\":\"t\",\"kind\":\"n\",\"text\":\"x\"}\n").unwrap();
    ok(&store, &["ingest", f.to_str().unwrap()]);
    let quiet = cli::text(&ok(&store, &["compact"]));
    assert!(!quiet.contains("quarantine"), "{quiet}");
    let q = store.join("quarantine").join("repair-1");
    std::fs::create_dir_all(&q).unwrap();
    std::fs::write(q.join("00000000000000000001.seg.from-64"), b"cut bytes").unwrap();
    let said = cli::text(&ok(&store, &["compact"]));
    assert!(
        said.contains("quarantine") && said.contains("1 file(s)"),
        "{said}"
    );
    assert!(q.join("00000000000000000001.seg.from-64").exists());
}

/// `recall --queries`: each line is a whole request, so a flag that shapes
/// one (a filter, k, a time) is refused beside it, not silently ignored.
#[test]
fn recall_queries_refuses_the_flags_it_would_ignore() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = small_store(tmp.path());
    let q = tmp.path().join("q.jsonl");
    std::fs::write(&q, "{\"text\":\"checkout\"}\n").unwrap();
    let qs = q.to_str().unwrap();
    ok(
        &store,
        &["recall", "--tenant", "t", "--queries", qs, "--json"],
    );
    for extra in [
        &["--user", "nobody"][..],
        &["--k", "1"],
        &["--kind", "k"],
        &["--as-of", "2000-01-01T00:00:00Z"],
        &["--text", "zzz"],
    ] {
        let mut args = vec!["recall", "--tenant", "t", "--queries", qs];
        args.extend_from_slice(extra);
        let o = cli::at(&store, &args);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {}", cli::text(&o));
        assert!(
            cli::text(&o).contains("cannot be used with"),
            "{}",
            cli::text(&o)
        );
    }
}

/// `eval` checks every case as it would run before any runs: under each
/// `--config` (its episodic window too) and a zero query vector, so a bad
/// one stops the run with nothing measured.
#[test]
fn eval_checks_configurations_and_vectors_before_any_case_runs() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = small_store(tmp.path());
    let cases = tmp.path().join("cases.jsonl");
    std::fs::write(
        &cases,
        "{\"case_id\":\"c1\",\"tenant\":\"t\",\"query\":\"checkout\",\"relevant_ids\":[\"a\"]}\n",
    )
    .unwrap();
    let cs = cases.to_str().unwrap();
    ok(
        &store,
        &["eval", cs, "--config", "base", "--config", "x:window=8"],
    );
    for bad in ["x:window=999999", "x:seeds=0"] {
        let msg = fails(&store, &["eval", cs, "--config", "base", "--config", bad]);
        assert!(
            msg.contains("configuration x: case c1 (line 1)") && msg.contains("nothing was run"),
            "{bad}: {msg}"
        );
    }
    let zero = tmp.path().join("zero.jsonl");
    std::fs::write(
        &zero,
        "{\"case_id\":\"c1\",\"tenant\":\"t\",\"query\":\"checkout\",\"relevant_ids\":[\"a\"]}\n{\"case_id\":\"z\",\"tenant\":\"t\",\"vector\":[0,0],\"relevant_ids\":[\"a\"]}\n",
    )
    .unwrap();
    let msg = fails(&store, &["eval", zero.to_str().unwrap()]);
    assert!(
        msg.contains("case z (line 2)") && msg.contains("zero") && msg.contains("nothing was run"),
        "{msg}"
    );
}

/// `review list --principal P` shows P's queue: a reviewer sees the
/// candidates it may decide, not its own; a principal without the role is
/// refused; a principal needs `--tenant`.
#[test]
fn review_list_shows_a_principals_own_queue() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("s");
    let file = tmp.path().join("c.jsonl");
    std::fs::write(
        &file,
        concat!(
            "{\"tenant\":\"t\",\"external_id\":\"e1\",\"kind\":\"note\",\"text\":\"src\"}\n",
            "{\"tenant\":\"t\",\"record\":\"assertion\",\"kind\":\"procedure\",\"text\":\"always do X\",",
            "\"writer\":{\"principal\":\"bot\",\"kind\":\"model\"},\"sources\":[\"e1\"]}\n",
            "{\"tenant\":\"t\",\"record\":\"assertion\",\"kind\":\"procedure\",\"text\":\"never do Y\",",
            "\"writer\":{\"principal\":\"rita\",\"kind\":\"user\"},\"sources\":[\"e1\"]}\n",
        ),
    )
    .unwrap();
    // (a person's procedure waits for review too: rita's own candidate)
    ok(&store, &["init"]);
    ok(
        &store,
        &[
            "review",
            "rule",
            "--tenant",
            "t",
            "--kind",
            "procedure",
            "--writer",
            "user",
            "--review",
            "true",
        ],
    );
    ok(&store, &["ingest", file.to_str().unwrap()]);
    ok(
        &store,
        &[
            "grant",
            "--tenant",
            "t",
            "--role",
            "reviewer",
            "--principal",
            "rita",
        ],
    );
    let queue = |who: Option<&str>| {
        let mut args = vec!["review", "list", "--tenant", "t", "--json"];
        if let Some(p) = who {
            args.extend(["--principal", p]);
        }
        crate::cli::json(&ok(&store, &args))
    };
    assert_eq!(queue(None).as_array().unwrap().len(), 2);
    let rita = queue(Some("rita"));
    assert_eq!(rita.as_array().unwrap().len(), 1, "{rita}");
    assert!(rita.to_string().contains("always do X"), "{rita}");
    let e = crate::cli::fails(
        &store,
        &["review", "list", "--tenant", "t", "--principal", "bot"],
    );
    assert!(e.contains("reviewer"), "{e}");
    crate::cli::fails(&store, &["review", "list", "--principal", "rita"]);
}

/// A command whose derived state cannot be written at close (the state
/// checkpoint's path is a directory) still succeeds: what it stored is
/// durable in the log, and it says so. A deletion exited 1 after printing
/// that it had deleted.
#[test]
fn a_command_whose_close_cannot_write_derived_state_still_succeeds() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = small_store(tmp.path());
    let snap = store.join("derived").join("state.snap");
    let _ = std::fs::remove_file(&snap);
    std::fs::create_dir(&snap).unwrap();
    let o = ok(&store, &["delete", "a", "--tenant", "t"]);
    let out = crate::cli::text(&o);
    assert!(
        out.contains("warning: writing derived state at close failed"),
        "{out}"
    );
    let o = ok(&store, &["get", "b", "--tenant", "t"]);
    assert!(crate::cli::text(&o).contains("catalog outage"));
    std::fs::remove_dir(&snap).unwrap();
    let msg = fails(&store, &["get", "a", "--tenant", "t"]);
    assert!(msg.contains("no record"), "{msg}");
    ok(&store, &["verify"]);
}

/// A restore into a new directory opens the restored store with the
/// backup's embedder (its settings are the restored store's): the records
/// it restores get their derived vectors, as in the store backed up, and
/// not only the ones written after.
#[test]
fn a_restore_into_a_new_directory_rebuilds_the_backups_derived_vectors() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    ok(&store, &["--embedder", "hash", "init"]);
    let f = tmp.path().join("one.jsonl");
    std::fs::write(
        &f,
        "{\"tenant\":\"t\",\"external_id\":\"h\",\"kind\":\"doc\",\"text\":\"hello world vector\"}\n",
    )
    .unwrap();
    ok(&store, &["ingest", f.to_str().unwrap()]);
    let backup = tmp.path().join("bk");
    ok(&store, &["backup", backup.to_str().unwrap()]);
    let restored = tmp.path().join("restored");
    ok(&restored, &["restore", backup.to_str().unwrap()]);
    let found = |dir: &std::path::Path| {
        cli::text(&ok(
            dir,
            &[
                "recall",
                "--tenant",
                "t",
                "--text",
                "hello world",
                "--mode",
                "vector",
                "--json",
            ],
        ))
    };
    let there = found(&restored);
    assert!(there.contains("\"h\""), "{there}");
    // an embedder chosen for the restore computes the vectors then: its
    // note names no rebuild
    let chosen = tmp.path().join("chosen");
    let said = cli::text(&ok(
        &chosen,
        &["--embedder", "hash-64", "restore", backup.to_str().unwrap()],
    ));
    assert!(
        said.contains("now remembers the embedder 'hash-64'"),
        "{said}"
    );
    assert!(!said.contains("rebuild"), "{said}");
    assert!(found(&chosen).contains("\"h\""));
    // and a record's validity shows both its ends
    let f = tmp.path().join("valid.jsonl");
    std::fs::write(
        &f,
        "{\"tenant\":\"t\",\"external_id\":\"v\",\"kind\":\"doc\",\"text\":\"x\",\"valid_from\":\"2020-01-01T00:00:00Z\",\"valid_until\":\"2023-01-01T00:00:00Z\"}\n",
    )
    .unwrap();
    ok(&store, &["ingest", f.to_str().unwrap()]);
    let shown = cli::text(&ok(&store, &["get", "v", "--tenant", "t"]));
    assert!(
        shown.contains("2020-01-01T00:00:00") && shown.contains("2023-01-01T00:00:00"),
        "{shown}"
    );
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&there).unwrap()["hits"],
        serde_json::from_str::<serde_json::Value>(&found(&store)).unwrap()["hits"]
    );
}

/// A tenant's review rules are set from the CLI (`engram review rule`),
/// not only from the embedded API, and `stats` lists them: a rule makes a
/// model's notes wait for review, another lets its policies apply at once;
/// an unknown kind is refused naming the kinds there are.
#[test]
fn review_rules_are_set_from_the_cli_and_listed_by_stats() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    ok(&store, &["init"]);
    let rule = |kind: &str, review: &str| {
        ok(
            &store,
            &[
                "review", "rule", "--tenant", "t", "--kind", kind, "--writer", "model", "--review",
                review,
            ],
        )
    };
    rule("note", "true");
    rule("policy", "false");
    let f = tmp.path().join("m.jsonl");
    std::fs::write(
        &f,
        "{\"tenant\":\"t\",\"record\":\"assertion\",\"external_id\":\"n\",\"kind\":\"note\",\"text\":\"a model's note\",\"sources\":[\"e\"],\"writer\":{\"principal\":\"bot\",\"kind\":\"model\"}}\n\
         {\"tenant\":\"t\",\"record\":\"assertion\",\"external_id\":\"p\",\"kind\":\"policy\",\"text\":\"a model's policy\",\"sources\":[\"e\"],\"writer\":{\"principal\":\"bot\",\"kind\":\"model\"}}\n",
    )
    .unwrap();
    let e = tmp.path().join("e.jsonl");
    std::fs::write(
        &e,
        "{\"tenant\":\"t\",\"external_id\":\"e\",\"kind\":\"turn\",\"text\":\"said\"}\n",
    )
    .unwrap();
    ok(&store, &["ingest", e.to_str().unwrap()]);
    ok(&store, &["ingest", f.to_str().unwrap()]);
    let status = |id: &str| {
        cli::json(&ok(&store, &["get", id, "--tenant", "t", "--json"]))["status"].clone()
    };
    assert_eq!(status("n"), "candidate");
    assert_eq!(status("p"), "approved");
    let stats = cli::json(&ok(&store, &["stats", "--json"]));
    let rules = &stats["tenants"]["t"]["review_rules"];
    assert_eq!(
        rules,
        &serde_json::json!([
            {"kind": "note", "writer": "model", "review": true},
            {"kind": "policy", "writer": "model", "review": false}
        ]),
        "{stats}"
    );
    let msg = fails(
        &store,
        &[
            "review", "rule", "--tenant", "t", "--kind", "memo", "--writer", "model", "--review",
            "true",
        ],
    );
    assert!(msg.contains("kind") && msg.contains("procedure"), "{msg}");
    // only the tenant admin sets them
    let msg = fails(
        &store,
        &[
            "review", "rule", "--tenant", "t", "--kind", "fact", "--writer", "model", "--review",
            "true", "--as", "bob",
        ],
    );
    assert!(
        msg.contains("bob") || msg.contains("forbidden") || msg.contains("may not"),
        "{msg}"
    );
}

/// `log --limit 0` is refused (it listed nothing and said "0 record(s)",
/// as for an empty store), as the server refuses `limit=0`.
#[test]
fn log_limit_zero_is_refused() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = small_store(tmp.path());
    let msg = fails(&store, &["log", "--tenant", "t", "--limit", "0"]);
    assert!(msg.contains("--limit must be at least 1"), "{msg}");
    ok(&store, &["log", "--tenant", "t", "--limit", "1"]);
}

/// A statement left unquoted (`engram query --tenant t FIND ANY`) is
/// told to be quoted, not "unexpected argument 'ANY'".
#[test]
fn an_unquoted_statement_is_told_to_be_quoted() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = small_store(tmp.path());
    let msg = fails(
        &store,
        &["query", "--tenant", "t", "FIND", "ANY", "LIMIT", "1"],
    );
    assert!(
        msg.contains("quote it") && msg.contains("\"FIND ANY ...\""),
        "{msg}"
    );
    ok(&store, &["query", "--tenant", "t", "FIND ANY LIMIT 1"]);
}

/// `verify` of a backup with bytes appended after its last frame says what
/// `restore` does with it (takes every frame backup.json records and
/// ignores the rest), where it said the copy was damaged and that restore
/// refused it while restore took it.
#[test]
fn verify_of_a_backup_with_bytes_appended_says_what_restore_does() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = small_store(tmp.path());
    let backup = tmp.path().join("backup");
    ok(&store, &["backup", backup.to_str().unwrap()]);
    let seg = cli::segments(&backup).pop().unwrap();
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes.extend_from_slice(&[0x5a; 300]);
    std::fs::write(&seg, &bytes).unwrap();
    let out = ok(&backup, &["verify"]);
    let msg = cli::text(&out);
    assert!(
        msg.contains("restore ignores them") && !msg.contains("restore refuses"),
        "{msg}"
    );
    let restored = tmp.path().join("restored");
    ok(&restored, &["restore", backup.to_str().unwrap()]);
    ok(&restored, &["verify"]);
}

/// Working memory across sessions (an agent's memory loop): a summary and
/// a preference scoped to last session's conversation reach this
/// session's context (they were left out unless the conversation was the
/// same); one scoped to another user does not. A claim whose object is a
/// value naming an entity agrees with a relation to that entity (both were
/// marked CONFLICT), while claims that differ still are; and a relation
/// renders with its entities' names, not their ids.
#[test]
fn context_carries_earlier_conversations_and_names_entities() {
    use engram::context::ContextRequest;
    use engram::{Engram, HashEmbedder, Options, Principal};
    let tmp = tempfile::tempdir().unwrap();
    let opts = Options {
        embedder: Some(std::sync::Arc::new(HashEmbedder::default())),
        ..Options::default()
    };
    let db = Engram::open(tmp.path().join("s"), opts).unwrap();
    let s = db.session(Principal::admin("t"));
    let lines = engram::query::parse_jsonl(
        r#"{"external_id":"m1","kind":"user_message","text":"I prefer aisle seats and live in Berlin.","scope":{"user":"zoe","conversation":"trip-1"}}
{"external_id":"a/aisle","record":"assertion","kind":"preference","text":"Zoe prefers aisle seats on flights.","sources":["m1"],"scope":{"user":"zoe","conversation":"trip-1"}}
{"external_id":"s/trip-1","record":"summary","generator":"sum@1","text":"Trip 1: Zoe wants aisle seats on flights.","sources":["m1"],"scope":{"user":"zoe","conversation":"trip-1"}}
{"external_id":"s/other","record":"summary","generator":"sum@1","text":"Max wants window seats on flights.","sources":["m1"],"scope":{"user":"max","conversation":"trip-9"}}
{"external_id":"e/zoe","record":"entity","entity_type":"person","name":"Zoe"}
{"external_id":"e/berlin","record":"entity","entity_type":"city","name":"Berlin","aliases":["BER"]}
{"external_id":"r/lives","record":"relation","subject":"e/zoe","predicate":"lives_in","object":"e/berlin"}
{"external_id":"a/lives","record":"assertion","kind":"fact","subject":"e/zoe","predicate":"lives_in","object":"berlin","text":"Zoe lives in Berlin.","sources":["m1"]}
"#,
    )
    .unwrap();
    s.append(lines.into_iter().map(|l| l.record).collect())
        .unwrap();
    db.wait_indexed().unwrap();
    let ctx = |text: &str| {
        let mut r = ContextRequest::new(text);
        r.user = Some("zoe".into());
        r.conversation = Some("trip-2".into());
        r.semantic_k = 20;
        r.episodic_k = 20;
        s.context(&r).unwrap()
    };
    let ext_of = |c: &engram::context::Context, section: &str| -> Vec<String> {
        c.sections
            .iter()
            .filter(|x| x.name == section)
            .flat_map(|x| x.items.iter().filter_map(|i| i.external_id.clone()))
            .collect()
    };
    let c = ctx("book a flight seat for Zoe");
    assert!(
        ext_of(&c, "episodic").contains(&"s/trip-1".to_string()),
        "{c:?}"
    );
    assert!(
        !ext_of(&c, "episodic").contains(&"s/other".to_string()),
        "{c:?}"
    );
    assert!(
        ext_of(&c, "semantic").contains(&"a/aisle".to_string()),
        "{c:?}"
    );
    // where Zoe lives: the relation and the claim agree
    let c = ctx("where does Zoe live, Berlin");
    let rendered = c.render();
    assert!(!rendered.contains("CONFLICT"), "{rendered}");
    assert!(rendered.contains("Zoe lives_in Berlin"), "{rendered}");
    // a claim that differs is still marked
    let lines = engram::query::parse_jsonl(
        r#"{"external_id":"a/paris","record":"assertion","kind":"fact","subject":"e/zoe","predicate":"lives_in","object":"Paris","text":"Zoe lives in Paris.","sources":["m1"]}
"#,
    )
    .unwrap();
    s.append(lines.into_iter().map(|l| l.record).collect())
        .unwrap();
    db.wait_indexed().unwrap();
    let rendered = ctx("where does Zoe live, Berlin or Paris").render();
    assert!(rendered.contains("CONFLICT"), "{rendered}");
    drop(s);
    db.close().unwrap();
}

/// A claim the context shows is marked as contested by a current claim
/// outside its top `semantic_k` (with the same subject and predicate and
/// another object), which joins it: the conflict was resolved by rank,
/// the lower side dropped and the shown one unmarked. Claims naming no
/// object are not in conflict (they were marked so); a name no record may
/// hold is refused (it dropped every item scoped to it without a word).
#[test]
fn a_conflict_outside_the_top_claims_is_shown_whole() {
    use engram::context::ContextRequest;
    use engram::{Engram, HashEmbedder, Options, Principal};
    let tmp = tempfile::tempdir().unwrap();
    let opts = Options {
        embedder: Some(std::sync::Arc::new(HashEmbedder::default())),
        ..Options::default()
    };
    let db = Engram::open(tmp.path().join("s"), opts).unwrap();
    let s = db.session(Principal::admin("t"));
    let mut jsonl = String::from(
        r#"{"external_id":"e","kind":"note","text":"account notes"}
{"external_id":"acct","record":"entity","entity_type":"account","name":"acct42"}
{"external_id":"fa","record":"assertion","kind":"fact","subject":"acct","predicate":"payout_iban","object":"DE001","text":"payout iban for acct42 is DE001","sources":["e"]}
{"external_id":"fb","record":"assertion","kind":"fact","subject":"acct","predicate":"payout_iban","object":"XX999","text":"bank details changed to XX999","sources":["e"]}
{"external_id":"p1","record":"assertion","kind":"preference","subject":"acct","predicate":"likes","text":"acct42 likes tea","sources":["e"]}
{"external_id":"p2","record":"assertion","kind":"preference","subject":"acct","predicate":"likes","text":"acct42 likes tea, confirmed again","sources":["e"]}
"#,
    );
    for i in 0..30 {
        jsonl.push_str(&format!(
            "{{\"external_id\":\"n{i}\",\"record\":\"assertion\",\"kind\":\"fact\",\"text\":\"payout iban acct42 note {i}\",\"sources\":[\"e\"]}}\n"
        ));
    }
    let lines = engram::query::parse_jsonl(&jsonl).unwrap();
    s.append(lines.into_iter().map(|l| l.record).collect())
        .unwrap();
    db.wait_indexed().unwrap();
    let mut r = ContextRequest::new("payout iban for acct42 is DE001");
    r.semantic_k = 1;
    let c = s.context(&r).unwrap();
    let semantic: Vec<&engram::context::ContextItem> = c
        .sections
        .iter()
        .filter(|x| x.name == "semantic")
        .flat_map(|x| x.items.iter())
        .collect();
    let by_ext = |e: &str| {
        semantic
            .iter()
            .find(|i| i.external_id.as_deref() == Some(e))
            .copied()
    };
    let fa = by_ext("fa").expect("the best claim is shown");
    let fb = by_ext("fb").expect("the claim contesting it joins");
    assert_eq!(fa.conflicts_with, vec![fb.id]);
    assert_eq!(fb.conflicts_with, vec![fa.id]);
    // two claims with no object say nothing to disagree on
    let mut r = ContextRequest::new("acct42 likes tea");
    r.semantic_k = 40;
    let rendered = s.context(&r).unwrap().render();
    let tea: Vec<&str> = rendered
        .lines()
        .filter(|l| l.contains("likes tea"))
        .collect();
    assert_eq!(tea.len(), 2, "{rendered}");
    assert!(tea.iter().all(|l| !l.contains("CONFLICT")), "{rendered}");
    // a user name no record may hold
    let mut r = ContextRequest::new("acct42");
    r.user = Some(" u1".into());
    let e = s.context(&r).unwrap_err();
    assert!(e.to_string().contains("user"), "{e}");
    drop(s);
    db.close().unwrap();
}

/// A command whose output cannot be written (`>/dev/full`) after it made
/// its change says the change was made (its status 1 is the output's), and
/// a new key whose secret nobody received is revoked at once.
#[test]
fn an_unwritable_stdout_after_a_change_says_the_change_was_made() {
    let _serial = crate::cli::serial();
    if std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .is_err()
    {
        return; // (no /dev/full on this system)
    }
    let tmp = tempfile::tempdir().unwrap();
    let store = small_store(tmp.path());
    let to_full = |args: &[&str]| {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let mut all = vec!["--data", store.to_str().unwrap()];
        all.extend_from_slice(args);
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_engram"))
            .args(&all)
            .stdout(std::process::Stdio::from(full))
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(1), "{args:?}: {o:?}");
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    let err = to_full(&["delete", "ext:a", "--tenant", "t"]);
    assert!(
        err.contains("cannot write output") && err.contains("deleted 1 record(s)"),
        "{err}"
    );
    // (it was: a deleted record is no record to read)
    let out = fails(&store, &["get", "ext:a", "--tenant", "t"]);
    assert!(out.contains("no record"), "{out}");
    let err = to_full(&["keys", "create", "--tenant", "t", "--principal", "p"]);
    assert!(err.contains("was revoked at once"), "{err}");
    let keys = cli::json(&ok(&store, &["keys", "list", "--json"]));
    let keys = keys.as_array().unwrap();
    assert_eq!(keys.len(), 1);
    assert!(!keys[0]["revoked_at"].is_null(), "{keys:?}");
    // stdout on /dev/null (where a closed one is put): no key is created
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_engram"))
        .args([
            "--data",
            store.to_str().unwrap(),
            "keys",
            "create",
            "--tenant",
            "t",
        ])
        .args(["--principal", "p"])
        .stdout(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("no key was created"));
    let keys = cli::json(&ok(&store, &["keys", "list", "--json"]));
    assert_eq!(keys.as_array().unwrap().len(), 1, "{keys}");
    let err = to_full(&[
        "review", "rule", "--tenant", "t", "--kind", "note", "--writer", "model", "--review",
        "true",
    ]);
    assert!(err.contains("set the review rule"), "{err}");
    // a command that changed nothing says nothing of a change
    let err = to_full(&["log", "--tenant", "t"]);
    assert!(
        err.contains("cannot write output") && !err.contains("made its change"),
        "{err}"
    );
}
