//! Applying log frames to the state: records, client vectors, tombstones
//! and lifecycle operations. The commit hook and the replay at open run
//! [`apply_frame`], so rebuilt state equals live state.

use super::*;
use crate::lexical::PreparedText;

impl State {
    /// The latest transaction time the state holds: of a record (kept by
    /// the applies below), a status change, an expiry or a ledger entry
    /// (what `as_of` reads travel past; a review rule's time is not kept,
    /// and no read travels it).
    pub fn latest_transaction_time(&self) -> i64 {
        let ops = self.status_log.iter().map(|c| c.at);
        let ops = ops.chain(self.expiry_log.iter().map(|c| c.at));
        let ops = ops.chain(self.ledger.iter().map(|e| e.at));
        ops.fold(self.last_ingested_at, i64::max)
    }

    /// Applies a record frame; `prepared` is its text as
    /// [`Bm25Index::prepare`](crate::lexical::Bm25Index::prepare) looked it
    /// up while the frame was being synced, if it was.
    fn apply_record(
        &mut self,
        a: &ArchivedStoredRecord,
        loc: FrameLoc,
        prepared: Option<PreparedText>,
    ) -> Result<()> {
        // The write path refuses records past the limit; a log holding more
        // could not be indexed without wrapping.
        if self.metas.len() >= crate::model::limits::RECORDS_MAX {
            return Err(crate::error::EngineError::LimitExceeded {
                item: None,
                what: "records in the store".into(),
                limit: crate::model::limits::RECORDS_MAX as u64,
                got: self.metas.len() as u64 + 1,
            });
        }
        let idx = idx_of(self.metas.len());
        let id = RecordId::from_bytes(a.id);
        self.check_new_id(id, loc)?;
        let tenant_name = a.tenant.as_str();
        let (tenant, ts) = self.tenant_mut(tenant_name);
        ts.last_lsn = ts.last_lsn.max(loc.lsn);
        let bad = |what: &str, code: u8| crate::error::EngineError::Corrupt {
            what: format!("record {id}"),
            detail: format!("unknown {what} code {code}"),
        };
        let rtype = RecordType::from_code(a.record_type)
            .ok_or_else(|| bad("record type", a.record_type))?;
        let writer_kind = WriterKind::from_code(a.writer_kind)
            .ok_or_else(|| bad("writer kind", a.writer_kind))?;
        let kind = self.strings.intern(a.kind.as_str());
        let writer = self.strings.intern(a.writer_principal.as_str());
        let akind = if rtype == RecordType::Assertion {
            AssertionKind::parse(a.kind.as_str())
        } else {
            None
        };
        let retention = self.strings.intern(a.retention_class.as_str());
        let user = a
            .scope_user
            .as_ref()
            .map(|s| self.strings.intern(s.as_str()));
        let conversation = a
            .scope_conversation
            .as_ref()
            .map(|s| self.strings.intern(s.as_str()));
        let agent = a
            .scope_agent
            .as_ref()
            .map(|s| self.strings.intern(s.as_str()));
        let scope_labels: Vec<Sym> = a
            .scope_labels
            .iter()
            .map(|s| self.strings.intern(s.as_str()))
            .collect();
        let resolve = |st: &State, b: &[u8; 16]| st.idx_in(tenant, RecordId::from_bytes(*b));
        let sources: Vec<Idx> = a.sources.iter().filter_map(|b| resolve(self, b)).collect();
        let supersedes = a.supersedes.as_ref().and_then(|b| resolve(self, b));
        let subject = a.subject.as_ref().and_then(|b| resolve(self, b));
        let object = a.object.as_ref().and_then(|b| resolve(self, b));
        let predicate = a
            .predicate
            .as_ref()
            .map(|s| self.strings.intern(s.as_str()));
        let mut access: BTreeSet<Sym> = a
            .access
            .iter()
            .map(|s| self.strings.intern(s.as_str()))
            .collect();
        for &s in &sources {
            access.extend(self.metas[s as usize].access.iter().copied());
        }
        // Relations and assertions about entities also inherit their
        // endpoints' restrictions.
        for e in [subject, object].into_iter().flatten() {
            access.extend(self.metas[e as usize].access.iter().copied());
        }
        let access: Vec<Sym> = access.into_iter().collect();
        let status = match a.status {
            0 => Status::Active,
            1 => Status::Candidate,
            2 => Status::Approved,
            c => return Err(bad("status", c)),
        };
        let occurred_at = a.occurred_at_ms.to_native();
        let ingested_at = a.ingested_at_ms.to_native();
        // Transaction time follows the log: `as_of` cuts rely on it.
        if ingested_at < self.last_ingested_at {
            return Err(crate::error::EngineError::Corrupt {
                what: format!("record {id} at LSN {}", loc.lsn),
                detail: format!(
                    "ingested_at {ingested_at} is before the previous record's {}",
                    self.last_ingested_at
                ),
            });
        }
        let valid_from = a
            .valid_from_ms
            .as_ref()
            .map(|v| v.to_native())
            .unwrap_or(occurred_at);
        let valid_until = a.valid_until_ms.as_ref().map(|v| v.to_native());
        let text = a.text.as_ref().map(|t| t.as_str());
        let external_id: Option<std::sync::Arc<str>> =
            a.external_id.as_ref().map(|e| e.as_str().into());
        let meta = Meta {
            id,
            loc,
            tenant,
            rtype,
            kind,
            akind,
            writer_kind,
            writer,
            occurred_at,
            ingested_at,
            valid_from,
            valid_from_given: a.valid_from_ms.is_some(),
            valid_until,
            status,
            retention,
            user,
            conversation,
            agent,
            scope_labels: scope_labels.clone(),
            access: access.clone(),
            supersedes,
            superseded_by: None,
            has_text: text.is_some_and(|t| !t.is_empty()),
            tombstone: false,
            external_id: external_id.clone(),
            subject,
            object,
            predicate,
        };
        self.push_meta(meta);
        self.by_id.insert(id, idx);
        self.last_ingested_at = self.last_ingested_at.max(ingested_at);
        bm_add(&mut self.bm_tenant, tenant, idx);
        self.bm_status.entry(status).or_default().insert(idx);
        self.bm_type.entry(rtype).or_default().insert(idx);
        bm_add(&mut self.bm_kind, kind, idx);
        bm_add(&mut self.bm_retention, retention, idx);
        if let Some(u) = user {
            bm_add(&mut self.bm_user, u, idx);
        }
        if let Some(c) = conversation {
            bm_add(&mut self.bm_conversation, c, idx);
        }
        if let Some(g) = agent {
            bm_add(&mut self.bm_agent, g, idx);
        }
        for &l in &scope_labels {
            bm_add(&mut self.bm_scope_label, l, idx);
        }
        for &l in &access {
            bm_add(&mut self.bm_access, l, idx);
        }
        if valid_until.is_some() {
            self.bm_bounded.insert(idx);
        }
        {
            let t = self.tenants.get_mut(&tenant).expect("tenant created above");
            t.labels.extend(access.iter().copied());
            if let Some(e) = &external_id {
                t.external_ids.insert(e.clone(), idx);
            }
            if rtype == RecordType::Entity {
                let mut names: Vec<String> = Vec::new();
                if let Some(n) = a.name.as_ref() {
                    names.push(crate::lexical::name_key(n.as_str()));
                }
                names.extend(
                    a.aliases
                        .iter()
                        .map(|s| crate::lexical::name_key(s.as_str())),
                );
                names.retain(|n| !n.is_empty());
                names.sort();
                names.dedup();
                for n in names {
                    t.entity_names.entry(n).or_default().push(idx);
                }
            }
        }
        // A record whose input was deleted before it was applied (a write
        // that raced the deletion) is deleted too: nothing derived from
        // deleted content, and no version of a deleted chain, ever lives.
        let born_deleted = sources
            .iter()
            .chain(supersedes.as_ref())
            .any(|&s| self.deleted_before(s, id));
        // correction, before this record joins the lineage: what was
        // derived from the old version goes stale, never the correction
        // itself, even when it cites the old version among its sources
        if let Some(old) = supersedes {
            self.metas[old as usize].superseded_by = Some(idx);
            self.set_status(old, Status::Superseded, ingested_at);
            self.mark_dependents_stale(old, ingested_at);
        }
        // lineage
        if !sources.is_empty() {
            for &s in &sources {
                let d = self.dependents.entry(s).or_default();
                if d.last() != Some(&idx) {
                    d.push(idx);
                }
            }
            self.sources.insert(idx, sources);
        }
        // graph
        if rtype == RecordType::Relation {
            if let (Some(s), Some(o)) = (subject, object) {
                self.edges.entry(s).or_default().push(Edge {
                    relation: idx,
                    other: o,
                    outgoing: true,
                });
                self.edges.entry(o).or_default().push(Edge {
                    relation: idx,
                    other: s,
                    outgoing: false,
                });
            }
        }
        if rtype == RecordType::Assertion {
            if let Some(s) = subject {
                self.about.entry(s).or_default().push(idx);
            }
        }
        if born_deleted {
            self.set_status(idx, Status::Deleted, ingested_at);
        }
        // indexes
        if let Some(t) = text {
            if loc.lsn > self.lexical_loaded_lsn && !t.is_empty() {
                match prepared {
                    Some(p) => self.lexical.add_prepared(idx, t, p),
                    None => self.lexical.add(idx, t),
                }
                .map_err(|e| crate::error::EngineError::Corrupt {
                    what: "lexical index".into(),
                    detail: e.to_string(),
                })?;
            }
        }
        if let (Some(emb), Some(t)) = (self.embedder.clone(), text) {
            // A space of the embedder's model that is not the embedder's
            // (client vectors sent under that name before this embedder was
            // chosen: the write path refuses them now) keeps its own
            // vectors; the record gets none derived, rather than a frame
            // every replay would fail to apply.
            let foreign = self
                .vectors
                .get(tenant_name, emb.model_id())
                .is_some_and(|s| !s.derived || s.dim != emb.dim());
            if embeds(rtype, akind)
                && !foreign
                && !a.vector_models.iter().any(|m| m.as_str() == emb.model_id())
            {
                let v = emb.embed(t);
                self.vectors
                    .push(tenant_name, emb.model_id(), true, idx, &v)?;
            }
        }
        self.applied_lsn = self.applied_lsn.max(loc.lsn);
        Ok(())
    }

