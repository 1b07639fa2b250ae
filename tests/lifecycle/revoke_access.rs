//! Governance case 4: revoke a caller's access. The restricted source and
//! every derivative built on it (a summary that also used an ordinary
//! ticket) stop reaching that caller on the very next read: recall,
//! context, get, trace. Others keep their access; a tenant-wide revocation
//! hides the label from everyone, admins included.

use crate::common::*;
use engram::context::ContextRequest;
use engram::retrieval::RecallRequest;
use engram::{Body, EngineError, ManualClock, NewRecord, Principal};

#[test]
fn revocation_reaches_sources_and_derivatives() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let db = open(dir.path(), &clock);
    let admin = db.session(Principal::admin("acme-ops"));
    admin
        .append(vec![
            NewRecord::event(
                "ticket",
                "Ticket 88: checkout errors reported by customers in EU.",
            )
            .with_external_id("t-88"),
            NewRecord::event(
                "document",
                "Security investigation: credential stuffing against checkout from botnet AS1234.",
            )
            .with_external_id("sec-1")
            .with_access(&["security_investigation"]),
        ])
        .unwrap();
    admin
        .append(vec![NewRecord {
            body: Body::Summary {
                generator: "sum@1".into(),
            },
            kind: "summary".into(),
            text: Some(
                "Checkout errors in EU are caused by credential stuffing from AS1234.".into(),
            ),
            sources: vec![ext("t-88"), ext("sec-1")],
            external_id: Some("sum-88".into()),
            ..NewRecord::default()
        }])
        .unwrap();
    admin
        .grant(Some("dana"), Some("security_investigation"), None)
        .unwrap();
    admin
        .grant(Some("eve"), Some("security_investigation"), None)
        .unwrap();
    db.wait_indexed().unwrap();
    let summary = admin.get(&ext("sum-88")).unwrap();
    assert_eq!(
        summary.effective_access,
        vec!["security_investigation"],
        "a summary inherits the strictest access of its inputs"
    );

    let dana = db.session(Principal::user("acme-ops", "dana"));
    let eve = db.session(Principal::user("acme-ops", "eve"));
    let q = || RecallRequest::text("checkout errors credential stuffing");
    let sees = |s: &engram::Session, e: &str| {
        s.recall(&q())
            .unwrap()
            .hits
            .iter()
            .any(|h| h.external_id.as_deref() == Some(e))
    };
    assert!(sees(&dana, "sec-1") && sees(&dana, "sum-88"));

    admin
        .revoke(Some("dana"), Some("security_investigation"), None)
        .unwrap();
    assert!(
        !sees(&dana, "sec-1"),
        "source still visible after revocation"
    );
    assert!(
        !sees(&dana, "sum-88"),
        "derived summary still visible after revocation"
    );
    assert!(sees(&dana, "t-88"), "unrestricted records stay visible");
    assert!(matches!(
        dana.get(&ext("sum-88")),
        Err(EngineError::NotFound { .. })
    ));
    let c = dana
        .context(&ContextRequest::new("why do checkout errors happen in EU?"))
        .unwrap()
        .render();
    assert!(!c.contains("AS1234"), "{c}");
    let t = dana.trace(&ext("t-88")).unwrap();
    assert!(
        t.nodes.iter().all(|n| n.id != summary.id)
            && t.edges
                .iter()
                .all(|e| e.from != summary.id && e.to != summary.id),
        "trace must not reveal a restricted record, not even that it exists"
    );
    // eve keeps access
    assert!(sees(&eve, "sum-88"));
    // tenant-wide: nobody, admin included
    admin
        .revoke(None, Some("security_investigation"), None)
        .unwrap();
    assert!(!sees(&eve, "sec-1"));
    assert!(!sees(&admin, "sum-88"));
    admin
        .grant(None, Some("security_investigation"), None)
        .unwrap();
    assert!(sees(&eve, "sum-88") && sees(&admin, "sec-1"));
    assert!(!sees(&dana, "sec-1"));
    // granting back what is not revoked tenant-wide (a mistyped label, or
    // the same grant twice) is named, and nothing is written
    let ops = db.stats().unwrap().last_lsn;
    for label in ["security_investigation", "security_investigaton"] {
        match admin.grant(None, Some(label), None) {
            Err(EngineError::InvalidInput { field, reason, .. }) => {
                assert_eq!(field, "label");
                assert!(
                    reason.contains(label) && reason.contains("nothing was granted"),
                    "{reason}"
                );
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(db.stats().unwrap().last_lsn, ops, "a refused grant wrote");
    // so is a revocation that withdraws nothing: a label or role the
    // principal was never granted (a typo in either name), a label
    // already revoked tenant-wide; the real grant stays, and nothing is
    // written
    admin
        .revoke(None, Some("security_investigation"), None)
        .unwrap();
    let ops = db.stats().unwrap().last_lsn;
    for (principal, label, role, field) in [
        (Some("dana"), Some("security_investigation"), None, "label"),
        (Some("eve"), Some("security_investigaton"), None, "label"),
        (
            Some("Eve"),
            Some("security_investigation"),
            None,
            "principal",
        ),
        (Some("eve"), None, Some("reviewer"), "role"),
        (None, Some("security_investigation"), None, "label"),
    ] {
        match admin.revoke(principal, label, role) {
            Err(EngineError::InvalidInput {
                field: f, reason, ..
            }) => {
                assert_eq!(f, field);
                assert!(
                    reason.contains(label.or(role).unwrap())
                        && reason.contains("nothing was revoked"),
                    "{reason}"
                );
            }
            other => panic!("{principal:?} {label:?} {role:?}: {other:?}"),
        }
    }
    assert_eq!(
        db.stats().unwrap().last_lsn,
        ops,
        "a refused revocation wrote"
    );
    // a tenant-wide revocation of a label nothing carries yet is taken
    // (it applies to records written with it later), and said
    let done = admin
        .revoke(None, Some("security_investigaton"), None)
        .unwrap();
    let note = done.note.unwrap_or_default();
    assert!(
        note.contains("security_investigaton") && note.contains("mistyped"),
        "{note}"
    );
    assert!(db.stats().unwrap().last_lsn > ops);
    admin
        .grant(None, Some("security_investigation"), None)
        .unwrap();
    assert!(sees(&eve, "sum-88"), "eve's grant stays");
    db.close().unwrap();
}
