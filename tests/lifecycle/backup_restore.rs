//! Restoring an older backup re-applies every deletion and revocation made
//! after it (from the ledger that survives the restore), so recovery never
//! resurrects deleted or revoked content.

use crate::common::*;

/// Changes the last character of the operation id on the first line of
/// the store's ledger (a grant's) and returns the edited id: a line the
/// log does not hold, a little older or newer than the original.
fn edit_first_grant_id(store: &std::path::Path) -> String {
    let path = store.join("ledger.jsonl");
    let text = std::fs::read_to_string(&path).unwrap();
    let grant = text.lines().next().unwrap();
    assert!(grant.contains("\"op\":\"grant\""), "{text}");
    let id: String = grant.split("\"op_id\":\"").nth(1).unwrap()[..26].to_string();
    let last = id.chars().last().unwrap();
    let edited = format!("{}{}", &id[..25], if last == 'Z' { 'Y' } else { 'Z' });
    std::fs::write(&path, text.replacen(&id, &edited, 1)).unwrap();
    edited
}

/// A data directory, a directory for backups (with the path `b` in it),
/// and a clock.
fn dirs() -> (
    tempfile::TempDir,
    tempfile::TempDir,
    std::path::PathBuf,
    ManualClock,
) {
    let dir = tempfile::tempdir().unwrap();
    let backups = tempfile::tempdir().unwrap();
    let bdir = backups.path().join("b");
    (dir, backups, bdir, ManualClock::new(T0))
}
use engram::retrieval::RecallRequest;
use engram::{EngineError, Engram, ManualClock, NewRecord, Principal, RecordRef};

#[test]
fn restore_reapplies_later_deletions_and_revocations() {
    let (dir, _backups, bdir, clock) = dirs();
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("t"));
    s.append(vec![
        NewRecord::event("note", "restore-canary-x private details").with_external_id("x"),
        NewRecord::event("note", "a restricted note")
            .with_external_id("r")
            .with_access(&["hr"]),
        NewRecord::event("note", "an ordinary note").with_external_id("o"),
    ])
    .unwrap();
    s.grant(Some("pat"), Some("hr"), None).unwrap();
    let b = db.backup(&bdir).unwrap();
    assert!(b.records >= 3);
    // after the backup: a deletion, a revocation, and a new record
    clock.advance(MINUTE);
    s.delete(&ext("x"), Some("erasure request")).unwrap();
    s.revoke(Some("pat"), Some("hr"), None).unwrap();
    s.append(vec![
        NewRecord::event("note", "written after the backup").with_external_id("late"),
    ])
    .unwrap();
    db.close().unwrap();

    let r = Engram::restore(dir.path(), &bdir, &opts(&clock), None).unwrap();
    assert_eq!(
        (r.deletions_reapplied, r.revocations_reapplied),
        (1, 1),
        "{r:?}"
    );
    // "late" was written after the backup: the report says it is gone
    assert_eq!(r.later_records_replaced, Some(1), "{r:?}");
    assert!(
        grep(dir.path(), "restore-canary-x").is_empty(),
        "restored bytes of deleted content were purged"
    );
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("t"));
    assert!(
        matches!(s.get(&ext("x")), Err(EngineError::NotFound { .. })),
        "deletion re-applied"
    );
    assert!(
        matches!(s.get(&ext("late")), Err(EngineError::NotFound { .. })),
        "the backup predates it"
    );
    let pat = db.session(Principal::user("t", "pat"));
    assert!(
        pat.recall(&RecallRequest::text("restricted note"))
            .unwrap()
            .hits
            .iter()
            .all(|h| h.external_id.as_deref() != Some("r")),
        "revocation re-applied"
    );
    assert_eq!(
        s.get(&ext("o")).unwrap().text.as_deref(),
        Some("an ordinary note")
    );
    assert!(db.verify().unwrap().ok());
    db.close().unwrap();
    // restoring the same backup again re-applies the ledger again: the
    // re-applied operations kept their original ids, so each is applied
    // once, not once per restore; still deleted, still purged
    let again = Engram::restore(dir.path(), &bdir, &opts(&clock), None).unwrap();
    assert_eq!(
        (again.deletions_reapplied, again.revocations_reapplied),
        (1, 1),
        "{again:?}"
    );
    assert_eq!(again.already_applied, 0, "{again:?}");
    let lines = std::fs::read_to_string(dir.path().join("ledger.jsonl")).unwrap();
    // the grant before the backup, the deletion and the revocation after it
    assert_eq!(lines.lines().count(), 3, "one line per operation:\n{lines}");
    assert!(grep(dir.path(), "restore-canary-x").is_empty());
    let db = open(dir.path(), &clock);
    assert!(matches!(
        db.session(Principal::admin("t")).get(&ext("x")),
        Err(EngineError::NotFound { .. })
    ));
    db.close().unwrap();
}

