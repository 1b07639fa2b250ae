//! Power cuts during the offline maintenance operations. Compaction rewrites
//! log segments and drops derived files; restore swaps in an older log and
//! re-applies later deletions. A power cut after any write either makes
//! must leave a store that opens, verifies clean, still holds every live
//! record with its content, still treats the deleted record as deleted (a
//! restore never resurrects it), and purges it completely when compaction
//! is run (again).

use std::path::Path;
use std::sync::Arc;

use engram::storage::log::LogOptions;
use engram::storage::{Backend, MemBackend};
use engram::{Body, EngineError, Engram, ManualClock, NewRecord, Options, Principal, RecordRef};
use parking_lot::Mutex;

const CANARY: &str = "okapi-canary-51c2e7";
const DIR: &str = "/store";

fn options(backend: &MemBackend, clock: &ManualClock) -> Options {
    Options {
        backend: Arc::new(backend.clone()),
        clock: Arc::new(clock.clone()),
        // small segments: the canary's segment is one of several
        log: LogOptions {
            segment_bytes_max: 4 << 10,
            ..LogOptions::default()
        },
        ..Options::default()
    }
}

/// Every file of `b` under `DIR` whose bytes contain `needle`.
fn grep(b: &MemBackend, needle: &str) -> Vec<String> {
    grep_under(b, DIR, needle)
}

/// Every file of `b` under `root` whose bytes contain `needle`.
fn grep_under(b: &MemBackend, root: &str, needle: &str) -> Vec<String> {
    let mut out = Vec::new();
    if !b.exists(Path::new(root)) {
        return out;
    }
    let mut stack = vec![Path::new(root).to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in b.list_dir(&d).unwrap() {
            let p = d.join(&e.name);
            if e.is_dir {
                stack.push(p);
            } else if b
                .read_file(&p)
                .unwrap()
                .windows(needle.len())
                .any(|w| w == needle.as_bytes())
            {
                out.push(p.display().to_string());
            }
        }
    }
    out
}

/// A closed store with 40 live notes, a deleted canary and a summary of it;
/// with `backup`, a backup taken there before the deletion.
fn build(clock: &ManualClock, backup: Option<&str>) -> MemBackend {
    let b = MemBackend::new();
    let db = Engram::open(DIR, options(&b, clock)).unwrap();
    let s = db.session(Principal::admin("t"));
    let notes = |from: usize, topic: &str| {
        for i in from..from + 20 {
            let text = format!("live note number {i} about the {topic}");
            s.append(vec![
                NewRecord::event("note", text).with_external_id(format!("n{i}")),
            ])
            .unwrap();
        }
    };
    notes(0, "checkout queue");
    let canary = s
        .append(vec![
            NewRecord::event("note", format!("the secret is {CANARY}")).with_external_id("canary"),
        ])
        .unwrap()[0]
        .id;
    s.append(vec![NewRecord {
        body: Body::Summary {
            generator: "g@1".into(),
        },
        kind: "summary".into(),
        text: Some(format!("summary of {CANARY}")),
        sources: vec![RecordRef::Id(canary)],
        ..NewRecord::default()
    }])
    .unwrap();
    notes(20, "billing cache");
    if let Some(dest) = backup {
        db.backup(dest).unwrap();
    }
    s.delete(&RecordRef::Id(canary), Some("user request"))
        .unwrap();
    db.close().unwrap();
    b
}

/// The store in `b` opens, verifies clean, holds every live note, and the
/// canary is deleted.
fn check_sound(b: &MemBackend, clock: &ManualClock, what: &str) {
    check_sound_at(b, clock, DIR, what)
}

