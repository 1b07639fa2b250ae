//! Lifecycle operations: each is a record in the log (an operation frame),
//! applied to the derived state in LSN order like everything else.
//!
//! | operation | effect |
//! |---|---|
//! | `expire` | sets the end of validity: the record is historical after it (still found with `valid_at` in the past) |
//! | correction | not here: a record with `supersedes` (see `Session::append`); the old version and its dependents go stale |
//! | `delete` | the record, every version of its correction chain and every derivative become ineligible at once; `compact` purges their bytes |
//! | `revoke` / `grant` | change what principals may read, from the next read on (summaries and caches included, since access is checked at read time against effective labels) |
//! | `retract` | withdraws a semantic record; its dependents go stale |
//! | `approve` / `reject` | a reviewer's decision on a candidate |
//! | `set_retention` | retention period of a class for the tenant; past it records are ineligible and purged by `compact` (unless under a hold) |
//! | `hold` | a legal hold on a scope suspends purging |
//!
//! Authority is decided by the authorization matrix (`crate::authz`):
//! expire, delete and retract need the tenant admin or the record's writer;
//! reviews need the `reviewer` role; the tenant-wide operations (grants,
//! revocations, retention, holds, review rules) need the tenant admin.
//! Targets are resolved inside the session's tenant only, and a record the
//! principal cannot read is reported as missing.
//!
//! This module must never mutate a record in place: every change is a new
//! log entry.

use crate::authz::Operation;
use crate::codec::OpBody;
use crate::db::Session;
use crate::error::{EngineError, Result};
use crate::id::RecordId;
use crate::model::{RecordRef, Status, check_name, check_reason, check_time};
use crate::principal::{ROLE_ADMIN, ROLE_REVIEWER};
use crate::time::format_rfc3339;

/// Result of a lifecycle operation.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct OpResult {
    /// Id of the operation record.
    pub op_id: RecordId,
    /// LSN of the operation.
    pub lsn: u64,
    /// Records whose status changed (for deletes: everything removed) that
    /// the principal may read. The operation reaches the others too (a
    /// deletion removes every derivative, whoever may read it), but they
    /// are not named: a record the principal cannot read does not exist for
    /// it (docs/security.md).
    pub affected: Vec<RecordId>,
    /// What the operation did that the caller may not expect (a
    /// tenant-wide revocation of a label nothing carries yet).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl Session {
    /// The ids of `idxs` whose labels the principal holds.
    fn named(
        &self,
        st: &crate::state::State,
        idxs: impl IntoIterator<Item = crate::state::Idx>,
    ) -> Vec<RecordId> {
        let held = self.held_labels(st);
        idxs.into_iter()
            .filter(|&i| self.target(st, i, &held).readable)
            .map(|i| st.meta(i).id)
            .collect()
    }
}

impl Session {
    /// Asks the authorization matrix about an operation with no target.
    fn require(&self, op: Operation) -> Result<()> {
        let st = self.db.state();
        self.authorize(&st, op, None)
    }

    fn write_op(&self, op: OpBody) -> Result<(RecordId, u64)> {
        self.write_op_as(op, None)
    }

