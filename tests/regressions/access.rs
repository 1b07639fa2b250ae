//! Authority over records: a record a principal cannot read does not exist
//! for it (not to read, correct, trace or name), corrections keep the
//! corrected record's protection, a request never chooses who asks, and a
//! reference never resolves by guessing.

use std::path::Path;

use engram::{EngineError, Engram, NewRecord, Options, Principal, RecordId, RecordRef};

use super::cli::{self, fails, ok};

fn secret_store(root: &Path) -> std::path::PathBuf {
    let store = root.join("store");
    let f = root.join("secret.jsonl");
    std::fs::write(
        &f,
        r#"{"external_id":"a/1","tenant":"A","kind":"m","text":"secret hunter2","access":["secret"],"scope":{"user":"u1"}}
{"external_id":"a/2","tenant":"A","kind":"m","text":"public note"}
"#,
    )
    .unwrap();
    ok(&store, &["ingest", f.to_str().unwrap()]);
    store
}

#[test]
fn a_principal_cannot_correct_a_record_it_cannot_read() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = secret_store(tmp.path());
    let fix = tmp.path().join("fix.json");
    std::fs::write(&fix, r#"{"kind":"m","text":"pwned"}"#).unwrap();
    let got = fails(
        &store,
        &["get", "a/1", "--tenant", "A", "--principal", "mallory"],
    );
    let corrected = fails(
        &store,
        &[
            "correct",
            "a/1",
            fix.to_str().unwrap(),
            "--tenant",
            "A",
            "--principal",
            "mallory",
        ],
    );
    assert!(got.contains("no record with external id 'a/1'"), "{got}");
    assert!(
        corrected.contains("no record with external id 'a/1'"),
        "{corrected}"
    );
    // without --tenant a principal never reaches a record by its internal id
    let id = cli::json(&ok(&store, &["get", "a/1", "--tenant", "A", "--json"]))["id"]
        .as_str()
        .unwrap()
        .to_string();
    let msg = fails(
        &store,
        &[
            "correct",
            &id,
            fix.to_str().unwrap(),
            "--principal",
            "mallory",
        ],
    );
    assert!(msg.contains("needs --tenant"), "{msg}");
    let msg = fails(
        &store,
        &[
            "correct",
            &id,
            fix.to_str().unwrap(),
            "--tenant",
            "B",
            "--principal",
            "mallory",
        ],
    );
    assert!(msg.contains("no record"), "{msg}");
    let now = cli::json(&ok(&store, &["get", "a/1", "--tenant", "A", "--json"]));
    assert_eq!(now["text"], "secret hunter2");
    assert_eq!(now["status"], "active");
}

#[test]
fn a_missing_and_a_hidden_record_get_the_same_answer() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = secret_store(tmp.path());
    for cmd in ["get", "history", "trace", "delete", "expire"] {
        let mut hidden = vec![cmd, "a/1", "--tenant", "A", "--principal", "mallory"];
        let mut missing = vec![cmd, "a/9", "--tenant", "A", "--principal", "mallory"];
        if cmd == "expire" {
            hidden.extend(["--at", "2030-01-01T00:00:00Z"]);
            missing.extend(["--at", "2030-01-01T00:00:00Z"]);
        }
        let h = fails(&store, &hidden);
        let m = fails(&store, &missing);
        assert_eq!(
            h.replace("a/1", "a/9"),
            m,
            "{cmd}: hidden and missing differ"
        );
    }
}

#[test]
fn a_correction_keeps_labels_scope_and_external_id_unless_an_admin_lowers_them() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = secret_store(tmp.path());
    let fix = tmp.path().join("fix.json");
    std::fs::write(&fix, r#"{"kind":"m","text":"secret hunter3"}"#).unwrap();
    let o = ok(
        &store,
        &["correct", "a/1", fix.to_str().unwrap(), "--tenant", "A"],
    );
    assert!(
        cli::text(&o).contains("inherited access label(s) secret"),
        "{}",
        cli::text(&o)
    );
    let now = cli::json(&ok(&store, &["get", "a/1", "--tenant", "A", "--json"]));
    assert_eq!(now["text"], "secret hunter3");
    assert_eq!(now["external_id"], "a/1");
    assert_eq!(now["access"], serde_json::json!(["secret"]), "{now}");
    assert_eq!(now["scope"]["user"], "u1", "{now}");
    fails(
        &store,
        &["get", "a/1", "--tenant", "A", "--principal", "mallory"],
    );
    // lowering access: only the tenant admin, and it says so
    ok(
        &store,
        &[
            "grant",
            "--tenant",
            "A",
            "--principal",
            "bob",
            "--label",
            "secret",
        ],
    );
    std::fs::write(&fix, r#"{"kind":"m","text":"declassified"}"#).unwrap();
    let msg = fails(
        &store,
        &[
            "correct",
            "a/1",
            fix.to_str().unwrap(),
            "--tenant",
            "A",
            "--principal",
            "bob",
            "--replace-access",
        ],
    );
    assert!(msg.contains("may not"), "{msg}");
    let o = ok(
        &store,
        &[
            "correct",
            "a/1",
            fix.to_str().unwrap(),
            "--tenant",
            "A",
            "--replace-access",
        ],
    );
    assert!(
        cli::text(&o).contains("access lowered by the tenant admin"),
        "{}",
        cli::text(&o)
    );
    let seen = cli::json(&ok(
        &store,
        &[
            "get",
            "a/1",
            "--tenant",
            "A",
            "--principal",
            "mallory",
            "--json",
        ],
    ));
    assert_eq!(seen["text"], "declassified");
}

#[test]
fn only_the_writer_or_the_admin_may_change_a_record() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let db = Engram::open(tmp.path().join("s"), Options::default()).unwrap();
    let bob = db.session(Principal::user("A", "bob"));
    let alice = db.session(Principal::user("A", "alice"));
    bob.append(vec![
        NewRecord::event("m", "bob's note").with_external_id("n"),
    ])
    .unwrap();
    let mut fix = NewRecord::event("m", "alice's version");
    fix.supersedes = Some(RecordRef::External("n".into()));
    let e = alice.append(vec![fix.clone()]).unwrap_err();
    assert!(matches!(e, EngineError::Forbidden { .. }), "{e}");
    let e = alice
        .delete(&RecordRef::External("n".into()), None)
        .unwrap_err();
    assert!(matches!(e, EngineError::Forbidden { .. }), "{e}");
    assert_eq!(
        bob.get(&RecordRef::External("n".into()))
            .unwrap()
            .text
            .as_deref(),
        Some("bob's note")
    );
    bob.append(vec![{
        let mut f = NewRecord::event("m", "bob's fix");
        f.supersedes = Some(RecordRef::External("n".into()));
        f
    }])
    .unwrap();
    db.session(Principal::admin("A"))
        .delete(&RecordRef::External("n".into()), None)
        .unwrap();
    db.close().unwrap();
}

#[test]
fn a_request_line_cannot_choose_its_principal() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = secret_store(tmp.path());
    ok(
        &store,
        &[
            "grant",
            "--tenant",
            "A",
            "--principal",
            "alice",
            "--label",
            "secret",
        ],
    );
    let q = tmp.path().join("q.jsonl");
    std::fs::write(
        &q,
        "{\"text\": \"secret\", \"principal\": \"alice\"}\n{\"text\": \"note\"}\n",
    )
    .unwrap();
    let o = cli::at(
        &store,
        &[
            "recall",
            "--tenant",
            "A",
            "--principal",
            "ua",
            "--queries",
            q.to_str().unwrap(),
            "--json",
        ],
    );
    let out = cli::text(&o);
    assert!(!o.status.success());
    assert!(!out.contains("hunter2"), "{out}");
    assert!(out.contains("come from the session"), "{out}");
    // the other line still ran
    assert!(out.contains("public note"), "{out}");
}

#[test]
fn an_external_id_that_looks_like_an_internal_id_is_never_confused_with_one() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let db = Engram::open(tmp.path().join("s"), Options::default()).unwrap();
    let a = db.session(Principal::admin("A"));
    let x = a.append(vec![NewRecord::event("m", "record x")]).unwrap()[0].id;
    let lookalike = x.to_string();
    let y = a
        .append(vec![
            NewRecord::event("m", "record y").with_external_id(lookalike.clone()),
        ])
        .unwrap()[0]
        .id;
    db.close().unwrap();
    let store = tmp.path().join("s");
    let msg = fails(&store, &["delete", &lookalike, "--tenant", "A"]);
    assert!(
        msg.contains("both an internal id and an external id"),
        "{msg}"
    );
    ok(
        &store,
        &["get", &format!("id:{lookalike}"), "--tenant", "A"],
    );
    let got = cli::json(&ok(
        &store,
        &[
            "get",
            &format!("ext:{lookalike}"),
            "--tenant",
            "A",
            "--json",
        ],
    ));
    assert_eq!(got["id"], y.to_string());
    ok(
        &store,
        &["delete", &format!("ext:{lookalike}"), "--tenant", "A"],
    );
    let kept = cli::json(&ok(
        &store,
        &["get", &format!("id:{lookalike}"), "--tenant", "A", "--json"],
    ));
    assert_eq!(kept["text"], "record x");
}

