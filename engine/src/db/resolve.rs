//! Stage 2 of the write path: resolving what each record of a batch names
//! (the record it corrects, its sources, a relation's or assertion's
//! endpoints) inside the session's tenant and among earlier items, under
//! the writer lock.

use super::write::{Resolved, one_of};
use super::*;
use crate::state::{Sym, TenantState};

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
    /// External id -> positions in the batch.
    pub(super) batch_ext: HashMap<String, Vec<usize>>,
    pub(super) metric: Metric,
}

impl Resolver<'_> {
    /// A stored record the principal cannot read does not exist for it:
    /// naming it as a source, a correction target or an endpoint is
    /// answered exactly like naming nothing.
    pub(super) fn visible(&self, ix: Idx) -> bool {
        self.session.target(self.st, ix, &self.held).readable
    }

    /// A reference of item `i` to (id, stored position): an earlier item
    /// of the batch (no position), or a stored record of the tenant.
    fn resolve(
        &self,
        batch_ids: &[RecordId],
        rf: &RecordRef,
        field: &str,
        i: usize,
    ) -> Result<(RecordId, Option<Idx>)> {
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
                return Ok((id, None));
            }
        }
        // The latest earlier item with that external id; an item
        // naming its own external id refers to the version it
        // corrects (earlier in the batch or stored).
        if let Some(e) = rf.as_external() {
            if let Some(pos) = self.batch_ext.get(e) {
                if let Some(&j) = pos.iter().rev().find(|&&j| j < i) {
                    return Ok((batch_ids[j], None));
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
            .and_then(|e| self.tstate.and_then(|t| t.external_ids.get(e).copied()));
        match one_of(by_id, by_ext, rf, self.tenant, |ix| self.visible(ix)) {
            Some(Ok(ix)) => Ok((self.st.meta(ix).id, Some(ix))),
            Some(Err(e)) => Err(e),
            None => Err(EngineError::invalid(
                field,
                format!(
                    "no record {} in tenant '{}'",
                    reference_phrase(rf),
                    self.tenant
                ),
            )
            .at_item(i)),
        }
    }

    /// Stage 2 for item `i`: resolves what it names (the record it
    /// corrects, its sources, a relation's or assertion's endpoints) inside
    /// the tenant and among earlier items, checks the correction may
    /// happen, inherits what a correction leaves out (access labels into
    /// `access`, scope and external id into the returned record), and checks
    /// vector dimensions. Returns the resolution, notes for the caller, and
    /// the record with inherited fields when there are any.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn record(
        &self,
        i: usize,
        r: &NewRecord,
        batch_ids: &[RecordId],
        access: &mut Vec<String>,
        w: &WriterState,
        superseded_here: &mut HashMap<RecordId, usize>,
        new_dims: &mut HashMap<String, usize>,
    ) -> Result<(Resolved, Vec<String>, Option<NewRecord>)> {
        let mut res = Resolved::default();
        let rtype = r.body.record_type();
        let mut notes: Vec<String> = Vec::new();
        // A correction of a stored record inherits what it leaves out.
        let mut inherited: Option<NewRecord> = None;
        if let Some(s) = &r.supersedes {
            let (sid, six) = self.resolve(batch_ids, s, "supersedes", i)?;
            if sid == batch_ids[i] {
                return Err(EngineError::SupersedesCycle {
                    item: i,
                    chain: format!("{s} supersedes itself"),
                });
            }
            if let Some(ix) = six {
                let m = self.st.meta(ix);
                // The matrix first: what the target's state is (its type, a
                // newer version, a deletion) is told only to a principal
                // that may correct it.
                let target = self.session.target(self.st, ix, &self.held);
                if let crate::authz::Decision::Forbidden(reason) =
                    crate::authz::decide(self.actor, crate::authz::Operation::Correct, Some(target))
                {
                    return Err(EngineError::Forbidden {
                        principal: self.session.principal.to_string(),
                        action: format!("correct {sid} (item {i})"),
                        reason: reason.to_string(),
                    });
                }
                if m.rtype != rtype {
                    return Err(EngineError::invalid(
                        "supersedes",
                        format!("a {} cannot supersede a {}", rtype.name(), m.rtype.name()),
                    )
                    .at_item(i));
                }
                if let Some(by) = m.superseded_by {
                    return Err(EngineError::AlreadySuperseded {
                        item: Some(i),
                        target: sid,
                        by: self.visible(by).then(|| self.st.meta(by).id),
                    });
                }
                if m.status == Status::Deleted {
                    return Err(
                        EngineError::invalid("supersedes", format!("{sid} is deleted")).at_item(i),
                    );
                }
                let given = &mut *access;
                let old: Vec<String> = self.st.access_names(ix);
                let dropped: Vec<String> =
                    old.iter().filter(|l| !given.contains(l)).cloned().collect();
                if !dropped.is_empty() {
                    if r.replace_access {
                        if let crate::authz::Decision::Forbidden(reason) = crate::authz::decide(
                            self.actor,
                            crate::authz::Operation::LowerAccess,
                            Some(target),
                        ) {
                            return Err(EngineError::Forbidden {
                                principal: self.session.principal.to_string(),
                                action: format!(
                                    "drop access label(s) {} of {sid} (item {i})",
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
                        given.extend(dropped.iter().cloned());
                        given.sort();
                        given.dedup();
                        notes.push(format!(
                            "inherited access label(s) {} from the corrected record",
                            dropped.join(", ")
                        ));
                    }
                }
                let scope_empty = r.scope == Scope::default();
                let ext_missing = r.external_id.is_none() && m.external_id.is_some();
                if scope_empty || ext_missing {
                    let mut c = r.clone();
                    if scope_empty {
                        let name = |x: Option<u32>| x.map(|x| self.st.strings.name(x).to_string());
                        c.scope = Scope {
                            user: name(m.user),
                            conversation: name(m.conversation),
                            agent: name(m.agent),
                            labels: m
                                .scope_labels
                                .iter()
                                .map(|&l| self.st.strings.name(l).to_string())
                                .collect(),
                        };
                    }
                    if ext_missing {
                        c.external_id = m.external_id.as_deref().map(str::to_string);
                    }
                    inherited = Some(c);
                }
            }
            if w.pending_superseded.contains(&sid) {
                return Err(EngineError::invalid(
                    "supersedes",
                    format!("{sid} is being corrected by another batch in flight; retry"),
                )
                .at_item(i));
            }
            if let Some(j) = superseded_here.insert(sid, i) {
                return Err(EngineError::invalid(
                    "supersedes",
                    format!("{sid} is corrected twice in the batch (items {j} and {i})"),
                )
                .at_item(i));
            }
            res.supersedes = Some(sid);
        }
        let r = inherited.as_ref().unwrap_or(r);
        for s in &r.sources {
            let (sid, six) = self.resolve(batch_ids, s, "sources", i)?;
            if let Some(ix) = six {
                let m = self.st.meta(ix);
                if m.status == Status::Deleted {
                    return Err(EngineError::invalid(
                        "sources",
                        format!("source {sid} is deleted"),
                    )
                    .at_item(i));
                }
            }
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
                for (ix, f) in [(six, "subject"), (oix, "object")] {
                    if let Some(ix) = ix {
                        if self.st.meta(ix).rtype != RecordType::Entity {
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
                res.subject = Some(self.resolve(batch_ids, subject, "subject", i)?.0);
            }
            _ => {}
        }
        // dims
        for e in &r.embeddings {
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
                    return Err(EngineError::DimensionMismatch {
                        item: Some(i),
                        field: "embedding.vector".into(),
                        model: e.model.clone(),
                        expected: d,
                        got: e.vector.len(),
                    });
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
        Ok((res, notes, inherited))
    }
}