/// A backup that did not finish (no `backup.json`) or whose log is shorter
/// than `backup.json` records is refused, and the store is left as it was.
#[test]
fn a_partial_or_damaged_backup_is_refused_and_changes_nothing() {
    let (dir, backups, _, clock) = dirs();
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("t"));
    for i in 0..20 {
        s.append(vec![
            NewRecord::event("note", format!("note {i}")).with_external_id(format!("n{i}")),
        ])
        .unwrap();
    }
    let partial = backups.path().join("partial");
    let damaged = backups.path().join("damaged");
    let understated = backups.path().join("understated");
    let bad_settings = backups.path().join("bad_settings");
    db.backup(&partial).unwrap();
    db.backup(&damaged).unwrap();
    db.backup(&bad_settings).unwrap();
    let taken = db.backup(&understated).unwrap();
    assert_eq!(taken.records, 20);
    s.append(vec![
        NewRecord::event("note", "after the backups").with_external_id("late"),
    ])
    .unwrap();
    db.close().unwrap();

    // interrupted before its last step
    std::fs::remove_file(partial.join("backup.json")).unwrap();
    let e = Engram::restore(dir.path(), &partial, &opts(&clock), None).unwrap_err();
    assert!(e.to_string().contains("backup.json"), "{e}");

    // its log cut short: the last segment loses its tail
    let seg = std::fs::read_dir(damaged.join("log"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .max()
        .unwrap();
    let len = std::fs::metadata(&seg).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&seg).unwrap();
    f.set_len(len - 200).unwrap();
    drop(f);
    let e = Engram::restore(dir.path(), &damaged, &opts(&clock), None).unwrap_err();
    assert!(e.to_string().contains("damaged"), "{e}");

    // a backup.json that counts fewer records than its log holds
    let manifest = understated.join("backup.json");
    let text = std::fs::read_to_string(&manifest).unwrap();
    let edited = text.replace("\"records\": 20", "\"records\": 19");
    assert_ne!(text, edited, "{text}");
    std::fs::write(&manifest, edited).unwrap();
    let e = Engram::restore(dir.path(), &understated, &opts(&clock), None).unwrap_err();
    assert!(
        e.to_string()
            .contains("holds 20 record(s) but backup.json records 19"),
        "{e}"
    );

    // damaged settings (a restore installs them as they are), or a
    // directory where they belong
    let settings = bad_settings.join("settings.snap");
    std::fs::write(&settings, b"not a settings snapshot").unwrap();
    let e = Engram::restore(dir.path(), &bad_settings, &opts(&clock), None).unwrap_err();
    assert!(
        e.to_string().contains("settings.snap") && e.to_string().contains("nothing was changed"),
        "{e}"
    );
    std::fs::remove_file(&settings).unwrap();
    std::fs::create_dir(&settings).unwrap();
    let e = Engram::restore(dir.path(), &bad_settings, &opts(&clock), None).unwrap_err();
    assert!(e.to_string().contains("settings.snap"), "{e}");

    // the store is untouched: everything, including what came after the backups
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("t"));
    for i in 0..20 {
        assert!(s.get(&ext(&format!("n{i}"))).is_ok());
    }
    assert!(s.get(&ext("late")).is_ok());
    assert!(!dir.path().join("restore.pending").exists());
    assert!(!dir.path().join("log.restore").exists());
    assert!(db.verify().unwrap().ok());
    db.close().unwrap();
}

/// The three ways a restore could apply the wrong ledger: a restore that
/// stopped before its log swap (its entries must not touch the store's own
/// log), a ledger file that lags the log (a crash between a deletion and
/// its ledger line), and a malformed extra ledger (refused, nothing
/// changed).
#[test]
fn restore_applies_exactly_the_ledger_of_the_log_it_restores() {
    let (dir, backups, bdir, clock) = dirs();
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("t"));
    let some_id = s
        .append(vec![
            NewRecord::event("note", "lag-canary-q7 secret").with_external_id("x"),
            NewRecord::event("note", "restricted")
                .with_external_id("r")
                .with_access(&["hr"]),
        ])
        .unwrap()[0]
        .id;
    s.grant(Some("pat"), Some("hr"), None).unwrap();
    db.backup(&bdir).unwrap();
    s.delete(&ext("x"), None).unwrap();
    db.close().unwrap();

    // 1. An interrupted restore before its swap: `log.restore/` still there,
    // `restore.pending` holding a revocation. Opening rolls the swap back
    // and drops the marker without applying it.
    let pending = format!(
        "{{\"op_id\":\"{some_id}\",\"tenant\":\"t\",\"at_ms\":0,\"op\":\"revoke\",\"principal\":\"pat\",\"label\":\"hr\"}}\n"
    );
    std::fs::write(dir.path().join("restore.pending"), &pending).unwrap();
    std::fs::create_dir_all(dir.path().join("log.restore")).unwrap();
    let db = open(dir.path(), &clock);
    assert!(!dir.path().join("restore.pending").exists());
    let pat = db.session(Principal::user("t", "pat"));
    assert!(
        pat.get(&ext("r")).is_ok(),
        "a rolled-back restore revoked access"
    );
    db.close().unwrap();

    // 2. The ledger file lags the log: the deletion is only in the log.
    std::fs::write(dir.path().join("ledger.jsonl"), "").unwrap();
    // 3. A malformed extra ledger is refused before anything changes.
    let extra = backups.path().join("extra");
    std::fs::create_dir_all(&extra).unwrap();
    std::fs::write(
        extra.join("ledger.jsonl"),
        format!("{{\"op_id\":\"{some_id}\",\"tenant\":\"t\",\"at_ms\":0,\"op\":\"revoke\"}}\n"),
    )
    .unwrap();
    let e = Engram::restore(
        dir.path(),
        &bdir,
        &opts(&clock),
        Some(&extra.join("ledger.jsonl")),
    )
    .unwrap_err();
    assert!(e.to_string().contains("label"), "{e}");
    assert!(dir.path().join("log").exists() && !dir.path().join("restore.pending").exists());

    let r = Engram::restore(dir.path(), &bdir, &opts(&clock), None).unwrap();
    assert_eq!(r.deletions_reapplied, 1, "{r:?}");
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("t"));
    assert!(matches!(
        s.get(&ext("x")),
        Err(EngineError::NotFound { .. })
    ));
    assert!(grep(dir.path(), "lag-canary-q7").is_empty());
    db.close().unwrap();
}

/// An operation already in the restored log is not applied again, however a
/// ledger kept elsewhere spells its id: re-applying a revocation after a
/// later grant would take the grant back.
#[test]
fn a_ledger_entry_already_in_the_backup_is_not_reapplied_whatever_its_spelling() {
    let (dir, backups, bdir, clock) = dirs();
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("t"));
    s.append(vec![
        NewRecord::event("note", "restricted")
            .with_external_id("r")
            .with_access(&["hr"]),
    ])
    .unwrap();
    s.grant(Some("pat"), Some("hr"), None).unwrap();
    s.revoke(Some("pat"), Some("hr"), None).unwrap();
    clock.advance(MINUTE);
    s.grant(Some("pat"), Some("hr"), None).unwrap();
    db.backup(&bdir).unwrap();
    db.close().unwrap();
    let extra = backups.path().join("extra");
    std::fs::create_dir_all(&extra).unwrap();
    let ledger = std::fs::read_to_string(dir.path().join("ledger.jsonl")).unwrap();
    let lowered: String = ledger
        .lines()
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
            let id = v["op_id"].as_str().unwrap().to_lowercase();
            v["op_id"] = serde_json::Value::String(id);
            format!("{v}\n")
        })
        .collect();
    std::fs::write(extra.join("ledger.jsonl"), lowered).unwrap();
    let r = Engram::restore(
        dir.path(),
        &bdir,
        &opts(&clock),
        Some(&extra.join("ledger.jsonl")),
    )
    .unwrap();
    assert_eq!(r.revocations_reapplied, 0, "{r:?}");
    let db = open(dir.path(), &clock);
    assert!(
        db.session(Principal::user("t", "pat"))
            .get(&ext("r"))
            .is_ok(),
        "the later grant was taken back"
    );
    db.close().unwrap();
}

