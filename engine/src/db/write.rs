//! The write path of one atomic batch (`Session::append_run`), in stages:
//!
//! 1. validate (`Session::validate_batch`, `write/validate.rs`; the state
//!    read only for the record limit, at its end): sizes, every record,
//!    canonical `data`, normalized access and retention, and the content
//!    hash of records that name no other record;
//! 2. resolve (under the writer lock, in `append_run`; `resolve.rs`): mint
//!    ids, resolve references (sources, corrections, endpoints) inside the
//!    tenant and among earlier items, inherit what a correction leaves out,
//!    check vector dimensions;
//! 3. admit (`admit.rs`): external-id rules (duplicates store nothing,
//!    conflicts are refused), the writer, the admission status, what may
//!    be built on what (`candidate_correction`, `source_out_of_use`);
//! 4. encode (`stored_record`, `encode_frames`): the stored records and
//!    their frames;
//! 5. queue (`InFlight`): register external ids, corrections and new
//!    vector spaces in flight, queue the frames, wait until applied.
//!
//! A batch is all or nothing: any error before stage 5 stores nothing.

use super::admit::{
    Admitted, Pending, admission, candidate_correction, existing_version, hold_op, release_op,
    source_out_of_use, unchanged_correction,
};
use super::resolve::{InBatch, ItemResolution, Resolver};
use super::*;
use crate::codec::{OpBody, StoredOp};

mod answer;
mod validate;
pub(super) use answer::said_as_applied;
use answer::{await_repeated, results};
use validate::Validated;

/// A record as the write path prepared it.
struct Prepared {
    stored: StoredRecord,
    outcome: AppendOutcome,
    status: Status,
    lsn: u64,
    /// What the engine decided for the record beyond what it said
    /// (inherited labels, lowered access).
    notes: Vec<String>,
    /// Position of its record frame in the batch (created records only).
    frame: usize,
    /// A duplicate of the record this batch creates at this position.
    same_as: Option<usize>,
}

impl Prepared {
    /// The answer for an item that stores nothing: a duplicate of record
    /// `id`, with the external id the item has (given or inherited), the
    /// status and LSN of what it repeats, and `same_as` when that is an
    /// item this batch creates (its LSN is known once the batch is framed).
    fn duplicate(
        id: RecordId,
        r: &NewRecord,
        (status, lsn): (Status, u64),
        same_as: Option<usize>,
    ) -> Self {
        let mut stored = StoredRecord::empty(id);
        stored.external_id = r.external_id.clone();
        Prepared {
            stored,
            outcome: AppendOutcome::Duplicate,
            status,
            lsn,
            notes: (!r.embeddings.is_empty())
                .then(|| DUPLICATE_VECTORS_NOTE.to_string())
                .into_iter()
                .collect(),
            frame: 0,
            same_as,
        }
    }
}

/// What a duplicate's answer says when it carried vectors: they are not
/// part of a record's content hash, so a duplicate with other vectors
/// keeps the stored record's.
const DUPLICATE_VECTORS_NOTE: &str = "a duplicate stores nothing, its vectors included: the \
    record keeps the vectors it has (a correction with supersedes gives it others)";