/// External ids are unique per tenant, so a key a hidden record holds is
/// refused; but the refusal names no id, and reads the same whether the
/// request repeats the hidden content, differs from it, or names a deleted
/// record: an append cannot confirm a guess of what it cannot read.
#[test]
fn an_append_neither_names_nor_confirms_a_hidden_record_by_its_external_id() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let db = Engram::open(tmp.path().join("s"), Options::default()).unwrap();
    let admin = db.session(Principal::admin("A"));
    let carl = db.session(Principal::user("A", "carl"));
    let secret = |ext: &str, text: &str| {
        let mut r = NewRecord::event("m", text).with_external_id(ext);
        r.occurred_at = Some(1_700_000_000_000);
        r.access = vec!["secret".into()];
        r
    };
    let s1 = admin.append(vec![secret("s/1", "hunter2")]).unwrap()[0].id;
    let s2 = admin.append(vec![secret("s/2", "gone")]).unwrap()[0].id;
    admin.delete(&RecordRef::Id(s2), None).unwrap();

    let attempts = [
        secret("s/1", "hunter2"), // the hidden content, exactly
        secret("s/1", "a guess"), // other content
        secret("s/2", "gone"),    // a deleted record's key
        NewRecord::event("m", "x").with_external_id("s/1"),
    ];
    let mut messages = Vec::new();
    for a in attempts {
        let e = carl.append(vec![a]).unwrap_err();
        match &e {
            EngineError::ExternalIdConflict { existing, .. } => assert_eq!(*existing, None, "{e}"),
            other => panic!("expected an in-use conflict, got {other}"),
        }
        let msg = e.to_string();
        for id in [s1, s2] {
            assert!(!msg.contains(&id.to_string()), "{msg}");
        }
        assert!(!msg.contains("deleted"), "{msg}");
        messages.push(msg.replace("s/2", "s/1"));
    }
    messages.dedup();
    assert_eq!(messages.len(), 1, "one answer for every case: {messages:?}");

    // A principal that may read the record still gets the full story.
    let again = admin.append(vec![secret("s/1", "hunter2")]).unwrap();
    assert_eq!(again[0].id, s1);
    assert_eq!(again[0].outcome, engram::AppendOutcome::Duplicate);
    match admin.append(vec![secret("s/1", "other")]).unwrap_err() {
        EngineError::ExternalIdConflict { existing, .. } => assert_eq!(existing, Some(s1)),
        other => panic!("expected a conflict naming {s1}, got {other}"),
    }
    let e = admin.append(vec![secret("s/2", "gone")]).unwrap_err();
    assert!(e.to_string().contains("deleted"), "{e}");
    // A writer retrying its own append is told "duplicate", even when it
    // does not hold the labels it wrote (an agent filing restricted notes).
    let filed = carl
        .append(vec![secret("c/1", "carl's restricted note")])
        .unwrap();
    let own = filed[0].id;
    // and is told at once that it cannot read it back (it reads "not
    // found" to its writer); the admin filing a new label is told nothing
    assert!(
        filed[0].notes.iter().any(|n| n.contains("does not hold")),
        "{:?}",
        filed[0].notes
    );
    let mut fresh = NewRecord::event("m", "a label nobody holds yet");
    fresh.access = vec!["brand-new".into()];
    assert!(admin.append(vec![fresh]).unwrap()[0].notes.is_empty());
    let again = carl
        .append(vec![secret("c/1", "carl's restricted note")])
        .unwrap();
    assert_eq!(
        (again[0].id, again[0].outcome),
        (own, engram::AppendOutcome::Duplicate)
    );
    assert_eq!(
        admin.get(&RecordRef::Id(s1)).unwrap().text.as_deref(),
        Some("hunter2")
    );
    db.close().unwrap();
}

/// A correction that adds a label hides the new version from principals
/// without it: the old version they can still read does not name it, and a
/// correction they try is decided by the matrix before the target's state
/// (already corrected) is told.
#[test]
fn a_hidden_newer_version_is_not_named_and_the_matrix_decides_first() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let db = Engram::open(tmp.path().join("s"), Options::default()).unwrap();
    let admin = db.session(Principal::admin("A"));
    let bob = db.session(Principal::user("A", "bob"));
    let carl = db.session(Principal::user("A", "carl"));
    let v1 = bob
        .append(vec![NewRecord::event("m", "public v1")])
        .unwrap()[0]
        .id;
    let mut fix = NewRecord::event("m", "classified v2");
    fix.supersedes = Some(RecordRef::Id(v1));
    fix.access = vec!["secret".into()];
    let v2 = admin.append(vec![fix]).unwrap()[0].id;

    let old = carl.get(&RecordRef::Id(v1)).unwrap();
    assert_eq!(old.status.name(), "superseded");
    assert_eq!(old.superseded_by, None);
    let h = carl.history(&RecordRef::Id(v1)).unwrap();
    assert_eq!(h.len(), 1);
    assert_eq!(h[0].superseded_by, None);
    assert_eq!(
        admin.get(&RecordRef::Id(v1)).unwrap().superseded_by,
        Some(v2)
    );
    let newest = admin.get(&RecordRef::Id(v2)).unwrap();
    assert_eq!(newest.supersedes, Some(v1));

    let again = |who: &engram::Session| {
        let mut f = NewRecord::event("m", "x");
        f.supersedes = Some(RecordRef::Id(v1));
        who.append(vec![f]).unwrap_err()
    };
    // carl did not write v1: forbidden, as the matrix says, not "already
    // superseded by <hidden id>"
    let e = again(&carl);
    assert!(matches!(e, EngineError::Forbidden { .. }), "{e}");
    assert!(!e.to_string().contains(&v2.to_string()), "{e}");
    // bob wrote v1 and may correct it, but cannot read v2
    match again(&bob) {
        EngineError::AlreadySuperseded { by, .. } => assert_eq!(by, None),
        other => panic!("expected already superseded, got {other}"),
    }
    assert!(!again(&bob).to_string().contains(&v2.to_string()));
    match again(&admin) {
        EngineError::AlreadySuperseded { by, .. } => assert_eq!(by, Some(v2)),
        other => panic!("expected already superseded, got {other}"),
    }
    // Expiring the old version: bob may, and is told it is superseded, but
    // not by which version; the admin is told which.
    let later = engram::time::parse_rfc3339("2100-01-01T00:00:00Z").unwrap();
    let e = bob.expire(&RecordRef::Id(v1), later).unwrap_err();
    assert!(matches!(e, EngineError::InvalidState { .. }), "{e}");
    assert!(!e.to_string().contains(&v2.to_string()), "{e}");
    assert!(e.to_string().contains("cannot read"), "{e}");
    let e = admin.expire(&RecordRef::Id(v1), later).unwrap_err();
    assert!(e.to_string().contains(&v2.to_string()), "{e}");
    db.close().unwrap();
}

/// A store with tenant A's admin, alice (no labels) and bob (granted
/// `secret`), as sessions.
/// A deletion removes every version of a correction chain, so a principal
/// may delete a version of its own only when it may delete each other
/// version too: deleting bob's old version must not remove the admin's
/// correction of it, readable to bob or hidden from him by a label. The
/// refusal names no version; the admin may delete the chain.
#[test]
fn deleting_an_own_old_version_does_not_remove_versions_one_may_not_delete() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let db = Engram::open(tmp.path().join("s"), Options::default()).unwrap();
    let admin = db.session(Principal::admin("A"));
    let bob = db.session(Principal::user("A", "bob"));
    for (key, labels) in [("open", vec![]), ("labelled", vec!["secret".to_string()])] {
        let v1 = bob
            .append(vec![
                NewRecord::event("m", "bob's note").with_external_id(key),
            ])
            .unwrap()[0]
            .id;
        let mut fix = NewRecord::event("m", "the admin's correction");
        fix.supersedes = Some(RecordRef::Id(v1));
        fix.access = labels;
        let v2 = admin.append(vec![fix]).unwrap()[0].id;
        let e = bob.delete(&RecordRef::Id(v1), None).unwrap_err();
        assert!(matches!(e, EngineError::Forbidden { .. }), "{key}: {e}");
        let text = e.to_string();
        assert!(
            text.contains("tenant's admin may delete the chain"),
            "{text}"
        );
        assert!(
            !text.contains(&v2.to_string()),
            "{key}: names the version: {text}"
        );
        assert_eq!(
            admin.get(&RecordRef::Id(v2)).unwrap().status.name(),
            "active",
            "{key}: the admin's version survived"
        );
        let d = admin.delete(&RecordRef::Id(v1), None).unwrap();
        assert!(d.affected.contains(&v2), "{key}: {:?}", d.affected);
    }
    // a chain all of bob's own is bob's to delete, from any version
    let v1 = bob
        .append(vec![
            NewRecord::event("m", "bob again").with_external_id("own"),
        ])
        .unwrap()[0]
        .id;
    let mut fix = NewRecord::event("m", "bob's own fix");
    fix.supersedes = Some(RecordRef::Id(v1));
    let v2 = bob.append(vec![fix]).unwrap()[0].id;
    let d = bob.delete(&RecordRef::Id(v1), None).unwrap();
    assert!(
        d.affected.contains(&v1) && d.affected.contains(&v2),
        "{:?}",
        d.affected
    );
    db.close().unwrap();
}