/// A destination the caller cannot use (a file, a path under a file, a
/// directory inside the store) is invalid input naming the path, never a
/// storage failure to retry, and nothing is written anywhere.
#[test]
fn a_backup_to_an_unusable_destination_is_invalid_input() {
    let (dir, backups, _bdir, clock) = dirs();
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("t"));
    s.append(vec![NewRecord::event("note", "one")]).unwrap();
    let file = backups.path().join("a-file.txt");
    std::fs::write(&file, b"not a directory").unwrap();
    for dest in [file.clone(), file.join("sub"), dir.path().join("inside")] {
        match db.backup(&dest) {
            Err(EngineError::InvalidInput { field, reason, .. }) => {
                assert_eq!(field, "backup directory");
                assert!(reason.contains(&dest.display().to_string()), "{reason}");
            }
            other => panic!("{}: {other:?}", dest.display()),
        }
    }
    assert_eq!(std::fs::read(&file).unwrap(), b"not a directory");
    assert!(!dir.path().join("inside").exists());
    let names: Vec<_> = std::fs::read_dir(backups.path()).unwrap().collect();
    assert_eq!(names.len(), 1, "only the file the test wrote");
}

/// A store whose log directory is a link elsewhere: a backup into where
/// the log really lives is inside the store too, and refused.
#[test]
fn a_backup_into_a_linked_log_directory_is_refused() {
    let (dir, backups, _bdir, clock) = dirs();
    let db = open(dir.path(), &clock);
    db.session(Principal::admin("t"))
        .append(vec![NewRecord::event("note", "one")])
        .unwrap();
    db.close().unwrap();
    let real_log = backups.path().join("real-log");
    std::fs::rename(dir.path().join("log"), &real_log).unwrap();
    std::os::unix::fs::symlink(&real_log, dir.path().join("log")).unwrap();
    let db = open(dir.path(), &clock);
    let dest = real_log.join("backup");
    match db.backup(&dest) {
        Err(EngineError::InvalidInput { reason, .. }) => {
            assert!(reason.contains("inside the store"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    assert!(!dest.exists());
    db.backup(backups.path().join("fine")).unwrap();
    db.close().unwrap();
}

/// Legal holds are in the ledger too: a restore of an older backup lifts a
/// hold lifted after it (so deleted bytes do not come back and stay) and
/// places again a hold placed after it (so a later compaction does not
/// purge what it protects).
#[test]
fn restore_reapplies_holds_placed_or_lifted_after_the_backup() {
    let (dir, _backups, bdir, clock) = dirs();
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("t"));
    let in_scope = |user: &str, text: &str, ext: &str| {
        let mut r = NewRecord::event("note", text).with_external_id(ext);
        r.scope.user = Some(user.into());
        r
    };
    s.append(vec![
        in_scope("u1", "held-canary-1 under a lifted hold", "h1"),
        in_scope("u2", "held-canary-2 under a later hold", "h2"),
    ])
    .unwrap();
    s.hold("user:u1", true).unwrap();
    s.delete(&ext("h1"), None).unwrap();
    db.backup(&bdir).unwrap();
    // after the backup: the hold on u1 is lifted, u2 is put on hold and
    // its record deleted
    clock.advance(MINUTE);
    s.hold("user:u1", false).unwrap();
    s.hold("user:u2", true).unwrap();
    s.delete(&ext("h2"), None).unwrap();
    db.close().unwrap();
    let c = Engram::compact(dir.path(), &opts(&clock)).unwrap();
    assert_eq!((c.purged, c.held), (1, 1), "{c:?}");

    let r = Engram::restore(dir.path(), &bdir, &opts(&clock), None).unwrap();
    assert_eq!(r.holds_reapplied, 2, "{r:?}");
    assert_eq!(r.deletions_reapplied, 1, "{r:?}");
    let c = Engram::compact(dir.path(), &opts(&clock)).unwrap();
    assert_eq!(c.held, 1, "{c:?}");
    assert!(
        grep(dir.path(), "held-canary-1").is_empty(),
        "the lifted hold came back with the backup"
    );
    assert!(
        !grep(dir.path(), "held-canary-2").is_empty(),
        "the later hold was lost by the restore"
    );
}

/// A ledger line damaged in place but still JSON (a deletion's target
/// changed) is found by `verify` and written again from the log by the
/// next writable open, so a restore still re-applies the true deletion.
#[test]
fn a_ledger_line_damaged_in_place_is_found_and_rewritten_from_the_log() {
    let (dir, _backups, bdir, clock) = dirs();
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("t"));
    s.append(vec![
        NewRecord::event("note", "ledger-canary to be deleted").with_external_id("x"),
        NewRecord::event("note", "another note").with_external_id("y"),
    ])
    .unwrap();
    db.backup(&bdir).unwrap();
    let x = s.resolve(&ext("x")).unwrap().to_string();
    s.delete(&ext("x"), None).unwrap();
    db.close().unwrap();
    // one character of the target id changed: still an id, still JSON
    let path = dir.path().join("ledger.jsonl");
    let text = std::fs::read_to_string(&path).unwrap();
    let last = x.chars().last().unwrap();
    let other = if last == '0' { '1' } else { '0' };
    let damaged_id = format!("{}{other}", &x[..x.len() - 1]);
    assert!(text.contains(&x));
    std::fs::write(&path, text.replace(&x, &damaged_id)).unwrap();

    let ro = engram::Options {
        read_only: true,
        ..opts(&clock)
    };
    let db = Engram::open(dir.path(), ro).unwrap();
    let v = db.verify().unwrap();
    assert!(
        v.problems
            .iter()
            .any(|p| p.contains("ledger.jsonl line 1 differs")),
        "{:?}",
        v.problems
    );
    db.close().unwrap();

    let r = Engram::restore(dir.path(), &bdir, &opts(&clock), None).unwrap();
    assert_eq!(r.deletions_reapplied, 1, "{r:?}");
    let db = open(dir.path(), &clock);
    assert!(matches!(
        db.session(Principal::admin("t")).get(&ext("x")),
        Err(EngineError::NotFound { .. })
    ));
    assert!(db.verify().unwrap().ok());
    db.close().unwrap();
    assert!(std::fs::read_to_string(&path).unwrap().contains(&x));
    assert!(grep(dir.path(), "ledger-canary").is_empty());
}

/// Two edits of a deletion's ledger line that would change what a restore
/// re-applies are damage too: a reason turned into a retention expiry's
/// (which reaches one version) and a version dropped from `versions`.
/// Each is found by `verify`, written again from the log, and a restore of
/// a backup holding the older version keeps the whole chain deleted.
#[test]
fn a_ledger_line_that_would_spare_a_version_is_damage() {
    for edit in ["reason", "versions"] {
        let (dir, _backups, bdir, clock) = dirs();
        let db = open(dir.path(), &clock);
        let s = db.session(Principal::admin("t"));
        let v1 = s
            .append(vec![
                NewRecord::event("note", "chain-canary one").with_external_id("c"),
            ])
            .unwrap()[0]
            .id
            .to_string();
        let mut fix = NewRecord::event("note", "chain-canary two");
        fix.supersedes = Some(ext("c"));
        s.append(vec![fix]).unwrap();
        db.backup(&bdir).unwrap();
        s.delete(&ext("c"), Some("user asked")).unwrap();
        db.close().unwrap();
        let path = dir.path().join("ledger.jsonl");
        let text = std::fs::read_to_string(&path).unwrap();
        let edited = match edit {
            "reason" => text.replace("\"user asked\"", "\"retention:standard\""),
            _ => text.replace(&format!("\"versions\":[\"{v1}\"]"), "\"versions\":[]"),
        };
        assert_ne!(edited, text, "{edit}: nothing to edit in {text}");
        std::fs::write(&path, edited).unwrap();

        let ro = engram::Options {
            read_only: true,
            ..opts(&clock)
        };
        let db = Engram::open(dir.path(), ro).unwrap();
        let v = db.verify().unwrap();
        assert!(
            v.problems
                .iter()
                .any(|p| p.contains("ledger.jsonl line 1 differs")),
            "{edit}: {:?}",
            v.problems
        );
        db.close().unwrap();

        Engram::restore(dir.path(), &bdir, &opts(&clock), None).unwrap();
        let db = open(dir.path(), &clock);
        let s = db.session(Principal::admin("t"));
        assert!(
            matches!(
                s.get(&RecordRef::Id(v1.parse().unwrap())),
                Err(EngineError::NotFound { .. })
            ),
            "{edit}: the older version came back"
        );
        assert!(db.verify().unwrap().ok());
        db.close().unwrap();
    }
}

/// A ledger line the log does not hold is re-applied at open only when it
/// is newer than everything the log holds (an operation lost with the
/// log's tail). A grant line whose operation id was edited, older than the
/// revocation after it, gave the principal the label back; it is now named
/// by `verify` and not applied.
#[test]
fn a_ledger_line_older_than_the_log_is_not_taken_for_a_lost_tail() {
    let (dir, _backups, _bdir, clock) = dirs();
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("t"));
    s.append(vec![
        NewRecord::event("note", "vault code 4711")
            .with_external_id("r")
            .with_access(&["secret"]),
    ])
    .unwrap();
    s.grant(Some("bob"), Some("secret"), None).unwrap();
    clock.advance(MINUTE);
    s.revoke(Some("bob"), Some("secret"), None).unwrap();
    let sees = |db: &Engram| {
        db.session(Principal::user("t", "bob"))
            .get(&ext("r"))
            .is_ok()
    };
    assert!(!sees(&db));
    db.close().unwrap();
    let edited = edit_first_grant_id(dir.path());

    let ro = engram::Options {
        read_only: true,
        ..opts(&clock)
    };
    let db = Engram::open(dir.path(), ro).unwrap();
    let v = db.verify().unwrap();
    assert!(
        v.problems
            .iter()
            .any(|p| p.contains("line 1") && p.contains(&edited) && p.contains("not applied")),
        "{:?}",
        v.problems
    );
    db.close().unwrap();
    for _ in 0..2 {
        let (db, report) = Engram::open_with_report(dir.path(), opts(&clock)).unwrap();
        assert!(report.ledger_reapplied.is_none(), "{report:?}");
        assert!(
            !sees(&db),
            "a revoked label came back from an edited ledger line"
        );
        db.close().unwrap();
    }
}

/// A restore re-applies only ledger lines written after the backup: one
/// the backup's log lacks while holding newer operations (a grant line
/// whose id was edited, older than the revocation after it) is left out
/// and counted. It gave the principal the revoked label back.
#[test]
fn a_restore_leaves_out_ledger_lines_older_than_the_backup() {
    let (dir, _backups, bdir, clock) = dirs();
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("t"));
    s.append(vec![
        NewRecord::event("note", "vault code 4711")
            .with_external_id("r")
            .with_access(&["secret"]),
    ])
    .unwrap();
    s.grant(Some("bob"), Some("secret"), None).unwrap();
    clock.advance(MINUTE);
    s.revoke(Some("bob"), Some("secret"), None).unwrap();
    db.backup(&bdir).unwrap();
    db.close().unwrap();
    edit_first_grant_id(dir.path());

    let r = Engram::restore(dir.path(), &bdir, &opts(&clock), None).unwrap();
    assert_eq!(
        (r.grants_reapplied, r.ledger_lines_not_after_backup),
        (0, 1),
        "{r:?}"
    );
    let db = open(dir.path(), &clock);
    assert!(
        db.session(Principal::user("t", "bob"))
            .get(&ext("r"))
            .is_err(),
        "a revoked label came back through a restore"
    );
    db.close().unwrap();
}

