//! Model-based tests of the state, with no store: random sequences of log
//! frames (records with sources and corrections, deletions, retractions,
//! over two tenants) applied to a `State` and to a plain model written from
//! the documented rules; after every frame both must agree on every
//! record's status, effective access, correction links and derivatives,
//! and on the tenant and status bitmaps. The same frames applied twice give
//! the same checkpoint encoding, and a checkpoint decoded back encodes to
//! the same bytes.

use std::path::Path;
use std::sync::Arc;

use proptest::prelude::*;

use super::*;
use crate::codec::{OpBody, StoredOp, StoredRecord};
use crate::lexical::Bm25Params;
use crate::vector::distance::Metric;
use crate::vector::hnsw::HnswParams;

const TENANTS: [&str; 2] = ["t0", "t1"];
const LABELS: [&str; 2] = ["hr", "legal"];

/// One frame of a generated log.
#[derive(Clone, Debug)]
enum Step {
    /// A record of `tenant` with the labels in `labels` (bit set), citing
    /// the records picked by `sources` and correcting the one picked by
    /// `supersedes` (picks are taken modulo the records so far; picks of
    /// another tenant's record are kept, and must be ignored).
    Append {
        tenant: usize,
        labels: u8,
        sources: Vec<usize>,
        supersedes: Option<usize>,
    },
    /// Deletes the picked record (its tenant's operation).
    Delete(usize),
    /// Retracts the picked record.
    Retract(usize),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        5 => (0..2usize, 0..4u8, proptest::collection::vec(0..64usize, 0..3), proptest::option::of(0..64usize))
            .prop_map(|(tenant, labels, sources, supersedes)| Step::Append { tenant, labels, sources, supersedes }),
        1 => (0..64usize).prop_map(Step::Delete),
        1 => (0..64usize).prop_map(Step::Retract),
    ]
}

/// What the documented rules say about one record.
#[derive(Clone, Debug)]
struct ModelRecord {
    tenant: usize,
    status: Status,
    access: BTreeSet<String>,
    supersedes: Option<usize>,
    superseded_by: Option<usize>,
    dependents: Vec<usize>,
}

#[derive(Default)]
struct Model {
    recs: Vec<ModelRecord>,
}

impl Model {
    fn set_status(&mut self, i: usize, to: Status) {
        let from = self.recs[i].status;
        if from != to && from != Status::Deleted {
            self.recs[i].status = to;
        }
    }
    fn derivatives(&self, i: usize) -> BTreeSet<usize> {
        let mut seen = BTreeSet::new();
        let mut stack = vec![i];
        while let Some(x) = stack.pop() {
            for &d in &self.recs[x].dependents {
                if d != i && seen.insert(d) {
                    stack.push(d);
                }
            }
        }
        seen
    }
    fn chain(&self, i: usize) -> Vec<usize> {
        let mut first = i;
        while let Some(p) = self.recs[first].supersedes {
            first = p;
        }
        let mut out = vec![first];
        while let Some(n) = self.recs[*out.last().expect("non-empty")].superseded_by {
            out.push(n);
        }
        out
    }
    fn mark_dependents_stale(&mut self, i: usize) {
        for d in self.derivatives(i) {
            if matches!(self.recs[d].status, Status::Active | Status::Approved) {
                self.set_status(d, Status::Stale);
            }
        }
    }
}

struct Run {
    st: State,
    model: Model,
    ids: Vec<RecordId>,
    lsn: u64,
}

fn loc_at(lsn: u64) -> FrameLoc {
    FrameLoc {
        segment: 1,
        offset: 64 * lsn,
        lsn,
    }
}

fn empty_state() -> State {
    let vectors = VectorSpaces::open(
        Arc::new(engram_storage::MemBackend::new()),
        Path::new("/v"),
        HnswParams::default(),
        Metric::Cosine,
    )
    .expect("vector spaces in memory");
    State::new(Bm25Index::new(Bm25Params::default()), 0, vectors, None)
}

impl Run {
    fn new() -> Self {
        Run {
            st: empty_state(),
            model: Model::default(),
            ids: Vec::new(),
            lsn: 0,
        }
    }

    fn apply(&mut self, ft: engram_storage::frame::FrameType, payload: &[u8]) {
        self.lsn += 1;
        apply_frame(
            &mut self.st,
            ft,
            codec::PAYLOAD_VERSION,
            payload,
            loc_at(self.lsn),
        )
        .expect("applies");
    }

