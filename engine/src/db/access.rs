//! What a session may see and do: resolving a reference inside its tenant
//! (another tenant's record is reported exactly like a missing one), the
//! labels and roles it holds, and the one call into the authorization
//! matrix.

use super::write::one_of;
use super::*;

impl Session {
    /// The principal.
    pub fn principal(&self) -> &Principal {
        &self.principal
    }

    /// The store.
    pub fn engram(&self) -> &Engram {
        &self.db
    }

    /// Resolves a reference within the session's tenant.
    pub fn resolve(&self, r: &RecordRef) -> Result<RecordId> {
        self.db.check_open()?;
        let st = self.db.inner.state.read();
        self.resolve_in(&st, r).map(|ix| st.meta(ix).id)
    }

    pub(crate) fn resolve_in(&self, st: &State, r: &RecordRef) -> Result<Idx> {
        self.resolve_filtered(st, r, true)
    }

    /// Resolves `r` in the session's tenant whatever labels the session
    /// holds: only for re-applying operations the tenant already decided
    /// (a restore's deletions), or to find a chain whose versions are then
    /// each held to what the request may read (an expansion's seed under
    /// `AS OF`); never to answer a request with the record found.
    pub(crate) fn resolve_unfiltered(&self, st: &State, r: &RecordRef) -> Result<Idx> {
        self.resolve_filtered(st, r, false)
    }

    fn resolve_filtered(&self, st: &State, r: &RecordRef, filter: bool) -> Result<Idx> {
        let tenant = self.principal.tenant();
        let not_found = || self.not_found(r);
        let t = st.tenant_sym(tenant).ok_or_else(not_found)?;
        let by_id = r.as_id().and_then(|id| st.idx_in(t, id));
        // A record purged by compaction keeps its external id hashed: it
        // is named by it as by its id (a trace shows its tombstone).
        let by_ext = r
            .as_external()
            .and_then(|e| st.tenants.get(&t)?.by_external_id(e));
        let held = if filter {
            self.held_labels(st)
        } else {
            BTreeSet::new()
        };
        one_of(by_id, by_ext, r, tenant, |ix| {
            !filter || self.target(st, ix, &held).readable
        })
        .ok_or_else(not_found)?
    }

    /// Whether the session may read record `idx` (tenant, labels; deleted
    /// records, and records past their retention period that `compact` has
    /// not deleted yet, are never readable).
    pub(crate) fn can_read(&self, st: &State, idx: Idx) -> bool {
        self.can_read_with(st, idx, &self.held_labels(st))
    }

    /// [`Session::can_read`] with the labels held computed once by the
    /// caller (loops over many records).
    pub(crate) fn can_read_with(&self, st: &State, idx: Idx, held: &BTreeSet<String>) -> bool {
        let m = st.meta(idx);
        m.status != Status::Deleted
            && !m.tombstone
            && self.target(st, idx, held).readable
            && !st.past_retention(idx, self.db.now())
    }

    /// Why a chain whose newest version is `head` takes no correction or
    /// expiry of an older version, when `head` is gone: deleted (a
    /// retention expiry's deletion reaches that version only) or past its
    /// retention period. Named only to a principal whose labels reach
    /// `head` (a hidden version is never named). `None` while it lives.
    pub(crate) fn gone_head(&self, st: &State, head: Idx) -> Option<String> {
        let m = st.meta(head);
        let named = if self.target(st, head, &self.held_labels(st)).readable {
            format!(" {}", m.id)
        } else {
            String::new()
        };
        if m.status == Status::Deleted {
            Some(format!(
                "its chain's newest version{named} was deleted: a chain whose newest version is gone takes no more corrections or expiries; write the new statement as a new record, with a new external id"
            ))
        } else if st.past_retention(head, self.db.now()) {
            Some(format!(
                "its chain's newest version{named} is past its retention period: name that version (until compact deletes it, after which the chain takes no more corrections)"
            ))
        } else {
            None
        }
    }

    /// The session tenant's records past their retention period now
    /// ([`State::past_retention_set`]): what [`Session::can_read_listed`]
    /// and [`State::shown_kind_and_status`] take, asked once per request.
    pub(crate) fn past_retention_now(&self, st: &State) -> roaring::RoaringBitmap {
        st.tenant_sym(self.principal.tenant())
            .map(|t| st.past_retention_set(t, self.db.now()).0)
            .unwrap_or_default()
    }

    /// [`Session::can_read_with`] for a loop over many records of the
    /// tenant: `expired` is [`State::past_retention_set`], asked once.
    pub(crate) fn can_read_listed(
        &self,
        st: &State,
        idx: Idx,
        held: &BTreeSet<String>,
        expired: &roaring::RoaringBitmap,
    ) -> bool {
        let m = st.meta(idx);
        m.status != Status::Deleted
            && !m.tombstone
            && !expired.contains(idx)
            && self.target(st, idx, held).readable
    }

