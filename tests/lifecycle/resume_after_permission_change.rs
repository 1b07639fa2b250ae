//! Governance case 6: resume a saved conversation after a permission
//! change. The context is rebuilt under the access that holds now: turns
//! and derived notes the principal lost access to are gone from it.

use crate::common::*;
use engram::context::ContextRequest;
use engram::{AssertionKind, ManualClock, NewRecord, Principal, Scope};

#[test]
fn a_resumed_conversation_is_filtered_by_current_access() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let db = open(dir.path(), &clock);
    let admin = db.session(Principal::admin("acme-support"));
    let conv = Scope {
        user: Some("dana".into()),
        conversation: Some("conv-7".into()),
        ..Scope::default()
    };
    let turns = [
        ("m1", "Can you look at the Acme Corp renewal?", &[][..]),
        (
            "m2",
            "Acme Corp's renewal price is 48000 EUR with a 12% discount.",
            &["finance"][..],
        ),
        ("m3", "Please draft the renewal email.", &[][..]),
    ];
    for (i, (e, t, labels)) in turns.iter().enumerate() {
        clock.set(T0 + i as i64 * MINUTE);
        admin
            .append(vec![
                NewRecord::event("user_message", *t)
                    .with_external_id(*e)
                    .with_scope(conv.clone())
                    .with_access(labels),
            ])
            .unwrap();
    }
    admin
        .append(vec![
            NewRecord::assertion(
                AssertionKind::Fact,
                "Acme Corp discount is 12%.",
                vec![ext("m2")],
            )
            .with_scope(Scope {
                user: Some("dana".into()),
                ..Scope::default()
            }),
        ])
        .unwrap();
    admin.grant(Some("dana"), Some("finance"), None).unwrap();
    let dana = db.session(Principal::user("acme-support", "dana"));
    let req = || {
        let mut r = ContextRequest::new("continue the Acme Corp renewal");
        r.user = Some("dana".into());
        r.conversation = Some("conv-7".into());
        r
    };
    let before = dana.context(&req()).unwrap().render();
    assert!(
        before.contains("48000 EUR") && before.contains("discount is 12%"),
        "{before}"
    );
    // the saved conversation is resumed after dana moved teams
    admin.revoke(Some("dana"), Some("finance"), None).unwrap();
    let after = dana.context(&req()).unwrap();
    let text = after.render();
    assert!(!text.contains("48000"), "{text}");
    assert!(!text.contains("12%"), "derived note leaked: {text}");
    let recent: Vec<_> = after.sections[3]
        .items
        .iter()
        .filter_map(|i| i.external_id.clone())
        .collect();
    assert_eq!(recent, vec!["m1", "m3"]);
    db.close().unwrap();
}
