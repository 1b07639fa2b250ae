//! Governance case 3: correct a suspected root cause. The hypothesis is
//! superseded; the summary built on it goes stale and stops being presented
//! (retrieval and context), while history and trace still show both.

use crate::common::*;
use engram::context::ContextRequest;
use engram::retrieval::RecallRequest;
use engram::{
    AssertionKind, Body, Derivation, ManualClock, NewRecord, Principal, RecordRef, Status,
};

#[test]
fn dependents_of_a_corrected_hypothesis_go_stale() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("acme-ops"));
    s.append(vec![
        NewRecord::event("tool_result", "catalog_api returned HTTP 503 on /health")
            .with_external_id("hc-1"),
        NewRecord::event(
            "tool_result",
            "db connection pool exhausted: 200 of 200 in use",
        )
        .with_external_id("pool-1"),
    ])
    .unwrap();
    let mut hyp = NewRecord::assertion(
        AssertionKind::Hypothesis,
        "Root cause: checkout waits on the unhealthy catalog_api (suspected).",
        vec![ext("hc-1")],
    )
    .with_external_id("rc-1");
    hyp.derivation = Some(Derivation {
        extractor: "triage@2".into(),
        model_config: None,
        generated: true,
    });
    s.append(vec![hyp]).unwrap();
    let summary = NewRecord {
        body: Body::Summary {
            generator: "episode-summary@1".into(),
        },
        kind: "summary".into(),
        text: Some("Incident 4711: root cause suspected in catalog_api; restart advised.".into()),
        sources: vec![ext("hc-1"), ext("rc-1")],
        external_id: Some("sum-4711".into()),
        ..NewRecord::default()
    };
    s.append(vec![summary]).unwrap();
    db.wait_indexed().unwrap();
    let q = || RecallRequest::text("incident 4711 root cause catalog_api");
    assert!(
        s.recall(&q())
            .unwrap()
            .hits
            .iter()
            .any(|h| h.external_id.as_deref() == Some("sum-4711"))
    );

    // the correction
    clock.advance(30 * MINUTE);
    let fix = NewRecord::assertion(
        AssertionKind::Fact,
        "Root cause: the database connection pool was exhausted; catalog_api was a symptom.",
        vec![ext("pool-1")],
    )
    .with_external_id("rc-1")
    .superseding(ext("rc-1"));
    s.append(vec![fix]).unwrap();

    let sum = s.get(&ext("sum-4711")).unwrap();
    assert_eq!(sum.status, Status::Stale);
    let old = s.history(&ext("rc-1")).unwrap();
    assert_eq!(old.len(), 2);
    assert_eq!(old[0].status, Status::Superseded);
    assert_eq!(old[1].kind, "fact");

    let r = s.recall(&q()).unwrap();
    let ids: Vec<_> = r
        .hits
        .iter()
        .filter_map(|h| h.external_id.as_deref().map(str::to_string))
        .collect();
    assert!(
        !ids.contains(&"sum-4711".to_string()),
        "stale summary presented: {ids:?}"
    );
    assert!(
        r.hits
            .iter()
            .all(|h| !h.text.as_deref().unwrap_or("").contains("(suspected)")),
        "rejected hypothesis presented"
    );
    let c = s
        .context(&ContextRequest::new(
            "what was the root cause of incident 4711?",
        ))
        .unwrap();
    let text = c.render();
    assert!(!text.contains("restart advised"), "{text}");
    assert!(text.contains("connection pool was exhausted"), "{text}");

    // trace shows the stale summary downstream of the old hypothesis
    let t = s.trace(&RecordRef::Id(old[0].id)).unwrap();
    assert!(
        t.nodes
            .iter()
            .any(|n| n.id == sum.id && n.status == "stale" && n.side == "downstream")
    );
    assert!(
        t.nodes
            .iter()
            .any(|n| n.id == old[1].id && n.side == "downstream")
    );
    db.close().unwrap();
}

/// A summary of `sources`, under an external id.
fn summary(ext_id: &str, text: &str, sources: Vec<RecordRef>) -> NewRecord {
    NewRecord {
        body: Body::Summary {
            generator: "g".into(),
        },
        kind: "summary".into(),
        text: Some(text.into()),
        sources,
        external_id: Some(ext_id.into()),
        ..NewRecord::default()
    }
}