    /// Labels the principal holds now (admins: every label not revoked).
    pub(crate) fn held_labels(&self, st: &State) -> BTreeSet<String> {
        let Some(t) = st.tenant(self.principal.tenant()) else {
            // A tenant with nothing stored yet: the credential's labels
            // (a batch may write and then correct a labelled record).
            return self.principal.credential_labels().iter().cloned().collect();
        };
        let mut held: BTreeSet<String> = if self.acts_as_admin(st) {
            t.labels
                .iter()
                .map(|&s| st.strings.name(s).to_string())
                .collect()
        } else {
            t.grants
                .get(self.principal.id())
                .map(|g| g.labels.clone())
                .unwrap_or_default()
        };
        held.extend(self.principal.credential_labels().iter().cloned());
        for r in &t.revoked_labels {
            held.remove(r);
        }
        held
    }

    /// The note for a record written with access labels its writer does
    /// not hold (`held`; for the tenant admin, a label revoked
    /// tenant-wide): the record then reads "not found" to the principal
    /// that just wrote it, which is said rather than left to surprise.
    pub(crate) fn labels_not_held_note(
        &self,
        st: &State,
        access: &[String],
        held: &BTreeSet<String>,
    ) -> Option<String> {
        let admin = self.acts_as_admin(st);
        let revoked = st
            .tenant(self.principal.tenant())
            .map(|t| &t.revoked_labels);
        let unheld: Vec<&str> = access
            .iter()
            .filter(|l| {
                if admin {
                    revoked.is_some_and(|r| r.contains(*l))
                } else {
                    !held.contains(*l)
                }
            })
            .map(String::as_str)
            .collect();
        (!unheld.is_empty()).then(|| {
            format!(
                "the record carries access label(s) {} that this principal does not hold: it cannot read the record back, nor delete it (the tenant admin can, or a grant of the label)",
                unheld.join(", ")
            )
        })
    }

    /// Whether the principal is its tenant's administrator: the tenant's
    /// admin principal, or one holding the `admin` role (granted, or from
    /// its credential). One definition for labels, the matrix and
    /// manifests.
    pub(crate) fn acts_as_admin(&self, st: &State) -> bool {
        let role = crate::principal::ROLE_ADMIN;
        self.principal.is_admin()
            || self.principal.credential_roles().contains(role)
            || st
                .tenant(self.principal.tenant())
                .and_then(|t| t.grants.get(self.principal.id()))
                .is_some_and(|g| g.roles.contains(role))
    }

    /// Roles the principal holds now.
    pub fn roles(&self) -> BTreeSet<String> {
        let st = self.db.inner.state.read();
        self.roles_in(&st)
    }

    /// [`Session::roles`] under a held state lock.
    pub(crate) fn roles_in(&self, st: &State) -> BTreeSet<String> {
        if self.principal.is_admin() {
            return [
                crate::principal::ROLE_ADMIN,
                crate::principal::ROLE_REVIEWER,
            ]
            .into_iter()
            .map(String::from)
            .collect();
        }
        let mut roles: BTreeSet<String> = st
            .tenant(self.principal.tenant())
            .and_then(|t| t.grants.get(self.principal.id()))
            .map(|g| g.roles.clone())
            .unwrap_or_default();
        roles.extend(self.principal.credential_roles().iter().cloned());
        roles
    }

    /// The session tenant's vector spaces: model id -> dimensions (what a
    /// query may name in `MODEL`); not a space holding only records the
    /// principal cannot read.
    pub fn vector_models(&self) -> std::collections::BTreeMap<String, usize> {
        let st = self.db.inner.state.read();
        let hidden = self.hidden_spaces(&st);
        st.vectors
            .of_tenant(self.principal.tenant())
            .filter(|s| !hidden.contains(&s.model))
            .map(|s| (s.model.clone(), s.dim))
            .collect()
    }

    /// Model ids of the tenant's spaces this principal does not see
    /// (`retrieval::eligibility::hidden_models`).
    pub(crate) fn hidden_spaces(&self, st: &State) -> Box<[String]> {
        let tenant = self.principal.tenant();
        let denied = match st.tenant(tenant) {
            Some(t) if !t.labels.is_empty() => {
                crate::retrieval::eligibility::denied(st, t, &self.held_labels(st))
            }
            _ => roaring::RoaringBitmap::new(),
        };
        crate::retrieval::eligibility::hidden_models(st, tenant, &denied)
    }

