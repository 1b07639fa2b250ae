//! A damaged or incomplete log is refused, never silently cut: only a torn
//! tail that nothing proves acknowledged may be cut, and `verify` changes
//! nothing. `engram repair` cuts at an LSN the operator names and keeps
//! the cut bytes in quarantine.

use std::path::Path;

use engram::storage::LogOptions;
use engram::{EngineError, Engram, NewRecord, Options, Principal};
use engram_storage::StorageError;

use super::cli::{self, fails, ok, snapshot};

fn flip(path: &Path, from_end: usize) {
    let mut b = std::fs::read(path).unwrap();
    let at = b.len() - from_end;
    b[at] ^= 0x5A;
    std::fs::write(path, b).unwrap();
}

#[test]
fn damage_inside_an_acknowledged_batch_is_refused_and_nothing_is_cut() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let file = cli::events_file(tmp.path(), "ev.jsonl", "t", 3000);
    ok(
        &store,
        &[
            "ingest",
            file.to_str().unwrap(),
            "--batch-size",
            "1000",
            "--json",
        ],
    );
    let seg = cli::segments(&store).pop().unwrap();
    flip(&seg, 300);
    let before = snapshot(&store);

    let v = cli::at(&store, &["verify", "--json"]);
    assert!(!v.status.success());
    let report = cli::json(&v);
    let problem = report["problems"][0].as_str().unwrap().to_string();
    assert!(
        problem.contains("segment 1")
            && problem.contains("LSNs")
            && problem.contains("nothing was cut"),
        "{problem}"
    );
    // where the damage is, and the batch it is in (nothing was dropped:
    // the refusal does not say it was)
    let seg_len = std::fs::metadata(&seg).unwrap().len();
    let damaged_frame_at = |p: &str| {
        let at: u64 = p
            .split(" at offset ")
            .nth(1)
            .unwrap()
            .split(',')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        at
    };
    let at = damaged_frame_at(&problem);
    // (the flipped byte, 300 from the end, is inside the named frame)
    let flipped = seg_len - 300;
    assert!(at <= flipped && flipped - at < 4096, "{problem}");
    assert!(
        problem.contains("inside a batch that began after LSN 2000"),
        "{problem}"
    );
    assert!(!problem.contains("dropped"), "{problem}");
    let text = String::from_utf8(ok(&store, &["repair"]).stdout).unwrap();
    assert!(
        text.contains("past the cut") && !text.contains("past the damage"),
        "{text}"
    );
    cli::assert_same(&before, &snapshot(&store), "verify changed the store");
    let msg = fails(&store, &["get", "e/5", "--tenant", "t"]);
    assert!(msg.contains("engram repair"), "{msg}");
    cli::assert_same(
        &before,
        &snapshot(&store),
        "a refused open changed the store",
    );

    // The operator's way out: see the loss, then cut at an intact batch end.
    let plan = cli::json(&ok(&store, &["repair", "--json"]));
    let intact = plan["intact_through"].as_u64().unwrap();
    assert_eq!(intact, 2000, "{plan}");
    assert_eq!(plan["durable_lsn"].as_u64().unwrap(), 3000, "{plan}");
    cli::assert_same(&before, &snapshot(&store), "inspecting changed the store");
    let r = cli::json(&ok(
        &store,
        &["repair", "--truncate-after", "2000", "--json"],
    ));
    let q = Path::new(r["quarantine"].as_str().unwrap());
    let kept: usize = std::fs::read_dir(q)
        .unwrap()
        .map(|e| std::fs::metadata(e.unwrap().path()).unwrap().len() as usize)
        .sum();
    assert!(kept > 900 * 400, "the cut bytes were not kept: {kept}");
    ok(&store, &["verify"]);
    let stats = cli::json(&ok(&store, &["stats", "--json"]));
    assert_eq!(stats["records"], 2000);
}

#[test]
fn a_cut_at_a_batch_that_is_not_intact_is_refused() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let file = cli::events_file(tmp.path(), "ev.jsonl", "t", 30);
    ok(
        &store,
        &["ingest", file.to_str().unwrap(), "--batch-size", "10"],
    );
    let msg = fails(&store, &["repair", "--truncate-after", "15"]);
    assert!(
        msg.contains("not the end of an intact atomic batch"),
        "{msg}"
    );
    ok(&store, &["verify"]);
}

