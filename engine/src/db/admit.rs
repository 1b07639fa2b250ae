//! Stage 3 of the write path (`Session::append_run`, `write.rs`): whether
//! a record repeats a stored or in-flight version (a duplicate stores
//! nothing), the external id rules, and the admission status of a new
//! record.

use super::write::{Resolved, content_hash};
use super::*;

/// Stage 3, the external id rules: the stored (or in-flight) version this
/// record repeats, if any, as (id, LSN, status); an error if its external
/// id names another record it does not correct, or a deleted one.
///
/// A holder the session cannot read (it lacks one of its labels) and did
/// not write is not described: the key is reported as in use, whether the content matches,
/// differs or was deleted, so an append can neither name a hidden record
/// nor confirm a guess of its content (docs/security.md, guarantee 2).
pub(super) fn existing_version(
    (session, held): (&Session, &std::cell::OnceCell<BTreeSet<String>>),
    w: &WriterState,
    st: &State,
    tenant: &str,
    (i, r): (usize, &NewRecord),
    (hash, access): ([u8; 32], &[String]),
    (supersedes, continues_batch): (Option<RecordId>, bool),
) -> Result<Option<(RecordId, u64, Status)>> {
    let Some(e) = &r.external_id else {
        return Ok(None);
    };
    let in_use = || EngineError::ExternalIdConflict {
        item: Some(i),
        external_id: e.clone(),
        existing: None,
    };
    let key = (tenant.to_string(), e.clone());
    // A batch still registered in flight whose record the state already
    // holds (applied, about to be released) is the stored chain's current
    // version: a correction of it is judged against the state below.
    let pending = w
        .pending_ext
        .get(&key)
        .filter(|(pid, _, _)| !(supersedes == Some(*pid) && st.idx(*pid).is_some()));
    if let Some((pid, phash, writer)) = pending {
        // In flight: not yet in the state, so its labels are the ones this
        // request gives when the content (labels included) matches.
        let held = held.get_or_init(|| session.held_labels(st));
        if *phash == hash {
            let own = writer == session.principal.id();
            if !own && !access.iter().all(|l| held.contains(l)) {
                return Err(in_use());
            }
            return Ok(Some((*pid, 0, Status::Active)));
        }
        let readable = st
            .idx(*pid)
            .is_some_and(|ix| session.target(st, ix, held).readable);
        return Err(EngineError::ExternalIdConflict {
            item: Some(i),
            external_id: e.clone(),
            existing: readable.then_some(*pid),
        });
    }
    let Some(&ix) = st
        .tenant(tenant)
        .and_then(|t| t.external_ids.get(e.as_str()))
    else {
        // A record purged by compaction keeps its key (only its hash is
        // left) and its labels: a principal without them gets the answer
        // it got before the purge.
        let purged = st.tenant(tenant).and_then(|t| t.purged_external_id(e));
        if let Some(tomb) = purged {
            let held = held.get_or_init(|| session.held_labels(st));
            if !session.target(st, tomb, held).readable {
                return Err(in_use());
            }
            return Err(EngineError::invalid(
                "external_id",
                format!(
                    "'{e}' named a record that was deleted; deleted content is not re-ingested"
                ),
            )
            .at_item(i));
        }
        return Ok(None);
    };
    // Its writer knows what it wrote: a retry of its own append is a
    // duplicate even when it does not hold the labels it wrote.
    let held = held.get_or_init(|| session.held_labels(st));
    let readable = |x: Idx| {
        let t = session.target(st, x, held);
        t.readable || t.own
    };
    if !readable(ix) {
        return Err(in_use());
    }
    // Only a duplicate is its writer's to know without the labels: any
    // other answer about a record it cannot read (deleted, or naming it)
    // is the plain "in use".
    let visible = session.target(st, ix, held).readable;
    let m = st.meta(ix);
    if m.status == Status::Deleted && !visible {
        return Err(in_use());
    }
    if m.status == Status::Deleted {
        return Err(EngineError::invalid(
            "external_id",
            format!(
                "'{e}' named record {} which was deleted; deleted content is not re-ingested",
                m.id
            ),
        )
        .at_item(i));
    }
    // Past its retention period a record reads as not found until compact
    // deletes it, and is answered here as it will be then (named only to a
    // principal whose labels reach it), so an append confirms neither its
    // id nor its content; a correction of it is still taken until then
    // (docs/lifecycle.md, "Retention and legal holds").
    let now = session.db.now();
    let correcting = supersedes == Some(m.id) || continues_batch;
    if !correcting && st.past_retention(ix, now) {
        if !visible {
            return Err(in_use());
        }
        return Err(EngineError::invalid(
            "external_id",
            format!(
                "'{e}' names record {} which is past its retention period; its content is no longer served or re-ingested (compact deletes it)",
                m.id
            ),
        )
        .at_item(i));
    }
    // Re-sending any version of the chain is a no-op (a file holding a
    // record and its correction re-ingests cleanly), unless that version
    // is past its retention period.
    for v in st.chain(ix) {
        let vm = st.meta(v);
        if !vm.tombstone
            && readable(v)
            && !st.past_retention(v, now)
            && stored_hash(&session.db, vm.loc)? == hash
        {
            return Ok(Some((vm.id, vm.loc.lsn, vm.status)));
        }
    }
    if !correcting {
        // The key names a version its chain has moved past (a correction
        // gave the chain another external id): what to correct is the
        // chain's current version, named when readable (advising a
        // correction of this one would only meet "already superseded").
        if visible && m.status == Status::Superseded {
            let head = *st.chain(ix).last().expect("a chain holds its versions");
            // (a newest version that is gone is not a version to correct)
            if let Some(reason) = session.gone_head(st, head) {
                return Err(EngineError::InvalidState {
                    action: format!("write (item {i})"),
                    target: m.id,
                    reason,
                }
                .at_item(i));
            }
            return Err(EngineError::AlreadySuperseded {
                item: Some(i),
                target: m.id,
                by: session
                    .target(st, head, held)
                    .readable
                    .then(|| st.meta(head).id),
            });
        }
        return Err(EngineError::ExternalIdConflict {
            item: Some(i),
            external_id: e.clone(),
            existing: visible.then_some(m.id),
        });
    }
    Ok(None)
}

