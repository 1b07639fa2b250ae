//! Unit tests of the write path and apply.

use super::write::{Resolved, content_hash};
use super::*;

mod in_flight;

/// The content hash as first specified: the canonical form of a
/// `serde_json` object. The direct writer must give identical bytes.
#[allow(clippy::cast_lossless)]
fn content_hash_reference(
    r: &NewRecord,
    resolved: &Resolved,
    retention: &str,
    access: &[String],
) -> Result<[u8; 32]> {
    use serde_json::{Map, Value, json};
    let mut o = Map::new();
    o.insert("record".into(), json!(r.body.record_type().name()));
    o.insert("kind".into(), json!(r.kind));
    let mut scope = Map::new();
    if let Some(u) = &r.scope.user {
        scope.insert("user".into(), json!(u));
    }
    if let Some(c) = &r.scope.conversation {
        scope.insert("conversation".into(), json!(c));
    }
    if let Some(a) = &r.scope.agent {
        scope.insert("agent".into(), json!(a));
    }
    if !r.scope.labels.is_empty() {
        let mut l = r.scope.labels.clone();
        l.sort();
        l.dedup();
        scope.insert("labels".into(), json!(l));
    }
    if !scope.is_empty() {
        o.insert("scope".into(), Value::Object(scope));
    }
    for (k, v) in [
        ("occurred_at", r.occurred_at),
        ("valid_from", r.valid_from),
        ("valid_until", r.valid_until),
        ("last_verified_at", r.last_verified_at),
    ] {
        if let Some(t) = v {
            o.insert(k.into(), json!(format_rfc3339(t)));
        }
    }
    if let Some(t) = &r.text {
        o.insert("text".into(), json!(t));
    }
    if let Some(d) = &r.data {
        o.insert("data".into(), d.clone());
    }
    o.insert("retention_class".into(), json!(retention));
    if !access.is_empty() {
        o.insert("access".into(), json!(access));
    }
    if let Some(s) = resolved.supersedes {
        o.insert("supersedes".into(), json!(s.to_string()));
    }
    if !resolved.sources.is_empty() {
        let s: Vec<String> = resolved.sources.iter().map(|i| i.to_string()).collect();
        o.insert("sources".into(), json!(s));
    }
    match &r.body {
        Body::Event => {}
        Body::Entity {
            entity_type,
            name,
            aliases,
        } => {
            o.insert("entity_type".into(), json!(entity_type));
            o.insert("name".into(), json!(name));
            if !aliases.is_empty() {
                o.insert("aliases".into(), json!(aliases));
            }
        }
        Body::Relation { predicate, .. } => {
            o.insert("predicate".into(), json!(predicate));
        }
        Body::Assertion {
            predicate, object, ..
        } => {
            if let Some(p) = predicate {
                o.insert("predicate".into(), json!(p));
            }
            if let Some(v) = object {
                o.insert("object".into(), json!(v));
            }
        }
        Body::Summary { generator } => {
            o.insert("generator".into(), json!(generator));
        }
    }
    if let Some(s) = resolved.subject {
        o.insert("subject".into(), json!(s.to_string()));
    }
    if let Some(s) = resolved.object {
        o.insert("object_entity".into(), json!(s.to_string()));
    }
    if let Some(d) = &r.derivation {
        let mut dm = Map::new();
        dm.insert("extractor".into(), json!(d.extractor));
        if let Some(m) = &d.model_config {
            dm.insert("model_config".into(), json!(m));
        }
        dm.insert("generated".into(), json!(d.generated));
        o.insert("derivation".into(), Value::Object(dm));
    }
    if let Some(c) = r.confidence {
        o.insert("confidence".into(), json!(c as f64));
    }
    canonical::content_sha256(&Value::Object(o))
        .map_err(|e| EngineError::invalid("data", e.to_string()))
}