    /// Applies `s` to both the state and the model; returns the frame.
    fn step(&mut self, s: &Step) -> Option<(engram_storage::frame::FrameType, Vec<u8>)> {
        let n = self.ids.len();
        let at = 1_000 + self.lsn as i64;
        match s {
            Step::Append {
                tenant,
                labels,
                sources,
                supersedes,
            } => {
                let id = RecordId::from_bytes(((1u128 << 80) | (n as u128 + 1)).to_be_bytes());
                let own: BTreeSet<String> = LABELS
                    .iter()
                    .enumerate()
                    .filter(|(b, _)| labels & (1 << b) != 0)
                    .map(|(_, l)| l.to_string())
                    .collect();
                let srcs: Vec<usize> = if n == 0 {
                    Vec::new()
                } else {
                    let mut v: Vec<usize> = sources.iter().map(|p| p % n).collect();
                    v.sort_unstable();
                    v.dedup();
                    v
                };
                // Only a current version can be corrected (the write path
                // refuses the others); another tenant's pick is ignored.
                let sup = supersedes
                    .filter(|_| n > 0)
                    .map(|p| p % n)
                    .filter(|&p| self.model.recs[p].superseded_by.is_none());
                let mut r = StoredRecord::empty(id);
                r.record_type = if srcs.is_empty() {
                    RecordType::Event.code()
                } else {
                    RecordType::Summary.code()
                };
                r.tenant = TENANTS[*tenant].into();
                r.kind = "note".into();
                r.retention_class = crate::model::DEFAULT_RETENTION_CLASS.into();
                r.ingested_at_ms = at;
                r.occurred_at_ms = at;
                r.access = own.iter().cloned().collect();
                r.sources = srcs.iter().map(|&p| self.ids[p].to_bytes()).collect();
                r.supersedes = sup.map(|p| self.ids[p].to_bytes());
                r.writer_kind = WriterKind::System.code();
                // a text for the lexical index: shared and rare words, and
                // now and then none
                if n % 5 != 4 {
                    r.text = Some(format!("note {n} word{} about t{tenant}", n % 7));
                }
                // the model: only this tenant's records count
                let same = |p: &usize| self.model.recs[*p].tenant == *tenant;
                let m_sources: Vec<usize> = srcs.iter().copied().filter(same).collect();
                let m_sup = sup.filter(same);
                let mut access = own;
                for &p in &m_sources {
                    access.extend(self.model.recs[p].access.iter().cloned());
                }
                let born_deleted = m_sources
                    .iter()
                    .chain(m_sup.as_ref())
                    .any(|&p| self.model.recs[p].status == Status::Deleted);
                self.model.recs.push(ModelRecord {
                    tenant: *tenant,
                    status: Status::Active,
                    access,
                    supersedes: m_sup,
                    superseded_by: None,
                    dependents: Vec::new(),
                });
                if let Some(old) = m_sup {
                    self.model.recs[old].superseded_by = Some(n);
                    self.model.set_status(old, Status::Superseded);
                    self.model.mark_dependents_stale(old);
                }
                for &p in &m_sources {
                    self.model.recs[p].dependents.push(n);
                }
                if born_deleted {
                    self.model.set_status(n, Status::Deleted);
                }
                self.ids.push(id);
                Some((codec::FRAME_RECORD, codec::encode_record(&r)))
            }
            Step::Delete(p) | Step::Retract(p) => {
                if n == 0 {
                    return None;
                }
                let t = p % n;
                let tenant = self.model.recs[t].tenant;
                let target = self.ids[t].to_bytes();
                let op = match s {
                    Step::Delete(_) => {
                        // the chain, what derives from any version, and on
                        // through the chains of those, to a fixpoint
                        let mut reached = BTreeSet::new();
                        let mut todo = vec![t];
                        while let Some(x) = todo.pop() {
                            for v in self.model.chain(x) {
                                if reached.insert(v) {
                                    todo.extend(self.model.derivatives(v));
                                }
                            }
                        }
                        for d in reached {
                            self.model.set_status(d, Status::Deleted);
                        }
                        OpBody::Delete {
                            target,
                            reason: None,
                        }
                    }
                    _ => {
                        if self.model.recs[t].status != Status::Deleted {
                            self.model.set_status(t, Status::Retracted);
                            self.model.mark_dependents_stale(t);
                        }
                        OpBody::Retract {
                            target,
                            reason: None,
                        }
                    }
                };
                let o = StoredOp {
                    id: RecordId::from_bytes(((2u128 << 80) | self.lsn as u128).to_be_bytes())
                        .to_bytes(),
                    tenant: TENANTS[tenant].into(),
                    at_ms: at,
                    actor: "admin".into(),
                    op,
                };
                Some((codec::FRAME_OP, codec::encode_op(&o)))
            }
        }
    }

