//! The authorization matrix of docs/security.md, cell by cell: every
//! operation x principal kind x label possession is performed for real, once
//! through the embedded API and once through the `engram` binary, and its
//! outcome (allow, hidden = answered like a missing record, forbidden) must
//! be the documented one. The expected table below is written from the doc,
//! not computed from the code it checks.

use std::path::Path;

use engram::{
    AssertionKind, EngineError, Engram, NewRecord, Options, Principal, RecordId, RecordRef, Writer,
    WriterKind,
};

use super::cli;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Out {
    Allow,
    Hidden,
    Forbidden,
}
use Out::{Allow, Forbidden, Hidden};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Who {
    Admin,
    Reviewer,
    Writer,
    User,
    Agent,
    OtherTenant,
}
const WHO: [Who; 6] = [
    Who::Admin,
    Who::Reviewer,
    Who::Writer,
    Who::User,
    Who::Agent,
    Who::OtherTenant,
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Read,
    Append,
    Cite,
    Correct,
    LowerAccess,
    Expire,
    Delete,
    Retract,
    Review,
    Grant,
    Revoke,
    Retention,
    Hold,
    ReviewRule,
    TenantStats,
}
const OPS: [Op; 15] = [
    Op::Read,
    Op::Append,
    Op::Cite,
    Op::Correct,
    Op::LowerAccess,
    Op::Expire,
    Op::Delete,
    Op::Retract,
    Op::Review,
    Op::Grant,
    Op::Revoke,
    Op::Retention,
    Op::Hold,
    Op::ReviewRule,
    Op::TenantStats,
];

/// The documented matrix (docs/security.md).
fn expected(op: Op, who: Who, holds: bool) -> Out {
    let targeted = !matches!(
        op,
        Op::Append
            | Op::Grant
            | Op::Revoke
            | Op::Retention
            | Op::Hold
            | Op::ReviewRule
            | Op::TenantStats
    );
    if targeted && (who == Who::OtherTenant || !holds) {
        return Hidden;
    }
    let allowed = match op {
        // a principal of another tenant appends into its own tenant
        Op::Read | Op::Append | Op::Cite => true,
        Op::Correct | Op::Expire | Op::Delete | Op::Retract => {
            matches!(who, Who::Admin | Who::Writer)
        }
        Op::Review => matches!(who, Who::Admin | Who::Reviewer),
        Op::LowerAccess
        | Op::Grant
        | Op::Revoke
        | Op::Retention
        | Op::Hold
        | Op::ReviewRule
        | Op::TenantStats => who == Who::Admin,
    };
    if allowed { Allow } else { Forbidden }
}

const LABEL: &str = "secret";

fn principal(who: Who) -> Principal {
    match who {
        Who::Admin => Principal::admin("A"),
        Who::Reviewer => Principal::user("A", "rev"),
        Who::Writer => Principal::user("A", "w"),
        Who::User => Principal::user("A", "u"),
        Who::Agent => Principal::model("A", "ag"),
        Who::OtherTenant => Principal::user("B", "x"),
    }
}

/// A store where the reviewer holds its role and, with `holds`, every
/// principal of A holds the label (without, it is revoked tenant-wide, so
/// that even the admin lacks it).
fn store(dir: &Path, holds: bool) -> Engram {
    let db = Engram::open(dir, Options::default()).unwrap();
    let admin = db.session(Principal::admin("A"));
    admin.grant(Some("rev"), None, Some("reviewer")).unwrap();
    if holds {
        for p in ["rev", "w", "u", "ag"] {
            admin.grant(Some(p), Some(LABEL), None).unwrap();
        }
    }
    admin
        .append(vec![
            NewRecord::event("note", "an open source event").with_external_id("src"),
        ])
        .unwrap();
    // B exists too
    db.session(Principal::admin("B"))
        .append(vec![NewRecord::event("note", "b's own note")])
        .unwrap();
    db
}

/// A fresh target written by principal `w` of tenant A: an assertion (so it
/// can be retracted), a review candidate for the review cell.
fn target(db: &Engram, candidate: bool, holds: bool, n: usize) -> RecordId {
    let admin = db.session(Principal::admin("A"));
    let mut r = NewRecord::assertion(
        if candidate {
            AssertionKind::Instruction
        } else {
            AssertionKind::Fact
        },
        format!("target statement {n}"),
        vec![src()],
    )
    .with_external_id(format!("target-{n}"));
    r.access = vec![LABEL.into()];
    r.writer = Some(Writer {
        principal: "w".into(),
        kind: if candidate {
            WriterKind::Model
        } else {
            WriterKind::User
        },
    });
    let id = admin.append(vec![r]).unwrap()[0].id;
    if !holds {
        // revoked after writing: nobody holds it now, the admin included
        admin.revoke(None, Some(LABEL), None).ok();
    }
    id
}

fn src() -> RecordRef {
    RecordRef::External("src".into())
}

fn classify(r: Result<(), EngineError>) -> Out {
    match r {
        Ok(()) => Allow,
        Err(EngineError::NotFound { .. }) => Hidden,
        Err(EngineError::InvalidInput { reason, .. }) if reason.starts_with("no record") => Hidden,
        Err(EngineError::Forbidden { .. }) => Forbidden,
        Err(e) => panic!("unexpected error: {e}"),
    }
}