/// [`check_sound`] for the store in `dir`.
fn check_sound_at(b: &MemBackend, clock: &ManualClock, dir: &str, what: &str) {
    let db = Engram::open(dir, options(b, clock))
        .unwrap_or_else(|e| panic!("{what}: store does not open: {e}"));
    let v = db.verify().unwrap();
    assert!(v.ok(), "{what}: verify: {:?}", v.problems);
    let s = db.session(Principal::admin("t"));
    for i in 0..40 {
        let r = s
            .get(&RecordRef::External(format!("n{i}")))
            .unwrap_or_else(|e| panic!("{what}: note n{i} lost: {e}"));
        assert!(
            r.text
                .as_deref()
                .unwrap_or("")
                .contains(&format!("number {i} ")),
            "{what}: note n{i} has the wrong text: {:?}",
            r.text
        );
    }
    assert!(
        matches!(
            s.get(&RecordRef::External("canary".into())),
            Err(EngineError::NotFound { .. })
        ),
        "{what}: the deleted record is readable again"
    );
    db.close().unwrap();
}

/// Runs `op` on images of `pristine`, cutting the power after each of its
/// writes (at most about 40 cuts, two tearing seeds each), and checks every
/// crash image with `check`. Returns (images with the canary still on disk,
/// images already purged).
fn at_every_write(
    pristine: &MemBackend,
    op: impl Fn(&MemBackend),
    check: impl Fn(&MemBackend, &str),
) -> (usize, usize) {
    let counted = pristine.crash_image(0);
    let writes = Arc::new(Mutex::new(0u64));
    {
        let writes = writes.clone();
        counted.on_write(Arc::new(move |n| *writes.lock() = n));
    }
    op(&counted);
    counted.clear_faults();
    let total = *writes.lock();
    assert!(total > 0, "the operation wrote nothing");
    check(&counted, "after the whole operation");
    let (mut unpurged, mut purged) = (0, 0);
    let step = (total / 40).max(1);
    let mut cut = 1;
    while cut <= total {
        for seed in [1u64, 2] {
            // A fresh image counts its writes from zero.
            let image = pristine.crash_image(0);
            let captured: Arc<Mutex<Option<MemBackend>>> = Arc::default();
            {
                let (img, captured) = (image.clone(), captured.clone());
                image.on_write(Arc::new(move |w| {
                    if w == cut {
                        let mut c = captured.lock();
                        if c.is_none() {
                            *c = Some(img.crash_image(seed ^ cut));
                        }
                    }
                }));
            }
            op(&image);
            // Background threads (indexer, checkpoints) make the number of
            // writes vary a little from run to run: a run that ended before
            // this cut has nothing to check here.
            let Some(crashed) = captured.lock().take() else {
                continue;
            };
            if grep(&crashed, CANARY).is_empty() {
                purged += 1;
            } else {
                unpurged += 1;
            }
            check(
                &crashed,
                &format!("power cut after write {cut} of {total} (seed {seed})"),
            );
        }
        cut += step;
    }
    assert!(
        unpurged + purged >= 20.min(total as usize),
        "too few crash points were reached ({} of {total} writes)",
        unpurged + purged
    );
    (unpurged, purged)
}

/// The crash image is sound, and compaction purges the canary from it.
fn sound_then_purged(b: &MemBackend, clock: &ManualClock, what: &str) {
    check_sound(b, clock, what);
    Engram::compact(DIR, &options(b, clock)).unwrap_or_else(|e| panic!("{what}: compaction: {e}"));
    assert!(
        grep(b, CANARY).is_empty(),
        "{what}: canary left after compaction in {:?}",
        grep(b, CANARY)
    );
    check_sound(b, clock, &format!("{what}, compacted"));
}

#[test]
fn a_power_cut_at_any_write_of_compaction_loses_nothing_and_resurrects_nothing() {
    let clock = ManualClock::new(1_760_000_000_000);
    let pristine = build(&clock, None);
    assert!(
        !grep(&pristine, CANARY).is_empty(),
        "canary on disk before compaction"
    );
    let (unpurged, purged) = at_every_write(
        &pristine,
        |b| {
            Engram::compact(DIR, &options(b, &clock)).unwrap();
        },
        |b, what| sound_then_purged(b, &clock, what),
    );
    eprintln!("compaction: crash images with the canary on disk {unpurged}, purged {purged}");
    // The cuts must land both before and after the purge, or the test
    // proves little.
    assert!(unpurged > 0 && purged > 0);
}