/// Nothing new is built on what is out of use or outdated: a record citing
/// a review candidate, a rejected or retracted record, a superseded version
/// or a stale record is refused (where the same lineage written before the
/// correction is stale, one written after would have been served as
/// current). A correction may still cite the version it corrects, and a
/// file ingested again after the correction still repeats what it stored.
#[test]
fn nothing_new_is_built_on_a_source_out_of_use_or_outdated() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let db = open(dir.path(), &clock);
    let admin = db.session(Principal::admin("t"));
    let first = vec![
        NewRecord::event("doc", "the outage lasted 5 hours").with_external_id("ev"),
        summary("s1", "outage lasted 5 hours", vec![ext("ev")]),
    ];
    admin.append(first.clone()).unwrap();
    let old_ev = admin.get(&ext("ev")).unwrap().id;
    admin
        .append(vec![
            NewRecord::event("doc", "the outage lasted 5 minutes")
                .with_external_id("ev")
                .superseding(ext("ev")),
        ])
        .unwrap();
    assert_eq!(admin.get(&ext("s1")).unwrap().status, Status::Stale);
    // the file ingested again: duplicates only
    assert!(
        admin
            .append(first)
            .unwrap()
            .iter()
            .all(|r| r.outcome == engram::AppendOutcome::Duplicate)
    );

    let model = db.session(Principal::model("t", "extractor"));
    model
        .append(vec![
            NewRecord::assertion(
                AssertionKind::Procedure,
                "CANDIDATE-CANARY",
                vec![ext("ev")],
            )
            .with_external_id("cand"),
        ])
        .unwrap();
    admin
        .append(vec![
            NewRecord::assertion(AssertionKind::Fact, "RETRACTED-CANARY", vec![ext("ev")])
                .with_external_id("ret"),
        ])
        .unwrap();
    admin.retract(&ext("ret"), None).unwrap();
    for (source, why) in [
        (ext("s1"), "is stale"),
        (RecordRef::Id(old_ev), "superseded version"),
        (ext("cand"), "review candidate"),
        (ext("ret"), "retracted"),
    ] {
        let lsn = db.applied_lsn();
        let e = admin
            .append(vec![summary("s2", "weekly digest", vec![source.clone()])])
            .unwrap_err();
        assert!(e.to_string().contains(why), "{source:?}: {e}");
        assert_eq!(db.applied_lsn(), lsn, "{source:?}: nothing written");
    }
    // the same in one batch: a candidate and a summary of it
    let e = model
        .append(vec![
            NewRecord::assertion(AssertionKind::Policy, "BATCH-CANARY", vec![ext("ev")])
                .with_external_id("cand2"),
            summary("s3", "digest of cand2", vec![ext("cand2")]),
        ])
        .unwrap_err();
    assert!(e.to_string().contains("review candidate"), "{e}");
    // a correction is of its record's type, said plainly
    let e = admin
        .append(vec![
            NewRecord::assertion(AssertionKind::Fact, "x", vec![ext("ev")]).superseding(ext("ev")),
        ])
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("an assertion cannot supersede an event"),
        "{e}"
    );
    // a source an earlier item of the batch corrects is outdated as well
    let current_ev = admin.get(&ext("ev")).unwrap().id;
    let e = admin
        .append(vec![
            NewRecord::event("doc", "the outage lasted 6 minutes")
                .with_external_id("ev")
                .superseding(RecordRef::Id(current_ev)),
            summary("s4", "digest", vec![RecordRef::Id(current_ev)]),
        ])
        .unwrap_err();
    assert!(e.to_string().contains("corrected by item 0"), "{e}");
    // a source built on what an earlier item corrects goes stale with it
    admin
        .append(vec![summary("s5", "digest of ev", vec![ext("ev")])])
        .unwrap();
    let e = admin
        .append(vec![
            NewRecord::event("doc", "the outage lasted 6 minutes")
                .with_external_id("ev")
                .superseding(ext("ev")),
            summary("s6", "digest of the digest", vec![ext("s5")]),
        ])
        .unwrap_err();
    assert!(e.to_string().contains("goes out of use"), "{e}");
    // through earlier items of the batch too: one built on ev, then ev
    // corrected, then a record citing the first (as separate batches,
    // the last would meet a stale source)
    let e = admin
        .append(vec![
            summary("m", "digest of ev", vec![RecordRef::Id(current_ev)]),
            NewRecord::event("doc", "the outage lasted 6 minutes")
                .with_external_id("ev")
                .superseding(ext("ev")),
            summary("n", "digest of m", vec![ext("m")]),
        ])
        .unwrap_err();
    assert!(e.to_string().contains("goes out of use"), "{e}");
    // so does one built on the version a correction corrects
    admin
        .append(vec![
            NewRecord::assertion(AssertionKind::Fact, "g v1", vec![ext("ev")])
                .with_external_id("g"),
            summary("s7", "digest of g", vec![ext("g")]),
        ])
        .unwrap();
    let e = admin
        .append(vec![
            NewRecord::assertion(AssertionKind::Fact, "g v2", vec![ext("s7")])
                .with_external_id("g")
                .superseding(ext("g")),
        ])
        .unwrap_err();
    assert!(e.to_string().contains("goes out of use"), "{e}");
    // and a stale record is not regenerated from itself
    let e = admin
        .append(vec![
            summary("s1", "outage lasted 5 hours", vec![ext("s1")]).superseding(ext("s1")),
        ])
        .unwrap_err();
    assert!(e.to_string().contains("is stale"), "{e}");
    // a file holding a chain, ingested again: duplicates only (the chain's
    // correction names a version already corrected, which is what it
    // repeats); its first version, superseded, cannot be retracted (that
    // would change nothing in force)
    let chain = vec![
        NewRecord::assertion(AssertionKind::Fact, "r v1", vec![ext("ev")]).with_external_id("r"),
        NewRecord::assertion(AssertionKind::Fact, "r v2", vec![ext("ev")])
            .with_external_id("r")
            .superseding(ext("r")),
    ];
    admin.append(chain.clone()).unwrap();
    let v1 = admin.history(&ext("r")).unwrap()[0].id;
    let e = admin.retract(&RecordRef::Id(v1), None).unwrap_err();
    assert!(e.to_string().contains("superseded version"), "{e}");
    assert!(
        admin
            .append(chain)
            .unwrap()
            .iter()
            .all(|r| r.outcome == engram::AppendOutcome::Duplicate)
    );
    // what is current may be cited, and a correction may cite its old version
    admin
        .append(vec![summary("s2", "weekly digest", vec![ext("ev")])])
        .unwrap();
    admin
        .append(vec![
            NewRecord::assertion(AssertionKind::Fact, "it lasted 5 minutes", vec![ext("ev")])
                .with_external_id("f"),
        ])
        .unwrap();
    let r = admin
        .append(vec![
            NewRecord::assertion(
                AssertionKind::Fact,
                "it lasted 5 minutes, not 5 hours",
                vec![ext("ev"), ext("f")],
            )
            .with_external_id("f")
            .superseding(ext("f")),
        ])
        .unwrap();
    assert_eq!(r[0].status, Status::Approved);
    // a chain in one batch, each version citing the one it corrects, and a
    // summary of its newest: as in separate batches, nothing goes stale
    let fact = |text: &str, source: &str| {
        NewRecord::assertion(AssertionKind::Fact, text, vec![ext(source)])
            .with_external_id("f")
            .superseding(ext("f"))
    };
    let r = admin
        .append(vec![
            fact("it lasted 5 minutes (v3)", "f"),
            fact("it lasted 5 minutes (v4)", "f"),
            summary("s8", "digest of f", vec![ext("f")]),
        ])
        .unwrap();
    assert!(
        r.iter()
            .all(|x| x.status == Status::Approved || x.status == Status::Superseded),
        "{r:?}"
    );
    db.close().unwrap();
}