    /// Applies a client vector frame (it follows its record in the batch).
    pub fn apply_vector(&mut self, a: &crate::codec::ArchivedStoredVector, lsn: Lsn) -> Result<()> {
        let id = RecordId::from_bytes(a.record);
        let idx = self
            .idx(id)
            .ok_or_else(|| crate::error::EngineError::Corrupt {
                what: format!("vector frame at LSN {lsn}"),
                detail: format!("record {id} is not in the log before it"),
            })?;
        let v: Vec<f32> = a.vector.iter().map(|x| x.to_native()).collect();
        let tenant = self.strings.name(self.meta(idx).tenant).to_string();
        self.vectors
            .push(&tenant, a.model.as_str(), false, idx, &v)?;
        let (_, ts) = self.tenant_mut(&tenant);
        ts.last_lsn = ts.last_lsn.max(lsn);
        self.applied_lsn = self.applied_lsn.max(lsn);
        Ok(())
    }

    /// A record or tombstone frame whose id the state already holds is
    /// damage (a frame written twice into the log, or copied from another
    /// place of it): ids are minted once and a record is written once.
    /// Refused before anything changes, naming both frames, as any frame
    /// that breaks a rule of the state is; it was counted twice and broke
    /// every later checkpoint.
    fn check_new_id(&self, id: RecordId, loc: FrameLoc) -> Result<()> {
        match self.by_id.get(&id) {
            None => Ok(()),
            Some(&first) => Err(crate::error::EngineError::Corrupt {
                what: format!("record {id} at LSN {}", loc.lsn),
                detail: format!(
                    "the log already holds this record id, at LSN {}",
                    self.metas[first as usize].loc.lsn
                ),
            }),
        }
    }