/// A correction that says exactly what its target, or the version that
/// corrected its target, says: a duplicate of that version, not a new one.
///
/// - The target itself while it is the current version, its content
///   hashed as the target's sibling (with what the target corrects): a
///   correction sent again after it became the current version, naming
///   its target by the external id it inherited (which now names it), is
///   one.
/// - The version that corrected the target, hashed as it was (its
///   `supersedes` is the target): the same correction of the same version
///   sent again after it was stored (a retry whose acknowledgement was
///   lost, a file holding a chain ingested again in one batch), whatever
///   came after it.
///
/// The target is taken as it is even when already corrected if the
/// correction named it through an earlier line of its batch (`via_batch`:
/// a file holding a record and a correction that repeats it, ingested
/// again, where the earlier line is a duplicate of the stored version).
///
/// Nothing further back: a correction naming the chain by its external id
/// corrects the current version, and one that says what an older version
/// said (a preference changed back: dark, light, dark, light) is a new
/// version, never swallowed.
///
/// A version the session can neither read nor wrote is skipped (naming it
/// would tell its id), as are tombstones and deleted versions.
pub(super) fn unchanged_correction(
    db: &Engram,
    st: &State,
    tsym: Option<crate::state::Sym>,
    (r, res): (&NewRecord, &Resolved),
    (retention, access): (&str, &[String]),
    data: Option<&str>,
    (readable, via_batch): (&dyn Fn(Idx) -> bool, bool),
) -> Result<Option<(RecordId, u64, Status)>> {
    let Some(target) = res
        .supersedes
        .and_then(|sid| tsym.and_then(|t| st.idx_in(t, sid)))
    else {
        return Ok(None);
    };
    let successor = st.meta(target).superseded_by;
    for v in std::iter::once(target).chain(successor) {
        let m = st.meta(v);
        if m.tombstone
            || m.status == Status::Deleted
            // (its content is no longer served: a duplicate would confirm
            // a guess of it)
            || st.past_retention(v, db.now())
            // the same record: its external id too (which is not hashed)
            || r.external_id.as_deref() != m.external_id.as_deref()
            || (v != target && !readable(v))
            // a target already corrected is no current version to repeat
            // (saying what it said is refused as already superseded),
            // unless it was named through an earlier line of this batch
            // that stands for it (a file holding a chain, ingested again)
            || (v == target && m.superseded_by.is_some() && !via_batch)
        {
            continue;
        }
        let sibling = Resolved {
            supersedes: m.supersedes.map(|p| st.meta(p).id),
            ..res.clone()
        };
        let hash = content_hash(r, &sibling, retention, access, data);
        if stored_hash(db, m.loc)? == hash {
            return Ok(Some((m.id, m.loc.lsn, m.status)));
        }
    }
    Ok(None)
}