    fn check(&self, after: &str) {
        let st = &self.st;
        assert_eq!(st.len(), self.model.recs.len(), "{after}: record count");
        for (i, m) in self.model.recs.iter().enumerate() {
            let idx = st.idx(self.ids[i]).expect("applied record is known");
            let meta = st.meta(idx);
            assert_eq!(meta.status, m.status, "{after}: status of record {i}");
            let access: BTreeSet<String> = st.access_names(idx).into_iter().collect();
            assert_eq!(access, m.access, "{after}: access of record {i}");
            assert_eq!(
                meta.superseded_by.map(|x| st.meta(x).id),
                m.superseded_by.map(|x| self.ids[x]),
                "{after}: superseded_by of record {i}"
            );
            let derivs: BTreeSet<RecordId> = st
                .derivatives(idx)
                .into_iter()
                .map(|d| st.meta(d).id)
                .collect();
            let model: BTreeSet<RecordId> = self
                .model
                .derivatives(i)
                .into_iter()
                .map(|d| self.ids[d])
                .collect();
            assert_eq!(derivs, model, "{after}: derivatives of record {i}");
        }
        for (t, name) in TENANTS.iter().enumerate() {
            let got: BTreeSet<RecordId> = st
                .tenant_sym(name)
                .and_then(|s| st.bm_tenant.get(&s))
                .map(|b| b.iter().map(|i| st.meta(i).id).collect())
                .unwrap_or_default();
            let want: BTreeSet<RecordId> = self
                .model
                .recs
                .iter()
                .enumerate()
                .filter(|(_, m)| m.tenant == t)
                .map(|(i, _)| self.ids[i])
                .collect();
            assert_eq!(got, want, "{after}: tenant bitmap of {name}");
        }
        for (status, b) in &st.bm_status {
            let got: BTreeSet<RecordId> = b.iter().map(|i| st.meta(i).id).collect();
            let want: BTreeSet<RecordId> = self
                .model
                .recs
                .iter()
                .enumerate()
                .filter(|(_, m)| m.status == *status)
                .map(|(i, _)| self.ids[i])
                .collect();
            assert_eq!(got, want, "{after}: status bitmap {status:?}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn state_follows_the_model_frame_by_frame(steps in proptest::collection::vec(step(), 1..60)) {
        let mut run = Run::new();
        let mut frames = Vec::new();
        for (k, s) in steps.iter().enumerate() {
            if let Some((ft, payload)) = run.step(s) {
                run.apply(ft, &payload);
                frames.push((ft, payload));
                run.check(&format!("after step {k} ({s:?})"));
            }
        }
        // Deterministic: the same frames give the same checkpoint bytes.
        let mut again = Run::new();
        for (ft, payload) in &frames {
            again.apply(*ft, payload);
        }
        let a = crate::checkpoint::encode(&run.st, &run.st.vectors.slots(), 0);
        let b = crate::checkpoint::encode(&again.st, &again.st.vectors.slots(), 0);
        prop_assert!(a == b, "two replays of the same frames encode differently");
        // A checkpoint decodes back to a state that encodes the same.
        let mut d = crate::checkpoint::decode(&a).expect("decodes");
        d.parts.validate().expect("valid");
        let back = d
            .parts
            .into_state(run.st.lexical.clone(), empty_state().vectors, None)
            .expect("a state");
        let c = crate::checkpoint::encode(&back, &back.vectors.slots(), 0);
        prop_assert!(a == c, "a decoded checkpoint encodes differently");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 6, ..ProptestConfig::default() })]