/// A fact true over an interval stays so when its wording is fixed: a
/// correction giving neither `valid_from` nor `valid_until` keeps the
/// corrected record's interval (with a note saying so), so an ended fact
/// does not become current again beside its successor; one giving a bound
/// states its own.
#[test]
fn a_correction_keeps_the_validity_interval_it_does_not_restate() {
    use engram::query::lang::QueryExt;
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("t"));
    let y = |year: i64| engram::time::parse_rfc3339(&format!("{year}-01-01T00:00:00Z")).unwrap();
    let fact = |text: &str, ext_id: &str| {
        NewRecord::assertion(AssertionKind::Fact, text, vec![ext("e1")]).with_external_id(ext_id)
    };
    s.append(vec![
        NewRecord::event("doc", "board minutes").with_external_id("e1"),
    ])
    .unwrap();
    s.append(vec![
        NewRecord {
            valid_from: Some(y(2020)),
            valid_until: Some(y(2023)),
            ..fact("the ceo is alise wombat", "ceo1")
        },
        NewRecord {
            valid_from: Some(y(2023)),
            ..fact("the ceo is bob wombat", "ceo2")
        },
    ])
    .unwrap();
    let r = s
        .append(vec![
            fact("the ceo is alice wombat", "ceo1").superseding(ext("ceo1")),
        ])
        .unwrap();
    assert!(
        r[0].notes.iter().any(|n| n.contains("validity interval")),
        "{:?}",
        r[0].notes
    );
    let fixed = s.get(&ext("ceo1")).unwrap();
    assert_eq!(
        (fixed.valid_from, fixed.valid_until),
        (Some(y(2020)), Some(y(2023)))
    );
    let names = |q: &str| {
        let out = s.query(q, &Default::default()).unwrap();
        format!("{:?}", out.rows)
    };
    let now = names("FIND ANY MATCH 'ceo' RETURN text");
    assert!(now.contains("bob") && !now.contains("alice"), "{now}");
    let then = names(
        "FIND ANY WHERE status IN (active, historical) VALID AT 2021-06-01T00:00:00Z MATCH 'ceo' RETURN text",
    );
    assert!(
        then.contains("alice wombat") && !then.contains("bob"),
        "{then}"
    );
    // the same in one batch, the record giving only its end: the
    // correction starts where the record did, and the batch sent again is
    // duplicates only
    let batch = vec![
        NewRecord {
            occurred_at: Some(y(2010)),
            valid_until: Some(y(2012)),
            ..fact("the cfo is carol", "cfo")
        },
        fact("the cfo is carol wombat", "cfo").superseding(ext("cfo")),
    ];
    s.append(batch.clone()).unwrap();
    let cfo = s.get(&ext("cfo")).unwrap();
    assert_eq!(
        (cfo.valid_from, cfo.valid_until),
        (Some(y(2010)), Some(y(2012)))
    );
    assert!(
        s.append(batch)
            .unwrap()
            .iter()
            .all(|r| r.outcome == engram::AppendOutcome::Duplicate)
    );
    // a bound given states the correction's own interval
    let r = s
        .append(vec![
            NewRecord {
                valid_from: Some(y(2019)),
                ..fact("the ceo is alice wombat, from 2019", "ceo1")
            }
            .superseding(ext("ceo1")),
        ])
        .unwrap();
    assert!(
        r[0].notes.iter().all(|n| !n.contains("validity")),
        "{:?}",
        r[0].notes
    );
    let again = s.get(&ext("ceo1")).unwrap();
    assert_eq!((again.valid_from, again.valid_until), (Some(y(2019)), None));
    // a record that occurs later than it is stored (a planned event) is
    // valid from when it was stored, the earlier of the two: its
    // correction keeps that start, not its occurred_at, so the chain stays
    // current now, stored before or in the same batch
    let day = 86_400_000;
    let planned = |text: &str, ext_id: &str| NewRecord {
        occurred_at: Some(T0 + 30 * day),
        valid_until: Some(T0 + 60 * day),
        ..NewRecord::event("plan", text).with_external_id(ext_id)
    };
    s.append(vec![planned("offsite in lisbon", "plan1")])
        .unwrap();
    s.append(vec![
        NewRecord::event("plan", "offsite in porto").superseding(ext("plan1")),
    ])
    .unwrap();
    let batch = vec![
        planned("launch in june", "plan2"),
        NewRecord::event("plan", "launch in july").superseding(ext("plan2")),
    ];
    s.append(batch.clone()).unwrap();
    // (sent again later, duplicates only: the start is the stored one)
    clock.advance(day);
    assert!(
        s.append(batch)
            .unwrap()
            .iter()
            .all(|r| r.outcome == engram::AppendOutcome::Duplicate)
    );
    for (id, text) in [("plan1", "porto"), ("plan2", "july")] {
        let fixed = s.get(&ext(id)).unwrap();
        assert!(
            fixed.valid_from.is_some_and(|f| f <= T0),
            "{id}: {:?}",
            fixed.valid_from
        );
        let now = names("FIND ANY WHERE kind = 'plan' RETURN text");
        assert!(now.contains(text), "{id}: {now}");
    }
    db.close().unwrap();
}