    /// Applies a tombstone frame: the record exists (identity, lineage) but
    /// its content is gone, and it is deleted.
    pub fn apply_tombstone(&mut self, a: &StoredTombstone, loc: FrameLoc) -> Result<()> {
        let idx = idx_of(self.metas.len());
        let id = RecordId::from_bytes(a.id);
        self.check_new_id(id, loc)?;
        let (tenant, ts) = self.tenant_mut(a.tenant.as_str());
        ts.last_lsn = ts.last_lsn.max(loc.lsn);
        if let Some(h) = a.external_id_sha256.as_ref() {
            let key = crate::state::purged_external_id_key(h);
            if ts.external_ids.insert(key, idx).is_none() {
                ts.purged_external_ids += 1;
            }
        }
        let kind = self.strings.intern("deleted");
        let retention = self.strings.intern("deleted");
        let sources: Vec<Idx> = a
            .sources
            .iter()
            .filter_map(|b| self.idx_in(tenant, RecordId::from_bytes(*b)))
            .collect();
        let ingested_at = a.ingested_at_ms;
        // The version it corrected (deleted too): the chain stays whole.
        let supersedes = a
            .supersedes
            .and_then(|b| self.idx_in(tenant, RecordId::from_bytes(b)));
        // As hidden as its record was (a version 1 tombstone has no labels).
        let mut access: Vec<Sym> = a.access.iter().map(|l| self.strings.intern(l)).collect();
        access.sort_unstable();
        access.dedup();
        // Its writer, when the tombstone keeps it (version 3); otherwise
        // the kind's symbol, which `Session::refusal` reads as "not known".
        let writer = if a.writer.is_empty() {
            kind
        } else {
            self.strings.intern(&a.writer)
        };
        self.push_meta(Meta {
            id,
            loc,
            tenant,
            rtype: RecordType::from_code(a.record_type).unwrap_or(RecordType::Event),
            kind,
            akind: None,
            writer_kind: WriterKind::System,
            writer,
            occurred_at: ingested_at,
            ingested_at,
            valid_from: ingested_at,
            valid_from_given: false,
            valid_until: None,
            status: Status::Deleted,
            retention,
            user: None,
            conversation: None,
            agent: None,
            scope_labels: Vec::new(),
            access: access.clone(),
            supersedes,
            superseded_by: None,
            has_text: false,
            tombstone: true,
            external_id: None,
            subject: None,
            object: None,
            predicate: None,
        });
        if a.deleted_by != [0; 16] {
            self.tombstone_deleted_by
                .insert(idx, RecordId::from_bytes(a.deleted_by));
        }
        self.by_id.insert(id, idx);
        self.last_ingested_at = self.last_ingested_at.max(ingested_at);
        bm_add(&mut self.bm_tenant, tenant, idx);
        self.bm_status
            .entry(Status::Deleted)
            .or_default()
            .insert(idx);
        for &l in &access {
            bm_add(&mut self.bm_access, l, idx);
        }
        // as when the record itself was applied: the version it corrected
        // stays superseded (a retention expiry purges only the newer
        // version), and what was derived from that version stale
        if let Some(old) = supersedes {
            self.metas[old as usize].superseded_by = Some(idx);
            self.set_status(old, Status::Superseded, ingested_at);
            self.mark_dependents_stale(old, ingested_at);
        }
        self.tenants
            .get_mut(&tenant)
            .expect("tenant created above")
            .labels
            .extend(access.iter().copied());
        for &s in &sources {
            self.dependents.entry(s).or_default().push(idx);
        }
        if !sources.is_empty() {
            self.sources.insert(idx, sources);
        }
        self.applied_lsn = self.applied_lsn.max(loc.lsn);
        Ok(())
    }

