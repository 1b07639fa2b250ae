//! The authorization matrix: what a principal may do, decided in one place.
//!
//! Every operation of a session, every CLI command and every server
//! endpoint asks [`decide`]; nothing decides authority on its own. The
//! matrix is documented cell by cell in `docs/security.md`, and
//! `tests/regressions/authz_matrix.rs` checks every cell through the embedded API and
//! through the CLI.
//!
//! Inputs are the acting [`Actor`] (store operator, or a principal of a
//! tenant with the roles it holds now), the [`Operation`] and, for
//! operations on a record, what the target is to the actor ([`Target`]).
//! Two rules hold for every cell:
//! - a record the actor cannot read (another tenant's, or one carrying a
//!   label the actor does not hold) is [`Decision::Hidden`]: reported
//!   exactly like a missing record, so no answer depends on it;
//! - tenant and principal come from the session, never from the request.
//!
//! This module must never look at record content or request bodies.

use crate::model::WriterKind;

/// What is being done.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Operation {
    /// get, history, list, recall, query, context, trace, eval: reads,
    /// always limited to records the actor may read.
    Read,
    /// Append new records (sources must be readable).
    Append,
    /// Append a record that supersedes (corrects) a stored one.
    Correct,
    /// A correction that drops labels of the record it corrects.
    LowerAccess,
    /// Set a record's end of validity.
    Expire,
    /// Delete a record, its versions and derivatives.
    Delete,
    /// Withdraw a semantic record.
    Retract,
    /// Approve or reject a review candidate; list the review queue.
    Review,
    /// Grant a label or role.
    Grant,
    /// Revoke a label or role.
    Revoke,
    /// Set a retention period.
    Retention,
    /// Place or lift a legal hold.
    Hold,
    /// Change which kinds need review.
    ReviewRule,
    /// Counts of the tenant.
    TenantStats,
    /// Counts of the whole store.
    StoreStats,
    /// Back up the store.
    Backup,
    /// Restore the store from a backup.
    Restore,
    /// Purge deleted content from the log.
    Compact,
    /// Check the store.
    Verify,
    /// Rebuild derived state.
    Rebuild,
    /// Cut a damaged log.
    Repair,
    /// Create API keys (server).
    ManageKeys,
}

impl Operation {
    /// Every operation, for tables and tests.
    pub const ALL: [Operation; 22] = [
        Operation::Read,
        Operation::Append,
        Operation::Correct,
        Operation::LowerAccess,
        Operation::Expire,
        Operation::Delete,
        Operation::Retract,
        Operation::Review,
        Operation::Grant,
        Operation::Revoke,
        Operation::Retention,
        Operation::Hold,
        Operation::ReviewRule,
        Operation::TenantStats,
        Operation::StoreStats,
        Operation::Backup,
        Operation::Restore,
        Operation::Compact,
        Operation::Verify,
        Operation::Rebuild,
        Operation::Repair,
        Operation::ManageKeys,
    ];

    /// Name used in messages and docs.
    pub fn name(self) -> &'static str {
        match self {
            Operation::Read => "read",
            Operation::Append => "append",
            Operation::Correct => "correct",
            Operation::LowerAccess => "lower access",
            Operation::Expire => "expire",
            Operation::Delete => "delete",
            Operation::Retract => "retract",
            Operation::Review => "review",
            Operation::Grant => "grant",
            Operation::Revoke => "revoke",
            Operation::Retention => "set retention",
            Operation::Hold => "place holds",
            Operation::ReviewRule => "set review rules",
            Operation::TenantStats => "see tenant stats",
            Operation::StoreStats => "see store stats",
            Operation::Backup => "back up the store",
            Operation::Restore => "restore the store",
            Operation::Compact => "compact the store",
            Operation::Verify => "verify the store",
            Operation::Rebuild => "rebuild the store",
            Operation::Repair => "repair the store",
            Operation::ManageKeys => "manage API keys",
        }
    }

    /// Whether the operation concerns the whole store (not one tenant).
    pub fn is_store_wide(self) -> bool {
        matches!(
            self,
            Operation::StoreStats
                | Operation::Backup
                | Operation::Restore
                | Operation::Compact
                | Operation::Verify
                | Operation::Rebuild
                | Operation::Repair
                | Operation::ManageKeys
        )
    }
}

