//! What an append answers, and when: each line's result, said as its
//! batch left the record; a duplicate of a record still in flight answered
//! only once that record is durable; a write a racing deletion reached
//! said `deleted`.

use super::*;

/// A line repeating a record another request has queued but not yet made
/// durable (a client re-sending while its first attempt is in flight) is
/// answered only once that record is durable and applied, with its LSN
/// and status: a duplicate is never acknowledged before what it repeats.
/// If that request's write failed, the line is refused (send it again).
pub(super) fn await_repeated(
    db: &Engram,
    prepared: &[Prepared],
    out: &mut [AppendResult],
) -> Result<()> {
    // (a duplicate of a stored record carries its LSN; of an earlier line
    // of this batch, `same_as`: LSN 0 and neither is one still in flight)
    let waiting: Vec<usize> = prepared
        .iter()
        .enumerate()
        .filter(|(_, p)| p.outcome == AppendOutcome::Duplicate && p.same_as.is_none() && p.lsn == 0)
        .map(|(k, _)| k)
        .collect();
    if waiting.is_empty() {
        return Ok(());
    }
    let applied = |out: &mut [AppendResult]| {
        let st = db.state();
        let found: Option<Vec<(u64, Status)>> = waiting
            .iter()
            .map(|&k| {
                st.idx(out[k].id).map(|i| {
                    let m = st.meta(i);
                    (m.loc.lsn, m.status)
                })
            })
            .collect();
        found.map(|f| {
            for (&k, (lsn, status)) in waiting.iter().zip(f) {
                out[k].lsn = lsn;
                out[k].status = status;
            }
        })
    };
    loop {
        if applied(out).is_some() {
            return Ok(());
        }
        db.check_open()?;
        if let Some(reason) = db.inner.log.write_failure() {
            return Err(EngineError::Storage(
                engram_storage::StorageError::Poisoned { reason },
            ));
        }
        // A batch leaves the in-flight table only once it is applied or
        // the applier holds the state's write lock to apply it (which the
        // read below waits for), so one neither queued (seen under the
        // writer lock) nor applied after that failed to write.
        let queued = waiting.iter().any(|&k| {
            let w = db.inner.writer.lock();
            w.pending_ext.values().any(|(pid, _, _)| *pid == out[k].id)
        });
        if !queued {
            if applied(out).is_some() {
                return Ok(());
            }
            return Err(EngineError::InvalidState {
                action: "append".into(),
                target: out[waiting[0]].id,
                reason: "it repeats a record another request was storing, and that write \
                         failed; send the line again"
                    .into(),
            });
        }
        std::thread::sleep(std::time::Duration::from_micros(50));
    }
}

/// A record a deletion reached by the time its batch is acknowledged is
/// said `deleted`: a write that raced a deletion (checked before it was
/// applied, logged after it) is deleted as it is applied, and deleted is
/// final, so the answer never calls it current. Likewise a record said
/// current that is `stale` by then: a later line of its batch corrected or
/// retracted what it was built on (a summary and a correction of its
/// source sent together: the answer said `approved`, a read `stale`).
pub(in crate::db) fn said_as_applied(state: &State, out: &mut [AppendResult]) {
    for r in out.iter_mut() {
        let Some(i) = state.idx(r.id) else { continue };
        match state.meta(i).status {
            Status::Deleted => r.status = Status::Deleted,
            Status::Stale
                if matches!(
                    r.status,
                    Status::Active | Status::Approved | Status::Candidate
                ) =>
            {
                r.status = Status::Stale
            }
            _ => {}
        }
    }
}

pub(super) fn results(
    prepared: &[Prepared],
    records: &[NewRecord],
    locs: &[FrameLoc],
) -> Vec<AppendResult> {
    // What a later line of the batch corrected is superseded once the
    // batch is applied: its status is said as the batch left it.
    let corrected: HashSet<[u8; 16]> = prepared
        .iter()
        .filter(|p| p.outcome == AppendOutcome::Created)
        .filter_map(|p| p.stored.supersedes)
        .collect();
    prepared
        .iter()
        .zip(records)
        .map(|(p, r)| {
            let frame_lsn = |frame: usize| locs.get(frame).map(|l| l.lsn).unwrap_or(0);
            let lsn = match (p.outcome, p.same_as) {
                (AppendOutcome::Created, _) => frame_lsn(p.frame),
                (AppendOutcome::Duplicate, Some(j)) => frame_lsn(prepared[j].frame),
                (AppendOutcome::Duplicate, None) => p.lsn,
            };
            AppendResult {
                id: RecordId::from_bytes(p.stored.id),
                external_id: p
                    .stored
                    .external_id
                    .clone()
                    .or_else(|| r.external_id.clone()),
                outcome: p.outcome,
                status: if !corrected.is_empty() && corrected.contains(&p.stored.id) {
                    Status::Superseded
                } else {
                    p.status
                },
                lsn,
                notes: p.notes.clone(),
            }
        })
        .collect()
}
