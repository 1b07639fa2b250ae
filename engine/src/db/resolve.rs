//! Stage 2 of the write path: resolving what each record of a batch names
//! (the record it corrects, its sources, a relation's or assertion's
//! endpoints) inside the session's tenant and among earlier items, under
//! the writer lock.

use super::write::{Resolved, one_of};
use super::*;
use crate::state::{Sym, TenantState};

/// Where a reference of the batch led.
#[derive(Clone, Copy, Debug)]
pub(super) enum Place {
    /// A stored record (possibly one an earlier item repeated).
    Stored(Idx),
    /// A record an earlier item of the batch creates.
    Batch(usize),
}

/// What stage 2 keeps of an item of the batch it created, for a later item
/// that corrects it: a correction in the same batch as its target inherits
/// and is authorized exactly as one in a later batch.
#[derive(Clone, Debug)]
pub(super) struct InBatch {
    pub(super) rtype: RecordType,
    /// Its effective access labels (its own and its sources'); `None` when
    /// a source is another batch's record still in flight.
    pub(super) effective: Option<Vec<String>>,
    /// Whether the session's principal is its writer.
    pub(super) own: bool,
    /// Its admission status.
    pub(super) status: Status,
    pub(super) scope: Scope,
    pub(super) external_id: Option<String>,
    /// Its `valid_from` and `valid_until`, when it gives either (the start
    /// as applying it sets it, as for a stored record).
    pub(super) validity: Option<(Option<i64>, Option<i64>)>,
    /// Its sources, as resolved.
    pub(super) sources: Vec<RecordId>,
    /// The record it corrects, if any.
    pub(super) supersedes: Option<RecordId>,
}

/// Why a record of `status` cannot be corrected, if it cannot: it is out
/// of use ([`Status::out_of_use`]), and a correction would make it a
/// superseded version, which every reader may select (`status =
/// superseded`, `history`): text no reviewer approved, or that was
/// withdrawn, would become readable, and the rejection or retraction would
/// no longer show. (A candidate is revised by rejecting it and writing a
/// new one, as a stale candidate is regenerated.)
pub(super) fn out_of_use(status: Status) -> Option<String> {
    let advice = match status {
        Status::Candidate => {
            "reject it and write the new version as a record of its own, or approve it first"
        }
        _ => "write the new version as a record of its own",
    };
    status.out_of_use().map(|why| format!("it {why}: {advice}"))
}

/// What a correction inherits from, and is authorized against: the record
/// it corrects, stored or earlier in the batch.
struct Prior {
    labels: Vec<String>,
    target: crate::authz::Target,
    scope: Scope,
    external_id: Option<String>,
    /// Its validity interval (`valid_from`, `valid_until`), when it has
    /// one: `None` for a record valid from its start with no end.
    validity: Option<(Option<i64>, Option<i64>)>,
    /// The refusal of a correction of a version already corrected, unless
    /// the item is a duplicate.
    superseded: Option<EngineError>,
}

/// Stage 2's answer for one item.
pub(super) struct ItemResolution {
    pub(super) resolved: Resolved,
    /// What the engine decided beyond what the item said.
    pub(super) notes: Vec<String>,
    /// The item with the fields its correction inherits, when any.
    pub(super) inherited: Option<NewRecord>,
    /// Its effective access labels (see [`InBatch::effective`]).
    pub(super) effective: Option<Vec<String>>,
    /// The error to give unless stage 3 finds the item a duplicate (a
    /// correction of a version already corrected: appends are idempotent,
    /// so that correction sent again is a duplicate, anything else is
    /// refused).
    pub(super) unless_duplicate: Option<EngineError>,
}

/// A correction has the type of the record it corrects.
fn same_type(i: usize, r: &NewRecord, target: RecordType) -> Result<()> {
    let rtype = r.body.record_type();
    if rtype == target {
        return Ok(());
    }
    Err(EngineError::invalid(
        "supersedes",
        format!(
            "{} cannot supersede {}",
            crate::model::with_article(rtype.name()),
            crate::model::with_article(target.name())
        ),
    )
    .at_item(i))
}