/// A cut at a healthy log's end cuts nothing, and says so (it said "cut
/// the log after LSN 30; 0 byte(s) moved").
#[test]
fn a_cut_at_the_logs_end_says_nothing_was_cut() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let file = cli::events_file(tmp.path(), "ev.jsonl", "t", 30);
    ok(
        &store,
        &["ingest", file.to_str().unwrap(), "--batch-size", "10"],
    );
    let text = String::from_utf8(ok(&store, &["repair", "--truncate-after", "30"]).stdout).unwrap();
    assert!(
        text.contains("the log already ends at LSN 30: nothing cut"),
        "{text}"
    );
    let stats = cli::json(&ok(&store, &["stats", "--json"]));
    assert_eq!(stats["records"], 30);
}

fn small_segments() -> Options {
    Options {
        log: LogOptions {
            segment_bytes_max: 64 << 10,
            ..LogOptions::default()
        },
        ..Options::default()
    }
}

/// A store of 300 records in batches of 10, over several segments.
fn multi_segment_store(dir: &Path) -> usize {
    let db = Engram::open(dir, small_segments()).unwrap();
    let s = db.session(Principal::admin("t"));
    for b in 0..30 {
        let batch = (0..10)
            .map(|i| NewRecord::event("note", format!("batch {b} record {i} {}", "x".repeat(400))))
            .collect();
        s.append(batch).unwrap();
    }
    db.close().unwrap();
    let n = cli::segments(dir).len();
    assert!(n >= 3, "{n} segments");
    n
}

fn open_err(dir: &Path) -> EngineError {
    Engram::open(dir, small_segments()).unwrap_err()
}

#[test]
fn a_missing_first_segment_is_refused_by_open_verify_and_rebuild() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    multi_segment_store(&store);
    std::fs::remove_file(&cli::segments(&store)[0]).unwrap();
    let e = open_err(&store);
    assert!(
        matches!(
            e,
            EngineError::Storage(StorageError::LogGap { first_lsn: 1, .. })
        ),
        "{e}"
    );
    let before = snapshot(&store);
    let v = fails(&store, &["verify"]);
    assert!(v.contains("missing LSNs 1..="), "{v}");
    let r = fails(&store, &["rebuild"]);
    assert!(r.contains("missing LSNs 1..="), "{r}");
    cli::assert_same(
        &before,
        &snapshot(&store),
        "a refused rebuild changed the store",
    );
    // Without derived state (the snapshots that remember the log's length)
    // the first segment is still known to be missing.
    std::fs::remove_dir_all(store.join("derived")).unwrap();
    let e = open_err(&store);
    assert!(
        matches!(e, EngineError::Storage(StorageError::LogGap { .. })),
        "{e}"
    );
    fails(&store, &["stats"]);
}

#[test]
fn a_missing_middle_segment_is_refused() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    multi_segment_store(&store);
    std::fs::remove_file(&cli::segments(&store)[1]).unwrap();
    let e = open_err(&store);
    assert!(e.to_string().contains("segment file 2 is missing"), "{e}");
}

#[test]
fn a_removed_log_and_derived_state_are_refused_when_the_ledger_proves_writes() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    multi_segment_store(&store);
    let db = Engram::open(&store, small_segments()).unwrap();
    let s = db.session(Principal::admin("t"));
    let id = s
        .append(vec![NewRecord::event("note", "to delete")])
        .unwrap()[0]
        .id;
    s.delete(&engram::RecordRef::Id(id), None).unwrap();
    db.close().unwrap();
    std::fs::remove_dir_all(store.join("log")).unwrap();
    std::fs::remove_dir_all(store.join("derived")).unwrap();
    let before = snapshot(&store);
    let e = open_err(&store);
    assert!(
        matches!(e, EngineError::Storage(StorageError::LogGap { .. })),
        "{e}"
    );
    assert!(e.to_string().contains("ledger.jsonl records 1"), "{e}");
    let v = fails(&store, &["verify"]);
    assert!(v.contains("no whole segment file"), "{v}");
    assert!(v.contains("the store did not open"), "{v}");
    fails(&store, &["stats"]);
    for cmd in [
        &["rebuild"][..],
        &["compact"],
        &["repair", "--truncate-after", "3"],
    ] {
        let e = fails(&store, cmd);
        assert!(!e.contains("no store at"), "{cmd:?}: {e}");
    }
    cli::assert_same(
        &before,
        &snapshot(&store),
        "a refused command changed the store",
    );
    // repair names the loss, and a cut at 0 accepts it: an empty log, the
    // ledger applied again
    let plan = String::from_utf8(ok(&store, &["repair"]).stdout).unwrap();
    assert!(
        plan.contains("no whole segment file") && plan.contains("--truncate-after 0"),
        "{plan}"
    );
    cli::assert_same(&before, &snapshot(&store), "inspecting changed the store");
    ok(&store, &["repair", "--truncate-after", "0"]);
    // the cut is accepted: inspecting again (before any open applies the
    // ledger) reports no loss, as every open then opens it
    let again = String::from_utf8(ok(&store, &["repair"]).stdout).unwrap();
    assert!(!again.contains("no whole segment file"), "{again}");
    ok(&store, &["verify"]);
    let stats = cli::json(&ok(&store, &["stats", "--json"]));
    assert_eq!(stats["records"], 0, "{stats}");
}