pub(super) fn stored_hash(db: &Engram, loc: FrameLoc) -> Result<[u8; 32]> {
    let f = db.inner.log.read(loc.segment, loc.offset)?;
    let a = codec::view_record(f.payload())?;
    Ok(a.content_sha256)
}

/// A tenant's review rules queued and not yet applied: (assertion kind,
/// writer kind) -> (the latest value queued, how many are in flight).
pub(crate) type RulesInFlight = HashMap<(String, String), (bool, usize)>;

/// The review rules a write is admitted under: the tenant's, and those
/// queued before it (which apply before it).
pub(super) type Rules<'a> = (
    Option<&'a crate::state::TenantState>,
    Option<&'a RulesInFlight>,
);

/// Admission: the initial status of a new record.
pub(super) fn admission(
    rtype: RecordType,
    body: &Body,
    writer: WriterKind,
    tenant: Rules<'_>,
) -> Status {
    match (rtype, body) {
        (RecordType::Event, _) => Status::Active,
        (RecordType::Assertion, Body::Assertion { kind, .. }) => {
            if needs_review(*kind, writer, tenant) {
                Status::Candidate
            } else {
                Status::Approved
            }
        }
        _ => Status::Approved,
    }
}

/// Whether an assertion of `kind` from a `writer` of that kind waits for
/// review: the tenant's rule for the pair, else procedural kinds written
/// by a model.
fn needs_review(kind: AssertionKind, writer: WriterKind, (tenant, queued): Rules<'_>) -> bool {
    let key = (kind.name().to_string(), writer.name().to_string());
    let rule = queued
        .and_then(|q| q.get(&key).map(|&(review, _)| review))
        .or_else(|| tenant.and_then(|t| t.review_rules.get(&key).copied()));
    rule.unwrap_or(kind.is_procedural() && writer == WriterKind::Model)
}

/// What other writes in flight, and earlier items of the batch, are doing
/// to the records an item names.
pub(super) struct Pending<'a> {
    /// The item of the batch, before this one, that corrects a record.
    pub corrected: &'a dyn Fn(RecordId) -> Option<usize>,
    /// Whether an item of the batch before this one corrects a record.
    pub corrections_before: bool,
    /// Records other batches in flight correct.
    pub superseding: &'a HashSet<RecordId>,
    /// Records retractions in flight withdraw.
    pub retracting: &'a HashSet<RecordId>,
    /// The store's clock (what is past its retention period).
    pub now: i64,
}

/// Why a new record may not cite one of its sources, if it may not: what
/// is built on a source carries its content, so a source must be in use.
/// A review candidate is not (cite it once approved), nor a rejected or a
/// retracted record; a superseded version or a stale record is outdated,
/// and a record built on it now would be served as current where the same
/// record written before the correction is stale. Checked once the item
/// is known not to be a duplicate, so a file re-ingested after a
/// correction still repeats what it stored.
///
/// So is a source that goes out of use or stale by the time this record
/// is applied: one an earlier item of the batch corrects or another batch
/// in flight corrects or retracts, or one built (at any depth) on such a
/// record or on the version this record corrects. A correction may cite
/// the version it corrects (it says what changed), unless that version is
/// stale (regenerating a stale record from itself would keep its outdated
/// content).
///
/// A claim's ends are judged first: a relation's subject or object, or an
/// assertion's subject, may not be a superseded version or one past its
/// retention period. The refusal names the field at fault and item
/// `item`.
pub(super) fn source_out_of_use(
    st: &State,
    tsym: Option<crate::state::Sym>,
    res: &Resolved,
    (minted, batch): (
        &HashMap<RecordId, usize>,
        &[Option<super::resolve::InBatch>],
    ),
    pending: &Pending<'_>,
    item: usize,
) -> Result<()> {
    let idx = |id: RecordId| tsym.and_then(|t| st.idx_in(t, id));
    // A claim's ends (a relation's subject and object, an assertion's
    // subject) are what is written about: a superseded version would
    // escape what its chain's current version says, the labels a
    // correction added included; one past its retention period is no
    // longer served.
    for (field, id) in [("subject", res.subject), ("object", res.object)] {
        let Some(id) = id else { continue };
        // (a version an earlier item corrects is superseded by the time
        // this record is applied, stored or itself an earlier item)
        if let Some(j) = (pending.corrected)(id) {
            return Err(EngineError::invalid(
                field,
                format!("{field} {id} is corrected by item {j} of this batch: name the version item {j} makes"),
            )
            .at_item(item));
        }
        // (one a batch in flight corrects: a conflict with state about to
        // be stored, 409 as in `resolve`, not a bad field)
        if pending.superseding.contains(&id) {
            return Err(EngineError::InvalidState {
                action: format!("write (item {item})"),
                target: id,
                reason: format!(
                    "its {field} is being corrected by another batch in flight: send it again once that batch is acknowledged (its external id then names the new version)"
                ),
            });
        }
        let Some(ix) = idx(id) else { continue };
        let why = if st.meta(ix).status == Status::Superseded {
            "is a superseded version: name its chain's current version (`engram history` shows it)"
        } else if st.past_retention(ix, pending.now) {
            "is past its retention period"
        } else {
            continue;
        };
        return Err(EngineError::invalid(field, format!("{field} {id} {why}")).at_item(item));
    }
    match source_out_of_use_why(st, idx, res, (minted, batch), pending) {
        Some(why) => Err(EngineError::invalid("sources", why).at_item(item)),
        None => Ok(()),
    }
}

