//! Engram writes only into its own stores: a directory that is not a store
//! is refused by every command that writes, commands other than the ones
//! that create never create, and rebuild/restore remove only files Engram
//! names.

use std::path::Path;

use super::cli::{self, fails, ok, snapshot};

fn foreign_dir(root: &Path) -> std::path::PathBuf {
    let u = root.join("u");
    std::fs::create_dir_all(u.join("derived/reports")).unwrap();
    std::fs::create_dir_all(u.join("log")).unwrap();
    std::fs::write(u.join("derived/reports/q3.txt"), "q3").unwrap();
    std::fs::write(u.join("log/app.log"), "app").unwrap();
    u
}

#[test]
fn commands_refuse_a_directory_that_is_not_a_store_and_touch_nothing() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let u = foreign_dir(tmp.path());
    let before = snapshot(&u);
    let file = cli::events_file(tmp.path(), "ev.jsonl", "t", 3);
    for args in [
        vec!["rebuild"],
        vec!["rebuild", "--catalog"],
        vec!["compact"],
        vec!["stats"],
        vec!["verify"],
        vec!["ingest", file.to_str().unwrap()],
        vec!["init"],
        vec!["repair"],
    ] {
        let msg = fails(&u, &args);
        assert!(
            msg.contains("not an Engram store")
                || msg.contains("no store")
                || msg.contains("not empty"),
            "{args:?}: {msg}"
        );
        cli::assert_same(
            &before,
            &snapshot(&u),
            &format!("{args:?} changed a foreign directory"),
        );
    }
    // restore into it
    let src = tmp.path().join("src");
    ok(&src, &["ingest", file.to_str().unwrap()]);
    let bk = tmp.path().join("bk");
    ok(&src, &["backup", bk.to_str().unwrap()]);
    let msg = fails(&u, &["restore", bk.to_str().unwrap()]);
    assert!(msg.contains("not an Engram store"), "{msg}");
    cli::assert_same(&before, &snapshot(&u), "unchanged");
}

#[test]
fn rebuild_and_restore_leave_files_engram_does_not_name() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let file = cli::events_file(tmp.path(), "ev.jsonl", "t", 5);
    ok(&store, &["ingest", file.to_str().unwrap()]);
    std::fs::create_dir_all(store.join("derived/reports")).unwrap();
    std::fs::write(store.join("derived/reports/q3.txt"), "q3").unwrap();
    std::fs::write(store.join("log/app.log"), "app").unwrap();
    ok(&store, &["rebuild"]);
    let bk = tmp.path().join("bk");
    ok(&store, &["backup", bk.to_str().unwrap()]);
    ok(&store, &["restore", bk.to_str().unwrap()]);
    assert_eq!(
        std::fs::read_to_string(store.join("derived/reports/q3.txt")).unwrap(),
        "q3"
    );
    assert!(
        cli::json(&ok(&store, &["stats", "--json"]))["records"] == 5,
        "restore lost records"
    );
    assert!(
        crate::common::files_under(&store)
            .iter()
            .any(|p| p.ends_with("app.log")),
        "restore deleted a file it does not own"
    );
    // it stays where it was put (a file left in `log.old/` made every
    // later restore fail its rename: "Directory not empty")
    assert_eq!(
        std::fs::read_to_string(store.join("log/app.log")).unwrap(),
        "app"
    );
    assert!(!store.join("log.old").exists(), "log.old/ left behind");
    ok(&store, &["restore", bk.to_str().unwrap()]);
    ok(&store, &["restore", bk.to_str().unwrap()]);
    assert!(store.join("log/app.log").exists());
    // a `log.old/` left by an earlier build is emptied back into `log/` at
    // the next open; a name both hold is refused by restore, naming it,
    // before anything changes
    std::fs::create_dir(store.join("log.old")).unwrap();
    std::fs::write(store.join("log.old/notes.txt"), "n").unwrap();
    std::fs::write(store.join("log.old/app.log"), "older").unwrap();
    ok(&store, &["stats"]);
    assert_eq!(
        std::fs::read_to_string(store.join("log/notes.txt")).unwrap(),
        "n"
    );
    let out = fails(&store, &["restore", bk.to_str().unwrap()]);
    assert!(out.contains("log.old") && out.contains("app.log"), "{out}");
    assert!(out.contains("the restore did not start"), "{out}");
    assert!(!out.contains("  "), "{out}");
    assert!(!store.join("log.restore").exists());
    assert_eq!(cli::json(&ok(&store, &["stats", "--json"]))["records"], 5);
    std::fs::remove_file(store.join("log.old/app.log")).unwrap();
    ok(&store, &["restore", bk.to_str().unwrap()]);
    assert!(!store.join("log.old").exists());
    // a file in `log.old`'s place is no outgoing log: every open goes on,
    // and a restore names it
    std::fs::write(store.join("log.old"), "mine").unwrap();
    ok(&store, &["stats"]);
    let out = fails(&store, &["restore", bk.to_str().unwrap()]);
    assert!(out.contains("log.old"), "{out}");
    assert_eq!(
        std::fs::read_to_string(store.join("log.old")).unwrap(),
        "mine"
    );
    assert_eq!(cli::json(&ok(&store, &["stats", "--json"]))["records"], 5);
}