    /// Sets the end of validity of a record: past `valid_until` it is
    /// historical. Fails if `valid_until` is before the record's start of
    /// validity. Errors name it `at`, as the CLI's `--at` and the
    /// server's `{"at": ...}` do.
    pub fn expire(&self, target: &RecordRef, valid_until: i64) -> Result<OpResult> {
        check_time("at", Some(valid_until))?;
        let (id, from) = {
            let st = self.db.state();
            let idx = self.resolve_in(&st, target)?;
            self.authorize(&st, Operation::Expire, Some((idx, target)))?;
            let m = st.meta(idx);
            if m.status == Status::Deleted {
                return Err(EngineError::InvalidState {
                    action: "expire".into(),
                    target: m.id,
                    reason: "it is deleted".into(),
                });
            }
            // An old version is out of every current and valid-time read
            // already (`AS OF` shows it as it was): its expiry would change
            // nothing, so an old id named by mistake is said.
            if m.superseded_by.is_some() {
                // the chain's newest version, named only to a principal
                // that may read it (a hidden version is never named)
                let newest = *st.chain(idx).last().expect("a chain holds its record");
                let reason = if let Some(gone) = self.gone_head(&st, newest) {
                    gone
                } else if self.can_read(&st, newest) {
                    format!(
                        "it is superseded by {}; expire the current version",
                        st.meta(newest).id
                    )
                } else {
                    "it is superseded by a version this principal cannot read".to_string()
                };
                return Err(EngineError::InvalidState {
                    action: "expire".into(),
                    target: m.id,
                    reason,
                });
            }
            // (where retrieval starts it: a record about a later event is
            // valid from when it was written)
            (m.id, m.valid_start())
        };
        if valid_until < from {
            return Err(EngineError::InvalidInput {
                item: None,
                field: "at".into(),
                reason: format!(
                    "{} is before the record's start of validity {}",
                    format_rfc3339(valid_until),
                    format_rfc3339(from)
                ),
            });
        }
        let (op_id, lsn) = self.write_op(OpBody::Expire {
            target: id.to_bytes(),
            valid_until_ms: valid_until,
        })?;
        Ok(OpResult {
            op_id,
            lsn,
            affected: vec![id],
            note: None,
        })
    }

    /// Deletes a record, every version of its correction chain and every
    /// record derived from any of them. They are ineligible at once; their
    /// bytes are purged by the next compaction.
    /// A reason beginning `retention:` is refused: it marks compaction's
    /// deletions of expired versions
    /// ([`State::deletion_set_for`](crate::state::State::deletion_set_for)).
    pub fn delete(&self, target: &RecordRef, reason: Option<&str>) -> Result<OpResult> {
        if crate::state::is_retention_reason(reason) {
            return Err(EngineError::invalid(
                "reason",
                format!(
                    "`{}` begins only the reasons of retention expiries, which compaction records; choose another",
                    crate::state::RETENTION_REASON_PREFIX
                ),
            ));
        }
        self.delete_as(target, reason, None)
    }

    /// Deletes an expired version of a record and what was built on it,
    /// with reason `retention:<class>` (compaction).
    /// The caller brings the ledger file up to date once, after all of
    /// them (one sync per deletion read the whole file each time: a
    /// compaction expiring thousands of records took minutes).
    pub(crate) fn delete_expired(&self, id: RecordId, class: &str) -> Result<OpResult> {
        let reason = format!("{}{class}", crate::state::RETENTION_REASON_PREFIX);
        self.delete_synced(&RecordRef::Id(id), Some(&reason), None, false)
    }

    /// [`Session::delete`], re-applying the operation `reuse` (restore; the
    /// caller then brings the ledger file up to date once).
    pub(crate) fn delete_as(
        &self,
        target: &RecordRef,
        reason: Option<&str>,
        reuse: Option<RecordId>,
    ) -> Result<OpResult> {
        self.delete_synced(target, reason, reuse, reuse.is_none())
    }

