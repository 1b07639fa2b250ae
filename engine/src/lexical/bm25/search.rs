//! Search: query terms, the BM25 scorer, exhaustive scoring and MaxScore
//! pruning (see the parent module's documentation, "Top-k without scoring
//! every posting").

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use roaring::RoaringBitmap;

use std::sync::OnceLock;

use super::{Bm25Index, Bm25Params, CorpusStats, LexicalStats, Postings, ScoredDoc, terms};

/// The dense score accumulator is used when the span of matched document ids
/// is at most `DENSE_SPAN_RATIO` times the number of matches (plus a small
/// constant); otherwise partial scores are sorted by document.
const DENSE_SPAN_RATIO: usize = 32;
const DENSE_SPAN_SLACK: usize = 4096;

/// Dense accumulators up to this many slots (32 MiB of `f64`) stay with
/// their thread for the next query; larger ones are freed after use.
const DENSE_KEEP_MAX: usize = 1 << 22;

/// A dense accumulator: a score slot per document of the span, and a bit
/// per slot saying it was touched.
type Dense = (Vec<f64>, Vec<u64>);

thread_local! {
    /// This thread's dense score accumulator, all zeros between queries.
    static DENSE: std::cell::RefCell<Dense> = const { std::cell::RefCell::new((Vec::new(), Vec::new())) };
}

/// Runs `f` on an all-zero accumulator of `span` slots indexed by
/// `doc - lo`, and an all-zero bitset of `span` bits where `f` must set
/// the bit of every slot it makes non-zero. Afterwards only those slots
/// are reset, and the bitset (a word per 64 slots), so a query pays for
/// the slots it touched and a pass over the bitset, not for allocating
/// and clearing an array over the whole id span (at a million records,
/// 8 MB per query). The bitset
/// also lists the touched documents in ascending order without a sort. The
/// accumulator is taken out of the thread's slot while in use: a nested
/// call gets a fresh one, and a panic in `f` drops it rather than leaving
/// a dirty one behind.
fn with_dense<R>(span: usize, f: impl FnOnce(&mut [f64], &mut [u64]) -> R) -> R {
    let (mut acc, mut bits) = DENSE.with(|c| std::mem::take(&mut *c.borrow_mut()));
    let words = span.div_ceil(64);
    if acc.len() < span {
        acc.resize(span, 0.0);
    }
    if bits.len() < words {
        bits.resize(words, 0);
    }
    let r = f(&mut acc[..span], &mut bits[..words]);
    for_each_set(&bits[..words], |i| acc[i] = 0.0);
    bits[..words].fill(0);
    debug_assert!(
        acc.iter().all(|&x| x == 0.0),
        "a touched slot was not recorded"
    );
    if acc.len() <= DENSE_KEEP_MAX {
        DENSE.with(|c| *c.borrow_mut() = (acc, bits));
    }
    r
}

/// Calls `f` with the index of every set bit of `bits`, ascending.
#[inline]
fn for_each_set(bits: &[u64], mut f: impl FnMut(usize)) {
    for (w, &word) in bits.iter().enumerate() {
        let mut b = word;
        while b != 0 {
            f(w * 64 + b.trailing_zeros() as usize);
            b &= b - 1;
        }
    }
}

/// Term-frequency lookup for ascending documents of one term: a forward
/// galloping cursor over the term's tf >= 2 entries.
pub(super) struct TfCursor<'a> {
    docs: &'a [u32],
    tfs: &'a [u32],
}

impl<'a> TfCursor<'a> {
    pub(super) fn new(p: &'a Postings) -> Self {
        TfCursor {
            docs: &p.multi_docs,
            tfs: &p.multi_tfs,
        }
    }

    /// The tf of `doc`, which must be in the term's postings and not below
    /// any document asked before.
    pub(super) fn tf(&mut self, doc: u32) -> u32 {
        // The next entry is at or past `doc` for most documents asked:
        // answered without a search.
        match self.docs.first() {
            None => return 1,
            Some(&d) if d > doc => return 1,
            Some(&d) if d == doc => {
                let tf = self.tfs[0];
                self.docs = &self.docs[1..];
                self.tfs = &self.tfs[1..];
                return tf;
            }
            Some(_) => {}
        }
        let at = gallop(self.docs, doc);
        self.docs = &self.docs[at..];
        self.tfs = &self.tfs[at..];
        if self.docs.first() == Some(&doc) {
            let tf = self.tfs[0];
            self.docs = &self.docs[1..];
            self.tfs = &self.tfs[1..];
            tf
        } else {
            1
        }
    }
}