#[test]
fn a_power_cut_at_any_write_of_restore_never_resurrects_a_later_deletion() {
    let clock = ManualClock::new(1_760_000_000_000);
    // The backup is taken while the canary is live; it is deleted after.
    let pristine = build(&clock, Some("/backup"));
    let (unpurged, purged) = at_every_write(
        &pristine,
        |b| {
            Engram::restore(DIR, "/backup", &options(b, &clock), None).unwrap();
        },
        |b, what| sound_then_purged(b, &clock, what),
    );
    eprintln!("restore: crash images with the canary on disk {unpurged}, purged {purged}");
    assert!(unpurged > 0 && purged > 0);
}

#[test]
fn a_power_cut_at_any_write_of_online_compaction_loses_nothing_and_resurrects_nothing() {
    let clock = ManualClock::new(1_760_000_000_000);
    let pristine = build(&clock, None);
    let (unpurged, purged) = at_every_write(
        &pristine,
        |b| {
            let db = Engram::open(DIR, options(b, &clock)).unwrap();
            let out = db.compact_online(|| ()).unwrap();
            assert_eq!(out.report.purged, 2, "{:?}", out.report);
            assert!(out.reads_paused.is_some());
            out.db.close().unwrap();
            assert!(!b.exists(Path::new("/store/compact.staging")));
        },
        |b, what| sound_then_purged(b, &clock, what),
    );
    eprintln!(
        "online compaction: crash images with the canary on disk {unpurged}, purged {purged}"
    );
    assert!(unpurged > 0 && purged > 0);
}

/// A restore into a new directory cut by a power failure at any write:
/// the new directory is refused by every open, or it opens holding the
/// backup with the ledger's later deletion applied; never an empty store
/// served as if restored. Running the restore again finishes it.
#[test]
fn a_power_cut_at_any_write_of_a_restore_into_a_new_directory_leaves_no_empty_store() {
    const TARGET: &str = "/restored";
    let clock = ManualClock::new(1_760_000_000_000);
    let pristine = build(&clock, Some("/backup"));
    let ledger = Path::new(DIR).join("ledger.jsonl");
    let restore = |b: &MemBackend| {
        Engram::restore(TARGET, "/backup", &options(b, &clock), Some(&ledger)).unwrap();
    };
    let (refused, opened) = (Arc::new(Mutex::new(0)), Arc::new(Mutex::new(0)));
    at_every_write(&pristine, restore, |b, what| {
        check_sound(b, &clock, what);
        for read_only in [true, false] {
            let opts = Options {
                read_only,
                create_if_missing: false,
                ..options(b, &clock)
            };
            match Engram::open(TARGET, opts) {
                Ok(db) => {
                    db.close().unwrap();
                    check_sound_at(b, &clock, TARGET, what);
                    *opened.lock() += 1;
                }
                Err(e) => {
                    let text = e.to_string();
                    assert!(
                        text.contains("did not finish") || text.contains("no store"),
                        "{what}: {text}"
                    );
                    *refused.lock() += 1;
                }
            }
        }
        restore(b);
        check_sound_at(b, &clock, TARGET, &format!("{what}, restored again"));
    });
    let (refused, opened) = (*refused.lock(), *opened.lock());
    eprintln!("restore into a new directory: images refused {refused}, opened {opened}");
    assert!(refused > 0 && opened > 0);
}