/// SHA-256 of the record's canonical content (docs/format.md §6.1): the
/// canonical JSON of an object holding what the record says, with references
/// resolved to ids. Written straight from the record's parts; `data` is given
/// already in canonical form.
pub(super) fn content_hash(
    r: &NewRecord,
    resolved: &Resolved,
    retention: &str,
    access: &[String],
    data_canonical: Option<&str>,
) -> [u8; 32] {
    use canonical::{Member, ObjectWriter};
    use std::borrow::Cow;
    let mut o = ObjectWriter::new();
    o.member("record", Member::Str(r.body.record_type().name()));
    o.member("kind", Member::Str(&r.kind));
    let mut scope = ObjectWriter::new();
    if let Some(u) = &r.scope.user {
        scope.member("user", Member::Str(u));
    }
    if let Some(c) = &r.scope.conversation {
        scope.member("conversation", Member::Str(c));
    }
    if let Some(a) = &r.scope.agent {
        scope.member("agent", Member::Str(a));
    }
    let labels;
    if !r.scope.labels.is_empty() {
        let mut l = r.scope.labels.clone();
        l.sort();
        l.dedup();
        labels = l;
        scope.member("labels", Member::Strs(&labels));
    }
    if !scope.is_empty() {
        o.member("scope", Member::Canonical(Cow::Owned(scope.finish())));
    }
    for (k, v) in [
        ("occurred_at", r.occurred_at),
        ("valid_from", r.valid_from),
        ("valid_until", r.valid_until),
        ("last_verified_at", r.last_verified_at),
    ] {
        if let Some(t) = v {
            o.member(k, Member::String(format_rfc3339(t)));
        }
    }
    if let Some(t) = &r.text {
        o.member("text", Member::Str(t));
    }
    if let Some(d) = data_canonical {
        o.member("data", Member::Canonical(Cow::Borrowed(d)));
    }
    o.member("retention_class", Member::Str(retention));
    if !access.is_empty() {
        o.member("access", Member::Strs(access));
    }
    if let Some(s) = resolved.supersedes {
        o.member("supersedes", Member::String(s.to_string()));
    }
    let sources: Vec<String>;
    if !resolved.sources.is_empty() {
        sources = resolved.sources.iter().map(|i| i.to_string()).collect();
        o.member("sources", Member::Strs(&sources));
    }
    match &r.body {
        Body::Event => {}
        Body::Entity {
            entity_type,
            name,
            aliases,
        } => {
            o.member("entity_type", Member::Str(entity_type));
            o.member("name", Member::Str(name));
            if !aliases.is_empty() {
                o.member("aliases", Member::Strs(aliases));
            }
        }
        Body::Relation { predicate, .. } => {
            o.member("predicate", Member::Str(predicate));
        }
        Body::Assertion {
            predicate, object, ..
        } => {
            if let Some(p) = predicate {
                o.member("predicate", Member::Str(p));
            }
            if let Some(v) = object {
                o.member("object", Member::Str(v));
            }
        }
        Body::Summary { generator } => {
            o.member("generator", Member::Str(generator));
        }
    }
    if let Some(s) = resolved.subject {
        o.member("subject", Member::String(s.to_string()));
    }
    if let Some(s) = resolved.object {
        o.member("object_entity", Member::String(s.to_string()));
    }
    if let Some(d) = &r.derivation {
        let mut dm = ObjectWriter::new();
        dm.member("extractor", Member::Str(&d.extractor));
        if let Some(m) = &d.model_config {
            dm.member("model_config", Member::Str(m));
        }
        dm.member(
            "generated",
            Member::Canonical(Cow::Borrowed(if d.generated { "true" } else { "false" })),
        );
        o.member("derivation", Member::Canonical(Cow::Owned(dm.finish())));
    }
    if let Some(c) = r.confidence {
        let n = canonical::number_f64(f64::from(c)).unwrap_or_else(|| "null".to_string());
        o.member("confidence", Member::Canonical(Cow::Owned(n)));
    }
    let mut out = String::with_capacity(256 + r.text.as_ref().map_or(0, |t| t.len() * 2));
    o.write(&mut out);
    canonical::sha256(out.as_bytes())
}

/// Whether the record names other records (its content hash then depends on
/// resolving them against the store).
fn has_references(r: &NewRecord) -> bool {
    r.supersedes.is_some()
        || !r.sources.is_empty()
        || matches!(
            r.body,
            Body::Relation { .. }
                | Body::Assertion {
                    subject: Some(_),
                    ..
                }
        )
}