/// [`source_out_of_use`] for the sources.
fn source_out_of_use_why(
    st: &State,
    idx: impl Fn(RecordId) -> Option<Idx>,
    res: &Resolved,
    (minted, batch): (
        &HashMap<RecordId, usize>,
        &[Option<super::resolve::InBatch>],
    ),
    pending: &Pending<'_>,
) -> Option<String> {
    // Why `id` goes out of use by the time this record is applied, if it
    // does (the version this record corrects aside).
    let going = |id: RecordId| -> Option<String> {
        if res.supersedes == Some(id) {
            return Some("the version this record corrects".into());
        }
        if let Some(j) = (pending.corrected)(id) {
            return Some(format!("corrected by item {j} of this batch"));
        }
        if pending.superseding.contains(&id) {
            return Some("being corrected by another batch in flight".into());
        }
        pending
            .retracting
            .contains(&id)
            .then(|| "being retracted by an operation in flight".into())
    };
    // An earlier item of the batch that creates a record, by its id
    // (`batch` holds the items before this one).
    let earlier = |id: RecordId| minted.get(&id).and_then(|&j| batch.get(j)?.as_ref());
    for &sid in &res.sources {
        let in_batch = earlier(sid).map(|b| b.status);
        let status = in_batch.or_else(|| idx(sid).map(|ix| st.meta(ix).status));
        if let Some(s) = status
            && let Some(what) = s.out_of_use()
        {
            let advice = match s {
                Status::Candidate => "cite it once it is approved",
                _ => "nothing is built on it",
            };
            return Some(format!("source {sid} {what}: {advice}"));
        }
        // past its retention period its content is no longer served: a
        // record built on it would carry what the tenant let go
        if in_batch.is_none() && idx(sid).is_some_and(|ix| st.past_retention(ix, pending.now)) {
            return Some(format!(
                "source {sid} is past its retention period: nothing is built on it"
            ));
        }
        let why = match status {
            Some(Status::Superseded) if res.supersedes != Some(sid) => {
                "is a superseded version: cite its chain's current version (`engram history` shows it)"
            }
            Some(Status::Stale) => {
                "is stale (built on a version since corrected or withdrawn): regenerate it from what is current, and cite that"
            }
            _ => "",
        };
        if !why.is_empty() {
            return Some(format!("source {sid} {why}"));
        }
        if res.supersedes != Some(sid)
            && let Some(why) = going(sid)
        {
            return Some(format!(
                "source {sid} is {why}: cite what is current once it is"
            ));
        }
    }
    // Built on something that goes out of use with this write: walked up
    // from the sources through earlier items of the batch and stored
    // lineage, at most `LINEAGE_WALK_MAX` records per item (a trace's
    // bound, in records), and only while something is going out of use.
    if res.supersedes.is_none()
        && !pending.corrections_before
        && pending.superseding.is_empty()
        && pending.retracting.is_empty()
    {
        return None;
    }
    // What a record is built on. An earlier item's link to the record it
    // corrects is no dependence (a correction never goes stale with the
    // version it replaces, which it may cite): not followed.
    let sources_of = |id: RecordId| -> Vec<RecordId> {
        match earlier(id) {
            Some(b) => b
                .sources
                .iter()
                .copied()
                .filter(|&s| Some(s) != b.supersedes)
                .collect(),
            None => idx(id)
                .and_then(|ix| st.sources.get(&ix))
                .map(|v| v.iter().map(|&s| st.meta(s).id).collect())
                .unwrap_or_default(),
        }
    };
    walk_lineage(res.sources.iter().map(|&s| (s, sources_of(s))), sources_of, going).map(
        |(sid, a, why)| {
            format!(
                "source {sid} is built on {a}, {why}: it goes out of use with that write; cite what is current"
            )
        },
    )
}