/// A backup cut by a power failure at any write, taken after a deletion
/// (the copy holds the deleted content until the backup's own compaction
/// purges it): every image of the backup directory that still holds the
/// deleted content is opened by nothing (no store open, read-only or
/// writable, no restore); a finished one carries none of it and restores.
/// The store itself is untouched.
#[test]
fn a_backup_cut_short_is_opened_by_nothing() {
    let clock = ManualClock::new(1_760_000_000_000);
    let pristine = build(&clock, None);
    let (finished, refused) = (Arc::new(Mutex::new(0)), Arc::new(Mutex::new(0)));
    at_every_write(
        &pristine,
        |b| {
            let db = Engram::open(DIR, options(b, &clock)).unwrap();
            db.backup("/backup").unwrap();
            db.close().unwrap();
        },
        |b, what| {
            check_sound(b, &clock, what);
            let leaked = grep_under(b, "/backup", CANARY);
            let opts = |read_only| Options {
                read_only,
                create_if_missing: false,
                ..options(b, &clock)
            };
            let done = b.exists(Path::new("/backup/backup.json"))
                && !b.exists(Path::new("/backup/backup.partial"));
            if done {
                assert!(
                    leaked.is_empty(),
                    "{what}: a finished backup holds {leaked:?}"
                );
                *finished.lock() += 1;
                return;
            }
            if b.exists(Path::new("/backup/backup.partial")) {
                for read_only in [true, false] {
                    let e = Engram::open("/backup", opts(read_only))
                        .err()
                        .unwrap_or_else(|| panic!("{what}: an unfinished backup opened"));
                    assert!(e.to_string().contains("did not finish"), "{what}: {e}");
                }
                *refused.lock() += 1;
            } else {
                // before its marker: nothing of the store was copied yet
                assert!(leaked.is_empty(), "{what}: {leaked:?} without the marker");
            }
            let target = format!("/restored-{}", *refused.lock());
            let e = Engram::restore(&target, "/backup", &opts(false), None)
                .err()
                .unwrap_or_else(|| panic!("{what}: an unfinished backup restored"));
            assert!(!b.exists(Path::new(&target)), "{what}: {e}");
        },
    );
    let (finished, refused) = (*finished.lock(), *refused.lock());
    eprintln!("backup: finished images {finished}, refused unfinished images {refused}");
    assert!(finished > 0 && refused > 0);
}

/// `repair --truncate-after`, cut by a power failure at any write: the
/// store opens (derived state that the cut would contradict is gone before
/// the log is cut), keeps every note before the cut, and the deletion the
/// cut removed comes back from the ledger.
#[test]
fn a_power_cut_at_any_write_of_a_log_repair_leaves_a_store_that_opens() {
    let clock = ManualClock::new(1_760_000_000_000);
    let pristine = build(&clock, None);
    // the deletion is the log's last frame; keep everything before it
    let seen = Engram::inspect_log(DIR, &options(&pristine, &clock)).unwrap();
    let keep = seen.intact_through - 1;
    assert!(seen.recent_batch_ends.contains(&keep), "{seen:?}");
    at_every_write(
        &pristine,
        |b| {
            let r = Engram::repair_log(DIR, &options(b, &clock), keep).unwrap();
            assert_eq!(r.kept_through, keep);
        },
        |b, what| check_sound(b, &clock, what),
    );
}

/// Inspecting the log of a store in use is refused (its active segment is
/// being written, which would read as damage); once closed it is read.
#[test]
fn inspecting_the_log_of_a_store_in_use_is_refused() {
    let clock = ManualClock::new(1_760_000_000_000);
    let b = build(&clock, None);
    let db = Engram::open(DIR, options(&b, &clock)).unwrap();
    let e = Engram::inspect_log(DIR, &options(&b, &clock)).unwrap_err();
    assert!(
        matches!(
            e,
            EngineError::Storage(engram::storage::StorageError::Locked { .. })
        ),
        "{e}"
    );
    db.close().unwrap();
    let seen = Engram::inspect_log(DIR, &options(&b, &clock)).unwrap();
    assert!(seen.problem.is_none(), "{seen:?}");
}