#[test]
fn an_empty_log_directory_is_refused_as_a_removed_one() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let db = Engram::open(&store, small_segments()).unwrap();
    let s = db.session(Principal::admin("t"));
    let id = s
        .append(vec![NewRecord::event("note", "to delete")])
        .unwrap()[0]
        .id;
    s.delete(&engram::RecordRef::Id(id), None).unwrap();
    db.close().unwrap();
    std::fs::remove_dir_all(store.join("log")).unwrap();
    std::fs::create_dir(store.join("log")).unwrap();
    assert!(
        open_err(&store)
            .to_string()
            .contains("no whole segment file")
    );
}

#[test]
fn a_missing_last_segment_is_refused_when_derived_state_proves_it() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    multi_segment_store(&store);
    std::fs::remove_file(cli::segments(&store).last().unwrap()).unwrap();
    let e = open_err(&store);
    assert!(
        matches!(
            e,
            EngineError::Storage(StorageError::LogGap { last_lsn: 300, .. })
        ),
        "{e}"
    );
}

/// A last segment cut below its header's 64 bytes reads as one whose
/// creation was cut short; derived state proves its frames acknowledged,
/// so the open is refused, and the refusal changes nothing: the file
/// stays (it was removed before the refusal said "nothing was changed").
#[test]
fn a_last_segment_cut_into_its_header_is_refused_and_kept() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    multi_segment_store(&store);
    let last = cli::segments(&store).last().unwrap().clone();
    let bytes = std::fs::read(&last).unwrap();
    std::fs::write(&last, &bytes[..48]).unwrap();
    let before = snapshot(&store);
    let e = open_err(&store);
    assert!(
        matches!(
            e,
            EngineError::Storage(StorageError::LogGap { last_lsn: 300, .. })
        ),
        "{e}"
    );
    let msg = fails(&store, &["stats"]);
    assert!(msg.contains("nothing was changed"), "{msg}");
    cli::assert_same(
        &before,
        &snapshot(&store),
        "a refused open changed the store",
    );
}

#[test]
fn a_sealed_segment_cut_at_a_batch_boundary_is_a_gap() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    multi_segment_store(&store);
    let first = cli::segments(&store)[0].clone();
    // Cut the first segment after its first batch (10 frames): the file
    // still parses, but LSNs 11.. up to the second segment are gone.
    let bytes = std::fs::read(&first).unwrap();
    let mut pos = 64;
    for _ in 0..10 {
        let len = u32::from_le_bytes(bytes[pos + 4..pos + 8].try_into().unwrap()) as usize;
        pos += (32 + len).div_ceil(16) * 16;
    }
    std::fs::write(&first, &bytes[..pos]).unwrap();
    let e = open_err(&store);
    assert!(
        matches!(
            e,
            EngineError::Storage(StorageError::LogGap { first_lsn: 11, .. })
        ),
        "{e}"
    );
}

#[test]
fn verify_changes_nothing_and_reports_a_torn_tail_that_a_writer_then_cuts() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let file = cli::events_file(tmp.path(), "ev.jsonl", "t", 20);
    ok(&store, &["ingest", file.to_str().unwrap()]);
    let seg = cli::segments(&store).pop().unwrap();
    let mut b = std::fs::read(&seg).unwrap();
    b.extend_from_slice(&[0xAB; 100]); // a write torn after its first bytes
    std::fs::write(&seg, &b).unwrap();
    let before = snapshot(&store);
    let v = cli::json(&ok(&store, &["verify", "--json"]));
    assert_eq!(v["ok"], true, "{v}");
    assert!(v["notes"][0].as_str().unwrap().contains("torn"), "{v}");
    cli::assert_same(&before, &snapshot(&store), "verify changed the store");
    ok(&store, &["stats"]);
    assert_eq!(std::fs::read(&seg).unwrap().len(), b.len() - 100);
    let v = cli::json(&ok(&store, &["verify", "--json"]));
    assert!(v["notes"].as_array().unwrap().is_empty(), "{v}");
}