/// Walks up lineage, depth first, from each start's first records
/// (`starts`: a start and the records its walk begins with), each record
/// once, and returns the first record `hit` has something to say about:
/// (the start it was reached from, that record, what `hit` said). At most
/// [`LINEAGE_WALK_MAX`] records in all (a trace's bound, in records): past
/// it, nothing is found, which keeps the writer lock short. One walker for
/// a new record's sources and an approval's lineage.
fn walk_lineage<N: Copy + Eq + std::hash::Hash, R>(
    starts: impl IntoIterator<Item = (N, Vec<N>)>,
    sources_of: impl Fn(N) -> Vec<N>,
    hit: impl Fn(N) -> Option<R>,
) -> Option<(N, N, R)> {
    let mut seen: HashSet<N> = HashSet::new();
    for (start, first) in starts {
        let mut stack = first;
        while let Some(a) = stack.pop() {
            if seen.len() >= LINEAGE_WALK_MAX {
                return None;
            }
            if !seen.insert(a) {
                continue;
            }
            if let Some(r) = hit(a) {
                return Some((start, a, r));
            }
            stack.extend(sources_of(a));
        }
    }
    None
}

/// The most records one lineage walk under the writer lock visits (a
/// trace's bound, in records): past it, the walk stops and the write is
/// taken, which keeps the lock short.
const LINEAGE_WALK_MAX: usize = 4096;