#[test]
fn only_creating_commands_create_a_store() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let typo = tmp.path().join("nonexistent/deep/dir");
    for args in [
        vec!["stats"],
        vec!["verify"],
        vec!["get", "x", "--tenant", "t"],
        vec!["log"],
    ] {
        let msg = fails(&typo, &args);
        assert!(msg.contains("no store at"), "{args:?}: {msg}");
        assert!(
            !tmp.path().join("nonexistent").exists(),
            "{args:?} created the path"
        );
    }
    ok(&typo, &["init"]);
    let msg = fails(&typo, &["init"]);
    assert!(msg.contains("already an Engram store"), "{msg}");
    ok(&typo, &["stats"]);
}

#[test]
fn a_file_as_data_directory_is_named() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let f = tmp.path().join("afile");
    std::fs::write(&f, "x").unwrap();
    let msg = fails(&f, &["stats"]);
    assert!(
        msg.contains("not a store directory") || msg.contains("not an Engram store"),
        "{msg}"
    );
    let file = cli::events_file(tmp.path(), "ev.jsonl", "t", 1);
    let msg = fails(&f, &["ingest", file.to_str().unwrap()]);
    assert!(!msg.contains("os error 17"), "{msg}");
}

#[test]
fn a_damaged_settings_file_names_its_repair_and_verify_still_checks_the_log() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let file = cli::events_file(tmp.path(), "ev.jsonl", "t", 5);
    ok(
        &store,
        &["--embedder", "hash", "ingest", file.to_str().unwrap()],
    );
    let settings = store.join("settings.snap");
    let mut b = std::fs::read(&settings).unwrap();
    let n = b.len();
    b[n - 3] ^= 0xFF;
    std::fs::write(&settings, b).unwrap();
    let msg = fails(&store, &["stats"]);
    assert!(msg.contains("--embedder NAME rebuild"), "{msg}");
    let v = cli::at(&store, &["verify", "--json"]);
    let j = cli::json(&v);
    assert_eq!(j["frames"], 5, "verify did not check the log: {j}");
    assert_eq!(j["ok"], false);
    ok(&store, &["--embedder", "hash", "rebuild"]);
    ok(&store, &["stats"]);
    ok(&store, &["verify"]);
}