#[test]
fn damage_inside_a_batch_of_a_sealed_segment_names_the_last_intact_frame_and_batch() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    multi_segment_store(&store);
    // The text of LSN 14: the fourth record of the second batch (LSNs 11..=20).
    let first = cli::segments(&store)[0].clone();
    let mut b = std::fs::read(&first).unwrap();
    let needle = b"batch 1 record 3 ";
    let at = b
        .windows(needle.len())
        .position(|w| w == needle)
        .expect("the record's text is in the first segment");
    b[at] ^= 0x5A;
    std::fs::write(&first, b).unwrap();
    let e = open_err(&store).to_string();
    assert!(
        e.contains("segment 1")
            && e.contains("after LSN 13, inside a batch that began after LSN 10")
            && e.contains("not a torn tail"),
        "{e}"
    );
}

#[test]
fn a_repair_refused_because_the_store_is_in_use_changes_nothing() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    multi_segment_store(&store);
    let db = Engram::open(&store, small_segments()).unwrap();
    let e = Engram::repair_log(&store, &small_segments(), 100).unwrap_err();
    assert!(
        matches!(e, EngineError::Storage(StorageError::Locked { .. })),
        "{e}"
    );
    assert!(!store.join("quarantine").exists(), "a refused repair wrote");
    db.close().unwrap();
}

/// A store of 30 records in batches of 10 (LSNs 1..=30), record e/3
/// deleted (LSN 31) and compacted: one rewritten segment. Returns the
/// store and its segment files.
fn compacted_store(dir: &Path) -> (std::path::PathBuf, Vec<std::path::PathBuf>) {
    let store = dir.join("store");
    let file = cli::events_file(dir, "ev.jsonl", "t", 30);
    ok(
        &store,
        &["ingest", file.to_str().unwrap(), "--batch-size", "10"],
    );
    ok(&store, &["delete", "e/3", "--tenant", "t"]);
    ok(&store, &["compact"]);
    let segs = cli::segments(&store);
    (store, segs)
}

/// Damage to the last frame of a compacted segment that is still the last
/// one (its header records its end): not a torn write, since the segment
/// was written whole and synced before use. Every open refuses and
/// nothing is cut; it used to be cut as a torn tail by the next command.
#[test]
fn damage_at_the_end_of_a_compacted_last_segment_is_not_cut_as_torn() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let (store, segs) = compacted_store(tmp.path());
    assert_eq!(segs.len(), 1, "{segs:?}");
    // a byte of the deletion's frame, the segment's last
    let mut bytes = std::fs::read(&segs[0]).unwrap();
    let end = bytes.iter().rposition(|&b| b != 0).unwrap();
    bytes[end - 8] ^= 0xff;
    std::fs::write(&segs[0], &bytes).unwrap();
    let before = snapshot(&store);
    let v = cli::at(&store, &["verify"]);
    assert!(!v.status.success(), "{}", cli::text(&v));
    for cmd in [vec!["stats"], vec!["log", "--tenant", "t"]] {
        let msg = fails(&store, &cmd);
        assert!(msg.contains("not a torn tail"), "{cmd:?}: {msg}");
    }
    cli::assert_same(
        &before,
        &snapshot(&store),
        "a refused open changed the store",
    );
    assert_eq!(std::fs::read(&segs[0]).unwrap(), bytes);
}