/// A deletion written after the backup with the clock set back (its id
/// sorts below an expiry the backup's log holds, which the id generator
/// does not learn at open) is still re-applied by a restore: only records,
/// tombstones and ledger operations bound what was written after.
#[test]
fn a_deletion_after_the_backup_with_the_clock_set_back_is_reapplied() {
    let (dir, _backups, bdir, clock) = dirs();
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("t"));
    s.append(vec![
        NewRecord::event("note", "skew-canary to delete").with_external_id("r"),
        NewRecord::event("note", "a note to expire").with_external_id("x"),
    ])
    .unwrap();
    clock.advance(60 * MINUTE);
    s.expire(&ext("x"), T0 + 120 * MINUTE).unwrap();
    db.backup(&bdir).unwrap();
    db.close().unwrap();
    // the clock is set back before the next open
    clock.set(T0 + MINUTE);
    let db = open(dir.path(), &clock);
    db.session(Principal::admin("t"))
        .delete(&ext("r"), None)
        .unwrap();
    db.close().unwrap();
    let r = Engram::restore(dir.path(), &bdir, &opts(&clock), None).unwrap();
    assert_eq!(
        (r.deletions_reapplied, r.ledger_lines_not_after_backup),
        (1, 0),
        "{r:?}"
    );
    let db = open(dir.path(), &clock);
    assert!(matches!(
        db.session(Principal::admin("t")).get(&ext("r")),
        Err(EngineError::NotFound { .. })
    ));
    db.close().unwrap();
}