/// Index of the first element of ascending `s` that is >= `x`. When `s`
/// holds at least [`LINEAR`] elements, those first ones are counted
/// without a branch (most seeks of a tenant's documents move a few
/// entries, and a mispredicted branch per halving cost more than the
/// compares); past them, or in a shorter `s`, exponential then binary
/// search: O(LINEAR + log i) for answer `i`.
pub(super) fn gallop(s: &[u32], x: u32) -> usize {
    if let Some(head) = s.get(..LINEAR) {
        let below = head.iter().filter(|&&v| v < x).count();
        if below < LINEAR {
            return below;
        }
        return LINEAR + gallop_past(&s[LINEAR..], x);
    }
    gallop_past(s, x)
}

/// Elements [`gallop`] counts before searching.
const LINEAR: usize = 16;

/// [`gallop`] by exponential then binary search alone.
fn gallop_past(s: &[u32], x: u32) -> usize {
    let mut hi = 1;
    while hi <= s.len() && s[hi - 1] < x {
        hi *= 2;
    }
    let lo = hi / 2;
    let hi = hi.min(s.len());
    lo + s[lo..hi].partition_point(|&v| v < x)
}

/// A score accumulated in `f64`, rounded to the `f32` results carry.
#[inline]
#[allow(clippy::cast_possible_truncation)]
fn round_score(s: f64) -> f32 {
    s as f32
}

/// Whether a score of at most `bound` ranks strictly below every score of
/// at least `theta` once both are rounded to the `f32` results carry (a
/// tie could still win on document id, so ties are not pruned). The
/// relative margins cover the rounding of the bound arithmetic (bounds are
/// added in another order than the scores they bound).
fn below(bound: f64, theta: f64) -> bool {
    round_score(bound * (1.0 + 1e-9) + 1e-300) < round_score(theta * (1.0 - 1e-9))
}

/// Top-k over terms in descending order of their score bound (`terms`, as
/// ranked by the caller). Every path, pruned or not, scores terms in that
/// order into one accumulator, so each document's partial scores are added
/// in the same order and the results agree bit for bit.
///
/// With `prune` (MaxScore), terms are scored until the bounds of the terms
/// left add up to less than a lower bound of the k-th best score. A
/// document none of the scored terms matched cannot reach the top k then,
/// so the terms left are never enumerated: they are only intersected with
/// the documents that can still make it ([`finish`]). The lower bound of the k-th best
/// score after a term is the larger of the previous one and the k-th best
/// partial sum among the documents that term touched (partial sums only
/// grow). Without `prune`, every posting of every term is scored (the
/// reference the pruning is tested against).
///
/// The accumulator is a dense array over the documents' id span when that
/// span is small compared to the matches, else a list sorted by document
/// that each term is merged into (a tenant's documents spread over a large
/// store's whole id space).
fn top_k(
    terms: &[RankedTerm<'_>],
    scorer: &Scorer<'_>,
    k: usize,
    force_dense: Option<bool>,
    prune: bool,
    stats: &mut LexicalStats,
    materialize: &dyn Fn(&QueryTerm<'_>, &mut LexicalStats) -> Vec<u32>,
) -> Vec<ScoredDoc> {
    let lo = terms.iter().filter_map(|r| r.t.postings.docs.min()).min();
    let hi = terms.iter().filter_map(|r| r.t.postings.docs.max()).max();
    let (Some(lo), Some(hi)) = (lo, hi) else {
        return Vec::new();
    };
    let span = (hi - lo) as usize + 1;
    let total = terms.iter().map(|r| r.t.df).sum::<u64>();
    let dense = force_dense.unwrap_or(
        span <= usize::try_from(total)
            .unwrap_or(usize::MAX)
            .saturating_mul(DENSE_SPAN_RATIO)
            .saturating_add(DENSE_SPAN_SLACK),
    );
    let run = Run {
        terms,
        scorer,
        k,
        prune,
        materialize,
    };
    if dense {
        with_dense(span, |acc, bits| {
            run.with(
                &mut DenseAcc {
                    acc,
                    bits,
                    touched: 0,
                    lo,
                },
                stats,
            )
        })
    } else {
        run.with(&mut SortedAcc::default(), stats)
    }
}

/// Partial sums of the documents a search has touched so far.
trait Accumulator {
    /// Adds `partial(d)` to every document `d` of `docs` (ascending) and
    /// pushes each one's new sum to `sums`.
    fn add(&mut self, docs: &[u32], partial: impl FnMut(u32) -> f64, sums: &mut Vec<f64>);
    /// Documents touched so far.
    fn touched(&self) -> usize;
    /// Every touched document with its sum, ascending by document.
    fn for_each(&self, f: impl FnMut(u32, f64));
}

/// A dense array over the id span, with a bit per touched slot (see
/// [`with_dense`]).
struct DenseAcc<'a> {
    acc: &'a mut [f64],
    bits: &'a mut [u64],
    touched: usize,
    lo: u32,
}

impl Accumulator for DenseAcc<'_> {
    fn add(&mut self, docs: &[u32], mut partial: impl FnMut(u32) -> f64, sums: &mut Vec<f64>) {
        for &d in docs {
            let i = (d - self.lo) as usize;
            let (word, bit) = (&mut self.bits[i / 64], 1u64 << (i % 64));
            if *word & bit == 0 {
                *word |= bit;
                self.touched += 1;
            }
            let slot = &mut self.acc[i];
            *slot += partial(d);
            sums.push(*slot);
        }
    }
    fn touched(&self) -> usize {
        self.touched
    }
    // a slot's index is below the span, `hi - lo + 1`, so the document
    // `lo + index` is at most `hi`, a u32
    #[allow(clippy::cast_possible_truncation)]
    fn for_each(&self, mut f: impl FnMut(u32, f64)) {
        for_each_set(self.bits, |i| f(self.lo + i as u32, self.acc[i]));
    }
}