/// Stage 2's view of the store and the batch, under the writer lock.
pub(super) struct Resolver<'a> {
    pub(super) session: &'a Session,
    pub(super) st: &'a State,
    pub(super) tenant: &'a str,
    pub(super) tsym: Option<Sym>,
    pub(super) tstate: Option<&'a TenantState>,
    /// Labels the session holds (only when the batch names other records).
    pub(super) held: BTreeSet<String>,
    pub(super) actor: crate::authz::Actor<'a>,
    /// Whether the session acts as its tenant's admin, who holds every
    /// label not revoked tenant-wide (labels new in this batch included).
    pub(super) admin: bool,
    /// External id -> positions in the batch; a correction that inherits
    /// its target's external id is added, so a later item naming that id
    /// names the newest version, as it would in a later batch.
    pub(super) batch_ext: std::cell::RefCell<HashMap<String, Vec<usize>>>,
    pub(super) metric: Metric,
}

impl Resolver<'_> {
    /// A stored record the principal cannot read does not exist for it:
    /// naming it as a source, a correction target or an endpoint is
    /// answered exactly like naming nothing.
    pub(super) fn visible(&self, ix: Idx) -> bool {
        self.session.target(self.st, ix, &self.held).readable
    }

    /// The error for a reference that names nothing the caller can see.
    fn missing(&self, rf: &RecordRef, field: &str, i: usize) -> EngineError {
        EngineError::invalid(
            field,
            format!(
                "no record {} in tenant '{}'",
                reference_phrase(rf),
                self.tenant
            ),
        )
        .at_item(i)
    }

    /// A reference of item `i` to an earlier item `j` of the batch, whose
    /// id is `id`. An item that repeated a stored record (a duplicate)
    /// stands for that record: the reference then leads to it, with the
    /// same visibility and checks as a reference to it from a later batch.
    fn earlier(
        &self,
        rf: &RecordRef,
        field: &str,
        (i, j): (usize, usize),
        id: RecordId,
    ) -> Result<(RecordId, Place)> {
        match self.tsym.and_then(|t| self.st.idx_in(t, id)) {
            Some(ix) if self.visible(ix) => Ok((id, Place::Stored(ix))),
            Some(_) => Err(self.missing(rf, field, i)),
            None => Ok((id, Place::Batch(j))),
        }
    }

    /// A reference of item `i` to an earlier item of the batch or a stored
    /// record of the tenant.
    fn resolve(
        &self,
        batch_ids: &[RecordId],
        rf: &RecordRef,
        field: &str,
        i: usize,
    ) -> Result<(RecordId, Place)> {
        // An earlier item of the batch, by the id minted for it.
        if let Some(id) = rf.as_id() {
            if let Some(j) = batch_ids.iter().position(|b| *b == id) {
                if j >= i {
                    return Err(EngineError::invalid(
                        field,
                        format!("{id} refers to a record later in the batch"),
                    )
                    .at_item(i));
                }
                return self.earlier(rf, field, (i, j), id);
            }
        }
        // The latest earlier item with that external id; an item
        // naming its own external id refers to the version it
        // corrects (earlier in the batch or stored).
        if let Some(e) = rf.as_external() {
            if let Some(pos) = self.batch_ext.borrow().get(e) {
                // (the latest earlier item: positions are not in order, as
                // an item inheriting the external id is added when it is
                // resolved, after the items that give it)
                if let Some(j) = pos.iter().copied().filter(|&j| j < i).max() {
                    // An item that repeats another stands for it: its id
                    // is the earlier item's (the first that holds it) or
                    // a stored record's.
                    let j = batch_ids[..j]
                        .iter()
                        .position(|b| *b == batch_ids[j])
                        .unwrap_or(j);
                    // A bare reference whose id reading names another
                    // (stored) record is ambiguous, as it is from a later
                    // batch: never a guess.
                    let stored = rf
                        .as_id()
                        .and_then(|id| self.tsym.and_then(|t| self.st.idx_in(t, id)))
                        .filter(|&ix| self.visible(ix));
                    if let Some(ix) = stored
                        && self.st.meta(ix).id != batch_ids[j]
                    {
                        return Err(EngineError::ambiguous(self.tenant, rf).placed(i, field));
                    }
                    return self.earlier(rf, field, (i, j), batch_ids[j]);
                }
                if let Some(&j) = pos.iter().find(|&&j| j > i) {
                    if !pos.contains(&i) {
                        return Err(EngineError::invalid(
                            field,
                            format!("external id '{e}' is defined later in the batch (item {j})"),
                        )
                        .at_item(i));
                    }
                }
            }
        }
        let by_id = rf
            .as_id()
            .and_then(|id| self.tsym.and_then(|t| self.st.idx_in(t, id)));
        let by_ext = rf
            .as_external()
            .and_then(|e| self.tstate?.by_external_id(e));
        match one_of(by_id, by_ext, rf, self.tenant, |ix| self.visible(ix)) {
            Some(Ok(ix)) => Ok((self.st.meta(ix).id, Place::Stored(ix))),
            Some(Err(e)) => Err(e.placed(i, field)),
            None => Err(self.missing(rf, field, i)),
        }
    }

    /// The stored record `ix` that item `i` corrects: the matrix, its
    /// type, a newer version, a deletion; then what the correction
    /// inherits from it.
    fn stored_prior(&self, i: usize, r: &NewRecord, sid: RecordId, ix: Idx) -> Result<Prior> {
        let m = self.st.meta(ix);
        // The matrix first: what the target's state is (its type, a
        // newer version, a deletion) is told only to a principal that may
        // correct it.
        let target = self.session.target(self.st, ix, &self.held);
        if let crate::authz::Decision::Forbidden(reason) =
            crate::authz::decide(self.actor, crate::authz::Operation::Correct, Some(target))
        {
            let action = format!("correct {sid} (item {i})");
            return Err(self.session.refusal(self.st, ix, action, reason));
        }
        same_type(i, r, m.rtype)?;
        // A version already corrected: refused unless the item turns out
        // to be that correction sent again (stage 3, by content).
        // (naming the chain's newest version: its next one may have been
        // corrected too, and a client would walk the chain one refusal at
        // a time)
        let superseded = m.superseded_by.map(|_| {
            let head = *self
                .st
                .chain(ix)
                .last()
                .expect("a chain holds its versions");
            // (a newest version that is gone is not a version to correct)
            match self.session.gone_head(self.st, head) {
                Some(reason) => EngineError::InvalidState {
                    action: format!("correct (item {i})"),
                    target: sid,
                    reason,
                },
                None => EngineError::AlreadySuperseded {
                    item: Some(i),
                    target: sid,
                    by: self.visible(head).then(|| self.st.meta(head).id),
                },
            }
        });
        if m.status == Status::Deleted {
            // as any other operation on a deleted record it could read
            return Err(EngineError::InvalidState {
                action: format!("correct (item {i})"),
                target: sid,
                reason: "it is deleted".into(),
            });
        }
        // (a version already corrected is refused as such, unless the
        // item repeats that correction: deferred above)
        if let Some(reason) = out_of_use(m.status).filter(|_| superseded.is_none()) {
            return Err(EngineError::InvalidState {
                action: format!("correct (item {i})"),
                target: sid,
                reason,
            });
        }
        let name = |x: Option<u32>| x.map(|x| self.st.strings.name(x).to_string());
        Ok(Prior {
            labels: self.st.access_names(ix),
            target,
            scope: Scope {
                user: name(m.user),
                conversation: name(m.conversation),
                agent: name(m.agent),
                labels: m
                    .scope_labels
                    .iter()
                    .map(|&l| self.st.strings.name(l).to_string())
                    .collect(),
            },
            external_id: m.external_id.as_deref().map(str::to_string),
            // (a start that was not given is the record's own, the
            // earlier of its occurred_at and its ingestion: kept with an
            // end, so the correction is valid over the same interval)
            validity: (m.valid_from_given || m.valid_until.is_some())
                .then_some((Some(m.valid_start()), m.valid_until)),
            superseded,
        })
    }

    /// Item `j` of the batch, which item `i` corrects: the same matrix and
    /// type rule as for a stored record.
    fn batch_prior(
        &self,
        (i, j): (usize, usize),
        r: &NewRecord,
        s: &RecordRef,
        batch: &[Option<InBatch>],
    ) -> Result<Prior> {
        let in_flight = || {
            EngineError::invalid(
                "supersedes",
                format!("{s} (item {j}) is being written by another batch in flight; retry"),
            )
            .at_item(i)
        };
        let Some(b) = batch.get(j).and_then(Option::as_ref) else {
            return Err(in_flight());
        };
        let Some(labels) = b.effective.clone() else {
            return Err(in_flight());
        };
        let holds = |l: &String| {
            self.held.contains(l)
                || (self.admin && !self.tstate.is_some_and(|t| t.revoked_labels.contains(l)))
        };
        let target = crate::authz::Target {
            readable: labels.iter().all(holds),
            own: b.own,
            same_name: b.own,
        };
        match crate::authz::decide(self.actor, crate::authz::Operation::Correct, Some(target)) {
            crate::authz::Decision::Allow => {}
            crate::authz::Decision::Hidden => return Err(self.missing(s, "supersedes", i)),
            crate::authz::Decision::Forbidden(reason) => {
                return Err(EngineError::Forbidden {
                    principal: self.session.principal.to_string(),
                    action: format!("correct {s} (item {i})"),
                    reason: reason.to_string(),
                });
            }
        }
        same_type(i, r, b.rtype)?;
        if let Some(reason) = out_of_use(b.status) {
            return Err(
                EngineError::invalid("supersedes", format!("{s} (item {j}): {reason}")).at_item(i),
            );
        }
        Ok(Prior {
            labels,
            target,
            scope: b.scope.clone(),
            external_id: b.external_id.clone(),
            validity: b.validity,
            superseded: None,
        })
    }

    /// A record's effective labels, as applying it will compute them: its
    /// own (`access`) and those of every record it carries the labels of;
    /// `None` when one of those is another batch's record still in flight.
    fn effective(
        &self,
        access: &[String],
        carried: &[Place],
        batch: &[Option<InBatch>],
    ) -> Option<Vec<String>> {
        let mut e = access.to_vec();
        for &place in carried {
            match place {
                Place::Stored(ix) => e.extend(self.st.access_names(ix)),
                Place::Batch(j) => e.extend(batch.get(j)?.as_ref()?.effective.clone()?),
            }
        }
        e.sort();
        e.dedup();
        Some(e)
    }

    /// What a correction leaves out, taken from the record it corrects:
    /// its access labels (into `access`; dropping one takes the tenant
    /// admin and `replace_access`), its scope when the correction gives
    /// none, its external id when the correction gives none.
    fn inherit(
        &self,
        (i, r): (usize, &NewRecord),
        what: &str,
        prior: Prior,
        access: &mut Vec<String>,
        notes: &mut Vec<String>,
    ) -> Result<Option<NewRecord>> {
        let dropped: Vec<String> = prior
            .labels
            .iter()
            .filter(|l| !access.contains(l))
            .cloned()
            .collect();
        if !dropped.is_empty() {
            if r.replace_access {
                if let crate::authz::Decision::Forbidden(reason) = crate::authz::decide(
                    self.actor,
                    crate::authz::Operation::LowerAccess,
                    Some(prior.target),
                ) {
                    return Err(EngineError::Forbidden {
                        principal: self.session.principal.to_string(),
                        action: format!(
                            "drop access label(s) {} of {what} (item {i})",
                            dropped.join(", ")
                        ),
                        reason: reason.to_string(),
                    });
                }
                notes.push(format!(
                    "access lowered by the tenant admin: label(s) {} of the corrected record dropped",
                    dropped.join(", ")
                ));
            } else {
                access.extend(dropped.iter().cloned());
                access.sort();
                access.dedup();
                notes.push(format!(
                    "inherited access label(s) {} from the corrected record",
                    dropped.join(", ")
                ));
            }
        }
        let scope_empty = r.scope == Scope::default();
        let ext_missing = r.external_id.is_none() && prior.external_id.is_some();
        // A fact true over an interval stays so when its wording is fixed:
        // a correction giving neither bound keeps the corrected record's
        // (said in a note, since it changes when the record is current).
        let validity = prior
            .validity
            .filter(|_| r.valid_from.is_none() && r.valid_until.is_none());
        if !(scope_empty || ext_missing || validity.is_some()) {
            return Ok(None);
        }
        let mut c = r.clone();
        if scope_empty {
            c.scope = prior.scope;
        }
        if ext_missing {
            c.external_id = prior.external_id;
        }
        if let Some((from, until)) = validity {
            (c.valid_from, c.valid_until) = (from, until);
            let show = |t: Option<i64>| t.map_or("-".to_string(), crate::time::format_rfc3339);
            notes.push(format!(
                "inherited the corrected record's validity interval (valid_from {}, valid_until {}); give valid_from or valid_until to state another",
                show(from),
                show(until)
            ));
        }
        Ok(Some(c))
    }

    /// Stage 2 for item `i`: resolves what it names (the record it
    /// corrects, its sources, a relation's or assertion's endpoints) inside
    /// the tenant and among earlier items (`batch`: what stage 2 kept of
    /// each), checks the correction may happen, inherits what a correction
    /// leaves out (access labels into `access`, scope and external id into
    /// the returned record), and checks vector dimensions.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn record(
        &self,
        i: usize,
        r: &NewRecord,
        batch_ids: &[RecordId],
        batch: &[Option<InBatch>],
        access: &mut Vec<String>,
        w: &WriterState,
        superseded_here: &mut HashMap<RecordId, usize>,
        new_dims: &mut HashMap<String, usize>,
    ) -> Result<ItemResolution> {
        let mut res = Resolved::default();
        let mut notes: Vec<String> = Vec::new();
        // A correction inherits what it leaves out.
        let mut inherited: Option<NewRecord> = None;
        let mut unless_duplicate = None;
        if let Some(s) = &r.supersedes {
            let (sid, place) = self.resolve(batch_ids, s, "supersedes", i)?;
            if sid == batch_ids[i] {
                return Err(EngineError::SupersedesCycle {
                    item: i,
                    chain: format!("{s} supersedes itself"),
                });
            }
            let (mut prior, what) = match place {
                Place::Stored(ix) => (self.stored_prior(i, r, sid, ix)?, sid.to_string()),
                Place::Batch(j) => (
                    self.batch_prior((i, j), r, s, batch)?,
                    format!("item {j} of the batch ({s})"),
                ),
            };
            unless_duplicate = prior.superseded.take();
            inherited = self.inherit((i, r), &what, prior, access, &mut notes)?;
            if let Some(e) = inherited
                .as_ref()
                .filter(|_| r.external_id.is_none())
                .and_then(|c| c.external_id.as_ref())
            {
                self.batch_ext
                    .borrow_mut()
                    .entry(e.clone())
                    .or_default()
                    .push(i);
            }
            if w.pending_retracted.contains(&sid) {
                return Err(EngineError::InvalidState {
                    action: "correct".into(),
                    target: sid,
                    reason: "it is being retracted by an operation in flight (a retracted record is out of use)".into(),
                });
            }
            // (resolved now, it would not inherit the end the expiry gives)
            if w.pending_expired.contains_key(&sid) {
                return Err(EngineError::InvalidState {
                    action: "correct".into(),
                    target: sid,
                    reason: "an expiry of it is in flight: correct it once that is applied (the correction then keeps its end)".into(),
                });
            }
            // A conflict with state about to be stored (409, as when it is
            // stored), not a bad field: once the other batch is
            // acknowledged, a retry is a duplicate or already superseded.
            if w.pending_superseded.contains(&sid) {
                return Err(EngineError::InvalidState {
                    action: "correct".into(),
                    target: sid,
                    reason:
                        "another batch in flight corrects it; once that batch is acknowledged, \
                             a retry of the same correction is a duplicate and another one is \
                             refused as already superseded"
                            .into(),
                });
            }
            if let Some(j) = superseded_here.insert(sid, i) {
                return Err(EngineError::invalid(
                    "supersedes",
                    format!("{s} is corrected twice in the batch (items {j} and {i})"),
                )
                .at_item(i));
            }
            res.supersedes = Some(sid);
        }
        let r = inherited.as_ref().unwrap_or(r);
        // Effective labels: its own and every source's (as applying it
        // will compute them).
        // what it carries the labels of: its sources, a relation's
        // endpoints, an assertion's subject
        let mut carried: Vec<Place> = Vec::new();
        // A deleted record is gone for what is written from now on: it
        // may not be cited, nor connected or described (its tombstone
        // still answers to its id, so say why).
        let not_deleted = |place: Place, field: &str, what: &str, id: RecordId| match place {
            Place::Stored(ix) if self.st.meta(ix).status == Status::Deleted => {
                Err(EngineError::invalid(field, format!("{what} {id} is deleted")).at_item(i))
            }
            _ => Ok(()),
        };
        for s in &r.sources {
            let (sid, place) = self.resolve(batch_ids, s, "sources", i)?;
            not_deleted(place, "sources", "source", sid)?;
            carried.push(place);
            if !res.sources.contains(&sid) {
                res.sources.push(sid);
            }
        }
        match &r.body {
            Body::Relation {
                subject, object, ..
            } => {
                let (s, six) = self.resolve(batch_ids, subject, "subject", i)?;
                let (o, oix) = self.resolve(batch_ids, object, "object", i)?;
                not_deleted(six, "subject", "subject", s)?;
                not_deleted(oix, "object", "object", o)?;
                carried.extend([six, oix]);
                for (place, f) in [(six, "subject"), (oix, "object")] {
                    let endpoint = match place {
                        Place::Stored(ix) => Some(self.st.meta(ix).rtype),
                        Place::Batch(j) => batch.get(j).and_then(Option::as_ref).map(|b| b.rtype),
                    };
                    if let Some(t) = endpoint {
                        if t != RecordType::Entity {
                            return Err(
                                EngineError::invalid(f, "a relation connects entities").at_item(i)
                            );
                        }
                    }
                }
                res.subject = Some(s);
                res.object = Some(o);
            }
            Body::Assertion {
                subject: Some(subject),
                ..
            } => {
                let (sid, place) = self.resolve(batch_ids, subject, "subject", i)?;
                not_deleted(place, "subject", "subject", sid)?;
                carried.push(place);
                res.subject = Some(sid);
            }
            _ => {}
        }
        // dims, and the embedder's own model: what a duplicate would not
        // store is refused only if the record is not one (a re-sent record
        // with other vectors is a duplicate that stores none of them)
        let mut vector_refusal: Option<EngineError> = None;
        let derived_model = self.st.embedder.as_deref().map(|e| e.model_id());
        for e in &r.embeddings {
            if derived_model == Some(e.model.as_str()) {
                vector_refusal.get_or_insert_with(|| {
                    EngineError::invalid(
                        "embedding.model",
                        format!(
                            "'{}' is the model of this store's embedder, whose vectors are derived \
                             from text; send client vectors under a model name of their own",
                            e.model
                        ),
                    )
                    .at_item(i)
                });
                continue;
            }
            let known = self
                .st
                .vectors
                .dim_of(self.tenant, &e.model)
                .or_else(|| {
                    w.pending_dims
                        .get(&(self.tenant.to_string(), e.model.clone()))
                        .copied()
                })
                .or_else(|| new_dims.get(&e.model).copied());
            match known {
                Some(d) if d != e.vector.len() => {
                    vector_refusal.get_or_insert(EngineError::DimensionMismatch {
                        item: Some(i),
                        field: "embedding.vector".into(),
                        model: e.model.clone(),
                        expected: d,
                        got: e.vector.len(),
                    });
                    continue;
                }
                Some(_) => {}
                None => {
                    new_dims.insert(e.model.clone(), e.vector.len());
                }
            }
            if self.metric == Metric::Cosine && e.vector.iter().all(|x| *x == 0.0) {
                return Err(EngineError::invalid(
                    "embedding.vector",
                    "all components are zero (no direction for cosine similarity)",
                )
                .at_item(i));
            }
        }
        let effective = self.effective(access, &carried, batch);
        Ok(ItemResolution {
            resolved: res,
            notes,
            inherited,
            effective,
            unless_duplicate: unless_duplicate.or(vector_refusal),
        })
    }
}