    /// [`Session::delete_as`], bringing the ledger file up to date after
    /// it when `sync` says so.
    fn delete_synced(
        &self,
        target: &RecordRef,
        reason: Option<&str>,
        reuse: Option<RecordId>,
        sync: bool,
    ) -> Result<OpResult> {
        let id = {
            let st = self.db.state();
            // A restore re-applies a deletion the tenant already decided,
            // and compaction one the tenant's retention period decided
            // (only `delete_expired` gives a `retention:` reason), whatever
            // labels are held (or revoked tenant-wide, which hides a
            // record from the admin too) now.
            let idx = if reuse.is_none() && !crate::state::is_retention_reason(reason) {
                let idx = self.resolve_in(&st, target)?;
                self.authorize(&st, Operation::Delete, Some((idx, target)))?;
                self.authorize_chain(&st, Operation::Delete, idx)?;
                idx
            } else {
                self.resolve_unfiltered(&st, target)?
            };
            let m = st.meta(idx);
            if m.status == Status::Deleted {
                return Err(EngineError::InvalidState {
                    action: "delete".into(),
                    target: m.id,
                    reason: "it is already deleted".into(),
                });
            }
            m.id
        };
        check_reason("reason", reason)?;
        let (op_id, lsn) = self.write_op_as(
            OpBody::Delete {
                target: id.to_bytes(),
                reason: reason.map(str::to_string),
            },
            reuse,
        )?;
        // A restore re-applying operations, and compaction's retention
        // deletions, sync the ledger once at their end.
        if sync {
            self.db.sync_ledger_after_op(op_id);
        }
        // What the deletion covered when it was applied (listed after, not
        // before: a derivative written concurrently may have joined it).
        let affected = {
            let st = self.db.state();
            st.idx(id)
                .map(|i| {
                    let removed = st
                        .deletion_set_for(i, reason)
                        .into_iter()
                        .filter(|&v| st.meta(v).status == Status::Deleted);
                    self.named(&st, removed)
                })
                .unwrap_or_default()
        };
        Ok(OpResult {
            op_id,
            lsn,
            affected,
            note: None,
        })
    }

    /// Withdraws a semantic record; its dependents become stale.
    pub fn retract(&self, target: &RecordRef, reason: Option<&str>) -> Result<OpResult> {
        check_reason("reason", reason)?;
        let (id, affected) = {
            let st = self.db.state();
            let idx = self.resolve_in(&st, target)?;
            self.authorize(&st, Operation::Retract, Some((idx, target)))?;
            let m = st.meta(idx);
            if let Some(reason) = crate::db::decision_refusal(&st, idx, None) {
                return Err(EngineError::InvalidState {
                    action: "retract".into(),
                    target: m.id,
                    reason,
                });
            }
            let mut a = vec![m.id];
            a.extend(self.named(&st, st.derivatives(idx)));
            (m.id, a)
        };
        let (op_id, lsn) = self.write_op(OpBody::Retract {
            target: id.to_bytes(),
            reason: reason.map(str::to_string),
        })?;
        Ok(OpResult {
            op_id,
            lsn,
            affected,
            note: None,
        })
    }

    fn review(&self, target: &RecordRef, approve: bool, note: Option<&str>) -> Result<OpResult> {
        let action = if approve { "approve" } else { "reject" };
        check_reason("note", note)?;
        let id = {
            let st = self.db.state();
            let idx = self.resolve_in(&st, target)?;
            self.authorize(&st, Operation::Review, Some((idx, target)))?;
            let m = st.meta(idx);
            if let Some(reason) = crate::db::decision_refusal(&st, idx, Some(approve)) {
                return Err(EngineError::InvalidState {
                    action: action.into(),
                    target: m.id,
                    reason,
                });
            }
            m.id
        };
        let (op_id, lsn) = self.write_op(OpBody::Review {
            target: id.to_bytes(),
            approve,
            note: note.map(str::to_string),
        })?;
        Ok(OpResult {
            op_id,
            lsn,
            affected: vec![id],
            note: None,
        })
    }

    /// Approves a review candidate (needs the reviewer role).
    pub fn approve(&self, target: &RecordRef, note: Option<&str>) -> Result<OpResult> {
        self.review(target, true, note)
    }

    /// Rejects a review candidate (needs the reviewer role).
    pub fn reject(&self, target: &RecordRef, note: Option<&str>) -> Result<OpResult> {
        self.review(target, false, note)
    }

    /// Grants a label or role to a principal; with no principal, lifts a
    /// tenant-wide revocation of the label.
    pub fn grant(
        &self,
        principal: Option<&str>,
        label: Option<&str>,
        role: Option<&str>,
    ) -> Result<OpResult> {
        self.access_as(true, principal, label, role, None)
    }