/// A compacted last segment cut, or zeroed, at a frame's edge: its header
/// records an end past the frames left, which is no frame; the derived
/// state's LSN proves the lost ones acknowledged. Refused, nothing cut
/// (it opened, and the next command dropped the acknowledged writes).
#[test]
fn a_compacted_last_segment_cut_at_a_frame_edge_is_refused() {
    let _serial = crate::cli::serial();
    for zeroed in [false, true] {
        let tmp = tempfile::tempdir().unwrap();
        let (store, segs) = compacted_store(tmp.path());
        let bytes = std::fs::read(&segs[0]).unwrap();
        // the frame of the deletion (LSN 31), the segment's last
        let at = frame_at(&bytes, 31);
        let mut damaged = bytes[..at].to_vec();
        if zeroed {
            damaged.resize(bytes.len(), 0);
        }
        std::fs::write(&segs[0], &damaged).unwrap();
        let before = snapshot(&store);
        let v = cli::at(&store, &["verify"]);
        assert!(!v.status.success(), "zeroed {zeroed}: {}", cli::text(&v));
        let msg = fails(&store, &["stats"]);
        assert!(msg.contains("LSN 31"), "zeroed {zeroed}: {msg}");
        // rebuild would discard the evidence: refused too
        let msg = fails(&store, &["rebuild"]);
        assert!(msg.contains("LSN 31"), "zeroed {zeroed}: {msg}");
        cli::assert_same(
            &before,
            &snapshot(&store),
            "a refused open changed the store",
        );
        // repair names the loss and the cut that accepts it
        let out = cli::text(&ok(&store, &["repair"]));
        assert!(
            out.contains("LSNs 31..=31") && out.contains("--truncate-after 30"),
            "zeroed {zeroed}: {out}"
        );
        ok(&store, &["repair", "--truncate-after", "30"]);
        ok(&store, &["verify"]);
    }
}

/// Damage in a compacted (sealed, header-recorded end) segment: `repair`
/// reports the last intact batch end before the damage, not the end the
/// segment's header records, and refuses a cut at that recorded end (which
/// would have kept nothing while claiming to keep everything).
#[test]
fn damage_in_a_compacted_segment_is_reported_at_the_last_intact_batch() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let (store, segs) = compacted_store(tmp.path());
    assert_eq!(segs.len(), 1, "{segs:?}");
    // a byte inside the second batch's frames (records e/10..=e/19, LSNs
    // 11..=20)
    let bytes = std::fs::read(&segs[0]).unwrap();
    let text = "event 15 lorem";
    let at = bytes
        .windows(text.len())
        .position(|w| w == text.as_bytes())
        .expect("record 15's text is in the segment");
    let mut damaged = bytes;
    damaged[at + 2] ^= 0x20;
    std::fs::write(&segs[0], damaged).unwrap();

    let plan = cli::json(&ok(&store, &["repair", "--json"]));
    assert_eq!(plan["intact_through"].as_u64().unwrap(), 10, "{plan}");
    let msg = fails(&store, &["repair", "--truncate-after", "31"]);
    assert!(
        msg.contains("not the end of an intact atomic batch"),
        "{msg}"
    );
    ok(&store, &["repair", "--truncate-after", "10"]);
    let stats = cli::json(&ok(&store, &["stats", "--json"]));
    assert_eq!(stats["records"], 10, "{stats}");
    ok(&store, &["verify"]);
}

/// A log cut at a frame's edge has no damaged frame, but fewer frames than
/// were acknowledged: `repair` names the missing LSNs and the ways out (it
/// said "nothing to repair" of a store that would not open).
#[test]
fn repair_names_acknowledged_lsns_a_log_cut_at_a_frame_edge_lacks() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let file = cli::events_file(tmp.path(), "ev.jsonl", "t", 30);
    ok(
        &store,
        &["ingest", file.to_str().unwrap(), "--batch-size", "10"],
    );
    let seg = cli::segments(&store).pop().unwrap();
    let bytes = std::fs::read(&seg).unwrap();
    // the header of the frame of LSN 21 (magic, length, then the LSN)
    let at = (64..bytes.len())
        .step_by(16)
        .find(|&o| {
            bytes[o..].starts_with(b"EGRM")
                && u64::from_le_bytes(bytes[o + 8..o + 16].try_into().unwrap()) == 21
        })
        .expect("the frame of LSN 21");
    std::fs::write(&seg, &bytes[..at]).unwrap();
    let out = cli::text(&cli::at(&store, &["repair"]));
    assert!(out.contains("LSNs 21..=30 are missing"), "{out}");
    assert!(out.contains("repair --truncate-after 20"), "{out}");
    assert!(!out.contains("nothing to repair"), "{out}");
    // rebuild (and rebuild --checkpoint) would discard the evidence of the
    // loss and report success: refused, nothing changed
    let before = snapshot(&store);
    for args in [&["rebuild"][..], &["rebuild", "--checkpoint"][..]] {
        let msg = fails(&store, args);
        assert!(msg.contains("LSN 30 was acknowledged"), "{args:?}: {msg}");
        cli::assert_same(
            &before,
            &snapshot(&store),
            "a refused rebuild changed the store",
        );
    }
}