/// A deletion acknowledged just before a crash, whose frame (the log's
/// last) is then damaged: recovery cuts it as a tail nothing proved
/// acknowledged, but the ledger line written after it was durable proves
/// it, so the open applies it again and the record stays deleted.
#[test]
fn a_cut_tail_holding_an_acknowledged_deletion_is_applied_again_from_the_ledger() {
    let clock = ManualClock::new(1_760_000_000_000);
    let b = MemBackend::new();
    let db = Engram::open(DIR, options(&b, &clock)).unwrap();
    let s = db.session(Principal::admin("t"));
    let id = s
        .append(vec![
            NewRecord::event("note", format!("the secret is {CANARY}")).with_external_id("secret"),
        ])
        .unwrap()[0]
        .id;
    s.delete(&RecordRef::Id(id), None).unwrap();
    // a power cut now: no checkpoint proves the deletion durable
    let image = b.crash_image(7);
    drop(s);
    drop(db);
    // damage the deletion's frame: the last place the record's id appears
    let seg = Path::new("/store/log/00000000000000000001.seg");
    let bytes = image.read_file(seg).unwrap();
    let needle = id.to_bytes();
    let at = bytes
        .windows(16)
        .rposition(|w| w == needle)
        .expect("the deletion names the record");
    assert!(image.flip_bit(seg, at + 3, 0));
    // a read-only open cannot apply it again: it refuses rather than show
    // the deleted record
    let ro = Options {
        read_only: true,
        ..options(&image, &clock)
    };
    match Engram::open(DIR, ro) {
        Err(EngineError::ReadOnly { action: detail }) => {
            assert!(detail.contains("ledger proves"), "{detail}");
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("a read-only open served the state without the deletion"),
    }
    let (db, report) = Engram::open_with_report(DIR, options(&image, &clock)).unwrap();
    assert!(report.log.truncation.is_some(), "{report:?}");
    let again = report.ledger_reapplied.clone().expect("re-applied");
    assert_eq!(again.deletions_reapplied, 1, "{again:?}");
    let s = db.session(Principal::admin("t"));
    assert!(
        matches!(
            s.get(&RecordRef::External("secret".into())),
            Err(EngineError::NotFound { .. })
        ),
        "the acknowledged deletion was undone"
    );
    drop(s);
    db.close().unwrap();
    // and the next open finds nothing more to do
    let (db, report) = Engram::open_with_report(DIR, options(&image, &clock)).unwrap();
    assert!(report.ledger_reapplied.is_none(), "{report:?}");
    db.close().unwrap();
}

/// The same deletion frame zeroed, or the segment cut at its first byte:
/// the log then reads as one that ended before it (nothing for recovery
/// to cut), and the ledger still proves the deletion, so every open
/// applies it again (only a cut tail used to be checked against the
/// ledger, and the deleted record came back).
#[test]
fn a_deletion_frame_zeroed_or_cut_at_its_edge_is_applied_again_from_the_ledger() {
    for zeroed in [true, false] {
        let clock = ManualClock::new(1_760_000_000_000);
        let b = MemBackend::new();
        let db = Engram::open(DIR, options(&b, &clock)).unwrap();
        let s = db.session(Principal::admin("t"));
        let id = s
            .append(vec![
                NewRecord::event("note", format!("the secret is {CANARY}"))
                    .with_external_id("secret"),
            ])
            .unwrap()[0]
            .id;
        s.delete(&RecordRef::Id(id), None).unwrap();
        let image = b.crash_image(7);
        drop(s);
        drop(db);
        let seg = Path::new("/store/log/00000000000000000001.seg");
        let mut bytes = image.read_file(seg).unwrap();
        let at = bytes
            .windows(16)
            .rposition(|w| w == id.to_bytes())
            .expect("the deletion names the record");
        let start = bytes[..at]
            .windows(4)
            .rposition(|w| w == b"EGRM")
            .expect("the deletion's frame header");
        if zeroed {
            bytes[start..].fill(0);
        } else {
            bytes.truncate(start);
        }
        image.write_file(seg, &bytes);
        let ro = Options {
            read_only: true,
            ..options(&image, &clock)
        };
        match Engram::open(DIR, ro) {
            Err(EngineError::ReadOnly { action: detail }) => {
                assert!(detail.contains("ledger proves"), "{detail}");
            }
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("a read-only open served the state without the deletion"),
        }
        let (db, report) = Engram::open_with_report(DIR, options(&image, &clock)).unwrap();
        let again = report.ledger_reapplied.clone().expect("re-applied");
        assert_eq!(again.deletions_reapplied, 1, "zeroed {zeroed}: {again:?}");
        let s = db.session(Principal::admin("t"));
        assert!(
            matches!(
                s.get(&RecordRef::External("secret".into())),
                Err(EngineError::NotFound { .. })
            ),
            "zeroed {zeroed}: the acknowledged deletion was undone"
        );
        drop(s);
        db.close().unwrap();
        let (db, report) = Engram::open_with_report(DIR, options(&image, &clock)).unwrap();
        assert!(report.ledger_reapplied.is_none(), "{report:?}");
        db.close().unwrap();
    }
}