/// Who acts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Actor<'a> {
    /// The store operator: the CLI with the store directory, or the
    /// server's store-wide admin key. Store-wide operations only: it has
    /// no tenant, so it reads no tenant's records.
    Operator,
    /// A principal of one tenant.
    Principal {
        /// Principal id.
        id: &'a str,
        /// Writer kind of the principal.
        kind: WriterKind,
        /// Tenant administrator (by identity or by a granted `admin` role).
        admin: bool,
        /// Holds the `reviewer` role now.
        reviewer: bool,
    },
}

/// A record an operation is about, as seen by the actor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Target {
    /// The actor may read it: same tenant, and holds every effective label.
    pub readable: bool,
    /// The actor wrote it (its writer principal is the actor: the same
    /// name and writer kind).
    pub own: bool,
    /// Its writer bears the actor's name, of whatever kind: review is
    /// another principal's decision, and a person named like the model
    /// that wrote a candidate is not another principal to a reader.
    pub same_name: bool,
}

/// The answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Go ahead.
    Allow,
    /// Report the target exactly like a missing record.
    Hidden,
    /// Refuse, with the reason.
    Forbidden(&'static str),
}

/// The matrix. See the module documentation and `docs/security.md`.
pub fn decide(actor: Actor<'_>, op: Operation, target: Option<Target>) -> Decision {
    use Decision::{Allow, Forbidden, Hidden};
    let (admin, reviewer, model) = match actor {
        Actor::Operator => {
            return if op.is_store_wide() {
                Allow
            } else {
                Forbidden(
                    "the store operator acts on the store, not inside a tenant: use a principal of the tenant",
                )
            };
        }
        Actor::Principal {
            admin,
            reviewer,
            kind,
            ..
        } => (admin, reviewer, kind == WriterKind::Model),
    };
    if op.is_store_wide() {
        return Forbidden(
            "only the store operator (the store's directory, or the server's admin key) may do this",
        );
    }
    // A record the actor cannot read does not exist for it.
    if let Some(t) = target {
        if !t.readable {
            return Hidden;
        }
    }
    let own = target.is_some_and(|t| t.own);
    // Review is people checking what models write: a model decides no
    // review and sets no review rule, whatever roles it was granted (an
    // admin role would otherwise let it approve its own candidates, which
    // it cannot write approved).
    if model && matches!(op, Operation::Review | Operation::ReviewRule) {
        return Forbidden(
            "a model does not decide review: review is a person's check of what models write",
        );
    }
    match op {
        Operation::Read | Operation::Append => Allow,
        Operation::Correct | Operation::Expire | Operation::Delete | Operation::Retract => {
            if admin || own {
                Allow
            } else {
                Forbidden("only the record's writer or the tenant admin may do this")
            }
        }
        // Review is a second principal's decision: a candidate's writer
        // may not approve it, reviewer role or not (the admin may, who can
        // write an approved record anyway).
        Operation::Review => {
            if admin {
                Allow
            } else if !reviewer {
                Forbidden("review needs the reviewer role")
            } else if own || target.is_some_and(|t| t.same_name) {
                Forbidden(
                    "a candidate's writer may not review it: review is another principal's decision",
                )
            } else {
                Allow
            }
        }
        Operation::LowerAccess
        | Operation::Grant
        | Operation::Revoke
        | Operation::Retention
        | Operation::Hold
        | Operation::ReviewRule
        | Operation::TenantStats => {
            if admin {
                Allow
            } else {
                Forbidden("only the tenant admin may do this")
            }
        }
        // store-wide operations were decided above
        _ => Forbidden("only the store operator may do this"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(admin: bool, reviewer: bool) -> Actor<'static> {
        Actor::Principal {
            id: "u",
            kind: WriterKind::User,
            admin,
            reviewer,
        }
    }

    const MINE: Target = Target {
        readable: true,
        own: true,
        same_name: true,
    };
    const THEIRS: Target = Target {
        readable: true,
        own: false,
        same_name: false,
    };
    const HIDDEN: Target = Target {
        readable: false,
        own: true,
        same_name: true,
    };

    #[test]
    fn an_unreadable_target_is_hidden_for_every_principal_and_operation() {
        for op in Operation::ALL.iter().filter(|o| !o.is_store_wide()) {
            for a in [p(false, false), p(true, false), p(false, true)] {
                assert_eq!(
                    decide(a, *op, Some(HIDDEN)),
                    Decision::Hidden,
                    "{op:?} {a:?}"
                );
            }
        }
    }

    #[test]
    fn store_operations_belong_to_the_operator_only() {
        for op in Operation::ALL {
            let by_admin = decide(p(true, true), op, None);
            let by_operator = decide(Actor::Operator, op, None);
            if op.is_store_wide() {
                assert!(matches!(by_admin, Decision::Forbidden(_)), "{op:?}");
                assert_eq!(by_operator, Decision::Allow, "{op:?}");
            } else {
                assert!(matches!(by_operator, Decision::Forbidden(_)), "{op:?}");
            }
        }
    }

    #[test]
    fn writers_may_change_their_own_records_only() {
        for op in [
            Operation::Correct,
            Operation::Expire,
            Operation::Delete,
            Operation::Retract,
        ] {
            assert_eq!(decide(p(false, false), op, Some(MINE)), Decision::Allow);
            assert!(matches!(
                decide(p(false, false), op, Some(THEIRS)),
                Decision::Forbidden(_)
            ));
            assert_eq!(decide(p(true, false), op, Some(THEIRS)), Decision::Allow);
        }
        assert!(matches!(
            decide(p(false, false), Operation::LowerAccess, Some(MINE)),
            Decision::Forbidden(_)
        ));
    }

    /// Review is another principal's decision: a reviewer may not review
    /// its own candidate; another's it may; the admin may either.
    #[test]
    fn a_reviewer_may_not_review_its_own_candidate() {
        assert!(matches!(
            decide(p(false, true), Operation::Review, Some(MINE)),
            Decision::Forbidden(_)
        ));
        assert_eq!(
            decide(p(false, true), Operation::Review, Some(THEIRS)),
            Decision::Allow
        );
        assert_eq!(
            decide(p(true, false), Operation::Review, Some(MINE)),
            Decision::Allow
        );
        assert_eq!(
            decide(p(false, true), Operation::Review, None),
            Decision::Allow
        );
        assert!(matches!(
            decide(p(false, false), Operation::Review, Some(THEIRS)),
            Decision::Forbidden(_)
        ));
        // without the role, the role is the reason given, also to a
        // record's writer (it may not be a candidate at all)
        for target in [MINE, THEIRS] {
            assert_eq!(
                decide(p(false, false), Operation::Review, Some(target)),
                Decision::Forbidden("review needs the reviewer role")
            );
        }
    }

    /// A model decides no review and sets no review rule, whatever roles
    /// it holds (a model granted the admin role approved its own
    /// candidate); its other rights are its roles'.
    #[test]
    fn a_model_decides_no_review_whatever_its_roles() {
        let model = |admin, reviewer| Actor::Principal {
            id: "bot",
            kind: WriterKind::Model,
            admin,
            reviewer,
        };
        for (admin, reviewer) in [(true, true), (true, false), (false, true)] {
            for (op, t) in [
                (Operation::Review, Some(THEIRS)),
                (Operation::Review, Some(MINE)),
                (Operation::Review, None),
                (Operation::ReviewRule, None),
            ] {
                assert!(
                    matches!(
                        decide(model(admin, reviewer), op, t),
                        Decision::Forbidden(_)
                    ),
                    "{op:?} admin {admin} reviewer {reviewer}"
                );
            }
        }
        assert_eq!(
            decide(model(true, false), Operation::Grant, None),
            Decision::Allow
        );
        // a hidden target stays hidden
        assert_eq!(
            decide(model(true, true), Operation::Review, Some(HIDDEN)),
            Decision::Hidden
        );
    }

    /// A person named like the model that wrote a candidate may not review
    /// it, reviewer role or not (it is not that model's writer for
    /// anything else).
    #[test]
    fn a_namesake_of_a_candidates_writer_may_not_review_it() {
        let namesake = Target {
            readable: true,
            own: false,
            same_name: true,
        };
        assert!(matches!(
            decide(p(false, true), Operation::Review, Some(namesake)),
            Decision::Forbidden(_)
        ));
        assert!(matches!(
            decide(p(false, false), Operation::Correct, Some(namesake)),
            Decision::Forbidden(_)
        ));
        assert_eq!(
            decide(p(true, false), Operation::Review, Some(namesake)),
            Decision::Allow
        );
    }
}
