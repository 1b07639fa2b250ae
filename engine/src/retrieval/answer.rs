//! What a recall or search returns: hits, each retriever's candidates and
//! vector plan, fusion inputs, cost counters, timings and the manifest
//! around them. Cheap to keep, formatted on output: retriever names are
//! shared, a plan's reason is the planner's figures.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

use super::{NormalizedQuery, Step, plan, search};
use crate::id::RecordId;
use crate::state::{Idx, State};

/// One result.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Hit {
    /// Rank from 1.
    pub rank: usize,
    /// Record id.
    pub id: RecordId,
    /// External id (shared with the store's record table: no copy).
    pub external_id: Option<std::sync::Arc<str>>,
    /// Fused score.
    pub score: f64,
    /// Record type.
    pub record: &'static str,
    /// Kind (shared with the store's names: no copy).
    pub kind: std::sync::Arc<str>,
    /// Status.
    pub status: &'static str,
    /// Valid time (RFC 3339 when shown or serialized).
    pub occurred_at: crate::time::Rfc3339,
    /// Validity ended before `valid_at` (only with `include_historical`).
    pub historical: bool,
    /// Text.
    pub text: Option<String>,
    /// The text was asked for but left out: the hits before this one
    /// already carry [`HITS_TEXT_BYTES_MAX`](crate::retrieval::HITS_TEXT_BYTES_MAX)
    /// bytes of text (read it by id).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub text_omitted: bool,
    /// Which retrievers found it, with rank.
    pub found_by: Few<(RetrieverName, usize)>,
    /// Each retriever that found it: rank and its own score.
    pub ranks: Few<RankInfo>,
    /// Sources attached (`attach.sources`), nearest first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<search::Linked>,
    /// Derivatives attached (`attach.derivatives`), nearest first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub derivatives: Vec<search::Linked>,
}

/// A retriever's name as results carry it: the names recall uses are
/// static strings and any other is shared, so every hit and fusion input
/// names its retrievers without a copy of the string (nor, for recall's
/// names, a reference count to touch). It compares, hashes, orders and
/// serializes as a plain string.
#[derive(Clone)]
pub struct RetrieverName(NameRepr);

#[derive(Clone)]
enum NameRepr {
    Static(&'static str),
    Shared(std::sync::Arc<str>),
}

/// The names recall's retrievers go by, held without an allocation.
const STATIC_NAMES: [&str; 5] = ["vector", "lexical", "recency", "graph", "episodic"];

impl RetrieverName {
    /// The name.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            NameRepr::Static(s) => s,
            NameRepr::Shared(s) => s,
        }
    }
}

impl PartialEq for RetrieverName {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for RetrieverName {}

impl std::hash::Hash for RetrieverName {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.as_str().hash(h);
    }
}