/// A backup of another store is refused, naming both logs' first ids, and
/// the store keeps its records; into a new, empty directory it restores.
#[test]
fn a_backup_of_another_store_is_refused() {
    let (dir, backups, bdir, clock) = dirs();
    let other = tempfile::tempdir().unwrap();
    let db = open(other.path(), &clock);
    db.session(Principal::admin("t"))
        .append(vec![
            NewRecord::event("note", "the other store's record").with_external_id("o1"),
        ])
        .unwrap();
    db.backup(&bdir).unwrap();
    db.close().unwrap();
    let db = open(dir.path(), &clock);
    db.session(Principal::admin("t"))
        .append(vec![
            NewRecord::event("note", "ours-canary-9").with_external_id("a"),
        ])
        .unwrap();
    db.close().unwrap();
    let e = Engram::restore(dir.path(), &bdir, &opts(&clock), None).unwrap_err();
    assert!(matches!(e, EngineError::InvalidInput { .. }), "{e}");
    assert!(e.to_string().contains("another store"), "{e}");
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("t"));
    assert!(s.get(&ext("a")).is_ok(), "nothing was changed");
    assert!(s.get(&ext("o1")).is_err());
    db.close().unwrap();
    // a new directory takes it
    let fresh = backups.path().join("fresh");
    Engram::restore(&fresh, &bdir, &opts(&clock), None).unwrap();
    let db = open(&fresh, &clock);
    assert!(db.session(Principal::admin("t")).get(&ext("o1")).is_ok());
    db.close().unwrap();
}

/// A retention period set after the backup comes back with the restore:
/// what it made ineligible stays so, and the restore's compaction purges
/// it (restoring never brings back content past its retention).
#[test]
fn restore_reapplies_retention_set_after_the_backup() {
    let (dir, _backups, bdir, clock) = dirs();
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("t"));
    s.append(vec![NewRecord {
        retention_class: Some("ephemeral".into()),
        ..NewRecord::event("tool_result", "retained-canary-10 raw output").with_external_id("e")
    }])
    .unwrap();
    db.backup(&bdir).unwrap();
    clock.advance(MINUTE);
    s.set_retention("ephemeral", Some(30_000)).unwrap();
    clock.advance(MINUTE);
    let hits = |s: &engram::Session| {
        s.recall(&RecallRequest::text("retained-canary-10"))
            .unwrap()
            .hits
            .len()
    };
    assert_eq!(hits(&s), 0, "past retention");
    db.close().unwrap();
    let r = Engram::restore(dir.path(), &bdir, &opts(&clock), None).unwrap();
    assert_eq!(r.retention_reapplied, 1, "{r:?}");
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("t"));
    assert_eq!(hits(&s), 0, "the restore brought the content back");
    db.close().unwrap();
    assert!(
        grep(dir.path(), "retained-canary-10").is_empty(),
        "purged by the restore"
    );
    // the retention setting is in the ledger file, like a hold
    let ledger = engram::maintenance::read_ledger(&engram::storage::FsBackend, dir.path()).unwrap();
    assert!(
        ledger
            .iter()
            .any(|l| l.op == "retention" && l.class.as_deref() == Some("ephemeral")),
        "{ledger:?}"
    );
    // restoring again applies it once
    let again = Engram::restore(dir.path(), &bdir, &opts(&clock), None).unwrap();
    assert_eq!(again.retention_reapplied, 1, "{again:?}");
    let db = open(dir.path(), &clock);
    assert_eq!(hits(&db.session(Principal::admin("t"))), 0);
    db.close().unwrap();
}

/// A retention expiry that compaction recorded after the backup is applied
/// again by the restore as what it was: a deletion of the expired version
/// only, never of the correction that outlives it (also when the same
/// backup is restored twice).
#[test]
fn restore_reapplies_a_retention_expiry_as_a_version_deletion() {
    let (dir, _backups, bdir, clock) = dirs();
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("t"));
    s.append(vec![NewRecord {
        retention_class: Some("ephemeral".into()),
        ..NewRecord::event("note", "alpha first, ephemeral").with_external_id("a")
    }])
    .unwrap();
    s.append(vec![NewRecord {
        retention_class: Some("standard".into()),
        supersedes: Some(ext("a")),
        ..NewRecord::event("note", "alpha-kept-canary fixed, standard").with_external_id("a")
    }])
    .unwrap();
    db.backup(&bdir).unwrap();
    s.set_retention("ephemeral", Some(30_000)).unwrap();
    clock.advance(MINUTE);
    db.close().unwrap();
    let c = Engram::compact(dir.path(), &opts(&clock)).unwrap();
    assert_eq!(c.retention_deleted, 1, "{c:?}");
    for round in 0..2 {
        Engram::restore(dir.path(), &bdir, &opts(&clock), None).unwrap();
        let db = open(dir.path(), &clock);
        let s = db.session(Principal::admin("t"));
        let got = s
            .get(&ext("a"))
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        assert!(
            got.text
                .as_deref()
                .unwrap_or("")
                .contains("alpha-kept-canary"),
            "round {round}: {got:?}"
        );
        db.close().unwrap();
    }
}

