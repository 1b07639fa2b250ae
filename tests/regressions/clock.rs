//! The system clock stepped back: transaction time never goes back
//! (records, and lifecycle operations, across a reopen too), the validity
//! rule gives one answer whenever a request runs, and a record written
//! meanwhile is valid from the clock's present, so its writer reads it.

use crate::common::{T0, ext, open};
use engram::retrieval::RecallRequest;
use engram::{ManualClock, NewRecord, Principal};

const SECOND: i64 = 1000;

/// A store on a temporary directory, its clock at `T0` (the suite's
/// serial lock held while the test runs).
fn clocked() -> (
    std::sync::MutexGuard<'static, ()>,
    tempfile::TempDir,
    ManualClock,
    engram::Engram,
) {
    let serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let db = open(tmp.path(), &clock);
    (serial, tmp, clock, db)
}

fn found(s: &engram::Session, q: RecallRequest) -> Vec<String> {
    let mut out: Vec<String> = s
        .recall(&q)
        .unwrap()
        .hits
        .iter()
        .filter_map(|h| h.external_id.as_deref().map(str::to_string))
        .collect();
    out.sort();
    out
}

/// An expiry made at :10, then (in a later process, the clock back at :09)
/// a record: the record is dated after the operation, so `as_of` :09.5 is
/// a prefix of the log (the record, dated :09, read as written before an
/// expiry the store already held).
#[test]
fn a_record_written_after_an_operation_is_dated_after_it_across_a_reopen() {
    let (_serial, tmp, clock, db) = clocked();
    let s = db.session(Principal::admin("t"));
    s.append(vec![
        NewRecord::event("note", "zebra r1").with_external_id("r1"),
    ])
    .unwrap();
    clock.set(T0 + 10 * SECOND);
    s.expire(&ext("r1"), T0 + 5 * SECOND).unwrap();
    db.close().unwrap();

    clock.set(T0 + 9 * SECOND);
    let db = open(tmp.path(), &clock);
    let s = db.session(Principal::admin("t"));
    s.append(vec![
        NewRecord::event("note", "zebra r2").with_external_id("r2"),
    ])
    .unwrap();
    let r2 = s.get(&ext("r2")).unwrap();
    assert!(
        r2.ingested_at >= T0 + 10 * SECOND,
        "dated {} before the expiry at {}",
        r2.ingested_at,
        T0 + 10 * SECOND
    );
    // the store as it was at :09.5: r1 alone, not yet expired (r2, dated
    // :09, was in it, valid from then)
    let mut q = RecallRequest::text("zebra");
    q.as_of = Some(T0 + 9 * SECOND + 500);
    q.valid_at = Some(T0 + 9 * SECOND + 500);
    assert_eq!(found(&s, q), ["r1"]);
    db.close().unwrap();
}

/// With the clock behind the store's last write, the validity rule is the
/// same at the present as at any moment: a record is not valid before its
/// start, whether or not that moment is past the clock (the present read
/// every record as started). A record written meanwhile is dated after the
/// last write (transaction time), and valid from the clock's present (its
/// `occurred_at` left out), so its writer reads it.
#[test]
fn a_clock_behind_the_store_keeps_the_validity_rule() {
    let (_serial, tmp, clock, db) = clocked();
    let s = db.session(Principal::admin("t"));
    s.append(vec![
        NewRecord::event("note", "zebra a").with_external_id("a"),
    ])
    .unwrap();
    let at = |s: &engram::Session, valid_at: Option<i64>| {
        let mut q = RecallRequest::text("zebra");
        q.valid_at = valid_at;
        found(s, q)
    };
    let back = T0 - 3600 * SECOND;
    clock.set(back);
    assert!(at(&s, None).is_empty(), "a starts at T0, after the present");
    assert!(at(&s, Some(back)).is_empty());
    assert!(at(&s, Some(T0 - 5 * SECOND)).is_empty());
    assert_eq!(at(&s, Some(T0 + 5 * SECOND)), ["a"]);
    s.append(vec![
        NewRecord::event("note", "zebra b").with_external_id("b"),
    ])
    .unwrap();
    let b = s.get(&ext("b")).unwrap();
    assert!(b.ingested_at >= T0, "dated {} before a", b.ingested_at);
    assert_eq!(b.occurred_at, back, "it occurred at the clock's present");
    assert_eq!(at(&s, None), ["b"], "a writer reads its own write");
    assert_eq!(at(&s, Some(T0 + 5 * SECOND)), ["a", "b"]);
    // and the same after a reopen with the clock still behind
    db.close().unwrap();
    let db = open(tmp.path(), &clock);
    let s = db.session(Principal::admin("t"));
    assert_eq!(at(&s, None), ["b"]);
    assert!(at(&s, Some(T0 - 5 * SECOND)) == ["b"]);
    db.close().unwrap();
}

/// With the clock behind the store, a record bounded by `valid_until` and
/// corrected later in its own batch hands its correction the start it has
/// (the clock's present), as a stored record's correction is handed: it
/// handed the transaction time, still ahead, and the new version read as
/// not valid yet while the old one was superseded.
#[test]
fn a_correction_in_the_same_batch_starts_where_its_version_does() {
    let (_serial, _tmp, clock, db) = clocked();
    let s = db.session(Principal::admin("t"));
    s.append(vec![NewRecord::event("note", "zebra seed")])
        .unwrap();
    clock.set(T0 - 3600 * SECOND);
    let mut first = NewRecord::event("note", "zebra first").with_external_id("x");
    first.valid_until = Some(T0 + 3600 * SECOND);
    let fixed = NewRecord::event("note", "zebra fixed").superseding(ext("x"));
    s.append(vec![first, fixed]).unwrap();
    let q = RecallRequest::text("zebra fixed");
    let hits: Vec<String> = s
        .recall(&q)
        .unwrap()
        .hits
        .iter()
        .filter_map(|h| h.text.as_deref().map(str::to_string))
        .collect();
    assert!(hits.contains(&"zebra fixed".to_string()), "{hits:?}");
    db.close().unwrap();
}