fn sample_records() -> Vec<(NewRecord, Resolved)> {
    let id = |n: u64| {
        RecordId::from_bytes({
            let mut b = [0u8; 16];
            b[8..].copy_from_slice(&n.to_be_bytes());
            b
        })
    };
    let mut out = Vec::new();
    let mut e = NewRecord::event(
        "user_message",
        "Quote \" and \\ and \n, caf\u{e9} \u{1F600} \u{1}",
    );
    e.scope.user = Some("u1".into());
    e.scope.labels = vec!["b".into(), "a".into(), "b".into()];
    e.occurred_at = Some(1_700_000_000_123);
    e.data =
        Some(serde_json::json!({"z": [1, 2.5, null], "a": {"\u{10000}": true, "\u{e000}": false}}));
    out.push((e, Resolved::default()));
    let mut a = NewRecord::assertion(
        crate::model::AssertionKind::Fact,
        "Checkout depends on payments",
        vec![],
    );
    if let Body::Assertion {
        predicate, object, ..
    } = &mut a.body
    {
        *predicate = Some("depends_on".into());
        *object = Some("payments".into());
    }
    a.valid_from = Some(5);
    a.valid_until = Some(6);
    a.last_verified_at = Some(7);
    a.confidence = Some(0.1);
    a.derivation = Some(crate::model::Derivation {
        extractor: "x/v1".into(),
        model_config: Some("m".into()),
        generated: true,
    });
    out.push((
        a,
        Resolved {
            supersedes: Some(id(1)),
            sources: vec![id(2), id(3)],
            subject: Some(id(4)),
            object: None,
        },
    ));
    let en = NewRecord {
        body: Body::Entity {
            entity_type: "service".into(),
            name: "payments-api".into(),
            aliases: vec!["payments".into()],
        },
        kind: "entity".into(),
        ..NewRecord::default()
    };
    out.push((en, Resolved::default()));
    let r = NewRecord {
        body: Body::Summary {
            generator: "sum/v2".into(),
        },
        kind: "summary".into(),
        text: Some(String::new()),
        ..NewRecord::default()
    };
    out.push((
        r,
        Resolved {
            object: Some(id(9)),
            ..Resolved::default()
        },
    ));
    out
}

#[test]
fn direct_content_hash_matches_the_value_based_definition() {
    for (r, res) in sample_records() {
        for access in [vec![], vec!["ops".to_string(), "sec".to_string()]] {
            let data = r
                .data
                .as_ref()
                .map(|d| canonical::to_canonical_string(d).unwrap());
            assert_eq!(
                content_hash(&r, &res, "standard", &access, data.as_deref()),
                content_hash_reference(&r, &res, "standard", &access).unwrap(),
                "{r:?}"
            );
        }
    }
}

/// A write prepared before a deletion was applied (its checks passed)
/// but logged after it: a summary of the deleted record and a
/// correction of it. Applying them must not revive anything.
#[test]
fn a_write_that_raced_a_deletion_is_deleted_when_applied() {
    let db = mem_store("/race");
    let s = db.session(Principal::admin("t"));
    let x = s.append(vec![NewRecord::event("note", "x")]).unwrap()[0].id;
    let keep = s.append(vec![NewRecord::event("note", "keep")]).unwrap()[0].id;
    s.delete(&RecordRef::Id(x), None).unwrap();
    let frame = |r: StoredRecord| PendingFrame {
        frame_type: codec::FRAME_RECORD,
        frame_version: codec::PAYLOAD_VERSION,
        payload: codec::encode_record(&r),
    };
    let record = |rtype: RecordType, text: &str| {
        let now = db.now();
        let id = db.inner.writer.lock().ids.mint(now);
        let mut r = StoredRecord::empty(id);
        r.ingested_at_ms = now;
        r.record_type = rtype.code();
        r.tenant = "t".into();
        r.kind = "note".into();
        r.text = Some(text.into());
        r.retention_class = DEFAULT_RETENTION_CLASS.into();
        r.status = Status::Active as u8;
        r.writer_kind = WriterKind::System.code();
        r
    };
    let mut summary = record(RecordType::Summary, "summary of x");
    summary.sources = vec![x.to_bytes()];
    summary.generator = Some("g".into());
    let mut fix = record(RecordType::Event, "x corrected");
    fix.supersedes = Some(x.to_bytes());
    let (sid, fid) = (
        RecordId::from_bytes(summary.id),
        RecordId::from_bytes(fix.id),
    );
    db.inner
        .log
        .append(vec![frame(summary), frame(fix)])
        .unwrap();
    for id in [x, sid, fid] {
        assert!(
            matches!(s.get(&RecordRef::Id(id)), Err(EngineError::NotFound { .. })),
            "{id} is readable"
        );
    }
    assert!(s.get(&RecordRef::Id(keep)).is_ok());
    // the answers to such writes say so (the write path calls this once
    // their batch is applied)
    let mut answers: Vec<AppendResult> = [sid, fid, keep]
        .into_iter()
        .map(|id| AppendResult {
            id,
            external_id: None,
            outcome: AppendOutcome::Created,
            status: Status::Active,
            lsn: 0,
            notes: Vec::new(),
        })
        .collect();
    super::write::said_as_applied(&db.state(), &mut answers);
    let said: Vec<Status> = answers.iter().map(|a| a.status).collect();
    assert_eq!(said, [Status::Deleted, Status::Deleted, Status::Active]);
    assert!(db.verify().unwrap().ok());
    db.close().unwrap();
}