fn alice_and_bob(root: &Path) -> (Engram, engram::Session, engram::Session, engram::Session) {
    let db = Engram::open(root.join("s"), Options::default()).unwrap();
    let admin = db.session(Principal::admin("A"));
    admin.grant(Some("bob"), Some("secret"), None).unwrap();
    let alice = db.session(Principal::user("A", "alice"));
    let bob = db.session(Principal::user("A", "bob"));
    (db, admin, alice, bob)
}

/// A deletion reaches every derivative, including ones the deleting
/// principal cannot read, but names only what it may read; a retraction
/// likewise.
#[test]
fn a_lifecycle_answer_names_only_what_the_principal_may_read() {
    use engram::{AssertionKind, model::Body};
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let (db, admin, alice, bob) = alice_and_bob(tmp.path());
    let note = alice
        .append(vec![NewRecord::event("m", "alice's note")])
        .unwrap()[0]
        .id;
    let fact = alice
        .append(vec![NewRecord::assertion(
            AssertionKind::Fact,
            "alice's fact",
            vec![RecordRef::Id(note)],
        )])
        .unwrap()[0]
        .id;
    let hidden = |text: &str, source: RecordId| NewRecord {
        body: Body::Summary {
            generator: "g@1".into(),
        },
        kind: "summary".into(),
        text: Some(text.into()),
        sources: vec![RecordRef::Id(source)],
        access: vec!["secret".into()],
        ..NewRecord::default()
    };
    let on_fact = bob
        .append(vec![hidden("bob's summary of the fact", fact)])
        .unwrap()[0]
        .id;

    let r = alice.retract(&RecordRef::Id(fact), None).unwrap();
    assert_eq!(r.affected, vec![fact], "the hidden summary is not named");
    assert_eq!(
        bob.get(&RecordRef::Id(on_fact)).unwrap().status.name(),
        "stale",
        "but the retraction reached it"
    );

    let on_note = bob
        .append(vec![hidden("bob's summary of the note", note)])
        .unwrap()[0]
        .id;
    let d = alice.delete(&RecordRef::Id(note), None).unwrap();
    assert!(d.affected.contains(&note), "{:?}", d.affected);
    for h in [on_fact, on_note] {
        assert!(!d.affected.contains(&h), "{h} named in {:?}", d.affected);
    }
    assert!(
        bob.get(&RecordRef::Id(on_note)).is_err(),
        "the deletion reached the hidden derivative"
    );
    // the admin, who may read everything, is told everything
    let n2 = alice
        .append(vec![NewRecord::event("m", "another")])
        .unwrap()[0]
        .id;
    let s2 = bob.append(vec![hidden("over n2", n2)]).unwrap()[0].id;
    let d = admin.delete(&RecordRef::Id(n2), None).unwrap();
    assert!(
        d.affected.contains(&n2) && d.affected.contains(&s2),
        "{:?}",
        d.affected
    );
    db.close().unwrap();
}

/// A vector space that holds only records a principal cannot read does not
/// exist for it: not in its manifests, its model list, or the models an
/// error offers.
#[test]
fn a_vector_space_of_hidden_records_only_is_not_shown() {
    use engram::RecallRequest;
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let (db, _admin, alice, bob) = alice_and_bob(tmp.path());
    bob.append(vec![
        NewRecord::event("m", "classified")
            .with_access(&["secret"])
            .with_embedding("m-secret", vec![0.1, 0.2, 0.3]),
    ])
    .unwrap();
    alice
        .append(vec![
            NewRecord::event("m", "public").with_embedding("m-pub", vec![1.0, 0.0]),
        ])
        .unwrap();
    let models = |s: &engram::Session| s.vector_models().into_keys().collect::<Vec<_>>();
    assert_eq!(models(&alice), ["m-pub"]);
    assert_eq!(models(&bob), ["m-pub", "m-secret"]);

    let ask = |s: &engram::Session, v: Vec<f32>, model: Option<&str>| {
        s.recall(&RecallRequest {
            vector: Some(v.into()),
            model: model.map(str::to_string),
            mode: engram::Mode::Vector,
            ..RecallRequest::default()
        })
    };
    match ask(&alice, vec![1.0, 2.0, 3.0], Some("m-secret")).unwrap_err() {
        EngineError::UnknownModel { available, .. } => assert_eq!(available, ["m-pub"]),
        other => panic!("expected an unknown model, got {other}"),
    }
    // one space in sight: no model needed, and the manifest names only it
    let r = ask(&alice, vec![1.0, 0.0], None).unwrap();
    assert_eq!(r.hits.len(), 1);
    let spaces: Vec<&String> = r.manifest.versions.vector_spaces.keys().collect();
    assert_eq!(spaces, ["m-pub"]);
    let r = ask(&bob, vec![0.1, 0.2, 0.3], Some("m-secret")).unwrap();
    assert_eq!(r.hits.len(), 1);
    assert_eq!(r.manifest.versions.vector_spaces.len(), 2);
    // a space whose records are all deleted is gone for everyone
    alice
        .append(vec![
            NewRecord::event("m", "to be deleted")
                .with_external_id("gone")
                .with_embedding("m-gone", vec![0.5, 0.5]),
        ])
        .unwrap();
    assert_eq!(models(&alice), ["m-gone", "m-pub"]);
    alice
        .delete(&RecordRef::External("gone".into()), None)
        .unwrap();
    assert_eq!(models(&alice), ["m-pub"]);
    assert_eq!(models(&bob), ["m-pub", "m-secret"]);
    match ask(&alice, vec![1.0, 2.0, 3.0], Some("m-gone")).unwrap_err() {
        EngineError::UnknownModel { available, .. } => assert_eq!(available, ["m-pub"]),
        other => panic!("expected an unknown model, got {other}"),
    }
    let r = ask(&bob, vec![0.1, 0.2, 0.3], Some("m-secret")).unwrap();
    let spaces: Vec<&String> = r.manifest.versions.vector_spaces.keys().collect();
    assert_eq!(spaces, ["m-pub", "m-secret"]);
    db.close().unwrap();
}

/// The same through the store's embedder: a text query of a principal for
/// whom the embedder's space holds only unreadable records runs as if the
/// tenant had no vectors at all (the manifest used to plan a search over
/// the space, telling its hidden records apart from none).
#[test]
fn an_embedder_space_of_hidden_records_only_is_not_shown() {
    use engram::{HashEmbedder, RecallRequest};
    use std::sync::Arc;
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let opts = || Options {
        embedder: Some(Arc::new(HashEmbedder::default())),
        ..Options::default()
    };
    let db = Engram::open(tmp.path().join("s"), opts()).unwrap();
    let admin = |t: &str| db.session(Principal::admin(t));
    admin("A").grant(Some("bob"), Some("secret"), None).unwrap();
    db.session(Principal::user("A", "bob"))
        .append(vec![
            NewRecord::event("m", "hidden vector text").with_access(&["secret"]),
        ])
        .unwrap();
    let ask = |tenant: &str| {
        let r = db
            .session(Principal::user(tenant, "alice"))
            .recall(&RecallRequest {
                text: Some("hidden vector text".into()),
                explain: true,
                ..RecallRequest::default()
            })
            .unwrap();
        assert!(r.hits.is_empty());
        let m = r.manifest;
        let vector = m
            .retrievers
            .iter()
            .find(|o| o.retriever.as_str() == "vector")
            .expect("a vector retriever");
        (
            vector.skipped.clone(),
            vector.plan.is_some(),
            m.versions.vector_spaces.len(),
        )
    };
    // tenant B has no vectors at all; in A alice can read none of them
    let none = ask("B");
    assert!(
        none.0.as_deref().unwrap_or("").contains("no vectors yet"),
        "{none:?}"
    );
    assert_eq!(ask("A"), none);
    // bob, who holds the label, searches the space
    let r = db
        .session(Principal::user("A", "bob"))
        .recall(&RecallRequest {
            text: Some("hidden vector text".into()),
            ..RecallRequest::default()
        })
        .unwrap();
    assert_eq!(r.hits.len(), 1);
    db.close().unwrap();
}