    /// Adds a ledger entry (and its id to `ledger_ids`).
    fn push_ledger(&mut self, e: LedgerEntry) {
        self.ledger_ids.insert(e.op_id);
        self.ledger.push(e);
    }

    /// Applies a lifecycle operation frame.
    pub fn apply_op(&mut self, a: &ArchivedStoredOp, lsn: Lsn) -> Result<()> {
        let op_id = RecordId::from_bytes(a.id);
        // (before anything changes: an operation is written once)
        if self.ledger_ids.contains(&op_id) {
            return Err(crate::error::EngineError::Corrupt {
                what: format!("operation {op_id} at LSN {lsn}"),
                detail: "the log already holds this operation id".into(),
            });
        }
        let at = a.at_ms.to_native();
        let tenant_name = a.tenant.as_str().to_string();
        let (tenant, ts) = self.tenant_mut(&tenant_name);
        ts.last_lsn = ts.last_lsn.max(lsn);
        let target_idx = |st: &State, b: &[u8; 16]| st.idx_in(tenant, RecordId::from_bytes(*b));
        match &a.op {
            ArchivedOpBody::Review {
                target, approve, ..
            } => {
                if let Some(i) = target_idx(self, target) {
                    if self.metas[i as usize].status == Status::Candidate {
                        // approved on a source no longer current (corrected
                        // between the reviewer's check and this operation):
                        // built on outdated input, so stale
                        let to = match (*approve, self.outdated_source(i)) {
                            (true, None) => Status::Approved,
                            (true, Some(_)) => Status::Stale,
                            (false, _) => Status::Rejected,
                        };
                        self.set_status(i, to, at);
                    }
                }
            }
            ArchivedOpBody::Expire {
                target,
                valid_until_ms,
            } => {
                if let Some(i) = target_idx(self, target) {
                    let before = self.metas[i as usize].valid_until;
                    self.metas[i as usize].valid_until = Some(valid_until_ms.to_native());
                    self.bm_bounded.insert(i);
                    self.expiry_log.push(ExpiryChange { at, idx: i, before });
                }
            }
            ArchivedOpBody::Delete { target, reason } => {
                if let Some(i) = target_idx(self, target) {
                    let reason = reason.as_ref().map(|r| r.as_str());
                    for v in self.deletion_set_for(i, reason) {
                        self.set_status(v, Status::Deleted, at);
                    }
                }
                self.push_ledger(LedgerEntry {
                    lsn,
                    op_id,
                    tenant: tenant_name.clone(),
                    at,
                    what: LedgerWhat::Delete {
                        target: RecordId::from_bytes(*target),
                        reason: reason.as_ref().map(|r| r.as_str().to_string()),
                    },
                });
            }
            ArchivedOpBody::Retract { target, .. } => {
                if let Some(i) = target_idx(self, target) {
                    if self.metas[i as usize].status != Status::Deleted {
                        self.set_status(i, Status::Retracted, at);
                        self.mark_dependents_stale(i, at);
                    }
                }
            }
            ArchivedOpBody::Grant {
                principal,
                label,
                role,
            } => {
                self.push_ledger(LedgerEntry {
                    lsn,
                    op_id,
                    tenant: tenant_name.clone(),
                    at,
                    what: LedgerWhat::Grant {
                        principal: principal.as_ref().map(|p| p.as_str().to_string()),
                        label: label.as_ref().map(|l| l.as_str().to_string()),
                        role: role.as_ref().map(|r| r.as_str().to_string()),
                    },
                });
                let t = self.tenants.get_mut(&tenant).expect("tenant exists");
                match principal.as_ref() {
                    Some(p) => {
                        let g = t.grants.entry(p.as_str().to_string()).or_default();
                        if let Some(l) = label.as_ref() {
                            g.labels.insert(l.as_str().to_string());
                        }
                        if let Some(r) = role.as_ref() {
                            g.roles.insert(r.as_str().to_string());
                        }
                    }
                    None => {
                        if let Some(l) = label.as_ref() {
                            t.revoked_labels.remove(l.as_str());
                        }
                    }
                }
            }
            ArchivedOpBody::Revoke {
                principal,
                label,
                role,
            } => {
                let t = self.tenants.get_mut(&tenant).expect("tenant exists");
                match principal.as_ref() {
                    Some(p) => {
                        if let Some(g) = t.grants.get_mut(p.as_str()) {
                            if let Some(l) = label.as_ref() {
                                g.labels.remove(l.as_str());
                            }
                            if let Some(r) = role.as_ref() {
                                g.roles.remove(r.as_str());
                            }
                        }
                    }
                    None => {
                        if let Some(l) = label.as_ref() {
                            t.revoked_labels.insert(l.as_str().to_string());
                        }
                    }
                }
                self.push_ledger(LedgerEntry {
                    lsn,
                    op_id,
                    tenant: tenant_name.clone(),
                    at,
                    what: LedgerWhat::Revoke {
                        principal: principal.as_ref().map(|s| s.as_str().to_string()),
                        label: label.as_ref().map(|s| s.as_str().to_string()),
                        role: role.as_ref().map(|s| s.as_str().to_string()),
                    },
                });
            }
            ArchivedOpBody::Retention { class, period_ms } => {
                let t = self.tenants.get_mut(&tenant).expect("tenant exists");
                let period_ms = period_ms.as_ref().map(|p| p.to_native());
                t.retention.insert(class.as_str().to_string(), period_ms);
                self.push_ledger(LedgerEntry {
                    lsn,
                    op_id,
                    tenant: tenant_name.clone(),
                    at,
                    what: LedgerWhat::Retention {
                        class: class.as_str().to_string(),
                        period_ms,
                    },
                });
            }
            ArchivedOpBody::ReviewRule {
                kind,
                writer,
                review,
            } => {
                let t = self.tenants.get_mut(&tenant).expect("tenant exists");
                t.review_rules.insert(
                    (kind.as_str().to_string(), writer.as_str().to_string()),
                    *review,
                );
            }
            ArchivedOpBody::Hold { scope, on } => {
                let t = self.tenants.get_mut(&tenant).expect("tenant exists");
                if *on {
                    t.holds.insert(scope.as_str().to_string());
                } else {
                    t.holds.remove(scope.as_str());
                }
                self.push_ledger(LedgerEntry {
                    lsn,
                    op_id,
                    tenant: tenant_name.clone(),
                    at,
                    what: LedgerWhat::Hold {
                        scope: scope.as_str().to_string(),
                        on: *on,
                    },
                });
            }
        }
        self.applied_lsn = self.applied_lsn.max(lsn);
        Ok(())
    }
}