/// A line re-sent while its first attempt is still in flight (queued by
/// another request, its fsync not answered) is answered only once that
/// record is durable and applied, with its LSN: a duplicate is never
/// acknowledged before what it repeats.
#[test]
fn a_duplicate_of_a_record_in_flight_waits_for_it_to_be_durable() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let backend = Arc::new(engram_storage::MemBackend::new());
    let db = Engram::open(
        "/inflight",
        Options {
            backend: backend.clone(),
            ..Options::default()
        },
    )
    .unwrap();
    // the next write of the log stalls, as a slow disk would
    let stall = Arc::new(AtomicBool::new(false));
    let released = Arc::new(AtomicBool::new(false));
    {
        let (stall, released) = (stall.clone(), released.clone());
        backend.on_write(Arc::new(move |_| {
            if stall.swap(false, Ordering::AcqRel) {
                std::thread::sleep(std::time::Duration::from_millis(300));
                released.store(true, Ordering::Release);
            }
        }));
    }
    let record = || vec![NewRecord::event("note", "sent twice").with_external_id("k")];
    stall.store(true, Ordering::Release);
    let (first, second) = std::thread::scope(|sc| {
        let s1 = db.session(Principal::admin("t"));
        let a = sc.spawn(move || s1.append(record()).unwrap());
        // the first attempt is queued, its write stalled
        while stall.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
        let s2 = db.session(Principal::admin("t"));
        let b = s2.append(record()).unwrap();
        assert!(
            released.load(Ordering::Acquire),
            "the duplicate was answered while what it repeats was not durable"
        );
        (a.join().unwrap(), b)
    });
    assert_eq!(second[0].outcome, AppendOutcome::Duplicate);
    assert_eq!(second[0].id, first[0].id);
    assert_eq!(
        second[0].lsn, first[0].lsn,
        "the duplicate names the stored LSN"
    );
    assert_ne!(second[0].lsn, 0);
    db.close().unwrap();
}

/// A new store in memory at `dir`.
fn mem_store(dir: &str) -> Engram {
    Engram::open(
        dir,
        Options {
            backend: Arc::new(engram_storage::MemBackend::new()),
            ..Options::default()
        },
    )
    .unwrap()
}

fn store_with(n: usize) -> (Engram, Vec<RecordId>) {
    let db = mem_store("/inv");
    let s = db.session(Principal::admin("t"));
    let ids = (0..n)
        .map(|i| {
            s.append(vec![NewRecord::event("note", format!("r{i}"))])
                .unwrap()[0]
                .id
        })
        .collect();
    (db, ids)
}

#[test]
#[should_panic(expected = "invariant violated: frame LSN")]
fn a_frame_applied_out_of_order_stops_the_engine() {
    let (db, ids) = store_with(2);
    let mut st = db.inner.state.write();
    let m = st.meta(st.idx(ids[0]).unwrap()).clone();
    let f = db.inner.log.read(m.loc.segment, m.loc.offset).unwrap();
    let _ = apply_frame(
        &mut st,
        f.header.frame_type,
        f.header.frame_version,
        f.payload(),
        m.loc,
    );
}

/// A record frame written twice into the log (its checksums intact) is
/// refused when the second copy is applied, naming both LSNs, before
/// anything changes: it was counted twice, and every later checkpoint was
/// refused for holding an id twice.
#[test]
fn a_record_frame_repeated_in_the_log_is_refused_on_replay() {
    let (db, ids) = store_with(2);
    let mut st = db.inner.state.write();
    let m = st.meta(st.idx(ids[1]).unwrap()).clone();
    let f = db.inner.log.read(m.loc.segment, m.loc.offset).unwrap();
    let (len, lsn) = (st.len(), st.applied_lsn + 1);
    let loc = FrameLoc {
        segment: 1,
        offset: 0,
        lsn,
    };
    let e = apply_frame(
        &mut st,
        f.header.frame_type,
        f.header.frame_version,
        f.payload(),
        loc,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("already holds this record id") && e.contains(&format!("LSN {}", m.loc.lsn)),
        "{e}"
    );
    assert_eq!(st.len(), len, "the repeated frame changed the state");
}