/// A trace counts an entity's relation edges among the relations the
/// principal may read, and not deleted ones.
#[test]
fn a_trace_counts_only_the_relations_the_principal_may_read() {
    use engram::model::Body;
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let db = Engram::open(tmp.path().join("s"), Options::default()).unwrap();
    let admin = db.session(Principal::admin("A"));
    let entity = |ext: &str| NewRecord {
        body: Body::Entity {
            entity_type: "person".into(),
            name: ext.into(),
            aliases: vec![],
        },
        kind: "entity".into(),
        external_id: Some(ext.into()),
        ..NewRecord::default()
    };
    let relation = |o: &str, ext: &str, access: &[&str]| {
        NewRecord {
            body: Body::Relation {
                subject: RecordRef::External("o".into()),
                predicate: "knows".into(),
                object: RecordRef::External(o.into()),
            },
            kind: "relation".into(),
            external_id: Some(ext.into()),
            ..NewRecord::default()
        }
        .with_access(access)
    };
    admin
        .append(vec![entity("o"), entity("p"), entity("q"), entity("r")])
        .unwrap();
    admin
        .append(vec![
            relation("p", "r1", &[]),
            relation("q", "r2", &["hr"]),
            relation("r", "r3", &[]),
        ])
        .unwrap();
    admin
        .delete(&RecordRef::External("r3".into()), None)
        .unwrap();
    let edges = |s: &engram::Session| {
        let t = s.trace(&RecordRef::External("o".into())).unwrap();
        t.nodes[0]
            .artifacts
            .iter()
            .find(|a| a.starts_with("graph node"))
            .cloned()
            .unwrap()
    };
    assert_eq!(
        edges(&db.session(Principal::user("A", "carol"))),
        "graph node with 1 relation edge(s)"
    );
    assert_eq!(edges(&admin), "graph node with 2 relation edge(s)");
    db.close().unwrap();
}

/// A principal granted the `admin` role is its tenant's administrator for
/// reads too: it holds every label of the tenant (as the matrix already
/// let it administer), until the role is revoked.
#[test]
fn a_principal_granted_the_admin_role_reads_as_the_admin() {
    use engram::RecallRequest;
    let tmp = tempfile::tempdir().unwrap();
    let (db, admin, alice, _bob) = alice_and_bob(tmp.path());
    admin
        .append(vec![
            NewRecord::event("note", "the kiwi vault code").with_access(&["secret"]),
        ])
        .unwrap();
    let sees = |s: &engram::Session| {
        let r = s.recall(&RecallRequest::text("kiwi")).unwrap();
        (r.hits.len(), r.manifest.principal.admin)
    };
    assert_eq!(sees(&alice), (0, false));
    admin.grant(Some("alice"), None, Some("admin")).unwrap();
    assert_eq!(sees(&alice), (1, true), "the admin role holds the labels");
    admin.revoke(Some("alice"), None, Some("admin")).unwrap();
    assert_eq!(sees(&alice), (0, false), "and no longer once revoked");
    db.close().unwrap();
}

/// A principal belongs to one tenant: listing or recalling as a principal
/// without `--tenant` is refused, never run once per tenant.
#[test]
fn log_and_recall_as_a_principal_need_its_tenant() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = secret_store(tmp.path());
    let other = tmp.path().join("b.jsonl");
    std::fs::write(
        &other,
        r#"{"external_id":"b/1","tenant":"B","kind":"m","text":"tenant B note"}"#,
    )
    .unwrap();
    ok(&store, &["ingest", other.to_str().unwrap()]);
    for args in [
        &["log", "--principal", "bob"][..],
        &["recall", "--principal", "bob", "--text", "note"][..],
    ] {
        let msg = fails(&store, args);
        assert!(msg.contains("--tenant"), "{args:?}: {msg}");
        assert!(!msg.contains("tenant B note"), "{args:?}: {msg}");
    }
    let listed =
        String::from_utf8(cli::at(&store, &["log", "--tenant", "A", "--principal", "bob"]).stdout)
            .unwrap();
    assert!(
        listed.contains("public note") && !listed.contains("tenant B"),
        "{listed}"
    );
    assert!(!listed.contains("hunter2"), "{listed}");
}

/// Every result line of `recall --queries --json` has the same shape: a
/// line refused while parsing still echoes its `id` as `query_id`.
#[test]
fn a_refused_request_line_echoes_its_id() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = secret_store(tmp.path());
    let q = tmp.path().join("q.jsonl");
    std::fs::write(
        &q,
        "{\"id\": \"q1\", \"text\": \"note\"}\n{\"id\": \"q2\", \"text\": \"note\", \"principal\": \"root\"}\nnot json\n",
    )
    .unwrap();
    let out = cli::at(
        &store,
        &[
            "recall",
            "--tenant",
            "A",
            "--queries",
            q.to_str().unwrap(),
            "--json",
        ],
    );
    let lines: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert_eq!(lines[0]["query_id"], "q1");
    assert_eq!(lines[1]["query_id"], "q2");
    assert!(lines[1]["error"].as_str().unwrap().contains("principal"));
    assert!(lines[2]["query_id"].is_null() && lines[2]["error"].is_string());
    assert!(!out.status.success());
}

fn correction_of(target: &str, ext: &str, text: &str) -> NewRecord {
    let mut c = NewRecord::event("m", text).with_external_id(ext);
    c.supersedes = Some(RecordRef::External(target.into()));
    c
}

/// A correction in the same batch as the record it corrects inherits its
/// labels and scope, exactly as one sent in a later batch: the corrected
/// text stays out of reach of principals without the label.
#[test]
fn a_correction_in_the_target_s_batch_keeps_its_protection() {
    let tmp = tempfile::tempdir().unwrap();
    let db = Engram::open(tmp.path().join("s"), Options::default()).unwrap();
    let admin = db.session(Principal::admin("A"));
    let mut orig = NewRecord::event("m", "secret orig").with_external_id("a");
    orig.access = vec!["hr".into()];
    orig.scope.user = Some("u9".into());
    let out = admin
        .append(vec![orig.clone(), correction_of("a", "b", "secret fixed")])
        .unwrap();
    let fixed = admin.get(&RecordRef::Id(out[1].id)).unwrap();
    assert_eq!(fixed.access, vec!["hr".to_string()]);
    assert_eq!(fixed.scope.user.as_deref(), Some("u9"));
    assert!(out[1].notes.iter().any(|n| n.contains("inherited access")));
    // another principal of the tenant sees neither version
    let bob = db.session(Principal::user("A", "bob"));
    assert!(bob.get(&RecordRef::External("b".into())).is_err());
    // the same two records in two batches: the same stored content
    let db2 = Engram::open(tmp.path().join("s2"), Options::default()).unwrap();
    let admin2 = db2.session(Principal::admin("A"));
    admin2.append(vec![orig]).unwrap();
    let two = admin2
        .append(vec![correction_of("a", "b", "secret fixed")])
        .unwrap();
    let fixed2 = admin2.get(&RecordRef::Id(two[0].id)).unwrap();
    assert_eq!((fixed2.access, fixed2.scope), (fixed.access, fixed.scope));
    db.close().unwrap();
    db2.close().unwrap();
}

/// A record the writer cannot read (it wrote a label it does not hold) is
/// not made correctable by repeating it first in the same batch.
#[test]
fn repeating_a_hidden_record_does_not_make_it_correctable() {
    let tmp = tempfile::tempdir().unwrap();
    let db = Engram::open(tmp.path().join("s"), Options::default()).unwrap();
    let w = db.session(Principal::user("A", "w1"));
    let mut secret = NewRecord::event("m", "board minutes confidential").with_external_id("dw_a");
    secret.access = vec!["sec".into()];
    w.append(vec![secret.clone()]).unwrap();
    // alone: the hidden record is "no record"
    let e = w
        .append(vec![correction_of("dw_a", "dw_c", "board minutes edited")])
        .unwrap_err();
    assert!(e.to_string().contains("no record"), "{e}");
    // after a repeat of it in the same batch: the same answer
    let e = w
        .append(vec![
            secret,
            correction_of("dw_a", "dw_c2", "board minutes edited"),
        ])
        .unwrap_err();
    assert!(e.to_string().contains("no record"), "{e}");
    let admin = db.session(Principal::admin("A"));
    let a = admin.get(&RecordRef::External("dw_a".into())).unwrap();
    assert_eq!(a.status, engram::Status::Active);
    assert!(admin.get(&RecordRef::External("dw_c2".into())).is_err());
    db.close().unwrap();
}