#[test]
fn a_backup_carries_no_content_deleted_before_it() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let f = tmp.path().join("e.jsonl");
    std::fs::write(
        &f,
        "{\"external_id\":\"gone\",\"tenant\":\"t\",\"kind\":\"k\",\"text\":\"CANARY-7f3a deleted before the backup\"}\n{\"external_id\":\"kept\",\"tenant\":\"t\",\"kind\":\"k\",\"text\":\"kept note\"}\n",
    )
    .unwrap();
    ok(&store, &["ingest", f.to_str().unwrap()]);
    ok(&store, &["delete", "gone", "--tenant", "t"]);
    let bk = tmp.path().join("bk");
    ok(&store, &["backup", bk.to_str().unwrap()]);
    let left = crate::common::grep(&bk, "CANARY-7f3a");
    assert!(left.is_empty(), "deleted content in the backup: {left:?}");
    // the backup restores to a store holding the kept record
    let other = tmp.path().join("other");
    ok(&other, &["restore", bk.to_str().unwrap()]);
    let got = cli::json(&ok(&other, &["get", "kept", "--tenant", "t", "--json"]));
    assert_eq!(got["text"], "kept note");
    fails(&other, &["get", "gone", "--tenant", "t"]);
    // a backup inside the store is refused
    let msg = fails(&store, &["backup", store.join("log/sub").to_str().unwrap()]);
    assert!(msg.contains("inside the store"), "{msg}");
    // and through a symbolic link to the store, or to a directory in it
    let link = tmp.path().join("link");
    std::os::unix::fs::symlink(&store, &link).unwrap();
    let log_link = tmp.path().join("log-link");
    std::os::unix::fs::symlink(store.join("log"), &log_link).unwrap();
    for dest in [link.join("bk2"), link.join("log/bk3"), log_link.join("bk4")] {
        let msg = fails(&store, &["backup", dest.to_str().unwrap()]);
        assert!(msg.contains("inside the store"), "{dest:?}: {msg}");
        assert!(!dest.exists(), "{dest:?} written");
    }
    // a destination that is a link to nothing is refused as bad input,
    // and nothing appears where it points
    let dangling = tmp.path().join("dangling");
    let target = tmp.path().join("nowhere");
    std::os::unix::fs::symlink(&target, &dangling).unwrap();
    let msg = fails(&store, &["backup", dangling.to_str().unwrap()]);
    assert!(
        msg.contains("symbolic link to a path that does not exist"),
        "{msg}"
    );
    assert!(!target.exists(), "the link's target was created");
}

/// Removing the lock file of an open store (a cleanup script) does not let
/// a second writer in: the store's directory is locked too.
#[test]
fn removing_the_lock_file_does_not_unlock_an_open_store() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let db = engram::Engram::open(&dir, engram::Options::default()).unwrap();
    std::fs::remove_file(dir.join("LOCK")).unwrap();
    for read_only in [false, true] {
        let e = engram::Engram::open(
            &dir,
            engram::Options {
                read_only,
                create_if_missing: false,
                ..engram::Options::default()
            },
        )
        .err()
        .unwrap_or_else(|| panic!("a second open (read_only {read_only}) was let in"));
        assert!(e.to_string().contains("in use"), "{e}");
    }
    db.close().unwrap();
    // once closed, the store opens again (a new lock file is made)
    engram::Engram::open(&dir, engram::Options::default())
        .unwrap()
        .close()
        .unwrap();
}

/// Two stores whose logs lead to one directory (a symbolic link) exclude
/// each other: the second open is `Locked`, where both used to write the
/// same segment and one's acknowledged writes were lost.
#[test]
fn two_stores_sharing_a_log_directory_through_a_link_exclude_each_other() {
    use engram::{EngineError, Engram, Options, storage::StorageError};
    let tmp = tempfile::tempdir().unwrap();
    let (x, y) = (tmp.path().join("x"), tmp.path().join("y"));
    for d in [&x, &y] {
        Engram::open(d, Options::default())
            .unwrap()
            .close()
            .unwrap();
    }
    std::fs::remove_dir_all(y.join("log")).unwrap();
    std::os::unix::fs::symlink(x.join("log"), y.join("log")).unwrap();
    let db = Engram::open(&x, Options::default()).unwrap();
    match Engram::open(&y, Options::default()) {
        Err(EngineError::Storage(StorageError::Locked { .. })) => {}
        Err(e) => panic!("expected Locked, got {e}"),
        Ok(_) => panic!("a second store writes the first one's log"),
    }
    db.close().unwrap();
}