/// An operation frame repeated in the log (a grant after the revocation
/// that followed it) is refused when applied, before anything changes: it
/// gave the principal the revoked label back.
#[test]
fn an_operation_frame_repeated_in_the_log_is_refused_on_replay() {
    let (db, _) = store_with(1);
    let s = db.session(Principal::admin("t"));
    s.grant(Some("p"), Some("L"), None).unwrap();
    s.revoke(Some("p"), Some("L"), None).unwrap();
    let mut st = db.inner.state.write();
    let grant = st.ledger[st.ledger.len() - 2].clone();
    let mut frame = None;
    db.inner
        .log
        .scan(grant.lsn, |f| {
            frame = Some(f.clone());
            Ok(std::ops::ControlFlow::Break(()))
        })
        .unwrap();
    let f = frame.expect("the grant's frame");
    let lsn = st.applied_lsn + 1;
    let e = apply_frame(
        &mut st,
        f.header.frame_type,
        f.header.frame_version,
        f.payload(),
        FrameLoc {
            segment: 1,
            offset: 0,
            lsn,
        },
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("already holds this operation id"), "{e}");
    let held = &st.tenant("t").unwrap().grants;
    assert!(held.get("p").is_none_or(|g| !g.labels.contains("L")));
}

#[test]
fn transaction_time_going_back_on_replay_is_refused() {
    let (db, _) = store_with(1);
    let now = db.now();
    let id = db.inner.writer.lock().ids.mint(now);
    let mut r = StoredRecord::empty(id);
    r.tenant = "t".into();
    r.kind = "note".into();
    r.retention_class = DEFAULT_RETENTION_CLASS.into();
    r.ingested_at_ms = 1; // long before the stored record
    let payload = codec::encode_record(&r);
    let mut st = db.inner.state.write();
    let loc = FrameLoc {
        segment: 1,
        offset: 0,
        lsn: st.applied_lsn + 1,
    };
    let e = apply_frame(
        &mut st,
        codec::FRAME_RECORD,
        codec::PAYLOAD_VERSION,
        &payload,
        loc,
    )
    .unwrap_err();
    assert!(e.to_string().contains("ingested_at"), "{e}");
}

/// An intact frame this build cannot apply (here: a frame type it does not
/// know) is reported as such, never as disk damage, and changes nothing:
/// the live store reports it on the next call, and a reopen refuses with
/// the frame's place and leaves the log as it was.
#[test]
fn an_intact_frame_that_cannot_be_applied_is_not_reported_as_damage() {
    let backend = engram_storage::MemBackend::new();
    let opts = || Options {
        backend: Arc::new(backend.clone()),
        ..Options::default()
    };
    let db = Engram::open("/apply", opts()).unwrap();
    let s = db.session(Principal::admin("t"));
    s.append(vec![NewRecord::event("note", "before")]).unwrap();
    let locs = db
        .inner
        .log
        .append(vec![PendingFrame {
            frame_type: engram_storage::frame::FrameType(200),
            frame_version: codec::PAYLOAD_VERSION,
            payload: vec![1, 2, 3, 4],
        }])
        .unwrap();
    let lsn = locs[0].lsn;
    let e = s
        .append(vec![NewRecord::event("note", "after")])
        .unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("could not be applied") && text.contains(&format!("LSN {lsn}")),
        "{text}"
    );
    assert!(
        !text.contains("damaged") && !text.contains("backup"),
        "{text}"
    );
    drop(s);
    drop(db);
    let log_before = backend.read_file(Path::new("/apply/log/00000000000000000001.seg"));
    assert!(log_before.is_some(), "the log's first segment");
    let e = Engram::open("/apply", opts()).unwrap_err();
    assert!(
        matches!(e, EngineError::Apply { lsn: l, .. } if l == lsn),
        "{e:?}"
    );
    assert_eq!(
        backend.read_file(Path::new("/apply/log/00000000000000000001.seg")),
        log_before,
        "a refused open changed the log"
    );
}