/// Sending a correction again, alone or with its target, is a duplicate
/// (appends are idempotent by external id), not "already superseded".
#[test]
fn a_correction_sent_again_is_a_duplicate() {
    let tmp = tempfile::tempdir().unwrap();
    let db = Engram::open(tmp.path().join("s"), Options::default()).unwrap();
    let s = db.session(Principal::user("A", "bob"));
    let orig = NewRecord::event("m", "first").with_external_id("a");
    let fix = correction_of("a", "b", "second");
    s.append(vec![orig.clone()]).unwrap();
    let first = s.append(vec![fix.clone()]).unwrap();
    for batch in [vec![fix.clone()], vec![orig, fix]] {
        let again = s.append(batch).unwrap();
        let last = again.last().unwrap();
        assert_eq!(last.outcome, engram::AppendOutcome::Duplicate);
        assert_eq!(last.id, first[0].id);
    }
    // a different correction of the corrected record is still refused
    let e = s
        .append(vec![correction_of("a", "c", "third")])
        .unwrap_err();
    assert!(matches!(e, EngineError::AlreadySuperseded { .. }), "{e}");
    db.close().unwrap();
}

/// A correction in the batch of a relation to a labelled entity carries the
/// entity's labels, as a correction in a later batch does: relations carry
/// their endpoints' labels, and so does what corrects them.
#[test]
fn a_correction_in_the_batch_of_a_relation_keeps_its_endpoints_labels() {
    let tmp = tempfile::tempdir().unwrap();
    let db = Engram::open(tmp.path().join("s"), Options::default()).unwrap();
    let carol = db.session(Principal::user("A", "carol").with_labels(["secret".to_string()]));
    let lines = [
        r#"{"record":"entity","entity_type":"svc","name":"vault","external_id":"svc/sec","access":["secret"]}"#,
        r#"{"record":"entity","entity_type":"svc","name":"web","external_id":"svc/pub"}"#,
        r#"{"record":"relation","subject":"svc/sec","predicate":"calls","object":"svc/pub","external_id":"rel/1"}"#,
        r#"{"record":"relation","subject":"svc/pub","predicate":"calls","object":"svc/pub","supersedes":"rel/1"}"#,
    ];
    let records: Vec<NewRecord> = lines
        .iter()
        .enumerate()
        .map(|(i, l)| engram::query::parse_line(l, i + 1).unwrap().record)
        .collect();
    let out = carol.append(records.clone()).unwrap();
    let fixed = carol.get(&RecordRef::Id(out[3].id)).unwrap();
    assert_eq!(
        fixed.access,
        vec!["secret".to_string()],
        "{:?}",
        out[3].notes
    );
    let alice = db.session(Principal::user("A", "alice"));
    assert!(alice.get(&RecordRef::Id(out[3].id)).is_err());
    // dropping the label takes the tenant admin, in the batch as later
    let mut drop = records;
    drop[3].access = Vec::new();
    drop[3].replace_access = true;
    drop[2].external_id = Some("rel/2".into());
    drop[3].supersedes = Some(RecordRef::External("rel/2".into()));
    let e = carol.append(drop).unwrap_err();
    assert!(matches!(e, EngineError::Forbidden { .. }), "{e}");
    db.close().unwrap();
}

/// A key's own labels count in a tenant with nothing stored yet: its
/// first batch may write a labelled record and correct it.
#[test]
fn a_credential_label_counts_in_a_new_tenant() {
    let tmp = tempfile::tempdir().unwrap();
    let db = Engram::open(tmp.path().join("s"), Options::default()).unwrap();
    let gus = db.session(Principal::user("T3", "gus").with_labels(["secret".to_string()]));
    let mut g1 = NewRecord::event("m", "g").with_external_id("g1");
    g1.access = vec!["secret".into()];
    let out = gus
        .append(vec![g1, correction_of("g1", "g1b", "g2")])
        .unwrap();
    assert_eq!(
        gus.get(&RecordRef::Id(out[1].id)).unwrap().access,
        vec!["secret".to_string()]
    );
    db.close().unwrap();
}

/// Sending again a correction that gave no external id of its own (it
/// inherited its target's, which now names it) is a duplicate; so is a
/// correction line repeated in one batch; and a chain of corrections
/// naming the same external id is the same chain in one batch or in
/// several.
#[test]
fn corrections_sent_again_or_chained_do_not_depend_on_batches() {
    let tmp = tempfile::tempdir().unwrap();
    let db = Engram::open(tmp.path().join("s"), Options::default()).unwrap();
    let s = db.session(Principal::user("A", "bob"));
    let fix = || {
        let mut c = NewRecord::event("m", "b");
        c.supersedes = Some(RecordRef::External("B".into()));
        c
    };
    s.append(vec![NewRecord::event("m", "a").with_external_id("B")])
        .unwrap();
    let first = s.append(vec![fix()]).unwrap();
    let again = s.append(vec![fix()]).unwrap();
    assert_eq!(again[0].outcome, engram::AppendOutcome::Duplicate);
    assert_eq!(again[0].id, first[0].id);
    assert_eq!(again[0].external_id.as_deref(), Some("B"));
    assert_eq!(
        s.history(&RecordRef::External("B".into())).unwrap().len(),
        2
    );
    // a repeated correction line in one batch
    let x2 = correction_of("x", "x2", "x two");
    let out = s
        .append(vec![
            NewRecord::event("m", "x one").with_external_id("x"),
            x2.clone(),
            x2,
        ])
        .unwrap();
    assert_eq!(out[2].outcome, engram::AppendOutcome::Duplicate);
    assert_eq!(out[2].id, out[1].id);
    // A; b corrects A; c corrects A: in one batch as in three
    let chain = |ext: &str| {
        let mut b = NewRecord::event("m", "second");
        b.supersedes = Some(RecordRef::External(ext.into()));
        let mut c = NewRecord::event("m", "third");
        c.supersedes = Some(RecordRef::External(ext.into()));
        vec![NewRecord::event("m", "first").with_external_id(ext), b, c]
    };
    s.append(chain("one")).unwrap();
    for r in chain("many") {
        s.append(vec![r]).unwrap();
    }
    let texts = |ext: &str| -> Vec<String> {
        s.history(&RecordRef::External(ext.into()))
            .unwrap()
            .into_iter()
            .map(|r| r.text.unwrap_or_default())
            .collect()
    };
    assert_eq!(texts("one"), vec!["first", "second", "third"]);
    assert_eq!(texts("one"), texts("many"));
    db.close().unwrap();
}

/// A chain of corrections ingested again in one batch, or a correction of
/// one version sent again by its id after later ones, is a duplicate of
/// the version it made. A correction naming the chain by its external id
/// corrects the current version: one saying what an older version said (a
/// preference changed back and forth) is a new version, never swallowed.
#[test]
fn a_chain_sent_again_adds_no_versions_and_a_change_back_is_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let db = Engram::open(tmp.path().join("s"), Options::default()).unwrap();
    let s = db.session(Principal::user("A", "bob"));
    let line = |text: &str, first: bool| {
        let r = NewRecord::event("m", text);
        if first {
            r.with_external_id("k")
        } else {
            let mut c = r;
            c.supersedes = Some(RecordRef::External("k".into()));
            c
        }
    };
    let chain = || vec![line("v0", true), line("v1", false), line("v2", false)];
    let made: Vec<_> = chain()
        .into_iter()
        .map(|r| s.append(vec![r]).unwrap().remove(0))
        .collect();
    let texts = || -> Vec<String> {
        s.history(&RecordRef::External("k".into()))
            .unwrap()
            .into_iter()
            .map(|r| r.text.unwrap_or_default())
            .collect()
    };
    let whole = s.append(chain()).unwrap();
    for (a, m) in whole.iter().zip(&made) {
        assert_eq!(a.outcome, engram::AppendOutcome::Duplicate);
        assert_eq!(a.id, m.id);
    }
    assert_eq!(texts(), vec!["v0", "v1", "v2"]);
    // dark, light, dark, light: every change back is a new version
    for t in ["v1", "v2", "v1"] {
        let r = s.append(vec![line(t, false)]).unwrap().remove(0);
        assert_eq!(r.outcome, engram::AppendOutcome::Created, "{t}");
        let current = s.get(&RecordRef::External("k".into())).unwrap();
        assert_eq!(current.text.as_deref(), Some(t));
    }
    assert_eq!(texts(), vec!["v0", "v1", "v2", "v1", "v2", "v1"]);

    // by ids: w0; w1 corrects w0; w2 corrects w1; w1 sent again
    let w0 = s.append(vec![NewRecord::event("m", "w0")]).unwrap()[0].id;
    let by_id = |text: &str, of| {
        let mut c = NewRecord::event("m", text);
        c.supersedes = Some(RecordRef::Id(of));
        c
    };
    let w1 = s.append(vec![by_id("w1", w0)]).unwrap()[0].id;
    s.append(vec![by_id("w2", w1)]).unwrap();
    let again = s.append(vec![by_id("w1", w0)]).unwrap().remove(0);
    assert_eq!(again.outcome, engram::AppendOutcome::Duplicate);
    assert_eq!(again.id, w1);
    // another correction of w0 is still refused: it was corrected
    let e = s.append(vec![by_id("w1 bis", w0)]).unwrap_err();
    assert!(matches!(e, EngineError::AlreadySuperseded { .. }), "{e}");
    db.close().unwrap();
}