/// (document, sum) ascending by document; each term's documents are merged
/// in. A new document's sum is `0.0 + partial`, as in the dense array.
#[derive(Default)]
struct SortedAcc {
    sums: Vec<(u32, f64)>,
    spare: Vec<(u32, f64)>,
}

impl Accumulator for SortedAcc {
    fn add(&mut self, docs: &[u32], mut partial: impl FnMut(u32) -> f64, sums: &mut Vec<f64>) {
        let old = std::mem::take(&mut self.sums);
        let mut out = std::mem::take(&mut self.spare);
        out.clear();
        out.reserve(old.len() + docs.len());
        let mut a = old.iter().copied().peekable();
        for &d in docs {
            while let Some(&(od, os)) = a.peek() {
                if od >= d {
                    break;
                }
                out.push((od, os));
                a.next();
            }
            let before = match a.peek() {
                Some(&(od, os)) if od == d => {
                    a.next();
                    os
                }
                _ => 0.0,
            };
            let now = before + partial(d);
            out.push((d, now));
            sums.push(now);
        }
        out.extend(a);
        self.sums = out;
        self.spare = old;
    }
    fn touched(&self) -> usize {
        self.sums.len()
    }
    fn for_each(&self, mut f: impl FnMut(u32, f64)) {
        for &(d, s) in &self.sums {
            f(d, s);
        }
    }
}

/// One top-k search's inputs (see [`top_k`]).
struct Run<'r, 'a> {
    terms: &'r [RankedTerm<'a>],
    scorer: &'r Scorer<'r>,
    k: usize,
    prune: bool,
    materialize: &'r dyn Fn(&QueryTerm<'_>, &mut LexicalStats) -> Vec<u32>,
}

impl Run<'_, '_> {
    /// The search over accumulator `acc`.
    fn with(&self, acc: &mut impl Accumulator, stats: &mut LexicalStats) -> Vec<ScoredDoc> {
        let Run {
            terms,
            scorer,
            k,
            prune,
            materialize,
        } = *self;
        // left[j]: what the terms from j on can add to any document
        let mut left = vec![0.0f64; terms.len() + 1];
        for j in (0..terms.len()).rev() {
            left[j] = left[j + 1] + terms[j].bound;
        }
        let mut theta = f64::NEG_INFINITY;
        let mut sums: Vec<f64> = Vec::new();
        let mut scored_terms = terms.len();
        for (j, r) in terms.iter().enumerate() {
            let docs = materialize(&r.t, stats);
            let mut tfs = TfCursor::new(r.t.postings);
            sums.clear();
            acc.add(&docs, |d| scorer.partial(r.w, tfs.tf(d), d), &mut sums);
            if !prune || j + 1 == terms.len() {
                continue;
            }
            if sums.len() >= k {
                let (_, &mut kth, _) = sums.select_nth_unstable_by(k - 1, |a, b| b.total_cmp(a));
                theta = theta.max(kth);
            }
            if below(left[j + 1], theta) {
                scored_terms = j + 1;
                break;
            }
        }
        finish(
            acc,
            &terms[scored_terms..],
            &left[scored_terms..],
            theta,
            scorer,
            k,
            stats,
        )
    }
}