/// The eligibility cache answers exactly what a fresh computation does,
/// for every principal and filter, while records arrive, are deleted and
/// expire, labels are granted and revoked, and the clock crosses
/// retention and validity boundaries.
#[test]
fn cached_eligibility_equals_a_fresh_computation() {
    use crate::retrieval::eligibility::{Cut, FilterExpr, Filters, compute_expr};
    use crate::time::ManualClock;
    use crate::{Principal, Scope};
    let clock = ManualClock::new(1_700_000_000_000);
    let db = Engram::open(
        "/elig",
        Options {
            backend: Arc::new(engram_storage::MemBackend::new()),
            clock: Arc::new(clock.clone()),
            ..Options::default()
        },
    )
    .unwrap();
    let admin = db.session(Principal::admin("t"));
    let users = [
        db.session(Principal::user("t", "ann")),
        db.session(Principal::user("t", "bob")),
    ];
    admin.set_retention("short", Some(5_000)).unwrap();
    let filters: Vec<FilterExpr> = vec![
        FilterExpr::from_filters(&Filters::default(), false),
        FilterExpr::from_filters(
            &Filters {
                users: vec!["u1".into()],
                ..Filters::default()
            },
            false,
        ),
        FilterExpr::from_filters(&Filters::default(), true),
    ];
    let check = |step: usize| {
        let now = clock.now_ms();
        for s in std::iter::once(&admin).chain(users.iter()) {
            let st = db.state();
            let held = s.held_labels(&st);
            for f in &filters {
                for include_historical in [false, true] {
                    let cut = Cut {
                        as_of: None,
                        valid_at: now,
                        include_historical,
                        now,
                        include_candidates: false,
                    };
                    let fresh = compute_expr(&st, s.principal.tenant(), &held, f, &cut);
                    // twice: a miss, then (usually) a hit
                    for pass in 0..2 {
                        let cached =
                            st.eligibility_cache
                                .compute(&st, s.principal.tenant(), &held, f, &cut);
                        assert_eq!(cached.bitmap, fresh.bitmap, "step {step} pass {pass} {f:?}");
                        assert_eq!(cached.historical, fresh.historical, "step {step}");
                        assert_eq!(cached.traversable, fresh.traversable, "step {step}");
                        assert_eq!(cached.steps, fresh.steps, "step {step}");
                        // BM25 statistics kept with a cached set are the
                        // fresh set's, and so are the scores over them.
                        let mut ls = crate::lexical::LexicalStats::default();
                        assert_eq!(
                            st.lexical.search_with(
                                "note 3",
                                &cached.bitmap,
                                5,
                                &mut ls,
                                &cached.lexical_corpus
                            ),
                            st.lexical.search("note 3", &fresh.bitmap, 5, &mut ls),
                            "step {step} pass {pass}"
                        );
                        if let Some(c) = cached.lexical_corpus.get() {
                            assert_eq!(*c, st.lexical.corpus_stats(&fresh.bitmap));
                        }
                    }
                }
            }
        }
    };
    let mut ids = Vec::new();
    for step in 0..40usize {
        match step % 8 {
            0..=2 => {
                let mut r = NewRecord::event("note", format!("note {step}")).with_scope(Scope {
                    user: Some(format!("u{}", step % 3)),
                    ..Scope::default()
                });
                if step % 2 == 0 {
                    r = r.with_access(&["secret"]);
                }
                if step % 3 == 0 {
                    r.retention_class = Some("short".into());
                }
                if step % 5 == 0 {
                    r.valid_until = Some(clock.now_ms() + 2_500);
                }
                ids.push(admin.append(vec![r]).unwrap()[0].id);
            }
            3 => {
                admin.grant(Some("ann"), Some("secret"), None).unwrap();
            }
            4 => {
                if let Some(id) = ids.get(step / 4) {
                    let _ = admin.delete(&RecordRef::Id(*id), Some("test"));
                }
            }
            5 => {
                admin.revoke(Some("ann"), Some("secret"), None).unwrap();
            }
            _ => {}
        }
        check(step);
        // time moves on: some steps cross a validity end or a retention
        // period, some stay inside the window
        clock.advance([400, 1_300, 2_600, 100][step % 4]);
        check(step);
    }
}

