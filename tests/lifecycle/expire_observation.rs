//! Governance case 2: expire a failure observation. After its evidence
//! window the failure is not presented as current; asked about the past, or
//! with history, it is found and labelled historical. Expiring into the
//! past of a record's validity is refused.

use crate::common::*;
use engram::context::ContextRequest;
use engram::retrieval::RecallRequest;
use engram::{EngineError, ManualClock, NewRecord, Principal};

#[test]
fn an_expired_observation_is_history_not_current_state() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0 + MINUTE);
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("acme-ops"));
    let mut obs = NewRecord::event("observation", "The catalog_api health check failed.")
        .with_external_id("hc-1")
        .at(T0);
    obs.valid_until = Some(T0 + 5 * MINUTE); // current_evidence_until
    s.append(vec![
        obs,
        NewRecord::event("observation", "Disk usage on db-1 is 40%.")
            .with_external_id("disk")
            .at(T0),
    ])
    .unwrap();
    db.wait_indexed().unwrap();
    let q = || RecallRequest::text("catalog_api health check");
    let hit = |r: &engram::RecallResponse| {
        r.hits
            .iter()
            .any(|h| h.external_id.as_deref() == Some("hc-1"))
    };

    // inside the window: current
    assert!(hit(&s.recall(&q()).unwrap()));
    // after the window: not presented as current
    clock.set(T0 + 10 * MINUTE);
    let now = s.recall(&q()).unwrap();
    assert!(!hit(&now), "expired observation presented as current");
    assert!(
        now.manifest
            .eligibility
            .iter()
            .any(|st| st.step == "validity")
    );
    // valid at a time inside the window: found
    let past = s
        .recall(&RecallRequest {
            valid_at: Some(T0 + 2 * MINUTE),
            ..q()
        })
        .unwrap();
    assert!(hit(&past));
    // with history requested: found and labelled historical
    let h = s
        .recall(&RecallRequest {
            include_historical: true,
            ..q()
        })
        .unwrap();
    let item = h
        .hits
        .iter()
        .find(|h| h.external_id.as_deref() == Some("hc-1"))
        .unwrap();
    assert!(item.historical);
    // context labels it historical and never current
    let c = s
        .context(&ContextRequest::new("is catalog_api failing?"))
        .unwrap();
    let rendered = c.render();
    for sec in &c.sections {
        for it in &sec.items {
            if it.external_id.as_deref() == Some("hc-1") {
                assert!(it.historical, "{rendered}");
            }
        }
    }

    // an explicit expiry op on the other observation
    s.expire(&ext("disk"), T0 + 3 * MINUTE).unwrap();
    assert!(
        !s.recall(&RecallRequest::text("disk usage db-1"))
            .unwrap()
            .hits
            .iter()
            .any(|h| h.external_id.as_deref() == Some("disk"))
    );
    // what the store knew before the expiry op was written (as_of): current
    let before_op = s
        .recall(&RecallRequest {
            as_of: Some(T0 + 5 * MINUTE),
            valid_at: Some(T0 + 5 * MINUTE),
            ..RecallRequest::text("disk usage db-1")
        })
        .unwrap();
    assert!(
        before_op
            .hits
            .iter()
            .any(|h| h.external_id.as_deref() == Some("disk"))
    );

    // expiring into the past of valid_from is refused, nothing written
    let lsn = db.applied_lsn();
    let e = s.expire(&ext("disk"), T0 - MINUTE).unwrap_err();
    assert!(
        matches!(e, EngineError::InvalidInput { ref field, .. } if field == "valid_until"),
        "{e}"
    );
    assert_eq!(db.applied_lsn(), lsn);
    db.close().unwrap();
}