/// Options of a store with the hashing embedder, read-only or writable.
fn vector_opts(read_only: bool) -> engram::Options {
    engram::Options {
        embedder: Some(std::sync::Arc::new(engram::HashEmbedder::default())),
        read_only,
        create_if_missing: !read_only,
        ..engram::Options::default()
    }
}

/// A store at `dir/store` holding `n` ingested events of tenant `t`.
fn ingested(dir: &Path, n: usize) -> std::path::PathBuf {
    let store = dir.join("store");
    let file = cli::events_file(dir, "ev.jsonl", "t", n);
    ok(&store, &["ingest", file.to_str().unwrap()]);
    store
}

/// A closed store in `dir` holding one record with a derived vector.
fn store_with_a_vector(dir: &Path) {
    let db = engram::Engram::open(dir, vector_opts(false)).unwrap();
    db.session(engram::Principal::admin("t"))
        .append(vec![engram::NewRecord::event("k", "hello world")])
        .unwrap();
    db.close().unwrap();
}

/// A derived file that cannot be read (a vector file replaced by a
/// directory) is named as the problem: a read-only open blamed the intact
/// log frame it was applying ("open the store with a build that reads
/// it"), and a writable open rebuilds it.
#[test]
fn an_unreadable_derived_file_is_named_not_the_log() {
    use engram::Engram;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    store_with_a_vector(&dir);
    let vectors = walk(&dir.join("derived"))
        .into_iter()
        .find(|p| p.ends_with("vectors.f32"))
        .expect("a vector file");
    std::fs::remove_file(&vectors).unwrap();
    std::fs::create_dir(&vectors).unwrap();
    // (the checkpoint may cover the frame: force its replay)
    let _ = std::fs::remove_file(dir.join("derived").join("state.snap"));
    match Engram::open(&dir, vector_opts(true)) {
        Err(e) => {
            let text = e.to_string();
            assert!(text.contains("vectors.f32"), "{text}");
            assert!(!text.contains("could not be applied"), "{text}");
        }
        Ok(_) => panic!("a vector file that is a directory went unnoticed"),
    }
    std::fs::remove_dir(&vectors).unwrap();
    Engram::open(&dir, vector_opts(false))
        .unwrap()
        .close()
        .unwrap();
}

#[test]
fn a_file_where_a_vector_space_directory_belongs_is_named_by_verify() {
    use engram::Engram;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    store_with_a_vector(&dir);
    let space = std::fs::read_dir(dir.join("derived/vectors"))
        .unwrap()
        .next()
        .expect("a vector space")
        .unwrap()
        .path();
    std::fs::remove_dir_all(&space).unwrap();
    std::fs::write(&space, "not a space").unwrap();
    let name = space.file_name().unwrap().to_str().unwrap();
    // a writable open refuses the store, naming the file ...
    let err = Engram::open(&dir, vector_opts(false))
        .unwrap_err()
        .to_string();
    assert!(err.contains(name), "{err}");
    // ... and verify, which opens it read-only, names it as a problem
    let db = Engram::open(&dir, vector_opts(true)).unwrap();
    let report = db.verify().unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.contains(name) && p.contains("vector space")),
        "{:?}",
        report.problems
    );
    db.close().unwrap();
    std::fs::remove_file(&space).unwrap();
    // a file of another name there stops nothing, and is no problem
    std::fs::write(dir.join("derived/vectors/.DS_Store"), "x").unwrap();
    let db = Engram::open(&dir, vector_opts(false)).unwrap();
    assert_eq!(db.verify().unwrap().problems, Vec::<String>::new());
    db.close().unwrap();
}