    /// The session as the authorization matrix sees it.
    pub(crate) fn actor<'a>(&'a self, st: &State) -> crate::authz::Actor<'a> {
        let roles = self.roles_in(st);
        crate::authz::Actor::Principal {
            id: self.principal.id(),
            kind: self.principal.kind(),
            admin: self.acts_as_admin(st),
            reviewer: roles.contains(crate::principal::ROLE_REVIEWER),
        }
    }

    /// Record `idx` as the matrix sees it: readable when it is in the
    /// session's tenant and the principal holds all its effective labels
    /// (deleted records and tombstones count as readable here: operations
    /// refuse them with their own error, reads never show their content,
    /// and a trace shows a tombstone as removed).
    pub(crate) fn target(
        &self,
        st: &State,
        idx: Idx,
        held: &BTreeSet<String>,
    ) -> crate::authz::Target {
        let m = st.meta(idx);
        let same_name = st.strings.name(m.writer) == self.principal.id();
        crate::authz::Target {
            readable: st.strings.name(m.tenant) == self.principal.tenant()
                && m.access.iter().all(|l| held.contains(st.strings.name(*l))),
            // the writer is a principal of one kind: a person's key or
            // session named like a model is not that model. A deleted
            // record is judged by name, as its tombstone (which keeps its
            // writer's name only) is after compaction: the answer does not
            // change with compaction.
            own: same_name
                && (m.status == Status::Deleted || m.writer_kind == self.principal.kind()),
            same_name,
        }
    }

    /// Asks the matrix about `op` on `target` (a resolved record, with the
    /// reference as the caller gave it). A hidden target is reported as
    /// missing, exactly like a reference to nothing.
    pub(crate) fn authorize(
        &self,
        st: &State,
        op: crate::authz::Operation,
        target: Option<(Idx, &RecordRef)>,
    ) -> Result<()> {
        let t = target.map(|(idx, _)| self.target(st, idx, &self.held_labels(st)));
        match crate::authz::decide(self.actor(st), op, t) {
            crate::authz::Decision::Allow => Ok(()),
            crate::authz::Decision::Hidden => {
                Err(self.not_found(target.map(|(_, r)| r).expect("only targets are hidden")))
            }
            crate::authz::Decision::Forbidden(reason) => Err(match target {
                Some((idx, _)) => self.refusal(st, idx, op.name().to_string(), reason),
                None => EngineError::Forbidden {
                    principal: self.principal.to_string(),
                    action: op.name().to_string(),
                    reason: reason.to_string(),
                },
            }),
        }
    }

    /// Asks the matrix about `op` on every other live version of the
    /// correction chain of `idx`, which `op` reaches with it (a deletion
    /// removes the whole chain). A version the principal may not delete on
    /// its own, because another principal wrote it or it carries a label
    /// the principal lacks, makes the operation forbidden on `idx`, naming
    /// no version: otherwise deleting an old version of one's own would
    /// remove what one may not touch.
    pub(crate) fn authorize_chain(
        &self,
        st: &State,
        op: crate::authz::Operation,
        idx: Idx,
    ) -> Result<()> {
        let held = self.held_labels(st);
        let actor = self.actor(st);
        let refused = st.chain(idx).into_iter().any(|v| {
            v != idx
                && st.meta(v).status != crate::model::Status::Deleted
                && crate::authz::decide(actor, op, Some(self.target(st, v, &held)))
                    != crate::authz::Decision::Allow
        });
        if refused {
            return Err(self.refusal(
                st,
                idx,
                op.name().to_string(),
                "another version of its correction chain, which the deletion would remove \
                 too, was written by another principal or carries a label this principal \
                 does not hold; the tenant's admin may delete the chain",
            ));
        }
        Ok(())
    }

    /// The answer to `action` on record `idx` when the matrix forbids it.
    /// A tombstone keeps its record's writer (payload version 3), so the
    /// matrix answers as before compaction. One purged by an earlier build
    /// kept none (its writer is its kind's symbol): the matrix cannot tell
    /// its writer from anyone else, and nothing can be done to it anyway,
    /// so whoever may read it gets the state's answer (its writer is never
    /// told it is not the writer).
    pub(crate) fn refusal(
        &self,
        st: &State,
        idx: Idx,
        action: String,
        reason: &str,
    ) -> EngineError {
        let m = st.meta(idx);
        if m.tombstone && m.writer == m.kind {
            return EngineError::InvalidState {
                action,
                target: m.id,
                reason: "it is deleted".into(),
            };
        }
        EngineError::Forbidden {
            principal: self.principal.to_string(),
            action,
            reason: reason.to_string(),
        }
    }

    /// The one "not found" of the session: the same for a missing record, a
    /// record of another tenant and one the principal may not read.
    pub(crate) fn not_found(&self, r: &RecordRef) -> EngineError {
        EngineError::NotFound {
            tenant: self.principal.tenant().to_string(),
            reference: reference_phrase(r),
        }
    }
}