/// How messages name a reference: `<id>` or `with external id '<e>'`.
pub(crate) fn reference_phrase(r: &RecordRef) -> String {
    match r {
        RecordRef::Id(id) => id.to_string(),
        RecordRef::External(e) => format!("with external id '{e}'"),
        RecordRef::IdOrExternal(s) => s.clone(),
    }
}

/// The record a reference names, from its two readings (internal id,
/// external id), counting only records `visible` says exist for the
/// caller. `None`: names nothing; `Some(Err)`: names two different records.
pub(super) fn one_of(
    by_id: Option<Idx>,
    by_ext: Option<Idx>,
    r: &RecordRef,
    tenant: &str,
    visible: impl Fn(Idx) -> bool,
) -> Option<Result<Idx>> {
    let by_id = by_id.filter(|&i| visible(i));
    let by_ext = by_ext.filter(|&i| visible(i));
    match (by_id, by_ext) {
        (Some(a), Some(b)) if a != b => Some(Err(EngineError::ambiguous(tenant, r))),
        (Some(a), _) | (None, Some(a)) => Some(Ok(a)),
        (None, None) => None,
    }
}

#[derive(Default, Clone)]
pub(super) struct Resolved {
    pub(super) supersedes: Option<RecordId>,
    pub(super) sources: Vec<RecordId>,
    pub(super) subject: Option<RecordId>,
    pub(super) object: Option<RecordId>,
}

impl Session {
    /// Appends an atomic batch. Every record is validated first; any error
    /// rejects the whole batch and stores nothing. Re-sending a record with
    /// the same external id and content is a no-op reported as
    /// [`AppendOutcome::Duplicate`].
    pub fn append(&self, records: Vec<NewRecord>) -> Result<Vec<AppendResult>> {
        self.append_run(records, None)
    }