    /// Revokes a label or role from a principal; with no principal, revokes
    /// the label for everyone in the tenant (admins included) until granted
    /// back tenant-wide. Applies from the next read on.
    pub fn revoke(
        &self,
        principal: Option<&str>,
        label: Option<&str>,
        role: Option<&str>,
    ) -> Result<OpResult> {
        self.access_as(false, principal, label, role, None)
    }

    /// [`Session::grant`] (`grant`) or [`Session::revoke`], re-applying the
    /// operation `reuse` (restore; the caller then brings the ledger file
    /// up to date once). Both are in the ledger, so that a restore
    /// re-applies them in order (a revocation lifted after a backup must
    /// stay lifted).
    pub(crate) fn access_as(
        &self,
        grant: bool,
        principal: Option<&str>,
        label: Option<&str>,
        role: Option<&str>,
        reuse: Option<RecordId>,
    ) -> Result<OpResult> {
        self.require(if grant {
            Operation::Grant
        } else {
            Operation::Revoke
        })?;
        check_grant(principal, label, role)?;
        // (checked and applied as one, against a twin sent together)
        let _serial = reuse.is_none().then(|| self.db.serial_access_op());
        // A tenant-wide grant or a revocation that would change nothing is
        // a mistake worth naming, as lifting a hold nobody placed is: a
        // mistyped label would otherwise read as lifted (or revoked) while
        // the real revocation (or grant) stays (`access_no_op`). A restore
        // re-applies the log's own operations.
        let note = match reuse {
            None => access_no_op(
                &self.db.state(),
                self.principal.tenant(),
                grant,
                principal,
                label,
                role,
            )?,
            Some(_) => None,
        };
        let (principal, label, role) = (
            principal.map(str::to_string),
            label.map(str::to_string),
            role.map(str::to_string),
        );
        let op = if grant {
            OpBody::Grant {
                principal,
                label,
                role,
            }
        } else {
            OpBody::Revoke {
                principal,
                label,
                role,
            }
        };
        let (op_id, lsn) = self.write_op_as(op, reuse)?;
        // A restore re-applying operations syncs the ledger once at its end.
        if reuse.is_none() {
            self.db.sync_ledger_after_op(op_id);
        }
        Ok(OpResult {
            op_id,
            lsn,
            affected: Vec::new(),
            note,
        })
    }

    /// Sets the retention period of a class in this tenant (None: forever).
    pub fn set_retention(&self, class: &str, period_ms: Option<i64>) -> Result<OpResult> {
        self.set_retention_as(class, period_ms, None)
    }

    /// [`Session::set_retention`], optionally under a given operation id
    /// (a restore re-applying a ledger entry).
    pub(crate) fn set_retention_as(
        &self,
        class: &str,
        period_ms: Option<i64>,
        reuse: Option<RecordId>,
    ) -> Result<OpResult> {
        self.require(Operation::Retention)?;
        check_name("class", class)?;
        if period_ms.is_some_and(|p| p <= 0) {
            return Err(EngineError::invalid("period", "must be positive"));
        }
        let (op_id, lsn) = self.write_op_as(
            OpBody::Retention {
                class: class.to_string(),
                period_ms,
            },
            reuse,
        )?;
        // Into the ledger now, as a hold is: a restore of an older backup
        // applies it again.
        if reuse.is_none() {
            self.db.sync_ledger_after_op(op_id);
        }
        Ok(OpResult {
            op_id,
            lsn,
            affected: Vec::new(),
            note: None,
        })
    }

    /// Places (`on`) or lifts a legal hold on a scope: `tenant`,
    /// `user:<id>`, `conversation:<id>`, `agent:<id>` or `label:<label>`.
    pub fn hold(&self, scope: &str, on: bool) -> Result<OpResult> {
        self.hold_as(scope, on, None)
    }