/// A store a restore into a new directory did not finish (it holds
/// `restore.partial`) is refused by the commands that write beside a store
/// without opening it, as by every open: `repair --truncate-after` used to
/// write `restore.pending` there, which let it open as an empty store.
#[test]
fn an_unfinished_restore_is_refused_by_keys_init_and_repair() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let s = tmp.path().join("s");
    ok(&s, &["init"]);
    std::fs::write(s.join("restore.partial"), "cut short").unwrap();
    for args in [
        vec!["stats"],
        vec!["verify"],
        vec!["keys", "create", "--admin"],
        vec!["init"],
        vec!["repair", "--truncate-after", "0"],
        vec!["repair"],
    ] {
        let msg = fails(&s, &args);
        assert!(
            msg.contains("restore that did not finish"),
            "{args:?}: {msg}"
        );
    }
    assert!(!s.join("restore.pending").exists());
    assert!(!s.join("keys.json").exists());
}

fn walk(d: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(d).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        }
        out.push(p);
    }
    out
}

/// `engram backup` of a store another process holds says how to back it
/// up instead (a running server's route), as `verify` does.
#[test]
fn backup_of_a_store_in_use_names_the_server_route() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let db = engram::Engram::open(&dir, engram::Options::default()).unwrap();
    let out = crate::cli::at(&dir, &["backup", tmp.path().join("b").to_str().unwrap()]);
    let text = crate::cli::text(&out);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("POST /v1/backup"), "{text}");
    db.close().unwrap();
}

/// `LOCK` or `ledger.jsonl` replaced by a symbolic link to nothing: the
/// store refuses to create the file through it (it created it wherever
/// the link pointed, outside the store), naming the link (for the ledger,
/// at the open after the deletion that could not write its line).
#[test]
fn a_store_file_is_never_created_through_a_link_to_nothing() {
    use engram::{Engram, NewRecord, Options, Principal, RecordRef};
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let elsewhere = tmp.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let db = Engram::open(&dir, Options::default()).unwrap();
    let id = db
        .session(Principal::admin("t"))
        .append(vec![NewRecord::event("k", "x")])
        .unwrap()[0]
        .id;
    db.close().unwrap();
    for name in ["LOCK", "ledger.jsonl"] {
        let path = dir.join(name);
        let _ = std::fs::remove_file(&path);
        std::os::unix::fs::symlink(elsewhere.join(name), &path).unwrap();
        // (a deletion stored in the log is done even when its ledger line
        // cannot be written: verify names the lagging ledger, and the next
        // open, which must write it, is refused)
        let r = Engram::open(&dir, Options::default()).and_then(|db| {
            let d = db
                .session(Principal::admin("t"))
                .delete(&RecordRef::Id(id), None);
            let v = db.verify()?;
            db.close()?;
            d?;
            assert!(!v.ok(), "{name}: verify names no lagging ledger");
            Engram::open(&dir, Options::default()).map(|_| ())
        });
        let e = r.expect_err(name).to_string();
        assert!(e.contains("symbolic link to nothing"), "{name}: {e}");
        assert!(e.contains(name), "{name}: {e}");
        assert!(
            !elsewhere.join(name).exists(),
            "{name} was created outside the store"
        );
        std::fs::remove_file(&path).unwrap();
    }
}

/// A directory where a segment file belongs is named as such: it was
/// skipped, and the store was refused as one whose log holds no whole
/// segment (or, with one segment left, as a gap).
#[test]
fn a_directory_in_place_of_a_segment_is_named() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let file = cli::events_file(tmp.path(), "ev.jsonl", "t", 5);
    ok(&store, &["ingest", file.to_str().unwrap()]);
    // an operation in the ledger (which alone, with no segment, says
    // acknowledged frames are gone): the directory is still named
    let listed = cli::json(&ok(
        &store,
        &["log", "--tenant", "t", "--limit", "1", "--json"],
    ));
    let id = listed["id"].as_str().unwrap().to_string();
    ok(&store, &["delete", &id, "--tenant", "t"]);
    let seg = cli::segments(&store).pop().unwrap();
    std::fs::rename(&seg, tmp.path().join("moved.seg")).unwrap();
    std::fs::create_dir(&seg).unwrap();
    let name = seg.file_name().unwrap().to_str().unwrap().to_string();
    for args in [&["stats"][..], &["verify"][..]] {
        let msg = fails(&store, args);
        assert!(
            msg.contains(&name) && msg.contains("a directory is where this segment file belongs"),
            "{args:?}: {msg}"
        );
    }
}