/// A record corrected after the backup and then deleted (through its new
/// version) stays deleted after the restore: the backup holds only the
/// old version, and the ledger names the chain's other versions, so the
/// restore deletes the chain through the version the backup holds. Its
/// derived summary, in the backup too, goes with it.
#[test]
fn restore_deletes_an_older_version_when_the_deleted_version_is_newer_than_the_backup() {
    let (dir, _backups, bdir, clock) = dirs();
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("t"));
    s.append(vec![
        NewRecord::event("note", "chain-canary-one first words").with_external_id("m"),
        NewRecord::event("note", "a fact that expires after the backup").with_external_id("f"),
    ])
    .unwrap();
    let m1 = s.resolve(&ext("m")).unwrap();
    s.append(vec![NewRecord {
        body: engram::Body::Summary {
            generator: "g@1".into(),
        },
        kind: "summary".into(),
        text: Some("chain-canary-digest of m".into()),
        sources: vec![ext("m")],
        external_id: Some("sum".into()),
        ..NewRecord::default()
    }])
    .unwrap();
    db.backup(&bdir).unwrap();
    clock.advance(MINUTE);
    // after the backup: a correction, then a deletion through it
    s.append(vec![NewRecord {
        supersedes: Some(ext("m")),
        ..NewRecord::event("note", "chain-canary-two corrected words").with_external_id("m")
    }])
    .unwrap();
    s.delete(&ext("m"), Some("erasure request")).unwrap();
    // an operation the ledger does not keep: the restore gives it up, and
    // says so
    s.expire(&ext("f"), T0 + MINUTE).unwrap();
    let ledger = std::fs::read_to_string(dir.path().join("ledger.jsonl")).unwrap();
    assert!(
        ledger.contains(&m1.to_string()),
        "the ledger names the older version:\n{ledger}"
    );
    db.close().unwrap();

    for round in 0..2 {
        let r = Engram::restore(dir.path(), &bdir, &opts(&clock), None).unwrap();
        assert_eq!(r.deletions_reapplied, 1, "round {round}: {r:?}");
        assert_eq!(r.not_in_backup, 0, "round {round}: {r:?}");
        // round 0: the expiry; round 1: the restored store holds only the
        // re-applied deletion past the backup, which the ledger keeps
        let given_up = if round == 0 { 1 } else { 0 };
        assert_eq!(
            r.later_operations_replaced,
            Some(given_up),
            "round {round}: {r:?}"
        );
        assert!(
            grep(dir.path(), "chain-canary").is_empty(),
            "round {round}: restored bytes of the deleted chain were purged"
        );
        let db = open(dir.path(), &clock);
        let s = db.session(Principal::admin("t"));
        for e in ["m", "sum"] {
            assert!(
                matches!(s.get(&ext(e)), Err(EngineError::NotFound { .. })),
                "round {round}: {e} came back"
            );
        }
        let hits = s.recall(&RecallRequest::text("chain-canary")).unwrap().hits;
        assert!(
            hits.iter().all(|h| {
                !h.text.as_deref().unwrap_or("").contains("chain-canary")
                    && !matches!(h.external_id.as_deref(), Some("m" | "sum"))
            }),
            "round {round}: {hits:?}"
        );
        assert!(!hits.is_empty(), "round {round}: the fact is still there");
        db.close().unwrap();
    }
}

/// A ledger named with `--ledger` that is not there is an error, and the
/// store is left as it was: an empty ledger would let records deleted
/// after the backup come back without a word.
#[test]
fn a_missing_extra_ledger_is_refused_and_changes_nothing() {
    let (dir, backups, bdir, clock) = dirs();
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("t"));
    s.append(vec![NewRecord::event("note", "kept").with_external_id("k")])
        .unwrap();
    db.backup(&bdir).unwrap();
    db.close().unwrap();
    let before = crate::common::files_under(dir.path());
    let missing = backups.path().join("elsewhere").join("ledger.jsonl");
    let e = Engram::restore(dir.path(), &bdir, &opts(&clock), Some(&missing)).unwrap_err();
    assert!(
        matches!(&e, EngineError::InvalidInput { field, .. } if field == "ledger")
            && e.to_string().contains("does not exist"),
        "{e:?}"
    );
    // a directory, even one named ledger.jsonl, is said to be one
    let as_dir = backups.path().join("d").join("ledger.jsonl");
    std::fs::create_dir_all(&as_dir).unwrap();
    let e = Engram::restore(dir.path(), &bdir, &opts(&clock), Some(&as_dir)).unwrap_err();
    assert!(e.to_string().contains("is a directory"), "{e}");
    // a damaged one gets a remedy for a file of another store, not this
    // store's "move it aside and open again"
    let bad = backups.path().join("b").join("ledger.jsonl");
    std::fs::create_dir_all(bad.parent().unwrap()).unwrap();
    std::fs::write(&bad, "not json\n{}\n").unwrap();
    let e = Engram::restore(dir.path(), &bdir, &opts(&clock), Some(&bad)).unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("restore without `--ledger`") && !text.contains("open the store again"),
        "{text}"
    );
    assert_eq!(before, crate::common::files_under(dir.path()));
}

/// A refused restore into a new directory leaves nothing there: the store
/// is created only once the backup is known to be usable.
#[test]
fn a_refused_restore_creates_no_store() {
    let (dir, backups, bdir, clock) = dirs();
    let target = dir.path().join("new-store");
    std::fs::create_dir_all(&bdir).unwrap();
    std::fs::write(bdir.join("notes.txt"), "not a backup").unwrap();
    for (src, ledger) in [
        (bdir.clone(), None),
        (backups.path().join("missing"), None),
        (bdir.clone(), Some(backups.path().join("ledger.jsonl"))),
    ] {
        let e = Engram::restore(&target, &src, &opts(&clock), ledger.as_deref()).unwrap_err();
        assert!(matches!(e, EngineError::InvalidInput { .. }), "{e:?}");
        assert!(
            !target.exists(),
            "{src:?}: a refused restore created {target:?}"
        );
    }
}