    /// Like [`Session::append`], recording `run_id` as the ingest run.
    pub fn append_run(
        &self,
        records: Vec<NewRecord>,
        run_id: Option<RecordId>,
    ) -> Result<Vec<AppendResult>> {
        let db = &self.db;
        let Validated {
            data_json,
            mut normalized,
        } = self.validate_batch(&records)?;
        let _maintenance = db.inner.maintenance.read();
        let tenant = self.principal.tenant().to_string();
        let rx;
        let mut prepared: Vec<Prepared>;
        let in_flight;
        {
            // stages 2-5 under the writer lock: ids and transaction times
            // follow LSN order, so minting and queueing stay together
            let mut w = db.inner.writer.lock();
            let st = db.inner.state.read();
            let tsym = st.tenant_sym(&tenant);
            let tstate = st.tenant(&tenant);
            let wall = db.now();
            let now = wall.max(w.last_ingested_at).max(st.last_ingested_at);
            let run = run_id.unwrap_or_else(|| w.ids.mint(now));
            prepared = Vec::with_capacity(records.len());
            // minted ids by position (and back); positions by external id (it
            // appears again only on a record that corrects the earlier one)
            let mut batch_ext: HashMap<String, Vec<usize>> = HashMap::new();
            let mut batch_ids: Vec<RecordId> = Vec::with_capacity(records.len());
            let mut minted = HashMap::with_capacity(records.len());
            let mut superseded_here: HashMap<RecordId, usize> = HashMap::new();
            let mut new_dims: HashMap<String, usize> = HashMap::new();
            let held = if records.iter().any(has_references) {
                self.held_labels(&st)
            } else {
                BTreeSet::new()
            };
            let actor = self.actor(&st);
            // The labels held, asked once, when an external id recurs or a record is labelled.
            let held_once = std::cell::OnceCell::new();
            // item -> the earlier item of the batch it repeats exactly (same
            // external id, same content): a duplicate, as it would be in a
            // later batch
            let mut repeats: HashMap<usize, usize> = HashMap::new();
            for (i, r) in records.iter().enumerate() {
                let id = w.ids.mint(now);
                batch_ids.push(id);
                minted.insert(id, i);
                if let Some(e) = &r.external_id {
                    let pos = batch_ext.entry(e.clone()).or_default();
                    if let Some(&j) = pos.last() {
                        let corrects_it = r.supersedes.as_ref()
                            == Some(&RecordRef::External(e.clone()))
                            || r.supersedes.as_ref() == Some(&RecordRef::Id(batch_ids[j]));
                        // the same content: the same hash, or (for a record
                        // naming others, hashed only once resolved) the
                        // same record as sent; any earlier line of that key
                        // (a line of the chain sent again is a duplicate,
                        // as in a later batch)
                        let same = |j: usize| {
                            (normalized[i].2.is_some() && normalized[i].2 == normalized[j].2)
                                || (normalized[i].2.is_none() && records[i] == records[j])
                        };
                        let repeated = pos.iter().copied().find(|&k| same(k));
                        if let (false, Some(j)) = (corrects_it, repeated) {
                            repeats.insert(i, j);
                            batch_ids[i] = batch_ids[j];
                            continue;
                        }
                        if !corrects_it {
                            return Err(EngineError::invalid(
                                "external_id",
                                format!("'{e}' appears twice in the batch (items {j} and {i}) and item {i} does not supersede it"),
                            )
                            .at_item(i));
                        }
                    }
                    pos.push(i);
                }
            }
            // A correction line repeated right after itself (no other
            // correction naming the same record in between) is one
            // correction, as it is when sent again in a later batch while
            // the version it made is current: the repeat is a duplicate of
            // the earlier line. With another correction in between, it is
            // a change back, and a new version.
            {
                let mut last: HashMap<&RecordRef, usize> = HashMap::new();
                for (i, r) in records.iter().enumerate() {
                    let Some(s) = &r.supersedes else { continue };
                    if repeats.contains_key(&i) {
                        continue;
                    }
                    match last.get(s) {
                        Some(&j) if records[j] == *r => {
                            repeats.insert(i, j);
                            batch_ids[i] = batch_ids[j];
                        }
                        _ => {
                            last.insert(s, i);
                        }
                    }
                }
            }
            // resolve a reference to (id, record type, effective state)
            let rz = Resolver {
                session: self,
                st: &st,
                tenant: &tenant,
                tsym,
                tstate,
                held,
                actor,
                admin: self.acts_as_admin(&st),
                batch_ext: std::cell::RefCell::new(batch_ext),
                metric: db.inner.opts.metric,
            };
            // what stage 2 kept of each item it created (None: a duplicate)
            let mut batch: Vec<Option<InBatch>> = Vec::with_capacity(records.len());
            for (i, r) in records.iter().enumerate() {
                if let Some(&j) = repeats.get(&i) {
                    // (what it repeats as resolved: stored, if that item was a duplicate)
                    batch_ids[i] = batch_ids[j];
                    batch.push(None);
                    let first = &prepared[j];
                    let same_as = (first.outcome == AppendOutcome::Created).then_some(j);
                    let mut p =
                        Prepared::duplicate(batch_ids[j], r, (first.status, first.lsn), same_as);
                    // (the first's external id, given or inherited, is the repeat's)
                    p.stored.external_id.clone_from(&first.stored.external_id);
                    prepared.push(p);
                    continue;
                }
                let rtype = r.body.record_type();
                let ItemResolution {
                    resolved: res,
                    mut notes,
                    inherited,
                    effective,
                    unless_duplicate,
                } = rz.record(
                    i,
                    r,
                    &batch_ids,
                    &batch,
                    &mut normalized[i].0,
                    &w,
                    &mut superseded_here,
                    &mut new_dims,
                )?;
                let r = inherited.as_ref().unwrap_or(r);
                // access and retention
                let (access, retention, pre_hash) = std::mem::take(&mut normalized[i]);
                let hash = match pre_hash {
                    Some(h) => h,
                    None => content_hash(r, &res, &retention, &access, data_json[i].as_deref()),
                };
                // A correction saying exactly what the item of this batch
                // it corrects says (hashed as that item's sibling, with its
                // external id): a duplicate of that item, as it is of the
                // stored version when sent in a later batch.
                let unchanged_here = res
                    .supersedes
                    // (the first item holding that id made it, not a repeat)
                    .and_then(|s| batch_ids[..i].iter().position(|b| *b == s))
                    .filter(|&j| {
                        let first = &prepared[j].stored;
                        prepared[j].outcome == AppendOutcome::Created
                            && first.external_id == r.external_id
                            && content_hash(
                                r,
                                &Resolved {
                                    supersedes: first.supersedes.map(RecordId::from_bytes),
                                    ..res.clone()
                                },
                                &retention,
                                &access,
                                data_json[i].as_deref(),
                            ) == first.content_sha256
                    });
                if let Some(j) = unchanged_here {
                    let s = batch_ids[j];
                    if superseded_here.get(&s) == Some(&i) {
                        superseded_here.remove(&s);
                    }
                    batch_ids[i] = s;
                    batch.push(None);
                    let status = prepared[j].status;
                    prepared.push(Prepared::duplicate(s, r, (status, 0), Some(j)));
                    continue;
                }
                // stage 3: external id rules (a duplicate stores nothing)
                // a correction of an earlier item of this batch that holds
                // the same external id continues that chain (the item
                // corrected the stored version)
                let continues_batch = res
                    .supersedes
                    .and_then(|s| batch_ids[..i].iter().position(|b| *b == s))
                    .and_then(|j| batch[j].as_ref())
                    .is_some_and(|b| b.external_id.is_some() && b.external_id == r.external_id);
                let existing = existing_version(
                    (self, &held_once),
                    &w,
                    &st,
                    &tenant,
                    (i, r),
                    (hash, &access),
                    (res.supersedes, continues_batch),
                );
                let existing = match (existing, unless_duplicate) {
                    (Ok(Some(dup)), _) => Some(dup),
                    _ if let Some(same) = unchanged_correction(
                        db,
                        &st,
                        tsym,
                        (r, &res),
                        (&retention, &access),
                        data_json[i].as_deref(),
                        (
                            &|v| {
                                let held = held_once.get_or_init(|| self.held_labels(&st));
                                let t = self.target(&st, v, held);
                                t.readable || t.own
                            },
                            res.supersedes.is_some_and(|s| batch_ids[..i].contains(&s)),
                        ),
                    )? =>
                    {
                        Some(same)
                    }
                    (_, Some(refused)) => return Err(refused),
                    (found, None) => found?,
                };
                if let Some((eid, lsn, status)) = existing {
                    // A duplicate corrects nothing: a later item of the
                    // batch may correct what it named.
                    if let Some(s) = res.supersedes
                        && superseded_here.get(&s) == Some(&i)
                    {
                        superseded_here.remove(&s);
                    }
                    // Later items of the batch that name this one must
                    // point at the stored record.
                    batch_ids[i] = eid;
                    batch.push(None);
                    prepared.push(Prepared::duplicate(eid, r, (status, lsn), None));
                    continue;
                }
                // writer and admission
                let writer = match (&r.writer, self.principal.may_attribute()) {
                    (Some(w), true) => w.clone(),
                    (given, _) => {
                        let me = Writer {
                            principal: self.principal.id().to_string(),
                            kind: self.principal.kind(),
                        };
                        if given.as_ref().is_some_and(|w| *w != me) {
                            notes.push(format!(
                                "writer ignored: the record is written by '{}' ({}), the principal that appends it (only the tenant admin names another writer)",
                                me.principal,
                                me.kind.name()
                            ));
                        }
                        me
                    }
                };
                if !access.is_empty() {
                    let held = held_once.get_or_init(|| self.held_labels(&st));
                    notes.extend(self.labels_not_held_note(&st, &access, held));
                }
                let rules = (tstate, w.pending_rules.get(&tenant));
                let status = admission(rtype, &r.body, writer.kind, rules);
                candidate_correction(&st, (tsym, rules), (status, &res), (i, r), writer.kind)?;
                let pending = Pending {
                    corrected: &|sid| superseded_here.get(&sid).copied().filter(|&j| j < i),
                    corrections_before: superseded_here.values().any(|&j| j < i),
                    superseding: &w.pending_superseded,
                    retracting: &w.pending_retracted,
                    now: self.db.now(),
                };
                source_out_of_use(&st, tsym, &res, (&minted, &batch), &pending, i)?;
                batch.push(Some(InBatch {
                    rtype,
                    effective,
                    own: writer.principal == self.principal.id()
                        && writer.kind == self.principal.kind(),
                    status,
                    scope: r.scope.clone(),
                    external_id: r.external_id.clone(),
                    // (a start not given: the earlier of occurred_at and
                    // now, as applying it will set it)
                    validity: (r.valid_from.is_some() || r.valid_until.is_some()).then(|| {
                        let start = r.occurred_at.map_or(wall, |o| o.min(now));
                        (r.valid_from.or(Some(start)), r.valid_until)
                    }),
                    sources: res.sources.clone(),
                    supersedes: res.supersedes,
                }));
                let stored = stored_record(
                    r,
                    &res,
                    Stamp {
                        id: batch_ids[i],
                        tenant: &tenant,
                        now,
                        wall,
                        run,
                    },
                    Admitted {
                        hash,
                        access,
                        retention,
                        writer,
                        status,
                    },
                    data_json[i].clone(),
                );
                prepared.push(Prepared {
                    stored,
                    outcome: AppendOutcome::Created,
                    status,
                    lsn: 0,
                    notes,
                    frame: 0,
                    same_as: None,
                });
            }
            let frames = encode_frames(&mut prepared, &records);
            if frames.is_empty() {
                drop((st, w));
                let mut out = results(&prepared, &records, &[]);
                await_repeated(db, &prepared, &mut out)?;
                return Ok(out);
            }
            // stage 5: register what is in flight (so concurrent batches
            // see these external ids, corrections and new vector spaces),
            // then queue
            in_flight = InFlight::register(&mut w, &tenant, &prepared, &records, new_dims);
            w.last_ingested_at = now;
            drop(st);
            rx = db.inner.log.append_async(frames);
        }
        let reply = durable(rx);
        in_flight.release(&db.inner.writer);
        let locs = reply?;
        db.check_open()?;
        let mut out = results(&prepared, &records, &locs);
        await_repeated(db, &prepared, &mut out)?;
        // (only a record naming another can be reached by a deletion that
        // raced it: plain records skip the lookups)
        if prepared.iter().any(|p| {
            p.outcome == AppendOutcome::Created
                && (p.stored.supersedes.is_some() || !p.stored.sources.is_empty())
        }) {
            said_as_applied(&db.state(), &mut out);
        }
        Ok(out)
    }
}