/// Observations are not hypotheses, through summaries too: context tags a
/// record built on a hypothesis, at any depth, so a summary of a guess
/// does not read as established; one built on facts only carries no tag.
#[test]
fn a_summary_of_a_hypothesis_is_marked_in_context() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("t"));
    s.append(vec![
        NewRecord::event("log", "ibis database latency spiked at noon").with_external_id("ev"),
        NewRecord::assertion(
            AssertionKind::Hypothesis,
            "the ibis database is overloaded",
            vec![ext("ev")],
        )
        .with_external_id("h"),
        NewRecord::assertion(
            AssertionKind::Observation,
            "ibis latency spiked at noon",
            vec![ext("ev")],
        )
        .with_external_id("o"),
        summary(
            "guess",
            "ibis digest: the database is overloaded",
            vec![ext("h")],
        ),
        summary(
            "guess2",
            "ibis weekly: overloaded database",
            vec![ext("guess")],
        ),
        summary("seen", "ibis digest: latency spiked", vec![ext("o")]),
    ])
    .unwrap();
    db.wait_indexed().unwrap();
    let mut req = ContextRequest::new("ibis database overloaded latency digest weekly");
    req.episodic_k = 10;
    let c = s.context(&req).unwrap();
    let items: Vec<_> = c.sections.iter().flat_map(|s| s.items.iter()).collect();
    let marked = |ext_id: &str| {
        items
            .iter()
            .find(|i| i.external_id.as_deref() == Some(ext_id))
            .unwrap_or_else(|| panic!("{ext_id} not in context: {}", c.render()))
            .built_on_hypothesis
    };
    assert!(marked("guess") && marked("guess2"), "{}", c.render());
    assert!(!marked("seen") && !marked("h"), "{}", c.render());
    assert!(c.render().contains("built on a hypothesis"));
    db.close().unwrap();
}