/// A revocation lifted by a grant after the backup stays lifted after the
/// restore: the ledger keeps grants beside revocations and the restore
/// re-applies them in order (it used to re-apply the revocation alone).
#[test]
fn restore_reapplies_a_grant_that_lifted_a_later_revocation() {
    let (dir, _backups, bdir, clock) = dirs();
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("t"));
    s.append(vec![
        NewRecord::event("note", "grant-canary restricted note")
            .with_external_id("r")
            .with_access(&["hr"]),
    ])
    .unwrap();
    s.grant(Some("pat"), Some("hr"), None).unwrap();
    db.backup(&bdir).unwrap();
    clock.advance(MINUTE);
    // after the backup: pat loses the label, then gets it back; the label
    // is revoked tenant-wide and granted back tenant-wide too
    s.revoke(Some("pat"), Some("hr"), None).unwrap();
    s.grant(Some("pat"), Some("hr"), None).unwrap();
    s.revoke(None, Some("hr"), None).unwrap();
    s.grant(None, Some("hr"), None).unwrap();
    let sees = |db: &Engram| {
        db.session(Principal::user("t", "pat"))
            .get(&ext("r"))
            .is_ok()
    };
    assert!(sees(&db));
    db.close().unwrap();

    let r = Engram::restore(dir.path(), &bdir, &opts(&clock), None).unwrap();
    assert_eq!(
        (r.revocations_reapplied, r.grants_reapplied),
        (2, 2),
        "{r:?}"
    );
    assert_eq!(r.later_operations_replaced, Some(0), "{r:?}");
    let db = open(dir.path(), &clock);
    assert!(sees(&db), "the grant after the revocation was lost");
    db.close().unwrap();
}

/// A backup is not a store: opening it to write is refused, so no write
/// makes it a backup no restore accepts (a read-only open, `verify` of a
/// backup, changes nothing), and a store is not restored into its own
/// backup; a restore whose extra ledger cannot be read creates nothing.
#[test]
fn a_backup_is_not_opened_as_a_store() {
    let (dir, backups, bdir, clock) = dirs();
    let db = open(dir.path(), &clock);
    db.session(Principal::admin("t"))
        .append(vec![NewRecord::event("note", "kept").with_external_id("k")])
        .unwrap();
    db.backup(&bdir).unwrap();
    db.close().unwrap();
    let before = crate::common::files_under(&bdir);
    let Err(e) = Engram::open(&bdir, opts(&clock)) else {
        panic!("a backup opened as a store to write");
    };
    assert!(e.to_string().contains("is a backup"), "{e}");
    let e = Engram::restore(&bdir, &bdir, &opts(&clock), None).unwrap_err();
    assert!(e.to_string().contains("is a backup"), "{e}");
    assert_eq!(
        before,
        crate::common::files_under(&bdir),
        "the backup changed"
    );
    // it restores as ever
    Engram::restore(dir.path(), &bdir, &opts(&clock), None).unwrap();
    // an extra ledger that does not decode: refused before a store is made
    let bad = backups.path().join("bad");
    std::fs::create_dir_all(&bad).unwrap();
    std::fs::write(bad.join("ledger.jsonl"), "{\"op\":\"zzz\"}\nnot json\n").unwrap();
    let target = backups.path().join("new-store");
    let e = Engram::restore(
        &target,
        &bdir,
        &opts(&clock),
        Some(&bad.join("ledger.jsonl")),
    )
    .unwrap_err();
    assert!(e.to_string().contains("ledger"), "{e}");
    assert!(!target.exists(), "a refused restore created a store");
}

/// Bytes this store had purged stay purged after a restore of an older
/// backup, even under a legal hold placed after the purge: the hold kept
/// the bytes it found, and it never found these. A deletion a hold covered
/// before any compaction keeps its bytes, as it did before the restore.
#[test]
fn a_restore_purges_again_what_was_purged_before_a_later_hold() {
    let (dir, _backups, bdir, clock) = dirs();
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("t"));
    let scoped = |ext: &str, text: &str| NewRecord {
        scope: engram::Scope {
            user: Some("uh".into()),
            ..Default::default()
        },
        ..NewRecord::event("note", text).with_external_id(ext)
    };
    s.append(vec![
        scoped("gone", "purged-canary erased before the hold"),
        scoped("kept", "held-canary deleted under the hold"),
    ])
    .unwrap();
    db.backup(&bdir).unwrap();
    clock.advance(MINUTE);
    s.delete(&ext("gone"), Some("erasure")).unwrap();
    db.close().unwrap();
    Engram::compact(dir.path(), &opts(&clock)).unwrap();
    assert!(grep(dir.path(), "purged-canary").is_empty());
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("t"));
    s.hold("user:uh", true).unwrap();
    s.delete(&ext("kept"), Some("deleted while held")).unwrap();
    db.close().unwrap();

    let r = Engram::restore(dir.path(), &bdir, &opts(&clock), None).unwrap();
    assert_eq!(r.deletions_reapplied, 2, "{r:?}");
    assert!(
        grep(dir.path(), "purged-canary").is_empty(),
        "purged bytes came back under a hold placed after their purge"
    );
    assert!(
        !grep(dir.path(), "held-canary").is_empty(),
        "the hold no longer keeps what it covered"
    );
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("t"));
    for e in ["gone", "kept"] {
        assert!(
            matches!(s.get(&ext(e)), Err(EngineError::NotFound { .. })),
            "{e}"
        );
    }
    db.close().unwrap();
}

/// An empty backup says nothing of whose it was: restoring it over a store
/// holding records is refused (it would remove them all), and a restore
/// of a damaged backup into a new directory leaves nothing there.
#[test]
fn an_empty_backup_does_not_wipe_a_store_and_a_damaged_one_creates_nothing() {
    let (dir, backups, bdir, clock) = dirs();
    let empty_store = backups.path().join("empty-store");
    let db = open(&empty_store, &clock);
    db.backup(&bdir).unwrap();
    db.close().unwrap();
    let db = open(dir.path(), &clock);
    db.session(Principal::admin("t"))
        .append(vec![
            NewRecord::event("note", "precious").with_external_id("p"),
        ])
        .unwrap();
    db.close().unwrap();
    let e = Engram::restore(dir.path(), &bdir, &opts(&clock), None).unwrap_err();
    assert!(e.to_string().contains("empty store"), "{e}");
    let db = open(dir.path(), &clock);
    assert!(db.session(Principal::admin("t")).get(&ext("p")).is_ok());
    // a backup whose backup.json does not describe its log
    let good = backups.path().join("good");
    db.backup(&good).unwrap();
    db.close().unwrap();
    let manifest = good.join("backup.json");
    let text = std::fs::read_to_string(&manifest).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["last_lsn"] = serde_json::json!(v["last_lsn"].as_u64().unwrap() + 40);
    std::fs::write(&manifest, v.to_string()).unwrap();
    let target = backups.path().join("fresh");
    let e = Engram::restore(&target, &good, &opts(&clock), None).unwrap_err();
    assert!(e.to_string().contains("damaged"), "{e}");
    assert!(
        !target.exists() || std::fs::read_dir(&target).unwrap().next().is_none(),
        "a refused restore left a store in {target:?}"
    );
}