#[cfg(test)]
thread_local! {
    /// Candidates [`finish`] dropped on this thread: tests check that the
    /// narrowing runs, not only that its results are right.
    pub(super) static DROPPED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// The top `k` once the terms before `rest` are in `acc`; `left[i]` is
/// what the terms from `rest[i]` on can add to any document (`left` has one
/// more entry than `rest`, the last 0).
///
/// The documents whose partial sum plus `left[0]` can still reach `theta`
/// (a lower bound of the k-th best score) are the candidates. The terms
/// left are taken one at a time, as the scored ones were: a term's
/// documents among the candidates are found by intersecting its postings
/// with them (in bulk, not by a lookup per candidate and term), their
/// partial scores are added, `theta` is raised to the k-th best sum so far
/// (sums only grow), and the candidates that the terms after it can no
/// longer lift to `theta` are dropped. Each document's partial scores are
/// still added in term order, so the sums are those of exhaustive scoring.
fn finish(
    acc: &impl Accumulator,
    rest: &[RankedTerm<'_>],
    left: &[f64],
    theta: f64,
    scorer: &Scorer<'_>,
    k: usize,
    stats: &mut LexicalStats,
) -> Vec<ScoredDoc> {
    let mut top = TopK::new(k);
    stats.docs_scored += acc.touched() as u64;
    if rest.is_empty() {
        acc.for_each(|d, s| {
            if round_score(s) >= top.floor {
                top.offer(d, s);
            }
        });
        return top.into_sorted();
    }
    let mut theta = theta;
    let mut candidates: Vec<(u32, f64)> = Vec::new();
    acc.for_each(|d, s| {
        if !below(s + left[0], theta) {
            candidates.push((d, s));
        }
    });
    debug_assert!(candidates.windows(2).all(|w| w[0].0 < w[1].0));
    // The candidates' documents, rebuilt only when some were dropped.
    let bitmap_of = |candidates: &[(u32, f64)]| {
        let docs = candidates.iter().map(|&(d, _)| d);
        // (ascending and distinct, as the accumulator lists them)
        RoaringBitmap::from_sorted_iter(docs.clone()).unwrap_or_else(|_| docs.collect())
    };
    let mut among = bitmap_of(&candidates);
    let mut sums: Vec<f64> = Vec::new();
    for (i, r) in rest.iter().enumerate() {
        if candidates.is_empty() {
            break;
        }
        stats.postings_read += candidates.len() as u64;
        let hits = &r.t.postings.docs & &among;
        let mut tfs = TfCursor::new(r.t.postings);
        let mut at = 0;
        for d in &hits {
            // every hit is a candidate, and hits ascend
            while candidates[at].0 < d {
                at += 1;
            }
            candidates[at].1 += scorer.partial(r.w, tfs.tf(d), d);
        }
        if i + 1 == rest.len() {
            break;
        }
        if candidates.len() >= k {
            sums.clear();
            sums.extend(candidates.iter().map(|&(_, s)| s));
            let (_, &mut kth, _) = sums.select_nth_unstable_by(k - 1, |a, b| b.total_cmp(a));
            theta = theta.max(kth);
        }
        let before = candidates.len();
        candidates.retain(|&(_, s)| !below(s + left[i + 1], theta));
        if candidates.len() < before {
            #[cfg(test)]
            DROPPED.with(|c| c.set(c.get() + (before - candidates.len()) as u64));
            among = bitmap_of(&candidates);
        }
    }
    for (d, s) in candidates {
        if round_score(s) >= top.floor {
            top.offer(d, s);
        }
    }
    top.into_sorted()
}

/// A query term found in the eligible documents.
struct QueryTerm<'a> {
    qtf: u32,
    postings: &'a Postings,
    /// Eligible documents holding the term.
    df: u64,
}

/// A query term with its weight and score bound in one search.
struct RankedTerm<'a> {
    t: QueryTerm<'a>,
    /// `qtf * idf * (k1 + 1)`.
    w: f64,
    /// Largest partial score the term can add to a document.
    bound: f64,
}