impl PartialOrd for RetrieverName {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for RetrieverName {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl Serialize for RetrieverName {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl std::ops::Deref for RetrieverName {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl From<&str> for RetrieverName {
    fn from(s: &str) -> Self {
        match STATIC_NAMES.iter().find(|n| **n == s) {
            Some(n) => RetrieverName(NameRepr::Static(n)),
            None => RetrieverName(NameRepr::Shared(s.into())),
        }
    }
}

impl PartialEq<str> for RetrieverName {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for RetrieverName {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for RetrieverName {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other.as_str()
    }
}

impl fmt::Debug for RetrieverName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for RetrieverName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A short list that is usually one element long (most hits are found
/// by one retriever): one element is held inline, more in a `Vec`, so the
/// common case costs no allocation. Reads as a slice, serializes as a
/// sequence.
#[derive(Clone)]
pub struct Few<T>(FewRepr<T>);

#[derive(Clone)]
enum FewRepr<T> {
    One(T),
    Many(Vec<T>),
}

impl<T> Few<T> {
    /// An empty list.
    pub const fn new() -> Self {
        Few(FewRepr::Many(Vec::new()))
    }

    /// A list of one, held inline.
    pub const fn one(x: T) -> Self {
        Few(FewRepr::One(x))
    }
}

impl<T> Default for Few<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> std::ops::Deref for Few<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        match &self.0 {
            FewRepr::One(x) => std::slice::from_ref(x),
            FewRepr::Many(v) => v,
        }
    }
}

impl<T> FromIterator<T> for Few<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        let mut it = iter.into_iter();
        let Some(first) = it.next() else {
            return Self::new();
        };
        let Some(second) = it.next() else {
            return Few(FewRepr::One(first));
        };
        let mut v = Vec::with_capacity(2 + it.size_hint().0);
        v.push(first);
        v.push(second);
        v.extend(it);
        Few(FewRepr::Many(v))
    }
}

impl<T> From<Vec<T>> for Few<T> {
    fn from(mut v: Vec<T>) -> Self {
        match v.len() {
            1 => Few(FewRepr::One(v.pop().expect("one element"))),
            _ => Few(FewRepr::Many(v)),
        }
    }
}

impl<'a, T> IntoIterator for &'a Few<T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<T: PartialEq> PartialEq for Few<T> {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl<T: fmt::Debug> fmt::Debug for Few<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<T: Serialize> Serialize for Few<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

/// A retriever's rank and own score for one hit.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RankInfo {
    /// Retriever name.
    pub retriever: RetrieverName,
    /// Rank from 1.
    pub rank: usize,
    /// Its own score (similarity, BM25, recency time, path score).
    pub score: f64,
}

/// A candidate of one retriever.
#[derive(Clone, Debug, Serialize)]
pub struct Candidate {
    /// Record id.
    pub id: RecordId,
    /// Rank from 1.
    pub rank: usize,
    /// Retriever's own score (similarity, BM25, ...).
    pub score: f64,
    /// The record's index in the state the search ran on: bookkeeping for
    /// the eligibility check, not part of the answer (neither serialized
    /// nor compared).
    #[serde(skip)]
    pub(crate) idx: Idx,
}

impl Candidate {
    /// The record at `idx`, ranked `rank` with its own `score`.
    pub(crate) fn of(st: &State, idx: Idx, rank: usize, score: f64) -> Candidate {
        Candidate {
            id: st.meta(idx).id,
            rank,
            score,
            idx,
        }
    }
}

impl PartialEq for Candidate {
    fn eq(&self, other: &Self) -> bool {
        (self.id, self.rank, self.score) == (other.id, other.rank, other.score)
    }
}

/// One retriever's output.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RetrieverOutput {
    /// Its name (`vector`, `lexical`, `recency`, `graph` for a recall).
    pub retriever: RetrieverName,
    /// Its kind.
    pub kind: search::RetrieverKind,
    /// Why it did not run, if it did not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    /// How a similarity retriever ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan: Option<VectorPlan>,
    /// Ranked candidates.
    pub candidates: Vec<Candidate>,
}

impl RetrieverOutput {
    /// Candidates of a retriever that ran (name and kind set by the caller).
    pub(crate) fn ran(candidates: Vec<Candidate>) -> Self {
        RetrieverOutput {
            retriever: RetrieverName::from(""),
            kind: search::RetrieverKind::Match,
            skipped: None,
            plan: None,
            candidates,
        }
    }

    /// A retriever that could not run, and why.
    pub(crate) fn skipped(why: impl Into<String>) -> Self {
        RetrieverOutput {
            skipped: Some(why.into()),
            ..Self::ran(Vec::new())
        }
    }
}

/// The query of a similarity retriever.
pub(crate) struct VectorQuery<'a> {
    pub vector: Option<&'a [f32]>,
    pub model: Option<&'a str>,
    pub ef: Option<usize>,
    pub text: Option<&'a str>,
}

/// How the vector retriever ran.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct VectorPlan {
    /// Space (model id).
    pub model: String,
    /// Metric.
    pub metric: &'static str,
    /// Eligible records with a vector in the space.
    pub eligible_in_space: u64,
    /// Vectors in the space (shown to the tenant admin only: the space
    /// holds vectors of records other principals may not read).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub space_size: Option<u64>,
    /// eligible / size (tenant admin only, as `space_size`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub selectivity: Option<f64>,
    /// `exact`, `prefiltered` (sign bits, then an exact scan of those
    /// kept; inner-product spaces only) or `hnsw`.
    pub strategy: &'static str,
    /// Why that strategy.
    pub reason: PlanReason,
    /// ef requested.
    pub ef_requested: usize,
    /// ef used (tenant admin only: a walk widens ef by the space's size
    /// over the eligible count, so it would tell the size).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ef_used: Option<usize>,
    /// Vectors in the graph at query time (tenant admin only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub indexed: Option<u64>,
    /// Eligible vectors not yet in the graph, scanned exactly.
    pub unindexed_scanned: u64,
    /// Where the query vector came from (`request` or the embedder's model id).
    pub query_vector: std::borrow::Cow<'static, str>,
}