/// The offset of the frame of `lsn` in a segment's bytes.
fn frame_at(bytes: &[u8], lsn: u64) -> usize {
    (64..bytes.len())
        .step_by(16)
        .find(|&o| {
            bytes[o..].starts_with(b"EGRM")
                && u64::from_le_bytes(bytes[o + 8..o + 16].try_into().unwrap()) == lsn
        })
        .unwrap_or_else(|| panic!("no frame of LSN {lsn}"))
}

/// A compacted last segment, with `derived/` removed (so no snapshot
/// proves how far the log went), cut inside a batch, cut at a batch's
/// edge, or zeroed from one: its header records the length the
/// compaction wrote whole, so none of it is a torn write. Every open
/// refuses and nothing is cut; `repair` names the damage and a cut
/// accepts it, deleted content staying gone. (Cut inside a batch, it was
/// cut back as an unfinished batch by the next `get`, and `verify` said
/// OK; cut at a batch's edge, it opened short with no word.)
#[test]
fn a_compacted_segment_cut_with_derived_state_removed_is_refused() {
    let _serial = crate::cli::serial();
    for (case, lsn, zeroed, keep) in [
        ("inside a batch", 12, false, 10),
        ("at a batch's edge", 21, false, 20),
        ("zeroed from a batch's edge", 21, true, 20),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let (store, segs) = compacted_store(tmp.path());
        assert_eq!(segs.len(), 1, "{segs:?}");
        let bytes = std::fs::read(&segs[0]).unwrap();
        let at = frame_at(&bytes, lsn);
        let mut damaged = bytes[..at].to_vec();
        if zeroed {
            damaged.resize(bytes.len(), 0);
        }
        std::fs::write(&segs[0], &damaged).unwrap();
        std::fs::remove_dir_all(store.join("derived")).unwrap();
        let before = snapshot(&store);
        let v = cli::at(&store, &["verify"]);
        assert!(!v.status.success(), "{case}: {}", cli::text(&v));
        for cmd in [vec!["stats"], vec!["get", "e/0", "--tenant", "t"]] {
            let msg = fails(&store, &cmd);
            assert!(
                msg.contains("not a torn tail") && msg.contains("wrote it whole"),
                "{case}: {cmd:?}: {msg}"
            );
        }
        cli::assert_same(
            &before,
            &snapshot(&store),
            "a refused open changed the store",
        );
        assert_eq!(std::fs::read(&segs[0]).unwrap(), damaged, "{case}");
        let plan = cli::json(&ok(&store, &["repair", "--json"]));
        assert_eq!(
            plan["intact_through"].as_u64(),
            Some(keep),
            "{case}: {plan}"
        );
        assert!(
            plan["problem"].as_str().unwrap().contains("wrote it whole"),
            "{case}: {plan}"
        );
        ok(&store, &["repair", "--truncate-after", &keep.to_string()]);
        ok(&store, &["verify"]);
        ok(&store, &["get", "e/0", "--tenant", "t"]);
        fails(&store, &["get", "e/3", "--tenant", "t"]);
        // the cut keeps the header true: the next open finds nothing wrong
        let again = cli::json(&ok(&store, &["repair", "--json"]));
        assert!(again["problem"].is_null(), "{case}: {again}");
    }
}

/// A compacted segment that is not the last one, cut at a batch's edge,
/// with `derived/` removed: the next segment starts right after the LSNs
/// its header covers, so continuity alone does not see the loss; the
/// length the header records does. (It opened with that batch gone.)
#[test]
fn a_compacted_sealed_segment_cut_at_a_batch_edge_is_refused() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let db = Engram::open(&store, small_segments()).unwrap();
    let s = db.session(Principal::admin("t"));
    let mut first = None;
    for b in 0..30 {
        let batch = (0..10)
            .map(|i| NewRecord::event("note", format!("batch {b} record {i} {}", "x".repeat(400))))
            .collect();
        let ids = s.append(batch).unwrap();
        first.get_or_insert(ids[0].id);
    }
    s.delete(&engram::RecordRef::Id(first.unwrap()), None)
        .unwrap();
    db.close().unwrap();
    assert!(cli::segments(&store).len() >= 3);
    Engram::compact(&store, &small_segments()).unwrap();
    let seg = cli::segments(&store)[0].clone();
    let bytes = std::fs::read(&seg).unwrap();
    let last = (64..bytes.len())
        .step_by(16)
        .filter(|&o| bytes[o..].starts_with(b"EGRM"))
        .map(|o| u64::from_le_bytes(bytes[o + 8..o + 16].try_into().unwrap()))
        .max()
        .unwrap();
    assert_eq!(last % 10, 0, "segment 1 ends at LSN {last}");
    // drop its last batch
    std::fs::write(&seg, &bytes[..frame_at(&bytes, last - 9)]).unwrap();
    std::fs::remove_dir_all(store.join("derived")).unwrap();
    let before = snapshot(&store);
    let e = open_err(&store);
    assert!(
        matches!(
            e,
            EngineError::Storage(StorageError::CorruptLog { segment: 1, .. })
        ),
        "{e}"
    );
    assert!(e.to_string().contains("wrote it whole"), "{e}");
    cli::assert_same(
        &before,
        &snapshot(&store),
        "a refused open changed the store",
    );
}