/// A key file is never created in a store's own directories (its
/// maintenance replaces them); one in a store's root, in a directory of
/// the operator's inside it, or outside any store, is. One already there
/// is still listed (to move it).
#[test]
fn a_key_file_inside_a_stores_directories_is_refused() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let s = tmp.path().join("s");
    ok(&s, &["init"]);
    // (through a link into the store, or `..` past a directory of the
    // operator's, too)
    std::os::unix::fs::symlink(s.join("log"), tmp.path().join("lnk")).unwrap();
    // (`..` after a link is taken from where the link leads, as the
    // system does: lnk2/.. is derived/)
    std::fs::create_dir_all(s.join("derived/x")).unwrap();
    std::os::unix::fs::symlink(s.join("derived/x"), tmp.path().join("lnk2")).unwrap();
    std::fs::create_dir(s.join("mine")).unwrap();
    // a key file created at `path`, refused: the error
    let create_at = |path: &std::path::Path| {
        fails(
            &s,
            &[
                "keys",
                "create",
                "--admin",
                "--key-file",
                path.to_str().unwrap(),
            ],
        )
    };
    for inside in [
        "log/k.json",
        "derived/k.json",
        "derived/new/k.json",
        "mine/../log/k.json",
        "missing/../derived/k.json",
        "../lnk/k.json",
        "../lnk2/../k.json",
    ] {
        let path = s.join(inside);
        let msg = create_at(&path);
        assert!(
            msg.contains("which its maintenance replaces"),
            "{inside}: {msg}"
        );
        assert!(!path.exists(), "{inside} written");
    }
    // a link to a file not there yet, inside log/ (it went through)
    let dangling = tmp.path().join("dangling.json");
    std::os::unix::fs::symlink(s.join("log/k.json"), &dangling).unwrap();
    let msg = create_at(&dangling);
    assert!(msg.contains("which its maintenance replaces"), "{msg}");
    assert!(!s.join("log/k.json").exists() && !s.join("log/k.json.lock").exists());
    // a file of the store's own in its root, not there yet (the store no
    // longer opened)
    for name in [
        "ledger.jsonl",
        "settings.snap",
        "restore.pending",
        "backup.json",
    ] {
        let path = s.join(name);
        let _ = std::fs::remove_file(&path);
        let msg = create_at(&path);
        assert!(msg.contains("is a file of the store"), "{name}: {msg}");
        assert!(!path.exists(), "{name} written");
    }
    ok(&s, &["stats"]);
    let outside = tmp.path().join("k.json");
    std::fs::create_dir(s.join("secrets")).unwrap();
    for path in [s.join("other-keys.json"), s.join("secrets/k.json"), outside] {
        let p = path.to_str().unwrap();
        ok(&s, &["keys", "create", "--admin", "--key-file", p]);
        assert!(path.exists(), "{p}");
    }
    let there = s.join("log/k.json");
    std::fs::copy(tmp.path().join("k.json"), &there).unwrap();
    ok(&s, &["keys", "list", "--key-file", there.to_str().unwrap()]);
}

/// A compaction cut short while writing its copy's marker leaves
/// `compact.staging/ENGRAM.tmp`: the next writable open removes it, as it
/// removes any staging copy (the marker's temporary name read as a file
/// Engram does not own, so the directory stayed). What is not Engram's
/// stays.
#[test]
fn a_staging_copy_cut_short_at_its_marker_is_removed_at_open() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = ingested(tmp.path(), 3);
    let staging = store.join("compact.staging");
    std::fs::create_dir_all(&staging).unwrap();
    std::fs::write(staging.join("ENGRAM.tmp"), "engram store\n").unwrap();
    ok(&store, &["stats"]);
    assert!(!staging.exists(), "compact.staging/ENGRAM.tmp left");
}