#[test]
fn a_records_text_reads_the_same_from_its_span_as_from_the_archive() {
    let (db, _) = store_with(0);
    let s = db.session(Principal::admin("t"));
    let mut no_text = NewRecord::event("note", "");
    no_text.text = None;
    no_text.data = Some(serde_json::json!({"a": 1}));
    let records = vec![
        NewRecord::event("note", "grüße, 世界").with_external_id("x-1"),
        NewRecord::event("note", "plain"),
        no_text,
    ];
    let ids: Vec<RecordId> = s.append(records).unwrap().iter().map(|r| r.id).collect();
    let st = db.state();
    for &id in &ids {
        let idx = st.idx(id).unwrap();
        assert_eq!(st.text_spans.get(idx), None, "nothing known before a read");
        let first = db.hit_content(&st, idx).unwrap();
        assert!(
            st.text_spans.get(idx).is_some(),
            "the first read notes the span"
        );
        let again = db.hit_content(&st, idx).unwrap();
        assert_eq!(first, again);
    }
    let texts: Vec<Option<String>> = ids
        .iter()
        .map(|&id| db.hit_content(&st, st.idx(id).unwrap()).unwrap().1)
        .collect();
    assert_eq!(
        texts,
        [Some("grüße, 世界".to_string()), Some("plain".into()), None]
    );
    assert_eq!(
        db.hit_content(&st, st.idx(ids[0]).unwrap())
            .unwrap()
            .0
            .as_deref(),
        Some("x-1")
    );
    // A span that ends past the log's durable bytes is not trusted: the
    // frame is verified, the archive validated again, and they give the
    // text.
    let idx = st.idx(ids[1]).unwrap();
    st.text_spans.set(idx, Some(1_000_000..1_000_005));
    assert_eq!(
        db.hit_content(&st, idx).unwrap().1.as_deref(),
        Some("plain")
    );
    assert_ne!(st.text_spans.get(idx), Some(Some(1_000_000..1_000_005)));
    // Nor one whose bytes are not UTF-8 (the second byte of 'ü' alone).
    let idx = st.idx(ids[0]).unwrap();
    let Some(Some(r)) = st.text_spans.get(idx) else {
        panic!("a text's span is known after a read")
    };
    st.text_spans.set(idx, Some(r.start + 3..r.start + 4));
    let (_, text) = db.hit_content(&st, idx).unwrap();
    assert_eq!(text.as_deref(), Some("grüße, 世界"));
    assert_eq!(st.text_spans.get(idx), Some(Some(r)));
}