/// A ledger file that lacks operations of the log (a line never written,
/// a file cut short) is named by `verify`, which changes nothing, and the
/// next writable open writes them back. (`verify` said nothing.)
#[test]
fn verify_names_a_ledger_that_lacks_operations_of_the_log() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let (store, _) = compacted_store(tmp.path());
    let ledger = store.join("ledger.jsonl");
    let full = std::fs::read(&ledger).unwrap();
    assert!(!full.is_empty());
    std::fs::write(&ledger, b"").unwrap();
    let v = cli::json(&ok(&store, &["verify", "--json"]));
    assert_eq!(v["ok"], true, "{v}");
    assert!(
        v["notes"]
            .to_string()
            .contains("ledger.jsonl lacks 1 operation"),
        "{v}"
    );
    assert!(std::fs::read(&ledger).unwrap().is_empty(), "verify wrote");
    ok(&store, &["stats"]);
    assert_eq!(std::fs::read(&ledger).unwrap(), full);
    let v = cli::json(&ok(&store, &["verify", "--json"]));
    assert_eq!(v["notes"], serde_json::json!([]), "{v}");
}

/// The only segment cut to less than its header, with `derived/` removed:
/// recovery would remove it as a start cut short and open an empty store,
/// but the ledger proves operations, so every open refuses it as it
/// refuses a removed log, and `verify` says so. (It opened empty.)
#[test]
fn a_sole_segment_cut_into_its_header_is_refused_when_the_ledger_proves_writes() {
    let _serial = crate::cli::serial();
    // (64 zero bytes: a header recovery also takes for a start cut short)
    for (len, zeroed) in [(0usize, false), (30, false), (63, false), (64, true)] {
        let tmp = tempfile::tempdir().unwrap();
        let (store, segs) = compacted_store(tmp.path());
        let bytes = std::fs::read(&segs[0]).unwrap();
        let cut = if zeroed {
            vec![0; len]
        } else {
            bytes[..len].to_vec()
        };
        std::fs::write(&segs[0], &cut).unwrap();
        std::fs::remove_dir_all(store.join("derived")).unwrap();
        let before = snapshot(&store);
        let v = cli::at(&store, &["verify"]);
        assert!(!v.status.success(), "{len}: {}", cli::text(&v));
        let msg = fails(&store, &["get", "e/0", "--tenant", "t"]);
        assert!(msg.contains("no whole segment file"), "{len}: {msg}");
        cli::assert_same(
            &before,
            &snapshot(&store),
            "a refused open changed the store",
        );
        let plan = cli::text(&ok(&store, &["repair"]));
        assert!(plan.contains("--truncate-after 0"), "{len}: {plan}");
    }
}

/// `rebuild` and `compact` say when their open cut an unacknowledged torn
/// tail, as every other command does (they cut it without a word).
#[test]
fn rebuild_and_compact_say_when_they_cut_a_torn_tail() {
    let _serial = crate::cli::serial();
    for cmd in [&["rebuild"][..], &["rebuild", "--verify"], &["compact"]] {
        let tmp = tempfile::tempdir().unwrap();
        let store = tmp.path().join("store");
        let file = cli::events_file(tmp.path(), "ev.jsonl", "t", 5);
        ok(&store, &["ingest", file.to_str().unwrap()]);
        let seg = cli::segments(&store).pop().unwrap();
        let mut f = std::fs::OpenOptions::new().append(true).open(&seg).unwrap();
        std::io::Write::write_all(&mut f, b"GARBAGE!!").unwrap();
        drop(f);
        let o = ok(&store, cmd);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("recovery: cut"), "{cmd:?}: {err}");
        assert!(!err.contains("InvalidTail {"), "{cmd:?}: {err}");
        ok(&store, &["verify"]);
    }
}