#[test]
fn a_backup_inside_another_store_is_refused() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    let file = cli::events_file(tmp.path(), "ev.jsonl", "t", 3);
    ok(&a, &["ingest", file.to_str().unwrap()]);
    ok(&b, &["ingest", file.to_str().unwrap()]);
    let before = snapshot(&b);
    // (a restore of `b` moved such a backup into its `log.old/`)
    for inner in ["log/bk", "derived/bk", "bk"] {
        let dest = b.join(inner);
        let out = fails(&a, &["backup", dest.to_str().unwrap()]);
        assert!(out.contains("is inside the store at"), "{inner}: {out}");
        assert!(!dest.exists(), "{inner}: created");
    }
    assert_eq!(before, snapshot(&b), "the other store changed");
    ok(&a, &["backup", tmp.path().join("bk").to_str().unwrap()]);
    // nor inside its log where a link makes it live outside the store
    // (no marker above it)
    #[cfg(unix)]
    {
        let elsewhere = tmp.path().join("b-log");
        std::fs::rename(b.join("log"), &elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, b.join("log")).unwrap();
        ok(&b, &["stats"]);
        let dest = elsewhere.join("bk");
        let out = fails(&a, &["backup", dest.to_str().unwrap()]);
        assert!(out.contains("segment files"), "{out}");
        assert!(!dest.exists());
    }
}

#[test]
fn keys_refuse_a_store_this_build_cannot_read_and_write_nothing() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("s");
    ok(&store, &["init"]);
    for (marker, says) in [
        (r#"{"engram_store": 2}"#, "this build reads up to"),
        ("not json", "not valid JSON"),
    ] {
        std::fs::write(store.join("ENGRAM"), marker).unwrap();
        let before = snapshot(&store);
        for args in [
            vec!["keys", "create", "--tenant", "acme", "--principal", "p"],
            vec!["keys", "list"],
        ] {
            let out = fails(&store, &args);
            assert!(out.contains(says), "{args:?}: {out}");
        }
        assert_eq!(before, snapshot(&store), "{marker}: written into");
        assert!(!store.join("keys.json").exists());
    }
}