impl Session {
    /// Writes an operation; `reuse` gives it the id of an operation that a
    /// restore re-applies, so that the re-applied operation is recognised
    /// as already present by any later restore or resume.
    pub(crate) fn write_op_as(
        &self,
        op: OpBody,
        reuse: Option<RecordId>,
    ) -> Result<(RecordId, u64)> {
        self.db.check_open()?;
        let _m = self.db.inner.maintenance.read();
        // Minted and queued under the writer lock, as a batch is: ids of
        // operations and records follow log order (`State::deleted_before`
        // relies on it).
        let (id, rx, held) = {
            let mut w = self.db.inner.writer.lock();
            let held = hold_op(
                &mut w,
                &self.db.state(),
                self.principal.tenant(),
                &op,
                reuse,
            )?;
            let (minted, at) = self.db.mint_locked(&mut w);
            let id = match reuse {
                Some(r) => {
                    // later ids must stay above it
                    w.ids.observe(r);
                    r
                }
                None => minted,
            };
            let stored = StoredOp {
                id: id.to_bytes(),
                tenant: self.principal.tenant().to_string(),
                at_ms: at,
                actor: self.principal.id().to_string(),
                op,
            };
            let frame = PendingFrame {
                frame_type: codec::FRAME_OP,
                frame_version: codec::PAYLOAD_VERSION,
                payload: codec::encode_op(&stored),
            };
            (id, self.db.inner.log.append_async(vec![frame]), held)
        };
        let locs = durable(rx);
        release_op(&mut self.db.inner.writer.lock(), held);
        let locs = locs?;
        self.db.check_open()?;
        Ok((id, locs[0].lsn))
    }
}