    /// The commit hook applies groups of frames, some texts looked up
    /// ahead while the group was synced: the state (checkpoint and lexical
    /// index, byte for byte) is the one a frame-by-frame replay leaves,
    /// whatever the group boundaries and whichever texts were prepared.
    #[test]
    fn a_group_applied_with_prepared_texts_equals_a_replay(
        steps in proptest::collection::vec(step(), 300..700),
        cuts in proptest::collection::vec(20..400usize, 1..4),
        prepare_mask in any::<u64>(),
    ) {
        let mut run = Run::new();
        let mut frames = Vec::new();
        for s in &steps {
            if let Some(f) = run.step(s) {
                let (ft, payload) = &f;
                run.apply(*ft, payload);
                frames.push(f);
            }
        }
        let mut grouped = empty_state();
        let (mut at, mut lsn) = (0usize, 0u64);
        let mut sizes = cuts.iter().cycle();
        while at < frames.len() {
            let end = (at + sizes.next().copied().unwrap_or(1) * 4).min(frames.len());
            // looked up against the state before the group, as the
            // prepare hook does while the group is synced
            let prepared: Vec<_> = frames[at..end]
                .iter()
                .enumerate()
                .map(|(k, (ft, payload))| {
                    let loc = loc_at(lsn + 1 + k as u64);
                    let ahead = prepare_mask & (1 << ((at + k) % 64)) != 0;
                    ahead
                        .then(|| prepare_frame(&grouped, *ft, codec::PAYLOAD_VERSION, payload, loc))
                        .flatten()
                })
                .collect();
            for ((ft, payload), p) in frames[at..end].iter().zip(prepared) {
                lsn += 1;
                let r = apply_frame_prepared(&mut grouped, *ft, codec::PAYLOAD_VERSION, payload, loc_at(lsn), p);
                prop_assert!(r.is_ok(), "{r:?}");
            }
            at = end;
        }
        let a = crate::checkpoint::encode(&run.st, &run.st.vectors.slots(), 0);
        let b = crate::checkpoint::encode(&grouped, &grouped.vectors.slots(), 0);
        prop_assert!(a == b, "grouped application encodes differently");
        let (mut la, mut lb) = (Vec::new(), Vec::new());
        run.st.lexical.write_to(&mut la);
        grouped.lexical.write_to(&mut lb);
        prop_assert!(la == lb, "grouped application indexes texts differently");
        prop_assert!(run.st.lexical.len() > 100, "texts were indexed");
    }
}

#[test]
fn text_spans_are_per_record_and_default_to_unknown() {
    let mut s = TextSpans::default();
    assert_eq!(s.get(0), None, "an empty table knows nothing");
    s.set(3, Some(1..4)); // beyond the table: ignored, never a panic
    assert_eq!(s.get(3), None);
    s.cover(10);
    assert!((0..10).all(|i| s.get(i).is_none()));
    s.set(0, Some(0..0));
    s.set(1, None);
    s.set(2, Some(17..4113));
    s.set(4, Some(usize::MAX - 1..usize::MAX)); // does not fit: not kept
    assert_eq!(s.get(0), Some(Some(0..0)));
    assert_eq!(s.get(1), Some(None));
    assert_eq!(s.get(2), Some(Some(17..4113)));
    assert_eq!(s.get(4), None);
    s.cover(5); // never shrinks
    assert_eq!(s.get(2), Some(Some(17..4113)));
}

#[test]
fn statuses_at_give_the_from_of_the_first_transition_after_the_moment() {
    let mut st = empty_state();
    let change = |at, idx, from, to| StatusChange { at, idx, from, to };
    st.status_log = vec![
        change(10, 0, Status::Active, Status::Superseded),
        change(20, 1, Status::Candidate, Status::Approved),
        change(30, 1, Status::Approved, Status::Retracted),
        change(40, 0, Status::Superseded, Status::Deleted),
    ];
    let at = |t| {
        let mut v: Vec<(Idx, Status)> = st.statuses_at(t).into_iter().collect();
        v.sort();
        v
    };
    assert_eq!(
        at(5),
        vec![(0, Status::Active), (1, Status::Candidate)],
        "before every change: each record's first `from`"
    );
    assert_eq!(
        at(20),
        vec![(0, Status::Superseded), (1, Status::Approved)],
        "a change made at the moment itself is already in effect"
    );
    assert_eq!(at(35), vec![(0, Status::Superseded)]);
    assert!(at(40).is_empty(), "nothing changed after the last change");
}