    /// [`Session::hold`], optionally under a given operation id (a restore
    /// re-applying a ledger entry).
    pub(crate) fn hold_as(
        &self,
        scope: &str,
        on: bool,
        reuse: Option<RecordId>,
    ) -> Result<OpResult> {
        self.require(Operation::Hold)?;
        check_hold_scope(scope)?;
        // (checked and applied as one, against a twin sent together)
        let _serial = reuse.is_none().then(|| self.db.serial_access_op());
        // Lifting a hold nobody placed is a mistake worth naming (a
        // mistyped scope would otherwise read as lifted). A restore
        // re-applies the log's own operations as they were.
        if !on && reuse.is_none() {
            let st = self.db.state();
            let placed = st
                .tenant(self.principal.tenant())
                .is_some_and(|t| t.holds.contains(scope));
            if !placed {
                return Err(EngineError::invalid(
                    "scope",
                    format!(
                        "no legal hold is placed on '{scope}' in tenant '{}'; nothing was lifted (the tenant's holds: `engram stats`, GET /v1/stats)",
                        self.principal.tenant()
                    ),
                ));
            }
        }
        let (op_id, lsn) = self.write_op_as(
            OpBody::Hold {
                scope: scope.to_string(),
                on,
            },
            reuse,
        )?;
        // Into the ledger now, as a deletion or revocation is: a restore of
        // an older backup applies it again (a restore syncs once, at its end).
        if reuse.is_none() {
            self.db.sync_ledger_after_op(op_id);
        }
        Ok(OpResult {
            op_id,
            lsn,
            affected: Vec::new(),
            note: None,
        })
    }

    /// [`Session::set_review_rule`] by the kinds' names (`policy`,
    /// `model`), as the CLI and the server take them: an unknown name is
    /// `invalid_input` on `kind` or `writer`, listing the names there are.
    pub fn set_review_rule_named(
        &self,
        kind: &str,
        writer: &str,
        review: bool,
    ) -> Result<OpResult> {
        use crate::model::{AssertionKind, WriterKind};
        // (who may, before what: a refused caller learns nothing of the names)
        self.require(Operation::ReviewRule)?;
        let k = AssertionKind::parse(kind).ok_or_else(|| {
            let all: Vec<&str> = AssertionKind::ALL.iter().map(|k| k.name()).collect();
            EngineError::invalid(
                "kind",
                format!("'{kind}' is no assertion kind (one of {})", all.join(", ")),
            )
        })?;
        let w = WriterKind::parse(writer).ok_or_else(|| {
            EngineError::invalid(
                "writer",
                format!("'{writer}' is no writer kind (user, system or model)"),
            )
        })?;
        self.set_review_rule(k, w, review)
    }

    /// Overrides the review policy for one assertion kind written by one
    /// writer kind in this tenant.
    pub fn set_review_rule(
        &self,
        kind: crate::model::AssertionKind,
        writer: crate::model::WriterKind,
        review: bool,
    ) -> Result<OpResult> {
        self.require(Operation::ReviewRule)?;
        let (op_id, lsn) = self.write_op(OpBody::ReviewRule {
            kind: kind.name().to_string(),
            writer: writer.name().to_string(),
            review,
        })?;
        Ok(OpResult {
            op_id,
            lsn,
            affected: Vec::new(),
            note: None,
        })
    }
}

/// Checks the scope of a legal hold: `tenant`, or a prefix and a value
/// that is a valid name (as a record's scope values and labels are: at
/// most 256 bytes, no control characters).
pub(crate) fn check_hold_scope(scope: &str) -> Result<()> {
    if scope == "tenant" {
        return Ok(());
    }
    let value = ["user:", "conversation:", "agent:", "label:"]
        .iter()
        .find_map(|p| scope.strip_prefix(p))
        .filter(|v| !v.is_empty());
    if let Some(v) = value {
        crate::model::check_name("scope", v)
    } else {
        Err(EngineError::invalid(
            "scope",
            format!(
                "'{scope}': expected tenant, user:<id>, conversation:<id>, agent:<id> or label:<label>"
            ),
        ))
    }
}