/// Applies one log frame to the state: the commit hook and the replay at
/// open run this same function, so rebuilt state equals live state.
pub fn apply_frame(
    st: &mut State,
    ft: engram_storage::frame::FrameType,
    version: u8,
    payload: &[u8],
    loc: FrameLoc,
) -> Result<()> {
    apply_frame_prepared(st, ft, version, payload, loc, None)
}

/// The work [`apply_frame_prepared`] can do ahead, while a record frame is
/// being synced, under a read lock: its text's tokens looked up
/// ([`Bm25Index::prepare`](crate::lexical::Bm25Index::prepare)). None for
/// other frames, unreadable payloads and texts the lexical index skips.
pub fn prepare_frame(
    st: &State,
    ft: engram_storage::frame::FrameType,
    version: u8,
    payload: &[u8],
    loc: FrameLoc,
) -> Option<crate::lexical::PreparedText> {
    if ft != codec::FRAME_RECORD
        || version != codec::PAYLOAD_VERSION
        || loc.lsn <= st.lexical_loaded_lsn
    {
        return None;
    }
    let a = codec::view_record(payload).ok()?;
    let text = a
        .text
        .as_ref()
        .map(|t| t.as_str())
        .filter(|t| !t.is_empty())?;
    Some(st.lexical.prepare(text))
}