/// A frame whose payload this build cannot read (checksums intact: written
/// by another build, or damaged and sealed again), behind a checkpoint
/// that covers it, is reported by `verify`: it passed, while the store
/// then failed to open once its derived state was gone, and a record whose
/// `data` does not parse failed every listing with no id named.
#[test]
fn verify_reads_every_frames_payload_as_a_replay_would() {
    use engram_storage::frame::{FrameType, decode_header, encode_into};
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let db = Engram::open(&dir, Options::default()).unwrap();
    db.session(Principal::admin("t"))
        .append(vec![
            NewRecord::event("note", "a"),
            NewRecord::event("note", "b"),
            NewRecord {
                data: Some(serde_json::json!({"k": "zqzq"})),
                ..NewRecord::event("note", "c").with_external_id("c")
            },
        ])
        .unwrap();
    // (the checkpoint is anchored on the last frame's payload: it stays
    // untouched)
    db.session(Principal::admin("t"))
        .append(vec![NewRecord::event("note", "d")])
        .unwrap();
    db.close().unwrap();
    let seg = cli::segments(&dir).pop().unwrap();
    let mut b = std::fs::read(&seg).unwrap();
    // a control character inside the third record's stored `data`, the
    // frame sealed again: its JSON no longer parses
    let at = b
        .windows(4)
        .position(|w| w == b"zqzq")
        .expect("the data's bytes");
    b[at] = 0x01;
    // The header of the frame holding segment byte `at` (the first record
    // frame: `None`), and where it starts.
    let find = |b: &[u8], at: Option<usize>| {
        let mut off = 64;
        loop {
            let h = decode_header(&b[off..]).unwrap();
            let end = off + h.encoded_len();
            match at {
                Some(at) if (off..end).contains(&at) => return (off, h),
                None if h.frame_type == FrameType(1) => return (off, h),
                _ => off = end,
            }
        }
    };
    // Seals the frame at `off` again, its payload as it is now, with
    // payload version `v`.
    let reseal = |b: &mut [u8], (off, h): (usize, engram_storage::frame::FrameHeader), v: u8| {
        let payload = b[off + 32..off + 32 + h.payload_len as usize].to_vec();
        let end = off + h.encoded_len();
        encode_into(
            &mut b[off..end],
            h.lsn,
            h.frame_type,
            v,
            h.flags,
            h.durable_before,
            &payload,
        );
    };
    let (off, h) = find(&b, Some(at));
    reseal(&mut b, (off, h), h.frame_version);
    // the first record frame, sealed again with payload version 4
    let first = find(&b, None);
    reseal(&mut b, first, 4);
    std::fs::write(&seg, &b).unwrap();
    // the checkpoint covers the frame: the store opens and serves it
    let db = Engram::open(&dir, Options::default()).unwrap();
    let v = db.verify().unwrap();
    assert!(
        v.problems
            .iter()
            .any(|p| p.contains("does not read") && p.contains("payload version 4")),
        "{:?}",
        v.problems
    );
    assert!(
        v.problems
            .iter()
            .any(|p| p.contains("does not read") && p.contains("record data")),
        "{:?}",
        v.problems
    );
    // a read of it names the record
    let c = db.session(Principal::admin("t"));
    let e = c.get(&engram::RecordRef::External("c".into())).unwrap_err();
    let id = c.resolve(&engram::RecordRef::External("c".into())).unwrap();
    assert!(e.to_string().contains(&id.to_string()), "{e}");
    db.close().unwrap();
}

/// A damaged state checkpoint is no problem (the state is replayed from
/// the log), but `verify` says so, as the reads do: it said nothing.
#[test]
fn verify_notes_a_damaged_checkpoint() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let file = cli::events_file(tmp.path(), "ev.jsonl", "t", 20);
    ok(&store, &["ingest", file.to_str().unwrap()]);
    let snap = store.join("derived").join("state.snap");
    assert!(snap.is_file());
    std::fs::write(&snap, b"garbage").unwrap();
    let v = cli::json(&ok(&store, &["verify", "--json"]));
    assert_eq!(v["ok"], true, "{v}");
    let notes = v["notes"].to_string();
    assert!(notes.contains("state checkpoint is not used"), "{v}");
}