impl VectorPlan {
    /// Removes whole-space facts (they count vectors of records the
    /// principal may not read): for everyone but the tenant admin.
    pub(crate) fn redact(&mut self) {
        self.space_size = None;
        self.selectivity = None;
        self.indexed = None;
        self.ef_used = None;
        self.reason.redacted = true;
    }
}

/// Why the planner chose its strategy: the planner's own figures, written
/// out as a sentence only when shown or serialized (as a string), so a
/// recall whose manifest is never printed formats no numbers.
#[derive(Clone, Debug, PartialEq)]
pub struct PlanReason {
    /// Eligible vectors in the space.
    pub eligible: u64,
    /// Eligible share of the space.
    pub selectivity: f64,
    /// The choice and its estimates.
    pub plan: plan::Plan,
    /// The walk needs no filter: every vector of the space is eligible.
    pub whole_space: bool,
    /// Only what a principal other than the tenant admin may see: the
    /// estimates and the selectivity count vectors of records the principal
    /// may not read.
    pub redacted: bool,
    /// The plan the store's `vector_plan` option forces (see
    /// [`crate::PlanChoice`]), `None` when the planner chose the cheaper.
    /// Where the forced plan does not apply (a prefilter on too small a
    /// set or in an L2 space; a walk when nothing is eligible), the exact
    /// scan ran instead and the reason says so.
    pub forced: Option<plan::PlanChoice>,
}

impl fmt::Display for PlanReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.explain(f)?;
        match self.forced {
            Some(choice) if choice.ran(&self.plan) => {
                write!(f, "; forced by the store's vector_plan option")
            }
            Some(choice) => write!(
                f,
                "; the store's vector_plan option asks for {}, which does not apply here",
                choice.name()
            ),
            None => Ok(()),
        }
    }
}

impl PlanReason {
    fn explain(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let e = self.eligible;
        if self.redacted {
            let how = match self.plan {
                plan::Plan::Exact { .. } => "exact scan",
                plan::Plan::Prefiltered { .. } => "sign-bit prefilter, then an exact scan",
                plan::Plan::Walk { .. } => "filtered graph walk",
            };
            return write!(f, "{e} eligible vectors: {how}");
        }
        let sel = self.selectivity;
        match self.plan {
            plan::Plan::Exact { cost_ns, walk_ns } => write!(
                f,
                "{e} eligible vectors, selectivity {sel:.4}: exact scan (estimated {:.0} us) over a filtered graph walk ({:.0} us)",
                cost_ns / 1e3,
                walk_ns / 1e3
            ),
            plan::Plan::Prefiltered {
                keep,
                cost_ns,
                scan_ns,
                walk_ns,
            } => write!(
                f,
                "{e} eligible vectors, selectivity {sel:.4}: sign-bit prefilter keeping {keep}, then an exact scan of those (estimated {:.0} us) over an exact scan of all ({:.0} us) and a filtered graph walk ({:.0} us)",
                cost_ns / 1e3,
                scan_ns / 1e3,
                walk_ns / 1e3
            ),
            plan::Plan::Walk {
                cost_ns, scan_ns, ..
            } => write!(
                f,
                "{e} eligible vectors, selectivity {sel:.4}: {} (estimated {:.0} us) over an exact scan ({:.0} us)",
                if self.whole_space {
                    "graph walk"
                } else {
                    "filtered graph walk with raised ef"
                },
                cost_ns / 1e3,
                scan_ns / 1e3
            ),
        }
    }
}

impl Serialize for PlanReason {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Cost counters.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Cost {
    /// Records examined by eligibility-restricted scans.
    pub records_scanned: u64,
    /// Vector distance computations.
    pub distance_computations: u64,
    /// Graph nodes visited.
    pub graph_nodes_visited: u64,
    /// Postings read by the lexical index.
    pub postings_read: u64,
    /// Documents given a lexical score.
    pub lexical_docs_scored: u64,
    /// Bytes of text returned.
    pub bytes_returned: u64,
}

/// Timings (the only part of a manifest that differs between replays).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Timings {
    /// Eligibility.
    pub eligibility_us: u64,
    /// Vector retriever.
    pub vector_us: u64,
    /// Lexical retriever.
    pub lexical_us: u64,
    /// Recency and graph retrievers.
    pub other_us: u64,
    /// Fusion and result assembly (from the last retriever's end, the
    /// eligibility check of every candidate included).
    pub fusion_us: u64,
    /// Everything.
    pub total_us: u64,
}