/// Waits for frames queued with `SegmentLog::append_async` to be durable
/// (and applied, or held under the state's write lock to be applied, which
/// every read waits for): where they went, or why they are not.
fn durable(
    queued: engram_storage::StorageResult<
        engram_storage::oneshot::Receiver<
            engram_storage::StorageResult<engram_storage::log::AppendOutcome>,
        >,
    >,
) -> Result<engram_storage::log::AppendOutcome> {
    queued?
        .recv()
        .map_err(|_| EngineError::Closed)
        .and_then(|r| r.map_err(EngineError::from))
}

/// Stage 4: each created record's frame, followed by one frame per client
/// vector; sets each record's `frame` to the position of its record frame.
fn encode_frames(prepared: &mut [Prepared], records: &[NewRecord]) -> Vec<PendingFrame> {
    // The archives over the cores for a large batch; the frames in order.
    let payloads = crate::split::map(prepared, crate::split::SPLIT_MIN, |_, p| {
        (p.outcome == AppendOutcome::Created).then(|| codec::encode_record(&p.stored))
    });
    let mut frames: Vec<PendingFrame> = Vec::with_capacity(prepared.len());
    for ((p, r), payload) in prepared.iter_mut().zip(records).zip(payloads) {
        let Some(payload) = payload else {
            continue;
        };
        p.frame = frames.len();
        frames.push(PendingFrame {
            frame_type: codec::FRAME_RECORD,
            frame_version: codec::PAYLOAD_VERSION,
            payload,
        });
        for e in &r.embeddings {
            frames.push(PendingFrame {
                frame_type: codec::FRAME_VECTOR,
                frame_version: codec::PAYLOAD_VERSION,
                payload: codec::encode_vector(&StoredVector {
                    record: p.stored.id,
                    model: e.model.clone(),
                    vector: e.vector.clone(),
                }),
            });
        }
    }
    frames
}