/// A top-k candidate. Ordered so that the *worse* candidate is greater
/// (lower score, then higher doc id), making `BinaryHeap` a heap of the
/// current worst.
#[derive(Clone, Copy, PartialEq)]
struct Candidate {
    score: f32,
    doc: u32,
}

impl Eq for Candidate {}

impl Ord for Candidate {
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .score
            .total_cmp(&self.score)
            .then(self.doc.cmp(&other.doc))
    }
}

impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Keeps the best `k` candidates seen, in any order of arrival.
struct TopK {
    k: usize,
    heap: BinaryHeap<Candidate>,
    /// Score of the worst kept candidate once `k` are kept (else -inf):
    /// a score strictly below it can never enter, so callers skip
    /// [`offer`](Self::offer) for it.
    floor: f32,
}

impl TopK {
    fn new(k: usize) -> Self {
        TopK {
            k,
            heap: BinaryHeap::with_capacity(k.min(1024) + 1),
            floor: f32::NEG_INFINITY,
        }
    }

    fn offer(&mut self, doc: u32, score: f64) {
        let c = Candidate {
            score: round_score(score),
            doc,
        };
        if self.heap.len() < self.k {
            self.heap.push(c);
        } else if let Some(mut worst) = self.heap.peek_mut()
            && c < *worst
        {
            *worst = c;
        }
        if self.heap.len() == self.k
            && let Some(worst) = self.heap.peek()
        {
            self.floor = worst.score;
        }
    }

    fn into_sorted(self) -> Vec<ScoredDoc> {
        self.heap
            .into_sorted_vec()
            .into_iter()
            .map(|c| ScoredDoc {
                doc: c.doc,
                score: c.score,
            })
            .collect()
    }
}

/// BM25 with the corpus statistics of one search.
struct Scorer<'a> {
    n: f64,
    /// `k1 + 1`.
    k1_plus_1: f64,
    /// `k1 * (1 - b)`: the length-independent part of the tf normaliser.
    norm_const: f64,
    /// `k1 * b / avgdl`: the per-token part of the tf normaliser.
    norm_per_len: f64,
    doc_len: &'a [u32],
}

impl<'a> Scorer<'a> {
    /// `n` eligible non-empty documents holding `sum_len` tokens (both >= 1).
    fn new(params: Bm25Params, n: u64, sum_len: u64, doc_len: &'a [u32]) -> Self {
        let k1 = f64::from(params.k1);
        let b = f64::from(params.b);
        let avgdl = sum_len as f64 / n as f64;
        Scorer {
            n: n as f64,
            k1_plus_1: k1 + 1.0,
            norm_const: k1 * (1.0 - b),
            norm_per_len: k1 * b / avgdl,
            doc_len,
        }
    }

    /// `qtf * idf * (k1 + 1)` of a term in `df` eligible documents.
    fn weight(&self, qtf: u32, df: u64) -> f64 {
        let df = df as f64;
        let idf = ((self.n - df + 0.5) / (df + 0.5)).ln_1p();
        f64::from(qtf) * idf * self.k1_plus_1
    }

    /// The score a term of weight `w` adds to document `d` where it occurs
    /// `tf` times.
    #[inline]
    fn partial(&self, w: f64, tf: u32, d: u32) -> f64 {
        let tf = f64::from(tf);
        let dl = f64::from(self.doc_len[d as usize]);
        w * tf / (tf + self.norm_const + self.norm_per_len * dl)
    }

    /// An upper bound of [`Scorer::partial`] over the term's documents:
    /// the partial rises with tf and falls with length, so the largest tf
    /// with the shortest length bounds every posting.
    fn bound(&self, w: f64, p: &Postings) -> f64 {
        let tf = f64::from(p.max_tf);
        let dl = f64::from(p.min_len);
        w * tf / (tf + self.norm_const + self.norm_per_len * dl)
    }
}

impl Bm25Index {
    /// Top-`k` documents for `query` among `eligible` only, best first. No
    /// document outside `eligible` is ever scored or returned, and corpus
    /// statistics (N, df, avgdl) are computed over the eligible documents,
    /// so documents outside `eligible` never change a score. See the module
    /// documentation for the formula, query-term frequency and tie-breaking.
    pub fn search(
        &self,
        query: &str,
        eligible: &RoaringBitmap,
        k: usize,
        stats: &mut LexicalStats,
    ) -> Vec<ScoredDoc> {
        self.search_with(query, eligible, k, stats, &OnceLock::new())
    }