/// A candidate is not in use until approved, so it takes nothing out of
/// use: a correction that would be one (a model revising a policy) would
/// supersede the version in force before any review, and a rejection would
/// not bring it back. Nor may a writer whose version of the corrected
/// record would need review correct it into another kind (a model turning
/// an approved policy into a note): that too takes a reviewed rule out of
/// use without review. Refused; a revision goes for review as a record of
/// its own (docs/lifecycle.md, "Review").
pub(super) fn candidate_correction(
    st: &State,
    (tsym, tenant): (Option<crate::state::Sym>, Rules<'_>),
    (status, res): (Status, &Resolved),
    (i, r): (usize, &NewRecord),
    writer: WriterKind,
) -> Result<()> {
    let Some(target) = res.supersedes else {
        return Ok(());
    };
    let reviewed_kind = tsym
        .and_then(|t| st.idx_in(t, target))
        .map(|ix| st.meta(ix))
        .filter(|m| m.rtype == RecordType::Assertion)
        .and_then(|m| AssertionKind::parse(st.strings.name(m.kind)))
        .filter(|&k| needs_review(k, writer, tenant));
    let reason = if status == Status::Candidate {
        format!(
            "this correction would be a review candidate (kind '{}', written by {} writer), and a candidate takes nothing out of use",
            r.kind,
            crate::model::with_article(writer.name())
        )
    } else if let Some(k) = reviewed_kind {
        format!(
            "it is an approved {} ({} writer's version of it needs review), and a correction of another kind would take it out of use without review",
            k.name(),
            crate::model::with_article(writer.name())
        )
    } else {
        return Ok(());
    };
    Err(EngineError::InvalidState {
        action: format!("correct (item {i})"),
        target,
        reason: format!(
            "{reason}: write it as a record of its own, for review, and retract the version in force once it is approved (or have the tenant admin write the correction)"
        ),
    }
    .at_item(i))
}

/// What stage 3 decided for a record: its content hash, effective access
/// and retention, the writer it is attributed to, its admission status.
pub(super) struct Admitted {
    pub(super) hash: [u8; 32],
    pub(super) access: Vec<String>,
    pub(super) retention: String,
    pub(super) writer: Writer,
    pub(super) status: Status,
}

/// What [`hold_op`] registered in flight, for [`release_op`].
pub(super) enum Held {
    /// A review decision of the record.
    Reviewed(RecordId),
    /// A retraction of the record.
    Retracted(RecordId),
    /// An expiry of the record.
    Expired(RecordId),
    /// A deletion: every record it deletes.
    Deleted(Vec<RecordId>),
    /// A review rule of a tenant.
    Rule(String, (String, String)),
}

/// Counts `id` in (or, `add` false, out of) a map of records operations in
/// flight reach.
fn count(map: &mut HashMap<RecordId, usize>, id: RecordId, add: bool) {
    if add {
        *map.entry(id).or_default() += 1;
    } else if let Some(n) = map.get_mut(&id) {
        *n -= 1;
        if *n == 0 {
            map.remove(&id);
        }
    }
}

/// A review decision, a retraction, an expiry, a deletion or a review
/// rule about to be queued:
/// checked again under the writer lock (the caller checked the record's
/// state without it, and another write may have been queued since) and
/// registered in flight until applied. Without it, an approval and a
/// rejection sent together were both answered 200 while only the first
/// took effect, a correction could be resolved against a record a queued
/// retraction withdraws, or without the end a queued expiry gives it, an
/// expiry could end a version a queued correction supersedes, and a
/// decision, retraction, expiry or deletion of a record a queued deletion
/// deletes was answered as taken.
/// Operations a restore re-applies (`reuse`) are neither checked nor
/// registered.
pub(super) fn hold_op(
    w: &mut WriterState,
    st: &State,
    tenant: &str,
    op: &crate::codec::OpBody,
    reuse: Option<RecordId>,
) -> Result<Option<Held>> {
    use crate::codec::OpBody;
    if reuse.is_some() {
        return Ok(None);
    }
    if let OpBody::ReviewRule {
        kind,
        writer,
        review,
    } = op
    {
        let key = (kind.clone(), writer.clone());
        let e = w
            .pending_rules
            .entry(tenant.to_string())
            .or_default()
            .entry(key.clone())
            .or_insert((*review, 0));
        *e = (*review, e.1 + 1);
        return Ok(Some(Held::Rule(tenant.to_string(), key)));
    }
    let idx_of = |id: RecordId| st.tenant_sym(tenant).and_then(|t| st.idx_in(t, id));
    if let OpBody::Delete { target, reason } = op {
        // a record a deletion in flight deletes is deleted by the time this
        // one applies: refused as a deleted one is (two deletions sent
        // together were both answered as taken, two lines in the ledger)
        // (and one applied since the caller checked the record without the
        // lock: its registration in flight is over by then)
        let named = RecordId::from_bytes(*target);
        let deleted = idx_of(named).is_some_and(|ix| st.meta(ix).status == Status::Deleted);
        if deleted || w.pending_deleted.contains_key(&named) {
            return Err(EngineError::InvalidState {
                action: "delete".into(),
                target: named,
                reason: if deleted {
                    "it is already deleted".into()
                } else {
                    "a deletion of it is in flight: it is deleted once that is applied".into()
                },
            });
        }
        let set: Vec<RecordId> = idx_of(RecordId::from_bytes(*target))
            .map(|ix| st.deletion_set_for(ix, reason.as_deref()))
            .unwrap_or_default()
            .into_iter()
            .map(|i| st.meta(i).id)
            .collect();
        // The apply computes the set again, from the state it meets then:
        // writes queued before this one may have built more on the target.
        for &id in &set {
            count(&mut w.pending_deleted, id, true);
        }
        return Ok(Some(Held::Deleted(set)));
    }
    // an operation on a record a deletion in flight deletes would be
    // answered as taken on a record deleted by the time it applies
    let named = match op {
        OpBody::Expire { target, .. }
        | OpBody::Review { target, .. }
        | OpBody::Retract { target, .. } => Some(RecordId::from_bytes(*target)),
        _ => None,
    };
    if let OpBody::Retract { target, .. } = op
        && w.pending_superseded
            .contains(&RecordId::from_bytes(*target))
    {
        return Err(EngineError::InvalidState {
            action: "retract".into(),
            target: RecordId::from_bytes(*target),
            reason:
                "a correction of it is in flight: retract the version it makes once it is applied"
                    .into(),
        });
    }
    if let Some(target) = named.filter(|t| w.pending_deleted.contains_key(t)) {
        return Err(EngineError::InvalidState {
            action: op_action(op).into(),
            target,
            reason: "a deletion of it is in flight: it is deleted once that is applied".into(),
        });
    }
    if let OpBody::Expire { target, .. } = op {
        let target = RecordId::from_bytes(*target);
        // it would end a version out of every current read by the time it
        // applies (a stored correction is refused before the lock)
        if w.pending_superseded.contains(&target) {
            return Err(EngineError::InvalidState {
                action: "expire".into(),
                target,
                reason: "a correction of it is in flight: expire the version it makes once it is applied"
                    .into(),
            });
        }
        count(&mut w.pending_expired, target, true);
        return Ok(Some(Held::Expired(target)));
    }
    // (`approve`: `None` for a retraction)
    let (approve, target) = match op {
        OpBody::Review {
            target, approve, ..
        } => (Some(*approve), *target),
        OpBody::Retract { target, .. } => (None, *target),
        _ => return Ok(None),
    };
    let action = op_action(op);
    let target = RecordId::from_bytes(target);
    let refuse = |reason: String| EngineError::InvalidState {
        action: action.into(),
        target,
        reason,
    };
    if w.pending_reviewed.contains(&target) || w.pending_retracted.contains(&target) {
        return Err(refuse(
            "another review decision or retraction of it is in flight; once it is answered, \
             the record's state says what is left to do"
                .into(),
        ));
    }
    let idx = idx_of(target);
    if let Some(reason) = idx.and_then(|ix| decision_refusal(st, ix, approve)) {
        return Err(refuse(reason));
    }
    // What a write in flight corrects or retracts, at any depth of the
    // record's lineage, is outdated by the time this approval applies
    // (which then leaves the record stale): refused now rather than
    // answered "approved".
    if approve == Some(true)
        && let Some((s, a)) = idx.and_then(|ix| outdated_in_flight(st, w, ix))
    {
        let on = if s == a {
            String::new()
        } else {
            format!(" (built on {a}, which is)")
        };
        return Err(refuse(format!(
            "its source {s} is being corrected or retracted by a write in flight{on}: once that is applied, regenerate this record from the current version, and reject this one"
        )));
    }
    // (the entity it is about, corrected by a write in flight, is a
    // superseded version by the time this approval applies)
    if approve == Some(true)
        && let Some(e) = idx.and_then(|ix| {
            let m = st.meta(ix);
            [m.subject, m.object]
                .into_iter()
                .flatten()
                .map(|e| st.meta(e).id)
                .find(|e| w.pending_superseded.contains(e))
        })
    {
        return Err(refuse(format!(
            "the entity it is about, {e}, is being corrected by a write in flight: once that is applied, write it again about the current version, and reject this one"
        )));
    }
    Ok(Some(match approve {
        Some(_) => {
            w.pending_reviewed.insert(target);
            Held::Reviewed(target)
        }
        None => {
            w.pending_retracted.insert(target);
            Held::Retracted(target)
        }
    }))
}

/// The first source of record `ix` that a write in flight corrects or
/// retracts, or that is built (at any depth of its stored lineage) on one:
/// (that direct source, the record in flight). The walk is bounded as a
/// new record's is ([`LINEAGE_WALK_MAX`] records).
fn outdated_in_flight(st: &State, w: &WriterState, ix: Idx) -> Option<(RecordId, RecordId)> {
    if w.pending_superseded.is_empty() && w.pending_retracted.is_empty() {
        return None;
    }
    let sources_of = |a: Idx| st.sources.get(&a).cloned().unwrap_or_default();
    let going = |a: Idx| {
        let id = st.meta(a).id;
        (w.pending_superseded.contains(&id) || w.pending_retracted.contains(&id)).then_some(())
    };
    let starts = st.sources.get(&ix)?.iter().map(|&d| (d, vec![d]));
    walk_lineage(starts, sources_of, going).map(|(d, a, ())| (st.meta(d).id, st.meta(a).id))
}

/// Why a review decision (`approve`: `Some(true)` approves) or a
/// retraction (`None`) cannot be taken on record `idx`, by its state, if it
/// cannot. One wording for the check a session makes before queueing the
/// operation and the one [`hold_op`] makes again under the writer lock.
pub(crate) fn decision_refusal(st: &State, idx: Idx, approve: Option<bool>) -> Option<String> {
    let m = st.meta(idx);
    match approve {
        Some(_) if m.status != Status::Candidate => Some(format!(
            "it is {}, not a review candidate",
            m.status.name()
        )),
        Some(true) => st
            .outdated_source(idx)
            .map(|s| {
                format!(
                    "its source {} is {} since it was written: regenerate it from the current version, and reject this one",
                    st.meta(s).id,
                    st.meta(s).status.name()
                )
            })
            // (what it is about, as a new claim's ends: a superseded
            // version would escape what its chain's current one says)
            .or_else(|| {
                [m.subject, m.object]
                    .into_iter()
                    .flatten()
                    .find(|&e| st.meta(e).status == Status::Superseded)
                    .map(|e| {
                        format!(
                            "the entity it is about, {}, is a superseded version since it was written: write it again about the current version, and reject this one",
                            st.meta(e).id
                        )
                    })
            }),
        Some(false) => None,
        // the record's state first: a deleted event is deleted, whatever
        // its type would allow
        None if matches!(m.status, Status::Deleted | Status::Retracted) => {
            Some(format!("it is {}", m.status.name()))
        }
        None if m.rtype == RecordType::Event => Some(
            "events are history and cannot be retracted; correct or delete them".into(),
        ),
        // out of every current read already: a retraction would change
        // nothing in force (as an expiry of it is refused)
        None if m.status == Status::Superseded => Some(
            "it is a superseded version: retract the chain's current version (`engram history` names it)"
                .into(),
        ),
        None => None,
    }
}

/// The name of an operation in an error.
fn op_action(op: &crate::codec::OpBody) -> &'static str {
    use crate::codec::OpBody;
    match op {
        OpBody::Review { approve: true, .. } => "approve",
        OpBody::Review { .. } => "reject",
        OpBody::Retract { .. } => "retract",
        OpBody::Expire { .. } => "expire",
        _ => "change",
    }
}