/// What a queued batch holds in the writer's in-flight tables until its
/// fsync answers: external ids, corrected records, new vector spaces.
struct InFlight {
    keys: Vec<(String, String)>,
    superseded: Vec<RecordId>,
    models: Vec<(String, String)>,
}

impl InFlight {
    fn register(
        w: &mut WriterState,
        tenant: &str,
        prepared: &[Prepared],
        records: &[NewRecord],
        new_dims: HashMap<String, usize>,
    ) -> InFlight {
        let mut f = InFlight {
            keys: Vec::new(),
            superseded: Vec::new(),
            models: Vec::new(),
        };
        for (p, r) in prepared.iter().zip(records) {
            if p.outcome != AppendOutcome::Created {
                continue;
            }
            if let Some(e) = &r.external_id {
                let key = (tenant.to_string(), e.clone());
                w.pending_ext.insert(
                    key.clone(),
                    (
                        RecordId::from_bytes(p.stored.id),
                        p.stored.content_sha256,
                        p.stored.writer_principal.clone(),
                    ),
                );
                f.keys.push(key);
            }
            if let Some(s) = p.stored.supersedes {
                let s = RecordId::from_bytes(s);
                w.pending_superseded.insert(s);
                f.superseded.push(s);
            }
        }
        for (m, d) in new_dims {
            let key = (tenant.to_string(), m);
            w.pending_dims.insert(key.clone(), d);
            f.models.push(key);
        }
        f
    }