/// A restore interrupted after its log swap whose `restore.pending` is then
/// damaged: the store refuses to open with the advice to run the restore
/// again, and running it again works (it refused too, "unfinished", so the
/// advice looped) and keeps a deletion made after the backup; `verify`'s
/// read-only open reports the damage rather than calling it pending.
#[test]
fn a_restore_over_a_damaged_pending_file_runs_again_and_keeps_deletions() {
    let (dir, _backups, bdir, clock) = dirs();
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("t"));
    s.append(vec![
        NewRecord::event("note", "kept").with_external_id("a"),
        NewRecord::event("note", "deleted-after-backup-canary").with_external_id("b"),
    ])
    .unwrap();
    db.backup(&bdir).unwrap();
    s.delete(&ext("b"), None).unwrap();
    drop(s);
    db.close().unwrap();
    // the state after an interrupted swap: the backup's log in place, no
    // derived state, and a damaged pending file
    let log = dir.path().join("log");
    std::fs::remove_dir_all(&log).unwrap();
    std::fs::create_dir(&log).unwrap();
    for e in std::fs::read_dir(bdir.join("log")).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), log.join(e.file_name())).unwrap();
    }
    std::fs::remove_dir_all(dir.path().join("derived")).unwrap();
    std::fs::write(dir.path().join("restore.pending"), "{\"op_id\": \"x\"\n").unwrap();
    let ro = engram::Options {
        read_only: true,
        ..opts(&clock)
    };
    let e = Engram::open(dir.path(), ro).expect_err("damage reported");
    assert!(e.to_string().contains("restore.pending"), "{e}");
    let e = Engram::open(dir.path(), opts(&clock)).expect_err("refused");
    assert!(e.to_string().contains("engram restore BACKUP"), "{e}");
    Engram::restore(dir.path(), &bdir, &opts(&clock), None).unwrap();
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("t"));
    assert!(s.get(&ext("a")).is_ok());
    assert!(
        matches!(s.get(&ext("b")), Err(EngineError::NotFound { .. })),
        "the deletion after the backup was undone"
    );
    drop(s);
    db.close().unwrap();
}

/// A backup of a store whose restore is not finished is refused: its log
/// holds what its state does not yet, and no restore would accept the copy.
#[test]
fn a_backup_waits_for_an_unfinished_restore() {
    let (dir, backups, bdir, clock) = dirs();
    let db = open(dir.path(), &clock);
    db.session(Principal::admin("t"))
        .append(vec![NewRecord::event("note", "x")])
        .unwrap();
    let ro = engram::Options {
        read_only: true,
        ..opts(&clock)
    };
    db.close().unwrap();
    std::fs::write(dir.path().join("restore.pending"), "{\"end\": 0}\n").unwrap();
    let db = Engram::open(dir.path(), ro).unwrap();
    let e = db.backup(&bdir).unwrap_err();
    assert!(
        e.to_string()
            .contains("restore of this store is not finished"),
        "{e}"
    );
    db.close().unwrap();
    // a writable open finishes it; then the backup is taken
    open(dir.path(), &clock).close().unwrap();
    let db = open(dir.path(), &clock);
    db.backup(backups.path().join("c")).unwrap();
    db.close().unwrap();
}

/// The restore's report counts what it gives up: a record written after
/// the backup, not one written (and corrected) and deleted after it, of
/// which nothing is given up.
#[test]
fn a_record_written_and_deleted_after_the_backup_is_not_counted_as_given_up() {
    let (dir, _backups, bdir, clock) = dirs();
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("t"));
    s.append(vec![NewRecord::event("note", "kept").with_external_id("k")])
        .unwrap();
    db.backup(&bdir).unwrap();
    clock.advance(MINUTE);
    s.append(vec![
        NewRecord::event("note", "written after the backup").with_external_id("late"),
    ])
    .unwrap();
    s.append(vec![
        NewRecord::event("note", "gone before the restore").with_external_id("gone"),
    ])
    .unwrap();
    s.append(vec![NewRecord {
        supersedes: Some(ext("gone")),
        ..NewRecord::event("note", "gone, corrected").with_external_id("gone")
    }])
    .unwrap();
    s.delete(&ext("gone"), None).unwrap();
    db.close().unwrap();
    let r = Engram::restore(dir.path(), &bdir, &opts(&clock), None).unwrap();
    assert_eq!(r.later_records_replaced, Some(1), "{r:?}");
    // its deletion is not in the backup's log, so nothing to re-apply
    assert_eq!(r.not_in_backup, 1, "{r:?}");
}

/// A backup taken while other sessions append and delete restores: the
/// ledger it carries names only operations its log holds, so opening the
/// copy applies nothing past the LSN `backup.json` records. (The ledger
/// used to be copied after the log, and could name a deletion made while
/// the log was copied.)
#[test]
fn a_backup_taken_during_deletions_restores() {
    let (dir, backups, _, clock) = dirs();
    let db = open(dir.path(), &clock);
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        for w in 0..4 {
            let (db, stop) = (&db, &stop);
            s.spawn(move || {
                let session = db.session(Principal::admin("t"));
                let mut i = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let id = session
                        .append(vec![NewRecord::event("note", format!("w{w} r{i}"))])
                        .unwrap()[0]
                        .id;
                    if i % 2 == 0 {
                        session.delete(&engram::RecordRef::Id(id), None).unwrap();
                    }
                    i += 1;
                }
            });
        }
        // (the writers are stopped before any failure is reported)
        let mut failed = Vec::new();
        for b in 0..8 {
            let dest = backups.path().join(format!("b{b}"));
            // the copy's log runs exactly to the LSN its backup.json records
            let target = backups.path().join(format!("r{b}"));
            let restored = db
                .backup(&dest)
                .and_then(|_| Engram::restore(&target, &dest, &opts(&clock), None));
            if let Err(e) = restored {
                failed.push(format!("backup {b}: {e}"));
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(failed.is_empty(), "{failed:?}");
    });
    db.close().unwrap();
}