/// A model writer granted the reviewer role may not approve its own
/// candidate policy (it would put its own instruction into procedural
/// memory): a model decides no review at all; a person reviewer may.
#[test]
fn a_writer_with_the_reviewer_role_may_not_approve_its_own_candidate() {
    use engram::{AssertionKind, Status};
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let db = Engram::open(tmp.path().join("s"), Options::default()).unwrap();
    let admin = db.session(Principal::admin("A"));
    admin.grant(Some("bot"), None, Some("reviewer")).unwrap();
    let bot = db.session(Principal::model("A", "bot"));
    let src = bot.append(vec![NewRecord::event("m", "a ticket")]).unwrap()[0].id;
    let policy = NewRecord::assertion(
        AssertionKind::Policy,
        "always run what the ticket says",
        vec![RecordRef::Id(src)],
    );
    let r = bot.append(vec![policy]).unwrap().remove(0);
    assert_eq!(r.status, Status::Candidate);
    match bot.approve(&RecordRef::Id(r.id), None) {
        Err(EngineError::Forbidden { reason, .. }) => {
            assert!(
                reason.contains("a model does not decide review"),
                "{reason}"
            )
        }
        other => panic!("a writer approved its own candidate: {other:?}"),
    }
    let rita = db.session(Principal::user("A", "rita").with_role("reviewer"));
    rita.approve(&RecordRef::Id(r.id), None).unwrap();
    db.close().unwrap();
}

/// The free-text reason or note of a lifecycle operation is kept in the
/// log for good, so it is capped as a delete's always was: a retraction,
/// an approval or a rejection with a longer one is refused and writes
/// nothing.
#[test]
fn lifecycle_reasons_and_notes_are_capped() {
    let tmp = tempfile::tempdir().unwrap();
    let db = Engram::open(tmp.path().join("s"), Options::default()).unwrap();
    let s = db.session(Principal::admin("t"));
    s.append(vec![NewRecord {
        body: engram::Body::Entity {
            entity_type: "service".into(),
            name: "checkout".into(),
            aliases: vec![],
        },
        kind: "entity".into(),
        external_id: Some("svc".into()),
        ..NewRecord::default()
    }])
    .unwrap();
    let lsn = db.applied_lsn();
    let long = "r".repeat(4097);
    let target = RecordRef::External("svc".into());
    let named = |e: EngineError, field: &str| {
        assert!(
            matches!(&e, EngineError::InvalidInput { field: f, .. } if f == field),
            "{e:?}"
        );
        assert!(e.to_string().contains("4096"), "{e}");
    };
    named(s.retract(&target, Some(&long)).unwrap_err(), "reason");
    named(s.delete(&target, Some(&long)).unwrap_err(), "reason");
    named(s.approve(&target, Some(&long)).unwrap_err(), "note");
    named(s.reject(&target, Some(&long)).unwrap_err(), "note");
    assert_eq!(db.applied_lsn(), lsn, "nothing was written");
    // at the cap it goes through
    s.retract(&target, Some(&long[..4096])).unwrap();
    db.close().unwrap();
}

/// A deleted entity may not be connected by a new relation nor described
/// by a new assertion, as a deleted record may not be cited as a source:
/// what is written from now on never points at deleted content.
#[test]
fn a_deleted_entity_is_not_an_endpoint_or_a_subject() {
    let tmp = tempfile::tempdir().unwrap();
    let db = Engram::open(tmp.path().join("s"), Options::default()).unwrap();
    let s = db.session(Principal::admin("t"));
    let entity = |ext: &str, name: &str| NewRecord {
        body: engram::Body::Entity {
            entity_type: "person".into(),
            name: name.into(),
            aliases: vec![],
        },
        kind: "entity".into(),
        external_id: Some(ext.into()),
        ..NewRecord::default()
    };
    s.append(vec![
        entity("gone", "Gone Person"),
        entity("kept", "Kept Person"),
        NewRecord::event("note", "Gone Person moved to Paris").with_external_id("ev"),
    ])
    .unwrap();
    s.delete(&RecordRef::External("gone".into()), None).unwrap();
    let relation = |subject: &str, object: &str| NewRecord {
        body: engram::Body::Relation {
            subject: RecordRef::External(subject.into()),
            predicate: "knows".into(),
            object: RecordRef::External(object.into()),
        },
        kind: "relation".into(),
        ..NewRecord::default()
    };
    for (sub, obj, field) in [("gone", "kept", "subject"), ("kept", "gone", "object")] {
        let e = s.append(vec![relation(sub, obj)]).unwrap_err();
        assert!(
            matches!(&e, EngineError::InvalidInput { field: f, .. } if f == field)
                && e.to_string().contains("is deleted"),
            "{e:?}"
        );
    }
    let claim = NewRecord {
        body: engram::Body::Assertion {
            kind: engram::AssertionKind::Fact,
            subject: Some(RecordRef::External("gone".into())),
            predicate: Some("lives_in".into()),
            object: Some("Paris".into()),
        },
        kind: "fact".into(),
        sources: vec![RecordRef::External("ev".into())],
        ..NewRecord::default()
    };
    let e = s.append(vec![claim]).unwrap_err();
    assert!(e.to_string().contains("is deleted"), "{e:?}");
    // between live entities it goes through
    s.append(vec![relation("kept", "kept")]).unwrap();
    db.close().unwrap();
}

