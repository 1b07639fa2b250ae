//! The engine's present when the system clock steps back: transaction time
//! never goes back (records, and lifecycle operations, across a reopen
//! too), and the present never reads as a moment before the store's last
//! write, so the validity rule does not depend on when a request runs.

use crate::common::{T0, ext, open};
use engram::retrieval::RecallRequest;
use engram::{ManualClock, NewRecord, Principal};

const SECOND: i64 = 1000;

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
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let db = open(tmp.path(), &clock);
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
    // the store as it was at :09.5: r1 alone, not yet expired
    let mut q = RecallRequest::text("zebra");
    q.as_of = Some(T0 + 9 * SECOND + 500);
    q.valid_at = Some(T0 + 6 * SECOND);
    assert_eq!(found(&s, q), ["r1"]);
    db.close().unwrap();
}

/// With the clock behind the store's last write, the present is that
/// write's time: a record is valid now and at any later moment, and not at
/// an earlier one, whether or not the moment is past the system clock.
#[test]
fn a_clock_behind_the_store_keeps_the_validity_rule() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let db = open(tmp.path(), &clock);
    let s = db.session(Principal::admin("t"));
    s.append(vec![
        NewRecord::event("note", "zebra a").with_external_id("a"),
    ])
    .unwrap();
    let at = |valid_at: Option<i64>| {
        let mut q = RecallRequest::text("zebra");
        q.valid_at = valid_at;
        found(&s, q)
    };
    clock.set(T0 - 3600 * SECOND);
    assert_eq!(at(None), ["a"], "a writer reads its own write");
    assert_eq!(db.now_ms(), T0, "the present is the store's last write");
    // before the record's start: not valid, on either side of the clock
    assert!(at(Some(T0 - 5 * SECOND)).is_empty());
    assert!(at(Some(T0 - 7200 * SECOND)).is_empty());
    assert_eq!(at(Some(T0 + 5 * SECOND)), ["a"]);
    // and the same after a reopen with the clock still behind
    db.close().unwrap();
    let db = open(tmp.path(), &clock);
    let s = db.session(Principal::admin("t"));
    let mut q = RecallRequest::text("zebra");
    q.valid_at = Some(T0 - 5 * SECOND);
    assert!(found(&s, q).is_empty());
    assert_eq!(found(&s, RecallRequest::text("zebra")), ["a"]);
    db.close().unwrap();
}