    /// Removes the batch's entries (its frames are applied, or failed).
    fn release(self, writer: &Mutex<WriterState>) {
        if self.keys.is_empty() && self.superseded.is_empty() && self.models.is_empty() {
            return;
        }
        let mut w = writer.lock();
        for k in &self.keys {
            w.pending_ext.remove(k);
        }
        for s in &self.superseded {
            w.pending_superseded.remove(s);
        }
        for m in &self.models {
            w.pending_dims.remove(m);
        }
    }
}

/// What the write path stamps on every record of a batch.
struct Stamp<'a> {
    id: RecordId,
    tenant: &'a str,
    /// Transaction time of the batch.
    now: i64,
    /// The clock's reading (`occurred_at`'s default): `now` unless the clock
    /// is behind the store (docs/format.md, "Time").
    wall: i64,
    /// The ingest run.
    run: RecordId,
}

/// Stage 4: the stored form of a record whose references are resolved.
fn stored_record(
    r: &NewRecord,
    res: &Resolved,
    stamp: Stamp<'_>,
    a: Admitted,
    data_json: Option<String>,
) -> StoredRecord {
    let rtype = r.body.record_type();
    let (entity_type, name, aliases) = match &r.body {
        Body::Entity {
            entity_type,
            name,
            aliases,
        } => (
            Some(entity_type.clone()),
            Some(name.clone()),
            aliases.clone(),
        ),
        _ => (None, None, Vec::new()),
    };
    let (predicate, object_value, generator) = match &r.body {
        Body::Relation { predicate, .. } => (Some(predicate.clone()), None, None),
        Body::Assertion {
            predicate, object, ..
        } => (predicate.clone(), object.clone(), None),
        Body::Summary { generator } => (None, None, Some(generator.clone())),
        _ => (None, None, None),
    };
    let mut scope_labels = r.scope.labels.clone();
    scope_labels.sort();
    scope_labels.dedup();
    StoredRecord {
        id: stamp.id.to_bytes(),
        record_type: rtype.code(),
        tenant: stamp.tenant.to_string(),
        scope_user: r.scope.user.clone(),
        scope_conversation: r.scope.conversation.clone(),
        scope_agent: r.scope.agent.clone(),
        scope_labels,
        kind: r.kind.clone(),
        occurred_at_ms: r.occurred_at.unwrap_or(stamp.wall),
        ingested_at_ms: stamp.now,
        valid_from_ms: r.valid_from,
        valid_until_ms: r.valid_until,
        last_verified_at_ms: r.last_verified_at,
        text: r.text.clone(),
        data_json,
        content_sha256: a.hash,
        schema_version: SCHEMA_VERSION,
        ingest_run_id: stamp.run.to_bytes(),
        external_id: r.external_id.clone(),
        supersedes: res.supersedes.map(|x| x.to_bytes()),
        retention_class: a.retention,
        access: a.access,
        writer_principal: a.writer.principal,
        writer_kind: a.writer.kind.code(),
        vector_models: r.embeddings.iter().map(|e| e.model.clone()).collect(),
        status: a.status as u8,
        entity_type,
        name,
        aliases,
        subject: res.subject.map(|x| x.to_bytes()),
        predicate,
        object: res.object.map(|x| x.to_bytes()),
        object_value,
        sources: res.sources.iter().map(|x| x.to_bytes()).collect(),
        derivation: r.derivation.as_ref().map(|d| StoredDerivation {
            extractor: d.extractor.clone(),
            model_config: d.model_config.clone(),
            generated: d.generated,
        }),
        confidence: r.confidence,
        generator,
    }
}