    /// [`search`](Self::search) with the eligible set's corpus statistics
    /// kept in `corpus`: read from it when set, else computed (only if a
    /// query term matches) and stored there. `corpus` must belong to this
    /// index and this `eligible`; the results are those of `search`.
    pub fn search_with(
        &self,
        query: &str,
        eligible: &RoaringBitmap,
        k: usize,
        stats: &mut LexicalStats,
        corpus: &OnceLock<CorpusStats>,
    ) -> Vec<ScoredDoc> {
        self.search_impl(query, eligible, k, stats, corpus, None, true)
    }

    /// Corpus statistics over the eligible documents only.
    pub fn corpus_stats(&self, eligible: &RoaringBitmap) -> CorpusStats {
        if self.nonempty.is_subset(eligible) {
            return CorpusStats {
                docs: self.nonempty.len(),
                tokens: self.total_len,
            };
        }
        let seen = &self.nonempty & eligible;
        let tokens = seen
            .iter()
            .map(|d| u64::from(self.doc_len[d as usize]))
            .sum();
        CorpusStats {
            docs: seen.len(),
            tokens,
        }
    }

    /// [`search`](Self::search) without pruning by score bounds: every
    /// eligible posting of every query term is scored. The results are the
    /// same; this is the reference the pruning is tested and measured
    /// against (`benches/lexical_vs_tantivy.rs`).
    pub fn search_exhaustive(
        &self,
        query: &str,
        eligible: &RoaringBitmap,
        k: usize,
        stats: &mut LexicalStats,
    ) -> Vec<ScoredDoc> {
        self.search_impl(query, eligible, k, stats, &OnceLock::new(), None, false)
    }

    /// [`search`](Self::search), optionally forcing the dense (`Some(true)`)
    /// or sorted (`Some(false)`) score accumulator, with or without
    /// pruning by score bounds (`prune`; results are identical).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn search_impl(
        &self,
        query: &str,
        eligible: &RoaringBitmap,
        k: usize,
        stats: &mut LexicalStats,
        corpus: &OnceLock<CorpusStats>,
        force_dense: Option<bool>,
        prune: bool,
    ) -> Vec<ScoredDoc> {
        if k == 0 || eligible.is_empty() || self.vocab.is_empty() {
            return Vec::new();
        }
        let mut qtoks = Vec::new();
        terms(query, &mut qtoks);
        qtoks.sort_unstable();

        let eligible_len = eligible.len();
        // When every non-empty document is eligible, postings need no
        // filtering and the corpus statistics are the cached totals.
        let covers = self.nonempty.is_subset(eligible);
        // Query terms in ascending term order, with their eligible document
        // frequency (counted without enumerating the documents).
        let mut qterms: Vec<QueryTerm<'_>> = Vec::new();
        let mut i = 0;
        while i < qtoks.len() {
            let run = qtoks[i..].iter().take_while(|t| **t == qtoks[i]).count();
            let term = &qtoks[i];
            i += run;
            stats.terms_looked_up += 1;
            let Some(&id) = self.vocab.get(term.as_str()) else {
                continue;
            };
            let postings = &self.postings[id as usize];
            let df = if covers {
                postings.docs.len()
            } else {
                postings.docs.intersection_len(eligible)
            };
            if df > 0 {
                qterms.push(QueryTerm {
                    qtf: u32::try_from(run).unwrap_or(u32::MAX),
                    postings,
                    df,
                });
            }
        }
        if qterms.is_empty() {
            return Vec::new();
        }

        let c = *corpus.get_or_init(|| self.corpus_stats(eligible));
        // Every matched document is eligible and non-empty, so both are >= 1.
        let scorer = Scorer::new(self.params, c.docs, c.tokens, &self.doc_len);
        // Terms by descending score bound (ties: term order): every path
        // adds each document's partial scores in this order.
        let mut ranked: Vec<RankedTerm<'_>> = qterms
            .into_iter()
            .map(|t| {
                let w = scorer.weight(t.qtf, t.df);
                RankedTerm {
                    bound: scorer.bound(w, t.postings),
                    w,
                    t,
                }
            })
            .collect();
        ranked.sort_by(|a, b| b.bound.total_cmp(&a.bound));
        let materialize = |t: &QueryTerm<'_>, stats: &mut LexicalStats| {
            let mut docs = Vec::new();
            stats.postings_read +=
                t.postings
                    .eligible_docs(eligible, eligible_len, covers, &mut docs);
            docs
        };
        top_k(&ranked, &scorer, k, force_dense, prune, stats, &materialize)
    }
}