/// Why this build cannot read payloads of `version` in frames of type
/// `ft`, if it cannot.
fn readable_version(ft: engram_storage::frame::FrameType, version: u8) -> Result<(), String> {
    let readable = if ft == codec::FRAME_TOMBSTONE {
        (1..=codec::TOMBSTONE_VERSION).contains(&version)
    } else {
        version == codec::PAYLOAD_VERSION
    };
    if readable {
        Ok(())
    } else {
        Err(format!(
            "payload version {version} of frame type {} is not readable by this build (reads {})",
            ft.0,
            codec::PAYLOAD_VERSION
        ))
    }
}

/// What [`check_frame`] found of one frame.
pub struct FrameCheck<'a> {
    /// A record frame's payload, viewed, when it decodes (even when its
    /// version or its `data` does not read): what `verify` compares with
    /// the state, without viewing it again.
    pub record: Option<&'a ArchivedStoredRecord>,
    /// Why a replay or a read by id could not read the frame, if it could
    /// not.
    pub problem: Option<String>,
}

/// Reads a frame's payload as a replay and a read by id would, without
/// applying it: its version, its decoding, a record's `data` as JSON.
/// What `verify` asks of every frame, so a frame that a checkpoint covers
/// but a replay (once the checkpoint is gone) or a `get` could not read is
/// found while the checkpoint still hides it.
pub fn check_frame(
    ft: engram_storage::frame::FrameType,
    version: u8,
    payload: &[u8],
) -> FrameCheck<'_> {
    let mut record = None;
    let decoded = if ft == codec::FRAME_RECORD {
        codec::view_record(payload).and_then(|a| {
            record = Some(a);
            match a.data_json.as_ref() {
                Some(d) => serde_json::from_str::<serde_json::Value>(d.as_str())
                    .map(|_| ())
                    .map_err(|e| crate::error::EngineError::Corrupt {
                        what: "record data".into(),
                        detail: e.to_string(),
                    }),
                None => Ok(()),
            }
        })
    } else if ft == codec::FRAME_OP {
        codec::view_op(payload).map(|_| ())
    } else if ft == codec::FRAME_TOMBSTONE {
        codec::read_tombstone(payload, version).map(|_| ())
    } else if ft == codec::FRAME_VECTOR {
        codec::view_vector(payload).map(|_| ())
    } else {
        return FrameCheck {
            record,
            problem: Some(format!("unknown frame type {}", ft.0)),
        };
    };
    let problem = match readable_version(ft, version) {
        Err(why) => Some(why),
        Ok(()) => decoded.err().map(|e| e.to_string()),
    };
    FrameCheck { record, problem }
}