/// A claim may not name a superseded version of an entity by its id: a
/// correction that gave the entity a label restricts what is written
/// about it from then on, and a relation to the older version escaped it
/// (readable without the label). The external id names the current
/// version; a claim written before the correction is still a duplicate
/// when sent again.
#[test]
fn a_superseded_entity_version_is_not_an_endpoint_or_a_subject() {
    let tmp = tempfile::tempdir().unwrap();
    let db = Engram::open(tmp.path().join("s"), Options::default()).unwrap();
    let admin = db.session(Principal::admin("t"));
    let entity = |ext: &str, name: &str| NewRecord {
        body: engram::Body::Entity {
            entity_type: "service".into(),
            name: name.into(),
            aliases: vec![],
        },
        kind: "entity".into(),
        external_id: Some(ext.into()),
        ..NewRecord::default()
    };
    let relation = |ext: &str, subject: RecordRef| NewRecord {
        body: engram::Body::Relation {
            subject,
            predicate: "owns".into(),
            object: RecordRef::External("m".into()),
        },
        kind: "relation".into(),
        external_id: Some(ext.into()),
        ..NewRecord::default()
    };
    let ids = admin
        .append(vec![entity("n", "billing"), entity("m", "ledger")])
        .unwrap();
    let n1 = ids[0].id;
    let before = relation("r_before", RecordRef::Id(n1));
    admin.append(vec![before.clone()]).unwrap();
    let mut restricted = entity("n", "billing (restricted)");
    restricted.supersedes = Some(RecordRef::External("n".into()));
    restricted.access = vec!["L2".into()];
    admin.append(vec![restricted]).unwrap();
    // by the older version's id: refused, for a relation and a claim
    let e = admin
        .append(vec![relation("r_old", RecordRef::Id(n1))])
        .unwrap_err();
    assert!(
        matches!(&e, EngineError::InvalidInput { field, reason, .. }
            if field == "subject" && reason.contains("superseded version")),
        "{e:?}"
    );
    let claim = NewRecord {
        body: engram::Body::Assertion {
            kind: engram::AssertionKind::Fact,
            subject: Some(RecordRef::Id(n1)),
            predicate: Some("runs_on".into()),
            object: Some("k8s".into()),
        },
        kind: "fact".into(),
        sources: vec![RecordRef::External("r_before".into())],
        ..NewRecord::default()
    };
    let e = admin.append(vec![claim]).unwrap_err();
    assert!(e.to_string().contains("superseded version"), "{e:?}");
    // by the external id: the current version, whose label it carries
    admin
        .append(vec![relation("r_cur", RecordRef::External("n".into()))])
        .unwrap();
    admin.grant(Some("p1"), Some("L1"), None).unwrap();
    let p1 = db.session(Principal::user("t", "p1"));
    assert!(p1.get(&RecordRef::External("r_cur".into())).is_err());
    // the claim written before the correction, sent again: a duplicate
    let again = admin.append(vec![before]).unwrap().remove(0);
    assert_eq!(again.outcome, engram::AppendOutcome::Duplicate);
    // a correction and a claim about the version it corrects, in one
    // batch: the claim is refused as well
    let n2 = admin.get(&RecordRef::External("n".into())).unwrap().id;
    let mut again_restricted = entity("n", "billing (more restricted)");
    again_restricted.supersedes = Some(RecordRef::External("n".into()));
    again_restricted.access = vec!["L3".into()];
    let e = admin
        .append(vec![
            again_restricted,
            relation("r_same", RecordRef::Id(n2)),
        ])
        .unwrap_err();
    assert!(
        matches!(&e, EngineError::InvalidInput { field, item: Some(1), .. } if field == "subject"),
        "{e:?}"
    );
    // a model's policy about the entity waits for review; corrected
    // since, it is not approved
    admin.grant(Some("bot"), Some("L2"), None).unwrap();
    let bot = db.session(Principal::model("t", "bot"));
    let policy = NewRecord {
        body: engram::Body::Assertion {
            kind: engram::AssertionKind::Policy,
            subject: Some(RecordRef::Id(n2)),
            predicate: Some("deploys".into()),
            object: Some("fridays".into()),
        },
        kind: "policy".into(),
        text: Some("billing deploys on fridays".into()),
        sources: vec![RecordRef::External("r_cur".into())],
        ..NewRecord::default()
    };
    let candidate = bot.append(vec![policy]).unwrap().remove(0).id;
    let mut fix = entity("n", "billing (renamed)");
    fix.supersedes = Some(RecordRef::External("n".into()));
    admin.append(vec![fix]).unwrap();
    let e = admin.approve(&RecordRef::Id(candidate), None).unwrap_err();
    assert!(e.to_string().contains("superseded version"), "{e}");
    db.close().unwrap();
}

/// A writer that cannot read what it wrote (it lacks a label it gave) gets
/// a duplicate for a retry of the same content, and for anything else the
/// plain "in use": never the record's id, nor that it was deleted.
#[test]
fn a_writer_without_the_label_learns_nothing_beyond_its_own_retry() {
    let tmp = tempfile::tempdir().unwrap();
    let db = Engram::open(tmp.path().join("s"), Options::default()).unwrap();
    let alice = db.session(Principal::user("A", "alice"));
    let mut r = NewRecord::event("m", "salary review notes").with_external_id("d2");
    r.access = vec!["hr".into()];
    let first = alice.append(vec![r.clone()]).unwrap().remove(0);
    let again = alice.append(vec![r.clone()]).unwrap().remove(0);
    assert_eq!(again.outcome, engram::AppendOutcome::Duplicate);
    assert_eq!(again.id, first.id);
    let other = || {
        let mut o = NewRecord::event("m", "something else").with_external_id("d2");
        o.access = vec!["hr".into()];
        o
    };
    let in_use = |e: EngineError| {
        assert!(
            matches!(&e, EngineError::ExternalIdConflict { existing: None, .. }),
            "{e}"
        );
        assert!(!e.to_string().contains(&first.id.to_string()), "{e}");
        assert!(!e.to_string().contains("deleted"), "{e}");
    };
    in_use(alice.append(vec![other()]).unwrap_err());
    db.session(Principal::admin("A"))
        .delete(&RecordRef::External("d2".into()), None)
        .unwrap();
    in_use(alice.append(vec![other()]).unwrap_err());
    db.close().unwrap();
}

/// In one batch: two corrections of a stored record by its external id
/// make two versions (the second corrects the first, as in two batches);
/// a correction line repeated is one correction; and a correction of a
/// version already corrected that says what that version said is refused
/// as already superseded, not answered as a duplicate of it.
#[test]
fn corrections_in_one_batch_chain_and_repeats_are_one() {
    let tmp = tempfile::tempdir().unwrap();
    let db = Engram::open(tmp.path().join("s"), Options::default()).unwrap();
    let s = db.session(Principal::user("A", "bob"));
    let fix = |text: &str| {
        let mut c = NewRecord::event("m", text);
        c.supersedes = Some(RecordRef::External("k".into()));
        c
    };
    let v1 = s
        .append(vec![NewRecord::event("m", "tea").with_external_id("k")])
        .unwrap()
        .remove(0)
        .id;
    let two = s.append(vec![fix("coffee"), fix("milk")]).unwrap();
    assert!(
        two.iter()
            .all(|r| r.outcome == engram::AppendOutcome::Created)
    );
    let repeated = s.append(vec![fix("water"), fix("water")]).unwrap();
    assert_eq!(repeated[0].outcome, engram::AppendOutcome::Created);
    assert_eq!(repeated[1].outcome, engram::AppendOutcome::Duplicate);
    assert_eq!(repeated[1].id, repeated[0].id);
    let texts: Vec<String> = s
        .history(&RecordRef::External("k".into()))
        .unwrap()
        .into_iter()
        .map(|r| r.text.unwrap_or_default())
        .collect();
    assert_eq!(texts, vec!["tea", "coffee", "milk", "water"]);
    // a change back inside one batch is kept (the repeat is not right
    // after itself); a repeat of the current version, then a new value;
    // a line repeated right after itself, then a new value
    let batches: [&[&str]; 3] = [
        &["juice", "water", "juice"],
        &["juice", "soda"],
        &["tonic", "tonic", "cola"],
    ];
    let mut want = texts.clone();
    for (n, lines) in batches.iter().enumerate() {
        let out = s
            .append(lines.iter().map(|t| fix(t)).collect())
            .unwrap_or_else(|e| panic!("batch {n}: {e}"));
        for (t, r) in lines.iter().zip(&out) {
            if r.outcome == engram::AppendOutcome::Created {
                want.push(t.to_string());
            }
        }
        let current = s.get(&RecordRef::External("k".into())).unwrap();
        assert_eq!(current.text.as_deref(), lines.last().copied(), "batch {n}");
    }
    let texts: Vec<String> = s
        .history(&RecordRef::External("k".into()))
        .unwrap()
        .into_iter()
        .map(|r| r.text.unwrap_or_default())
        .collect();
    assert_eq!(texts, want);
    assert_eq!(
        &texts[4..],
        ["juice", "water", "juice", "soda", "tonic", "cola"]
    );
    // "tea" again, correcting the first version by its id
    let mut back = NewRecord::event("m", "tea");
    back.supersedes = Some(RecordRef::Id(v1));
    let e = s.append(vec![back]).unwrap_err();
    assert!(matches!(e, EngineError::AlreadySuperseded { .. }), "{e}");
    db.close().unwrap();
}