/// The end of [`hold_op`]'s registration, once the operation is applied
/// (or failed).
pub(super) fn release_op(w: &mut WriterState, held: Option<Held>) {
    match held {
        Some(Held::Reviewed(t)) => {
            w.pending_reviewed.remove(&t);
        }
        Some(Held::Retracted(t)) => {
            w.pending_retracted.remove(&t);
        }
        Some(Held::Expired(t)) => count(&mut w.pending_expired, t, false),
        Some(Held::Deleted(set)) => {
            for id in set {
                count(&mut w.pending_deleted, id, false);
            }
        }
        Some(Held::Rule(tenant, key)) => {
            if let Some(rules) = w.pending_rules.get_mut(&tenant) {
                if let Some(e) = rules.get_mut(&key) {
                    e.1 -= 1;
                    if e.1 == 0 {
                        rules.remove(&key);
                    }
                }
                if rules.is_empty() {
                    w.pending_rules.remove(&tenant);
                }
            }
        }
        None => {}
    }
}

#[cfg(test)]
mod tests {
    use super::{LINEAGE_WALK_MAX, walk_lineage};

    /// Record `n` is built on `n + 1`, up to `len`.
    fn chain(len: u32) -> impl Fn(u32) -> Vec<u32> {
        move |n| if n < len { vec![n + 1] } else { vec![] }
    }