/// [`apply_frame`], with what [`prepare_frame`] computed for the frame.
pub fn apply_frame_prepared(
    st: &mut State,
    ft: engram_storage::frame::FrameType,
    version: u8,
    payload: &[u8],
    loc: FrameLoc,
    prepared: Option<PreparedText>,
) -> Result<()> {
    // Frames are applied once each, in LSN order: the state is a function
    // of the log prefix it has seen.
    assert!(
        loc.lsn > st.applied_lsn,
        "invariant violated: frame LSN {} applied after LSN {}",
        loc.lsn,
        st.applied_lsn
    );
    let failed = |reason: String| crate::error::EngineError::Apply {
        segment: loc.segment,
        offset: loc.offset,
        lsn: loc.lsn,
        reason,
    };
    readable_version(ft, version).map_err(failed)?;
    let r = if ft == codec::FRAME_RECORD {
        codec::view_record(payload).and_then(|a| st.apply_record(a, loc, prepared))
    } else if ft == codec::FRAME_OP {
        codec::view_op(payload).and_then(|a| st.apply_op(a, loc.lsn))
    } else if ft == codec::FRAME_TOMBSTONE {
        codec::read_tombstone(payload, version).and_then(|t| st.apply_tombstone(&t, loc))
    } else if ft == codec::FRAME_VECTOR {
        codec::view_vector(payload).and_then(|a| st.apply_vector(a, loc.lsn))
    } else {
        Err(crate::error::EngineError::Corrupt {
            what: "frame".into(),
            detail: format!("unknown frame type {}", ft.0),
        })
    };
    r.map_err(|e| match e {
        // a derived file that cannot be read or written (a vector file
        // replaced by a directory, say) is not the frame's fault: the
        // error names the file
        crate::error::EngineError::Storage(engram_storage::StorageError::Io { .. }) => e,
        e => failed(e.to_string()),
    })?;
    st.applied_loc = Some(loc);
    Ok(())
}