/// Large groups are looked up while they are synced (the log's prepare
/// hook), with other groups committing meanwhile: the lexical index must
/// still be the one indexing every text in log order from scratch gives.
#[test]
fn texts_prepared_while_synced_index_as_texts_added_in_log_order() {
    let db = mem_store("/prep");
    let words = [
        "walk", "walking", "zebra", "Crossing", "stripes", "caffè", "v2", "runner",
    ];
    let per_batch = engram_storage::log::PREPARE_MIN_FRAMES + 8;
    let texts: Vec<(RecordId, String)> = std::thread::scope(|scope| {
        let writers: Vec<_> = (0..3usize)
            .map(|w| {
                let db = &db;
                scope.spawn(move || {
                    let s = db.session(Principal::admin("t"));
                    let mut out = Vec::new();
                    for b in 0..4usize {
                        let batch: Vec<String> = (0..per_batch)
                            .map(|i| {
                                // new words appear in later batches
                                let k = w * 7 + b * 3 + i;
                                format!(
                                    "{} {} word{} {}",
                                    words[k % words.len()],
                                    words[(k / 3) % words.len()],
                                    k % (10 + 5 * b),
                                    words[(k + b) % words.len()]
                                )
                            })
                            .collect();
                        let records = batch.iter().map(|t| NewRecord::event("note", t.clone()));
                        let got = s.append(records.collect()).unwrap();
                        out.extend(got.iter().map(|r| r.id).zip(batch));
                    }
                    out
                })
            })
            .collect();
        writers
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    let st = db.state();
    let mut in_order: Vec<(Idx, &str)> = texts
        .iter()
        .map(|(id, t)| (st.idx(*id).unwrap(), t.as_str()))
        .collect();
    in_order.sort_unstable();
    let mut fresh = crate::lexical::Bm25Index::new(crate::lexical::Bm25Params::default());
    for (idx, t) in in_order {
        fresh.add(idx, t).unwrap();
    }
    let (mut live, mut want) = (Vec::new(), Vec::new());
    st.lexical.write_to(&mut live);
    fresh.write_to(&mut want);
    assert_eq!(live, want);
}

/// `rebuild` replays the whole log (in memory, changing nothing) before it
/// removes derived state: a frame that cannot be applied but is covered by
/// the checkpoint makes it fail with the checkpoint kept, so the store
/// still opens; so does `rebuild --checkpoint`.
#[test]
fn a_rebuild_that_cannot_replay_keeps_the_checkpoint() {
    let backend = engram_storage::MemBackend::new();
    let opts = || Options {
        backend: Arc::new(backend.clone()),
        ..Options::default()
    };
    let db = Engram::open("/rb", opts()).unwrap();
    let s = db.session(Principal::admin("t"));
    s.append(vec![
        NewRecord::event("note", "first").with_external_id("a"),
    ])
    .unwrap();
    s.append(vec![
        NewRecord::event("note", "second").with_external_id("b"),
    ])
    .unwrap();
    drop(s);
    db.close().unwrap();
    // The first frame's payload version becomes one this build cannot
    // read; its header checksum is made right again (intact, not damage).
    let seg = Path::new("/rb/log/00000000000000000001.seg");
    let mut bytes = backend.read_file(seg).unwrap();
    let at = engram_storage::log::segment::SEGMENT_HEADER_BYTES;
    bytes[at + 17] = 9;
    let crc = crc32c::crc32c(&bytes[at..at + 28]);
    bytes[at + 28..at + 32].copy_from_slice(&crc.to_le_bytes());
    backend.write_file(seg, &bytes);
    // the checkpoint covers it: the store opens
    Engram::open("/rb", opts()).unwrap().close().unwrap();
    let e = Engram::rebuild("/rb", &opts(), false).unwrap_err();
    assert!(matches!(e, EngineError::Apply { lsn: 1, .. }), "{e:?}");
    let e = Engram::rebuild_checkpoint("/rb", &opts()).unwrap_err();
    assert!(matches!(e, EngineError::Apply { lsn: 1, .. }), "{e:?}");
    // nor does a compaction with something to purge
    let db = Engram::open("/rb", opts()).unwrap();
    db.session(Principal::admin("t"))
        .delete(&RecordRef::External("b".into()), None)
        .unwrap();
    db.close().unwrap();
    let e = Engram::compact("/rb", &opts()).unwrap_err();
    assert!(matches!(e, EngineError::Apply { lsn: 1, .. }), "{e:?}");
    let db = Engram::open("/rb", opts()).unwrap();
    let got = db
        .session(Principal::admin("t"))
        .get(&RecordRef::External("b".into()));
    assert!(
        matches!(got, Err(EngineError::NotFound { .. })),
        "the store opens, the deletion holds: {got:?}"
    );
    db.close().unwrap();
}

/// Damage found in a live store's log is damage (`internal`: retrying
/// will not cure it), and `verify` reports it as a problem rather than
/// failing.
#[test]
fn live_damage_is_reported_as_damage_and_by_verify() {
    let backend = engram_storage::MemBackend::new();
    let opts = Options {
        backend: Arc::new(backend.clone()),
        ..Options::default()
    };
    let db = Engram::open("/live", opts).unwrap();
    let s = db.session(Principal::admin("t"));
    s.append(vec![
        NewRecord::event("note", "a record whose bytes go bad").with_external_id("a"),
    ])
    .unwrap();
    let seg = Path::new("/live/log/00000000000000000001.seg");
    let at = engram_storage::log::segment::SEGMENT_HEADER_BYTES + 40;
    assert!(backend.flip_bit(seg, at, 0));
    let v = db.verify().unwrap();
    assert!(!v.ok(), "{v:?}");
    match s.get(&RecordRef::External("a".into())) {
        Err(e) => assert_eq!(e.code(), "internal", "{e}"),
        Ok(r) => panic!("damaged bytes were served: {r:?}"),
    }
}

/// An append's results say each record's status as the batch leaves it:
/// a line a later line of the batch corrects is superseded.
#[test]
fn a_line_corrected_later_in_its_batch_is_reported_superseded() {
    let db = mem_store("/st");
    let s = db.session(Principal::admin("t"));
    let fix = NewRecord {
        supersedes: Some(RecordRef::External("x".into())),
        ..NewRecord::event("note", "two").with_external_id("x")
    };
    let batch = vec![NewRecord::event("note", "one").with_external_id("x"), fix];
    let first = s.append(batch.clone()).unwrap();
    assert_eq!(first[0].status, Status::Superseded);
    assert_eq!(first[1].status, Status::Active);
    assert_eq!(
        s.get(&RecordRef::Id(first[0].id)).unwrap().status,
        Status::Superseded
    );
    // sent again: duplicates, with the same statuses
    let again = s.append(batch).unwrap();
    assert_eq!(
        (again[0].status, again[1].status),
        (Status::Superseded, Status::Active)
    );
}

/// A correction repeated in its batch answers with the external id it
/// inherits, as the first does (it answered none).
#[test]
fn a_repeated_correction_answers_with_its_inherited_external_id() {
    let db = mem_store("/repeated-correction");
    let s = db.session(Principal::admin("t"));
    s.append(vec![NewRecord::event("note", "v1").with_external_id("a")])
        .unwrap();
    let fix = || NewRecord::event("note", "v2").superseding(RecordRef::External("a".into()));
    let r = s.append(vec![fix(), fix()]).unwrap();
    assert_eq!(r[0].outcome, AppendOutcome::Created);
    assert_eq!(r[1].outcome, AppendOutcome::Duplicate);
    assert_eq!(r[0].external_id.as_deref(), Some("a"));
    assert_eq!(r[1].external_id, r[0].external_id);
    db.close().unwrap();
}

/// A summary sent with a correction of its source, in one batch, is
/// answered `stale`, as the batch leaves it (it was said `approved`, and a
/// read said `stale`); a summary of it too.
#[test]
fn a_summary_whose_source_its_batch_corrects_is_answered_stale() {
    let db = mem_store("/stale-in-batch");
    let s = db.session(Principal::admin("t"));
    let ext = |e: &str| RecordRef::External(e.into());
    let summary = |id: &str, of: &str| NewRecord {
        body: Body::Summary {
            generator: "g@1".into(),
        },
        kind: "summary".into(),
        text: Some(format!("summary of {of}")),
        sources: vec![ext(of)],
        external_id: Some(id.into()),
        ..NewRecord::default()
    };
    let r = s
        .append(vec![
            NewRecord::event("note", "v1").with_external_id("p"),
            summary("s", "p"),
            summary("s_of_s", "s"),
            NewRecord::event("note", "v2").superseding(ext("p")),
        ])
        .unwrap();
    let statuses: Vec<Status> = r.iter().map(|x| x.status).collect();
    assert_eq!(
        statuses,
        [
            Status::Superseded,
            Status::Stale,
            Status::Stale,
            Status::Active
        ]
    );
    for (i, x) in r.iter().enumerate() {
        assert_eq!(s.get(&RecordRef::Id(x.id)).unwrap().status, statuses[i]);
    }
    db.close().unwrap();
}

/// A large batch is acknowledged before it is applied (with the state's
/// write lock held): a read that another thread starts once the append
/// returns still finds every record of it, and a recall ranks them.
#[test]
fn a_large_batch_is_read_by_another_thread_as_soon_as_it_is_acknowledged() {
    let db = mem_store("/ack");
    let n = engram_storage::log::PREPARE_MIN_FRAMES * 2;
    let (tx, rx) = crossbeam_channel::bounded::<(usize, Vec<RecordId>)>(0);
    std::thread::scope(|sc| {
        let reader = db.session(Principal::admin("t"));
        sc.spawn(move || {
            while let Ok((round, ids)) = rx.recv() {
                // the last record first: the end of the batch applied last
                for id in ids.iter().rev() {
                    let got = reader.get(&RecordRef::Id(*id));
                    assert!(got.is_ok(), "round {round}: {id} acknowledged, not found");
                }
                let hits = reader
                    .recall(&crate::retrieval::RecallRequest {
                        text: Some(format!("round{round}")),
                        k: n,
                        ..Default::default()
                    })
                    .unwrap()
                    .hits;
                assert_eq!(hits.len(), n, "round {round}");
            }
        });
        let s = db.session(Principal::admin("t"));
        for round in 0..40 {
            let batch = (0..n)
                .map(|i| NewRecord::event("note", format!("round{round} item {i}")))
                .collect();
            let ids = s.append(batch).unwrap().iter().map(|r| r.id).collect();
            tx.send((round, ids)).unwrap();
        }
        drop(tx);
    });
    // Every batch took that path, and single events do not: they are
    // acknowledged once applied (and so once the applier counted the
    // groups before them).
    let s = db.session(Principal::admin("t"));
    for i in 0..10 {
        s.append(vec![NewRecord::event("note", format!("single {i}"))])
            .unwrap();
    }
    assert_eq!(db.log_stats().n_groups_acknowledged_early, 40);
    db.close().unwrap();
}