/// A restore over a `log/` that is a link to another directory: the old
/// log's segments go from there, files of other names there stay where
/// they are (a move across file systems failed, and every later open
/// failed with it), and the store opens with the restored log.
#[cfg(unix)]
#[test]
fn a_restore_over_a_linked_log_leaves_the_link_target_s_other_files() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = ingested(tmp.path(), 4);
    let bk = tmp.path().join("bk");
    ok(&store, &["backup", bk.to_str().unwrap()]);
    let elsewhere = tmp.path().join("disk2");
    std::fs::rename(store.join("log"), &elsewhere).unwrap();
    std::fs::create_dir(elsewhere.join("lost+found")).unwrap();
    std::fs::write(elsewhere.join("README"), "mine").unwrap();
    std::os::unix::fs::symlink(&elsewhere, store.join("log")).unwrap();
    ok(&store, &["restore", bk.to_str().unwrap()]);
    assert!(!store.join("log.old").exists());
    assert!(
        !std::fs::symlink_metadata(store.join("log"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(
        std::fs::read_to_string(elsewhere.join("README")).unwrap(),
        "mine"
    );
    assert!(elsewhere.join("lost+found").is_dir());
    let segments = std::fs::read_dir(&elsewhere)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".seg")
        })
        .count();
    assert_eq!(
        segments, 0,
        "the old log's segments stayed where the link led"
    );
    assert_eq!(cli::json(&ok(&store, &["stats", "--json"]))["records"], 4);
    // a copied segment among other files does not make a directory a log:
    // a backup under it is accepted
    let home = tmp.path().join("home");
    std::fs::create_dir(&home).unwrap();
    std::fs::write(home.join("notes.txt"), "n").unwrap();
    let seg = std::fs::read_dir(store.join("log"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    std::fs::copy(&seg, home.join(seg.file_name().unwrap())).unwrap();
    ok(&store, &["backup", home.join("bk").to_str().unwrap()]);
}

/// A `log.old` that leads where the log is (a link to `log`, or to where a
/// linked `log` leads) is no outgoing log: an open cleared it, and with it
/// every segment of the live log.
#[cfg(unix)]
#[test]
fn a_log_old_leading_to_the_live_log_is_never_cleared() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = ingested(tmp.path(), 6);
    std::os::unix::fs::symlink("log", store.join("log.old")).unwrap();
    ok(&store, &["stats"]);
    assert_eq!(cli::json(&ok(&store, &["stats", "--json"]))["records"], 6);
    // the log a link to a directory elsewhere, log.old a second link there
    let elsewhere = tmp.path().join("disk2");
    std::fs::rename(store.join("log"), &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, store.join("log")).unwrap();
    // (the first link was removed, as a link to nothing of its own)
    assert!(std::fs::symlink_metadata(store.join("log.old")).is_err());
    std::os::unix::fs::symlink(&elsewhere, store.join("log.old")).unwrap();
    ok(&store, &["stats"]);
    assert_eq!(cli::json(&ok(&store, &["stats", "--json"]))["records"], 6);
    ok(&store, &["verify"]);
    // nor are the other places a restore or a compaction makes and
    // removes, when a link stands there
    std::os::unix::fs::symlink("log", store.join("log.restore")).unwrap();
    std::os::unix::fs::symlink(".", store.join("compact.staging")).unwrap();
    ok(&store, &["stats"]);
    assert!(store.join("ENGRAM").exists());
    assert!(std::fs::symlink_metadata(store.join("log.restore")).is_err());
    assert!(std::fs::symlink_metadata(store.join("compact.staging")).is_err());
    assert_eq!(cli::json(&ok(&store, &["stats", "--json"]))["records"], 6);
    ok(&store, &["verify"]);
}

/// Links between the store's own directories, made by hand: no open,
/// restore or compaction clears one part of the store through another
/// (each of these removed the live log's segments, or left a store no
/// open read).
#[cfg(unix)]
#[test]
fn links_between_a_store_s_parts_never_clear_the_log() {
    use std::os::unix::fs::symlink;
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = ingested(tmp.path(), 5);
    let bk = tmp.path().join("bk");
    ok(&store, &["backup", bk.to_str().unwrap()]);
    let records =
        |store: &std::path::Path| cli::json(&ok(store, &["stats", "--json"]))["records"].clone();
    // a dangling log.old: unlinked, and a restore goes through
    symlink("nowhere", store.join("log.old")).unwrap();
    ok(&store, &["stats"]);
    assert!(std::fs::symlink_metadata(store.join("log.old")).is_err());
    symlink("log.restore", store.join("log.old")).unwrap();
    ok(&store, &["restore", bk.to_str().unwrap()]);
    assert_eq!(records(&store), 5);
    ok(&store, &["verify"]);
    // the log linked into log.restore/: left alone by every open
    std::fs::rename(store.join("log"), store.join("log.restore")).unwrap();
    symlink("log.restore", store.join("log")).unwrap();
    ok(&store, &["stats"]);
    assert_eq!(records(&store), 5);
    std::fs::remove_file(store.join("log")).unwrap();
    std::fs::rename(store.join("log.restore"), store.join("log")).unwrap();
    // derived and log linked to one directory: what removes derived state
    // refuses, the log intact
    let shared = tmp.path().join("ssd");
    std::fs::rename(store.join("log"), &shared).unwrap();
    symlink(&shared, store.join("log")).unwrap();
    std::fs::remove_dir_all(store.join("derived")).unwrap();
    symlink(&shared, store.join("derived")).unwrap();
    let out = fails(&store, &["rebuild"]);
    assert!(
        out.contains("leads where another part of the store is"),
        "{out}"
    );
    std::fs::remove_file(store.join("derived")).unwrap();
    assert_eq!(records(&store), 5);
    ok(&store, &["verify"]);
}