pub(crate) fn check_grant(
    principal: Option<&str>,
    label: Option<&str>,
    role: Option<&str>,
) -> Result<()> {
    if label.is_none() && role.is_none() {
        return Err(EngineError::invalid("label", "give a label or a role"));
    }
    if let Some(p) = principal {
        crate::model::check_identifier("principal", p)?;
    }
    if let Some(l) = label {
        crate::model::check_identifier("label", l)?;
    }
    if let Some(r) = role {
        if r != ROLE_REVIEWER && r != ROLE_ADMIN {
            return Err(EngineError::invalid(
                "role",
                format!("'{r}' is not a role (reviewer, admin)"),
            ));
        }
        if principal.is_none() {
            return Err(EngineError::invalid(
                "principal",
                "roles are granted to a principal",
            ));
        }
    }
    Ok(())
}

/// Why a grant or a revocation would change nothing in `tenant`, if it
/// would not (see `Session::access_as`): a tenant-wide grant of a label
/// not revoked tenant-wide; a revocation from a principal of a label or
/// role the store does not grant it (a label an API key gives is changed
/// on the key); a tenant-wide revocation of a label already revoked.
/// `Ok(Some(note))`: done, but worth saying: a tenant-wide revocation of
/// a label that no record or grant of the tenant carries yet (it applies
/// to records written with it later, so it is taken; a mistyped label
/// would leave the real one readable, so it is said).
fn access_no_op(
    st: &crate::state::State,
    tenant: &str,
    grant: bool,
    principal: Option<&str>,
    label: Option<&str>,
    role: Option<&str>,
) -> Result<Option<String>> {
    let t = st.tenant(tenant);
    let invalid = |field: &str, why: String| Err(EngineError::invalid(field, why));
    match (grant, principal) {
        (true, None) => {
            let Some(l) = label else { return Ok(None) };
            if t.is_some_and(|t| t.revoked_labels.contains(l)) {
                return Ok(None);
            }
            invalid(
                "label",
                format!(
                    "no tenant-wide revocation of '{l}' is in effect in tenant '{tenant}'; nothing was granted (a grant to one principal names it)"
                ),
            )
        }
        (true, Some(_)) => Ok(None),
        (false, Some(p)) => {
            let g = t.and_then(|t| t.grants.get(p));
            if g.is_none() && (label.is_some() || role.is_some()) {
                let asked = label.map_or_else(
                    || format!("role '{}'", role.unwrap_or_default()),
                    |l| format!("label '{l}'"),
                );
                return invalid(
                    "principal",
                    format!(
                        "principal '{p}' holds no grant in tenant '{tenant}', so none of {asked}; nothing was revoked (check the principal's name; a label an API key gives holds until the key is revoked)"
                    ),
                );
            }
            let missing = [
                (
                    "label",
                    label,
                    g.is_some_and(|g| label.is_some_and(|l| g.labels.contains(l))),
                ),
                (
                    "role",
                    role,
                    g.is_some_and(|g| role.is_some_and(|r| g.roles.contains(r))),
                ),
            ]
            .into_iter()
            .find_map(|(field, name, held)| Some((field, name?)).filter(|_| !held));
            let Some((field, name)) = missing else {
                return Ok(None);
            };
            invalid(
                field,
                format!(
                    "principal '{p}' holds no grant of {field} '{name}' in tenant '{tenant}'; nothing was revoked (a {field} an API key gives holds until the key is revoked; `revoke --label` without a principal withdraws a label from everyone)"
                ),
            )
        }
        (false, None) => {
            let Some(l) = label else { return Ok(None) };
            if t.is_some_and(|t| t.revoked_labels.contains(l)) {
                return invalid(
                    "label",
                    format!(
                        "'{l}' is already revoked tenant-wide in tenant '{tenant}'; nothing was revoked"
                    ),
                );
            }
            let carried = t.is_some_and(|t| {
                st.strings.get(l).is_some_and(|s| t.labels.contains(&s))
                    || t.grants.values().any(|g| g.labels.contains(l))
            });
            Ok((!carried).then(|| {
                format!(
                    "no record or grant of tenant '{tenant}' carries label '{l}' yet: revoked for the records written with it from now on (if the label is mistyped, the real one is still readable)"
                )
            }))
        }
    }
}