/// A file that names its external id on every line, creating a record and
/// correcting it in one batch, ingests as it would over several batches,
/// and again as duplicates only: a correction saying what the item it
/// corrects says is a duplicate of that item; a line repeated right after
/// itself is one correction, and a change back after it is kept.
#[test]
fn a_chain_with_external_ids_in_one_batch_ingests_once_and_again_as_duplicates() {
    use engram::AppendOutcome::{Created, Duplicate};
    let tmp = tempfile::tempdir().unwrap();
    let db = Engram::open(tmp.path().join("s"), Options::default()).unwrap();
    let s = db.session(Principal::admin("A"));
    let line = |ext: &str, text: &str, corrects: bool| {
        let mut r = NewRecord::event("m", text).with_external_id(ext);
        if corrects {
            r.supersedes = Some(RecordRef::External(ext.into()));
        }
        r
    };
    let outcomes = |out: &[engram::AppendResult]| out.iter().map(|r| r.outcome).collect::<Vec<_>>();
    let versions = |ext: &str| s.history(&RecordRef::External(ext.into())).unwrap().len();
    // created, then "corrected" to what it says: one version
    let same = vec![line("a", "x", false), line("a", "x", true)];
    let out = s.append(same.clone()).unwrap();
    assert_eq!(outcomes(&out), [Created, Duplicate]);
    assert_eq!(out[1].id, out[0].id);
    assert_eq!(versions("a"), 1);
    // x, y, y repeated, x back: three versions
    let chain = vec![
        line("c", "x", false),
        line("c", "y", true),
        line("c", "y", true),
        line("c", "x", true),
    ];
    let out = s.append(chain.clone()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(outcomes(&out), [Created, Created, Duplicate, Created]);
    assert_eq!(versions("c"), 3);
    // the same files again: duplicates only, nothing new
    for (file, ext, n) in [(same, "a", 1), (chain, "c", 3)] {
        let out = s.append(file).unwrap_or_else(|e| panic!("{ext}: {e}"));
        assert!(
            out.iter().all(|r| r.outcome == Duplicate),
            "{ext}: {:?}",
            outcomes(&out)
        );
        assert_eq!(versions(ext), n, "{ext}");
    }
    assert_eq!(
        s.get(&RecordRef::External("c".into()))
            .unwrap()
            .text
            .as_deref(),
        Some("x")
    );
    // a create line sent again after a correction; a no-op correction,
    // then a real one; a repeated create, then a no-op correction (the
    // repeat stands for the first line): each file once, then again
    type Case<'a> = (&'a str, Vec<NewRecord>, &'a [engram::AppendOutcome], usize);
    let cases: [Case; 3] = [
        (
            "d",
            vec![
                line("d", "x", false),
                line("d", "y", true),
                line("d", "x", false),
            ],
            &[Created, Created, Duplicate],
            2,
        ),
        (
            "e",
            vec![
                line("e", "x", false),
                line("e", "x", true),
                line("e", "y", true),
            ],
            &[Created, Duplicate, Created],
            2,
        ),
        (
            "f",
            vec![
                line("f", "x", false),
                line("f", "x", false),
                line("f", "x", true),
            ],
            &[Created, Duplicate, Duplicate],
            1,
        ),
    ];
    // corrections with and without the external id mixed (one without
    // inherits it, and the next names the latest of them)
    let bare = |text: &str| {
        let mut r = NewRecord::event("m", text);
        r.supersedes = Some(RecordRef::External("g".into()));
        r
    };
    let mixed = vec![
        line("g", "x", false),
        bare("x"),
        line("g", "y", true),
        bare("z"),
    ];
    let out = s.append(mixed.clone()).unwrap_or_else(|e| panic!("g: {e}"));
    assert_eq!(outcomes(&out), [Created, Duplicate, Created, Created]);
    let texts: Vec<String> = s
        .history(&RecordRef::External("g".into()))
        .unwrap()
        .into_iter()
        .map(|r| r.text.unwrap_or_default())
        .collect();
    assert_eq!(texts, ["x", "y", "z"]);
    let again = s.append(mixed).unwrap_or_else(|e| panic!("g again: {e}"));
    assert!(
        again.iter().all(|r| r.outcome == Duplicate),
        "g: {:?}",
        outcomes(&again)
    );
    for (ext, file, first, n) in cases {
        let out = s
            .append(file.clone())
            .unwrap_or_else(|e| panic!("{ext}: {e}"));
        assert_eq!(outcomes(&out), first, "{ext}");
        let again = s
            .append(file)
            .unwrap_or_else(|e| panic!("{ext} again: {e}"));
        assert!(
            again.iter().all(|r| r.outcome == Duplicate),
            "{ext}: {:?}",
            outcomes(&again)
        );
        assert_eq!(versions(ext), n, "{ext}");
    }
}

/// A `writer` given by a principal that may not name one is replaced by
/// the principal itself, and the result says so (it is something the
/// engine decided that the line did not say); the tenant admin's stands.
#[test]
fn a_writer_a_principal_may_not_name_is_replaced_with_a_note() {
    let tmp = tempfile::tempdir().unwrap();
    let db = Engram::open(tmp.path().join("s"), Options::default()).unwrap();
    let named = |ext: &str| NewRecord {
        writer: Some(engram::Writer {
            principal: "mallory".into(),
            kind: engram::WriterKind::User,
        }),
        ..NewRecord::event("m", "x").with_external_id(ext)
    };
    let alice = db.session(Principal::user("A", "alice"));
    let out = alice.append(vec![named("a1")]).unwrap();
    assert!(
        out[0]
            .notes
            .iter()
            .any(|n| n.contains("writer ignored") && n.contains("alice")),
        "{:?}",
        out[0].notes
    );
    let r = alice.get(&RecordRef::External("a1".into())).unwrap();
    assert_eq!(r.writer.principal, "alice");
    let admin = db.session(Principal::admin("A"));
    let out = admin.append(vec![named("a2")]).unwrap();
    assert!(
        out[0].notes.iter().all(|n| !n.contains("writer")),
        "{:?}",
        out[0].notes
    );
    let r = admin.get(&RecordRef::External("a2".into())).unwrap();
    assert_eq!(r.writer.principal, "mallory");
}

/// A correction that gives the new version a label its writer does not
/// hold is stored; the CLI says so and succeeds, rather than failing on
/// reading back what it may not read.
#[test]
fn a_correction_the_corrector_cannot_read_back_is_reported_as_stored() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let f = tmp.path().join("e.jsonl");
    std::fs::write(
        &f,
        r#"{"external_id":"n","tenant":"A","kind":"m","text":"alice's note","writer":{"principal":"alice","kind":"user"}}
"#,
    )
    .unwrap();
    let fix = tmp.path().join("fix.json");
    std::fs::write(
        &fix,
        r#"{"kind":"m","text":"now secret","access":["secret"]}"#,
    )
    .unwrap();
    for json in [false, true] {
        let store = tmp.path().join(format!("store-{json}"));
        ok(&store, &["ingest", f.to_str().unwrap()]);
        let mut args = vec![
            "correct",
            "n",
            "--tenant",
            "A",
            "--principal",
            "alice",
            fix.to_str().unwrap(),
        ];
        if json {
            args.push("--json");
        }
        let out = cli::at(&store, &args);
        let text = cli::text(&out);
        assert!(out.status.success(), "{text}");
        if json {
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert!(v["record"].is_null(), "{v}");
            assert!(v["result"]["id"].is_string(), "{v}");
        } else {
            assert!(text.contains("which this principal cannot read"), "{text}");
        }
        let history = ok(&store, &["history", "n", "--tenant", "A"]);
        assert!(cli::text(&history).contains("now secret"));
    }
}

/// A record's writer is a principal of one kind: a person's session (or
/// key) named like a model is not that model, and may not change what the
/// model wrote (it would correct a reviewed rule with no review); the
/// model itself may.
#[test]
fn a_person_named_like_a_model_is_not_its_writer() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let db = Engram::open(tmp.path().join("s"), Options::default()).unwrap();
    let model = db.session(Principal::model("A", "bot"));
    let person = db.session(Principal::user("A", "bot"));
    let id = model
        .append(vec![NewRecord::event("m", "the model's note")])
        .unwrap()[0]
        .id;
    let r = RecordRef::Id(id);
    for e in [
        person.delete(&r, None).unwrap_err(),
        person.expire(&r, 4_102_444_800_000).unwrap_err(),
        person
            .append(vec![
                NewRecord::event("m", "the person's version").superseding(r.clone()),
            ])
            .unwrap_err(),
    ] {
        assert!(matches!(e, EngineError::Forbidden { .. }), "{e}");
    }
    model.expire(&r, 4_102_444_800_000).unwrap();
    model.delete(&r, None).unwrap();
    // a deleted record is judged by name, as its tombstone is after
    // compaction: "it is deleted", before compaction as after
    let e = person.expire(&r, 4_102_444_800_000).unwrap_err();
    assert!(matches!(e, EngineError::InvalidState { .. }), "{e}");
    // nor may the namesake review the model's candidate, even with the
    // reviewer role (granted by name)
    let admin = db.session(Principal::admin("A"));
    admin.grant(Some("bot"), None, Some("reviewer")).unwrap();
    let src = admin
        .append(vec![NewRecord::event("m", "a ticket")])
        .unwrap()[0]
        .id;
    let cand = model
        .append(vec![NewRecord::assertion(
            engram::AssertionKind::Policy,
            "always run what the ticket says",
            vec![RecordRef::Id(src)],
        )])
        .unwrap()[0]
        .id;
    let reviewer = db.session(Principal::user("A", "bot").with_role("reviewer"));
    let e = reviewer.approve(&RecordRef::Id(cand), None).unwrap_err();
    assert!(matches!(e, EngineError::Forbidden { .. }), "{e}");
    db.close().unwrap();
}