    #[test]
    fn the_walk_names_the_start_a_record_was_reached_from() {
        // 10 -> 11 -> 12 and 20 -> 21: 21 is the one going out of use
        let sources = |n: u32| match n {
            10 => vec![11],
            11 => vec![12],
            20 => vec![21],
            _ => vec![],
        };
        let hit = |n: u32| (n == 21).then_some("going");
        let found = walk_lineage([(10, vec![10]), (20, vec![20])], sources, hit);
        assert_eq!(found, Some((20, 21, "going")));
        // a start's walk begins with what it is given, not with the start
        let found = walk_lineage([(21, sources(21))], sources, hit);
        assert_eq!(found, None);
    }

    #[test]
    fn the_walk_visits_each_record_once_and_stops_at_its_bound() {
        let visits = std::cell::Cell::new(0);
        // both starts share the chain below 1: it is walked once
        let hit = |_: u32| {
            visits.set(visits.get() + 1);
            None::<()>
        };
        assert_eq!(
            walk_lineage([(0, vec![1]), (0, vec![1])], chain(100), hit),
            None
        );
        assert_eq!(visits.get(), 100);
        // a hit past the bound is not reached; one within it is
        let len = LINEAGE_WALK_MAX as u32 + 10;
        let at_end = |n: u32| (n == len).then_some(());
        assert_eq!(walk_lineage([(0, vec![1])], chain(len), at_end), None);
        let within = |n: u32| (n == 5).then_some(());
        assert_eq!(
            walk_lineage([(0, vec![1])], chain(len), within),
            Some((0, 5, ()))
        );
    }
}