/// One fused candidate with its inputs.
#[derive(Clone, Debug, Serialize)]
pub struct FusionInput {
    /// Record id.
    pub id: RecordId,
    /// (retriever, rank, contribution).
    pub contributions: Few<(RetrieverName, usize, f64)>,
    /// Fused score.
    pub score: f64,
    /// The record's index in the state the search ran on, carried from its
    /// candidates (no lookup by id when hits are built): bookkeeping, not
    /// part of the answer (neither serialized nor compared).
    #[serde(skip)]
    pub(crate) idx: Idx,
}

impl PartialEq for FusionInput {
    fn eq(&self, other: &Self) -> bool {
        (self.id, &self.contributions, self.score) == (other.id, &other.contributions, other.score)
    }
}

/// The principal as the manifest records it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ManifestPrincipal {
    /// Tenant.
    pub tenant: std::sync::Arc<str>,
    /// Principal id.
    pub id: std::sync::Arc<str>,
    /// Admin.
    pub admin: bool,
    /// Labels held at query time.
    pub labels: Vec<String>,
}

/// Versions of everything that shaped the result.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Versions {
    /// Engine crate version.
    pub engine: &'static str,
    /// Manifest layout.
    pub manifest: u32,
    /// Index term rules (tokenizer and stemming:
    /// `lexical::terms::TERMS_VERSION`).
    pub tokenizer: u32,
    /// The session tenant's vector spaces: model -> (dims, vectors,
    /// indexed); the counts are shown to the tenant admin only (0 for
    /// other principals: a space holds vectors of records they may not
    /// read). Nothing of other tenants' spaces appears here.
    pub vector_spaces: BTreeMap<String, (usize, u64, u64)>,
    /// Graph parameters (m, ef_construction).
    pub hnsw: (usize, usize),
    /// Embedder model id, if any.
    pub embedder: Option<String>,
}

/// Everything needed to explain and replay a retrieval.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Manifest {
    /// Normalized query.
    pub query: NormalizedQuery,
    /// Principal.
    pub principal: ManifestPrincipal,
    /// The tenant's snapshot position: LSN of the tenant's last log entry
    /// in the state read (moves only with the tenant's own writes).
    pub snapshot_lsn: u64,
    /// Versions.
    pub versions: Versions,
    /// Eligibility steps.
    pub eligibility: std::sync::Arc<[Step]>,
    /// Eligible count.
    pub eligible: u64,
    /// Vector plan.
    pub vector_plan: Option<VectorPlan>,
    /// Candidates per retriever.
    pub retrievers: Vec<RetrieverOutput>,
    /// Fusion.
    pub fusion_method: &'static str,
    /// rrf_k.
    pub rrf_k: f64,
    /// Fusion inputs (every fused candidate).
    pub fusion: Vec<FusionInput>,
    /// Final selection (ids in rank order).
    pub selection: Vec<RecordId>,
    /// Cost counters.
    pub cost: Cost,
    /// Timings.
    pub timings: Timings,
}

impl Manifest {
    /// The manifest without timings (what replays must reproduce exactly).
    pub fn without_timings(&self) -> Manifest {
        let mut m = self.clone();
        m.timings = Timings::default();
        m
    }
}

/// The answer to a recall: the answer of the search it compiles to (hits,
/// best first, and the manifest, always computed; `explain` only decides
/// whether the CLI prints it). One type, so a recall's answer is returned
/// as the search made it, without a move of the manifest.
pub type RecallResponse = search::SearchResponse;

#[cfg(test)]
mod tests {
    use super::Few;

    #[test]
    fn few_reads_and_serializes_like_the_list_it_holds() {
        for n in 0..4usize {
            let v: Vec<usize> = (0..n).collect();
            let few: Few<usize> = v.iter().copied().collect();
            assert_eq!(&*few, &v[..], "{n} elements");
            assert_eq!(Few::from(v.clone()), few);
            assert_eq!(
                serde_json::to_string(&few).unwrap(),
                serde_json::to_string(&v).unwrap()
            );
            assert_eq!(format!("{few:?}"), format!("{v:?}"));
            assert_eq!((&few).into_iter().count(), n);
        }
        assert!(Few::<u8>::default().is_empty());
        assert_ne!(Few::from(vec![1]), Few::from(vec![1, 2]));
    }
}