fn perform(db: &Engram, op: Op, who: Who, id: RecordId) -> Out {
    let s = db.session(principal(who));
    let t = RecordRef::Id(id);
    classify(match op {
        Op::Read => s.get(&t).map(drop),
        Op::Append => s
            .append(vec![NewRecord::event("note", "a plain new note")])
            .map(drop),
        Op::Cite => {
            let mut r = NewRecord::assertion(AssertionKind::Fact, "citing it", vec![t.clone()]);
            r.access = vec![LABEL.into()];
            s.append(vec![r]).map(drop)
        }
        Op::Correct | Op::LowerAccess => {
            let mut r = NewRecord::assertion(AssertionKind::Fact, "corrected", vec![src()]);
            r.supersedes = Some(t.clone());
            r.replace_access = op == Op::LowerAccess;
            s.append(vec![r]).map(drop)
        }
        Op::Expire => s.expire(&t, 4_102_444_800_000).map(drop),
        Op::Delete => s.delete(&t, None).map(drop),
        Op::Retract => s.retract(&t, None).map(drop),
        Op::Review => s.approve(&t, None).map(drop),
        Op::Grant => s.grant(Some("someone"), Some("l2"), None).map(drop),
        Op::Revoke => s.revoke(Some("someone"), Some("l2"), None).map(drop),
        Op::ReviewRule => s
            .set_review_rule(AssertionKind::Fact, WriterKind::Model, true)
            .map(drop),
        Op::Retention => s.set_retention("ephemeral", Some(3_600_000)).map(drop),
        Op::Hold => s.hold("tenant", true).map(drop),
        Op::TenantStats => s.tenant_stats().map(drop),
    })
}

#[test]
fn every_cell_of_the_matrix_through_the_embedded_api() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for holds in [true, false] {
        let db = store(&tmp.path().join(format!("s-{holds}")), holds);
        let mut n = 0;
        for op in OPS {
            for who in WHO {
                n += 1;
                let id = target(&db, op == Op::Review, holds, n);
                let got = perform(&db, op, who, id);
                let want = expected(op, who, holds);
                if got != want {
                    failures.push(format!(
                        "{op:?} by {who:?} (holds: {holds}): got {got:?}, want {want:?}"
                    ));
                }
                if !holds {
                    // grant it back tenant-wide for the next target
                    db.session(Principal::admin("A"))
                        .grant(None, Some(LABEL), None)
                        .unwrap();
                }
            }
        }
        db.close().unwrap();
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The CLI cells: the admin (no --principal) and named principals of A and
/// B (the CLI has no agent principals).
#[test]
fn every_cell_of_the_matrix_through_the_cli() {
    let _serial = crate::cli::serial();
    let tmp = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for holds in [true, false] {
        let dir = tmp.path().join(format!("s-{holds}"));
        store(&dir, holds).close().unwrap();
        let fix = tmp.path().join("fix.json");
        std::fs::write(
            &fix,
            r#"{"record":"assertion","kind":"fact","text":"corrected","sources":["src"]}"#,
        )
        .unwrap();
        let mut n = 0;
        for op in OPS {
            for who in WHO.into_iter().filter(|w| *w != Who::Agent) {
                n += 1;
                let id = {
                    let db = Engram::open(&dir, Options::default()).unwrap();
                    let id = target(&db, op == Op::Review, holds, n);
                    db.close().unwrap();
                    id
                };
                let (tenant, principal) = match who {
                    Who::Admin => ("A", None),
                    Who::Reviewer => ("A", Some("rev")),
                    Who::Writer => ("A", Some("w")),
                    Who::User => ("A", Some("u")),
                    Who::OtherTenant => ("B", Some("x")),
                    Who::Agent => unreachable!(),
                };
                let ext = format!("target-{n}");
                let idt = format!("id:{id}");
                let mut args: Vec<&str> = match op {
                    Op::Read => vec!["get", &idt],
                    Op::Append => continue, // `ingest` acts as the admin; covered above
                    Op::Cite => continue,   // citing is an append of a file; covered above
                    Op::Correct => vec!["correct", &ext, fix.to_str().unwrap()],
                    Op::LowerAccess => {
                        vec!["correct", &ext, fix.to_str().unwrap(), "--replace-access"]
                    }
                    Op::Expire => vec!["expire", &ext, "--at", "2100-01-01T00:00:00Z"],
                    Op::Delete => vec!["delete", &ext],
                    Op::Retract => continue, // no CLI command; covered above
                    Op::Review => vec!["review", "approve", &idt],
                    Op::Grant => vec!["grant", "--principal", "someone", "--label", "l2"],
                    Op::Revoke => vec!["revoke", "--principal", "someone", "--label", "l2"],
                    Op::ReviewRule => vec![
                        "review", "rule", "--kind", "fact", "--writer", "model", "--review", "true",
                    ],
                    Op::Retention => vec!["retention", "--class", "ephemeral", "--period", "1h"],
                    Op::Hold => vec!["hold", "--scope", "tenant"],
                    Op::TenantStats => continue, // the CLI's stats is the operator's
                };
                args.extend(["--tenant", tenant]);
                if let Some(p) = principal {
                    // tenant-wide commands name their grantee with
                    // --principal; the actor is --as
                    let tenant_wide = matches!(
                        op,
                        Op::Grant | Op::Revoke | Op::Retention | Op::Hold | Op::ReviewRule
                    );
                    args.extend([if tenant_wide { "--as" } else { "--principal" }, p]);
                }
                let o = cli::at(&dir, &args);
                let text = cli::text(&o);
                let got = if o.status.success() {
                    Allow
                } else if text.contains("no record") {
                    Hidden
                } else if text.contains("may not") {
                    Forbidden
                } else {
                    panic!("{args:?}: unexpected failure: {text}");
                };
                let want = expected(op, who, holds);
                if got != want {
                    failures.push(format!(
                        "{op:?} by {who:?} (holds: {holds}): got {got:?}, want {want:?}: {text}"
                    ));
                }
                if !holds {
                    let db = Engram::open(&dir, Options::default()).unwrap();
                    db.session(Principal::admin("A"))
                        .grant(None, Some(LABEL), None)
                        .unwrap();
                    db.close().unwrap();
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
