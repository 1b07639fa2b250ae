//! BM25 inverted index over dense `u32` document ids, with scoring restricted
//! to an eligibility bitmap.
//!
//! It owns the postings (one [`RoaringBitmap`] of documents per term plus the
//! term frequencies), the document lengths, BM25 scoring, top-k selection and
//! the index's versioned binary encoding. Terms come from
//! [`super::tokenize::tokenize`], for documents and queries alike.
//!
//! It must never score or return a document outside the caller's `eligible`
//! bitmap, never let a document outside `eligible` change any score, never
//! panic on stored bytes (a malformed encoding is a typed [`Bm25Error`]), and
//! never depend on hash-map iteration order for results or encodings.
//!
//! # Scoring
//!
//! For a query with terms `t` (after tokenization) and a document `d`:
//!
//! ```text
//! score(d) = sum over distinct t of  qtf(t) * idf(t) * tf(t,d) * (k1 + 1)
//!                                    / (tf(t,d) + k1 * (1 - b + b * dl(d) / avgdl))
//! idf(t)   = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))          (Lucene's idf, always > 0)
//! ```
//!
//! * The `(k1 + 1)` factor of the classic formula (which Lucene 8+ drops)
//!   scales every score equally and does not change rankings.
//! * `qtf(t)` is the number of times `t` occurs in the query: a repeated query
//!   term counts once per occurrence (standard BM25 query-term frequency), so
//!   `"backup backup restore"` weighs `backup` twice.
//! * `N`, `df(t)` and `avgdl` are computed over the **eligible** documents
//!   only, not the whole index: `N` is the number of eligible documents with
//!   at least one token, `df(t)` the number of eligible documents containing
//!   `t`, `avgdl` the mean token count of those `N` documents. So a tenant's
//!   scores depend only on the documents it may see, never on another
//!   tenant's. The price is that these statistics are computed per query: one
//!   intersection of the non-empty-document bitmap with `eligible` (skipped
//!   when every non-empty document is eligible) plus one
//!   `postings & eligible` per query term, which the search needs anyway.
//! * Documents added with no tokens are counted by [`Bm25Index::len`] but
//!   contribute nothing: they are in no postings, not in `N` nor in `avgdl`.
//! * Only documents containing at least one query term are returned (their
//!   score is > 0). Results are ordered by score descending, ties broken by
//!   document id ascending; the score compared is the returned `f32`.
//!   Arithmetic is done in `f64`, per document summing terms in sorted term
//!   order, so results are deterministic.
//!
//! # Postings layout
//!
//! Per term: a [`RoaringBitmap`] of the documents containing it, and the
//! sorted list of the documents whose term frequency is at least 2 together
//! with those frequencies (`multi_docs`, `multi_tfs`); every other document
//! of the bitmap has tf = 1. Short texts make tf = 1 by far the common case,
//! so this is smaller than one counter per posting, and looking up tf for a
//! document never needs a rank query on the bitmap: documents are visited in
//! ascending order, so a forward galloping cursor over `multi_docs` finds
//! each tf in amortised O(log gap).
//!
//! Per query term the eligible postings are enumerated one of three ways:
//! when every non-empty document is eligible (one `is_subset` test per
//! query), the postings are taken as they are; otherwise, chosen by
//! cardinality, when the term's postings are at most 1/`SCAN_RATIO` (1/16)
//! of `eligible` they are scanned and each document tested with
//! `eligible.contains` (no allocation, cost ~ |postings|), else the roaring
//! intersection `postings & eligible` is materialised and iterated
//! (container-wise intersection, cost ~ the smaller side).
//!
//! Scores are accumulated in a dense `f64` array over the span of matched
//! document ids when that span is small compared to the number of matches;
//! otherwise (a tenant's documents spread over a large store's whole id
//! space) each term's ascending document list is merged into a (document,
//! sum) list sorted by document. Exhaustive scoring and MaxScore share
//! both accumulators and one loop over the terms (MaxScore only stops it
//! early), so each document's partial scores are added in the same order
//! (the terms by descending score bound) on every path, with identical
//! results (property tests force each accumulator, with and without
//! pruning). Top-k uses a bounded binary heap.
//!
//! # Top-k without scoring every posting (MaxScore)
//!
//! Each term's postings keep their largest tf and shortest document, which
//! bound the score the term can add to any document (the term weight rises
//! with tf and falls with length). A search scores terms from the largest
//! bound down and, after each, takes a lower bound of the k-th best score so
//! far (partial sums only grow). Once the bounds of the terms left add up
//! to less than it, a document none of the scored terms matched cannot
//! reach the top k: the terms left are never enumerated. The documents
//! whose partial sum plus that bound can still make it are the candidates;
//! each term left is intersected with them in bulk (roaring `&`), its
//! partial scores added, the lower bound raised again, and the candidates
//! the terms after it can no longer lift to it dropped. Pruning compares
//! after rounding to the returned `f32`, with a margin, and never prunes a
//! tie, so the results are exactly those of exhaustive scoring (property
//! tests `pruning_keeps_the_exhaustive_top_k` and
//! `narrowing_the_candidates_keeps_the_exhaustive_top_k`;
//! [`Bm25Index::search_exhaustive`] is the reference). Corpus statistics
//! stay those of the eligible set: a term's document frequency is counted
//! with `intersection_len`, which enumerates nothing; N and the token total
//! ([`CorpusStats`]) take a pass over the eligible documents' lengths, so
//! [`Bm25Index::search_with`] lets a caller keep them with the set (the
//! engine keeps them in its cached eligibility results).
//!
//! # Encoding
//!
//! [`Bm25Index::write_to`] emits, little-endian (`varint` is unsigned LEB128,
//! shortest form only):
//!
//! ```text
//! magic "ENGRBM25" | format version u32 | tokenizer version u32
//! k1 f32 | b f32 | docs added u64 | has last doc u8 | last doc u32 (0 if none)
//! doc-length count varint | doc length varint * count   (dense by doc id,
//!                                                       up to the last non-empty doc)
//! term count varint | per term, in ascending byte order:
//!     term length varint | term UTF-8 bytes
//!     bitmap length varint | bitmap (RoaringBitmap::serialize_into)
//!     tf>=2 count varint | per entry: doc gap varint, tf - 2 varint
//!                          (gap = doc for the first entry, doc - previous - 1 after)
//! ```
//!
//! The encoding is canonical: two indexes holding the same documents encode
//! byte-identically, and [`Bm25Index::read_from`] accepts only canonical,
//! internally consistent input (terms are tokenizer fixed points in strictly
//! ascending order, postings lie within non-empty documents, and every
//! document's term frequencies add up to its length), so re-encoding accepted
//! bytes reproduces them exactly. It does not detect every corruption that
//! leaves a consistent index (e.g. a changed `k1`): the caller's checksum does.

use std::fmt;

use roaring::RoaringBitmap;
use rustc_hash::FxHashMap;

#[cfg(test)]
use super::terms::terms_of;
use super::terms::{TERMS_VERSION, terms, with_stem};
use super::tokenize::tokens_each;

/// A token being built, and term ids: reused by `add`.
type Scratch = (String, Vec<u32>);

thread_local! {
    /// Per-thread buffers for `add` (no allocation per token).
    static SCRATCH: std::cell::RefCell<Scratch> =
        const { std::cell::RefCell::new((String::new(), Vec::new())) };
}

/// Tokens remembered by [`TokenIds`] before it starts over.
const TOKEN_IDS_MAX: usize = 1 << 16;

/// The write path's shortcut from a token to its term id: a token seen
/// before is one lookup, instead of a stem (itself a cached lookup) and a
/// vocabulary lookup. Term ids never change within an index, so a hit is
/// always right; the map is cleared when full (vocabularies are small and
/// skewed, so nearly every token of a batch is a hit). Not part of the
/// index's state: a clone or a decoded index starts empty.
struct TokenIds {
    map: FxHashMap<Box<str>, u32>,
    /// Names this index instance (every new, decoded or cloned index gets
    /// its own), for [`Bm25Index::add_prepared`].
    generation: u64,
}

impl Default for TokenIds {
    fn default() -> Self {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        TokenIds {
            map: FxHashMap::default(),
            generation: NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        }
    }
}

impl Clone for TokenIds {
    fn clone(&self) -> Self {
        TokenIds::default()
    }
}

/// A text's tokens looked up ahead of [`Bm25Index::add_prepared`] by
/// [`Bm25Index::prepare`], which needs no write access: the term ids of
/// the tokens already known, sorted (the order `add` indexes them in), and
/// the tokens that were not.
#[derive(Debug)]
pub struct PreparedText {
    generation: u64,
    /// The term id of every known token, sorted.
    ids: Vec<u32>,
    /// Span in `tokens` of each token not yet known.
    unknown: Vec<(u32, u32)>,
    tokens: String,
}

/// Version of the binary encoding written by [`Bm25Index::write_to`].
pub const FORMAT_VERSION: u32 = 1;

const MAGIC: [u8; 8] = *b"ENGRBM25";

/// A term's postings are scanned (testing `eligible.contains` per document)
/// instead of intersected when `postings * SCAN_RATIO <= |eligible|`.
const SCAN_RATIO: u64 = 16;

/// Rough in-memory size of one roaring container header (key + store enum).
const ROARING_CONTAINER_BYTES: usize = 40;

/// BM25 parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bm25Params {
    /// Term-frequency saturation; finite and >= 0.
    pub k1: f32,
    /// Length normalisation; within `[0, 1]`.
    pub b: f32,
}

impl Default for Bm25Params {
    fn default() -> Self {
        Bm25Params { k1: 1.2, b: 0.75 }
    }
}

impl Bm25Params {
    /// Whether `k1` is finite and >= 0 and `b` is within `[0, 1]`.
    pub fn is_valid(&self) -> bool {
        self.k1.is_finite() && self.k1 >= 0.0 && (0.0..=1.0).contains(&self.b)
    }
}

/// Work counters of [`Bm25Index::search`]; each search adds to them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LexicalStats {
    /// Distinct query terms looked up in the vocabulary.
    pub terms_looked_up: u64,
    /// Posting entries visited: the whole postings list of a scanned term,
    /// the eligible postings of an intersected term.
    pub postings_read: u64,
    /// Distinct eligible documents that received a score.
    pub docs_scored: u64,
}

/// BM25's corpus statistics over one eligible set: its non-empty documents
/// and their tokens. They depend only on the index and the set, so a
/// caller that keeps an eligible set across searches (the eligibility
/// cache) keeps them with it: see [`Bm25Index::search_with`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CorpusStats {
    /// Eligible non-empty documents (BM25's N).
    pub docs: u64,
    /// Their tokens (N times the average length).
    pub tokens: u64,
}

/// One search result.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScoredDoc {
    pub doc: u32,
    pub score: f32,
}

/// Errors of the lexical index.
#[non_exhaustive]
#[derive(Debug)]
pub enum Bm25Error {
    /// [`Bm25Index::add`] was given a document id not greater than the last one.
    DocOutOfOrder { last: u32, got: u32 },
    /// The encoding is truncated, garbled or inconsistent at `offset`.
    Format { offset: usize, reason: &'static str },
    /// The encoding's format version is not [`FORMAT_VERSION`].
    VersionMismatch { found: u32, expected: u32 },
    /// The encoding was built with another tokenizer version: its terms do
    /// not match what queries would produce, so the index must be rebuilt.
    TokenizerVersionMismatch { found: u32, expected: u32 },
}

impl fmt::Display for Bm25Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Bm25Error::DocOutOfOrder { last, got } => write!(
                f,
                "lexical index: document {got} added after document {last}; ids must increase"
            ),
            Bm25Error::Format { offset, reason } => {
                write!(
                    f,
                    "lexical index: malformed encoding at byte {offset}: {reason}"
                )
            }
            Bm25Error::VersionMismatch { found, expected } => write!(
                f,
                "lexical index: encoding format version {found}, this build reads {expected}"
            ),
            Bm25Error::TokenizerVersionMismatch { found, expected } => write!(
                f,
                "lexical index: built with tokenizer version {found}, this build uses {expected}; \
                 the index must be rebuilt"
            ),
        }
    }
}

impl std::error::Error for Bm25Error {}

/// Postings of one term.
#[derive(Clone)]
struct Postings {
    /// Documents containing the term.
    docs: RoaringBitmap,
    /// Documents of `docs` whose term frequency is >= 2, ascending.
    multi_docs: Vec<u32>,
    /// Term frequencies of `multi_docs`, parallel to it.
    multi_tfs: Vec<u32>,
    /// Largest term frequency of any posting (0 for no posting). With
    /// `min_len`, bounds the term's score in any document: BM25's term
    /// weight rises with tf and falls with document length.
    max_tf: u32,
    /// Shortest document holding the term (`u32::MAX` for no posting).
    min_len: u32,
}

impl Default for Postings {
    fn default() -> Self {
        Postings {
            docs: RoaringBitmap::new(),
            multi_docs: Vec::new(),
            multi_tfs: Vec::new(),
            max_tf: 0,
            min_len: u32::MAX,
        }
    }
}

impl Postings {
    /// Appends this term's eligible documents to `out`, ascending, and
    /// returns the number of posting entries visited. `covers` says that
    /// every non-empty document is eligible, hence every posting is.
    fn eligible_docs(
        &self,
        eligible: &RoaringBitmap,
        eligible_len: u64,
        covers: bool,
        out: &mut Vec<u32>,
    ) -> u64 {
        let len = self.docs.len();
        if covers {
            append_all(&self.docs, out);
        } else if len.saturating_mul(SCAN_RATIO) <= eligible_len {
            let mut it = self.docs.iter();
            let mut buf = [0u32; 256];
            loop {
                let chunk = it.next_many(&mut buf);
                if chunk.is_empty() {
                    break;
                }
                out.extend(chunk.iter().copied().filter(|&d| eligible.contains(d)));
            }
        } else {
            let both = &self.docs & eligible;
            append_all(&both, out);
            return both.len();
        }
        len
    }

    fn heap_bytes(&self) -> usize {
        bitmap_heap_bytes(&self.docs)
            + self.multi_docs.capacity() * size_of::<u32>()
            + self.multi_tfs.capacity() * size_of::<u32>()
    }
}

/// Appends the members of `b` to `out`, ascending, in batches.
fn append_all(b: &RoaringBitmap, out: &mut Vec<u32>) {
    out.reserve(engram_storage::cast::usize_from(b.len()));
    let mut it = b.iter();
    let mut buf = [0u32; 256];
    loop {
        let chunk = it.next_many(&mut buf);
        if chunk.is_empty() {
            break;
        }
        out.extend_from_slice(chunk);
    }
}

fn bitmap_heap_bytes(b: &RoaringBitmap) -> usize {
    let s = b.statistics();
    engram_storage::cast::usize_from(
        s.n_bytes_array_containers + s.n_bytes_run_containers + s.n_bytes_bitset_containers,
    ) + s.n_containers as usize * ROARING_CONTAINER_BYTES
}

/// BM25 inverted index. See the module documentation.
#[derive(Clone)]
pub struct Bm25Index {
    params: Bm25Params,
    /// Term -> index into `postings`.
    vocab: FxHashMap<String, u32>,
    postings: Vec<Postings>,
    /// Token count per document id, up to the last non-empty document.
    doc_len: Vec<u32>,
    /// Documents with at least one token.
    nonempty: RoaringBitmap,
    /// Sum of `doc_len`.
    total_len: u64,
    /// Documents added, including empty ones.
    n_docs: u64,
    last_doc: Option<u32>,
    /// Token -> term id, for `add` (not part of the index's state).
    token_ids: TokenIds,
}

impl fmt::Debug for Bm25Index {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bm25Index")
            .field("params", &self.params)
            .field("docs", &self.n_docs)
            .field("nonempty_docs", &self.nonempty.len())
            .field("terms", &self.vocab.len())
            .field("last_doc", &self.last_doc)
            .finish()
    }
}

impl Bm25Index {
    /// An empty index.
    ///
    /// # Panics
    /// If `params` is not valid ([`Bm25Params::is_valid`]): that is a
    /// configuration bug, and scores would be meaningless.
    pub fn new(params: Bm25Params) -> Self {
        assert!(params.is_valid(), "invalid BM25 parameters {params:?}");
        Bm25Index {
            params,
            vocab: FxHashMap::default(),
            postings: Vec::new(),
            doc_len: Vec::new(),
            nonempty: RoaringBitmap::new(),
            total_len: 0,
            n_docs: 0,
            last_doc: None,
            token_ids: TokenIds::default(),
        }
    }

    /// The parameters the index scores with.
    pub fn params(&self) -> Bm25Params {
        self.params
    }

    /// Indexes `text` as document `doc`. `doc` must be greater than every
    /// document added so far (else [`Bm25Error::DocOutOfOrder`] and the
    /// index is unchanged). A text with no tokens is allowed: the document
    /// counts in [`len`](Self::len) but contributes nothing to any score or
    /// statistic. Document lengths are kept in an array indexed by id, so
    /// ids are expected to be dense (memory grows with the largest id of a
    /// non-empty document).
    pub fn add(&mut self, doc: u32, text: &str) -> Result<(), Bm25Error> {
        if let Some(last) = self.last_doc
            && doc <= last
        {
            return Err(Bm25Error::DocOutOfOrder { last, got: doc });
        }
        SCRATCH.with(|cell| {
            let (token, ids) = &mut *cell.borrow_mut();
            ids.clear();
            tokens_each(text, token, |t| ids.push(self.term_id(t)));
            self.add_ids(doc, ids);
        });
        Ok(())
    }

    /// Looks up the tokens of `text` for [`add_prepared`](Self::add_prepared),
    /// without changing the index: the write path runs this while the
    /// text's frame is being synced, under a read lock.
    pub fn prepare(&self, text: &str) -> PreparedText {
        let mut p = PreparedText {
            generation: self.token_ids.generation,
            // (a token and its separator take six bytes or more in most
            // texts: room for all of them, without growing the list)
            ids: Vec::with_capacity(text.len() / 6 + 1),
            unknown: Vec::new(),
            tokens: String::new(),
        };
        SCRATCH.with(|cell| {
            let (token, _) = &mut *cell.borrow_mut();
            tokens_each(text, token, |t| {
                let known =
                    self.token_ids.map.get(t).copied().or_else(|| {
                        with_stem(t, |stem| self.vocab.get(stem.unwrap_or(t)).copied())
                    });
                match known {
                    Some(id) => p.ids.push(id),
                    None => {
                        let offset = |n: usize| u32::try_from(n).expect("texts below 4 GiB");
                        let at = offset(p.tokens.len());
                        p.tokens.push_str(t);
                        p.unknown.push((at, offset(p.tokens.len())));
                    }
                }
            });
        });
        // Sorted here, where the write path splits the work over the
        // cores, rather than under the state's write lock.
        p.ids.sort_unstable();
        p
    }

    /// [`add`](Self::add), with the tokens of `text` already looked up by
    /// [`prepare`](Self::prepare). `p` must be `prepare(text)` of this
    /// index; one prepared by another index instance (a rebuilt or reloaded
    /// index) is ignored and `text` indexed from scratch.
    pub fn add_prepared(
        &mut self,
        doc: u32,
        text: &str,
        mut p: PreparedText,
    ) -> Result<(), Bm25Error> {
        if p.generation != self.token_ids.generation {
            return self.add(doc, text);
        }
        if let Some(last) = self.last_doc
            && doc <= last
        {
            return Err(Bm25Error::DocOutOfOrder { last, got: doc });
        }
        // Terms are only ever added, and ids never change: an id found by
        // `prepare` is still right; a token unknown then may be known now.
        if !p.unknown.is_empty() {
            for &(a, b) in &p.unknown {
                let id = self.term_id(&p.tokens[a as usize..b as usize]);
                p.ids.push(id);
            }
            p.ids.sort_unstable();
        }
        self.add_sorted_ids(doc, &p.ids);
        Ok(())
    }

    /// The term id of a token (its stem's, as [`terms`] would give it),
    /// adding the term to the vocabulary when new.
    fn term_id(&mut self, token: &str) -> u32 {
        if let Some(&id) = self.token_ids.map.get(token) {
            return id;
        }
        let id = with_stem(token, |stem| self.vocab_id(stem.unwrap_or(token)));
        if self.token_ids.map.len() >= TOKEN_IDS_MAX {
            self.token_ids.map.clear();
        }
        self.token_ids.map.insert(token.into(), id);
        id
    }

    /// The id of `term`, added to the vocabulary when new.
    fn vocab_id(&mut self, term: &str) -> u32 {
        if let Some(&id) = self.vocab.get(term) {
            return id;
        }
        let id = u32::try_from(self.postings.len()).expect("more than 2^32 terms");
        self.vocab.insert(term.to_owned(), id);
        self.postings.push(Postings::default());
        id
    }

    /// Indexes one document's term ids (one per token, in text order): the
    /// ids are sorted as integers, and each run of equal ids is one posting
    /// with its term frequency.
    fn add_ids(&mut self, doc: u32, ids: &mut [u32]) {
        ids.sort_unstable();
        self.add_sorted_ids(doc, ids);
    }

    /// [`add_ids`](Self::add_ids) of ids already sorted.
    fn add_sorted_ids(&mut self, doc: u32, ids: &[u32]) {
        debug_assert!(ids.is_sorted(), "term ids sorted");
        self.last_doc = Some(doc);
        self.n_docs += 1;
        if ids.is_empty() {
            return;
        }
        let dl = u32::try_from(ids.len()).unwrap_or(u32::MAX);
        let mut i = 0;
        while i < ids.len() {
            let id = ids[i];
            let run = ids[i..].iter().take_while(|&&t| t == id).count();
            let tf = u32::try_from(run).unwrap_or(u32::MAX);
            i += run;
            let p = &mut self.postings[id as usize];
            // `insert`, not `push`: roaring's push finds the maximum of a
            // bitmap container by scanning it, which made indexing dense
            // terms quadratic. Doc ids still only increase (checked above).
            p.docs.insert(doc);
            p.max_tf = p.max_tf.max(tf);
            p.min_len = p.min_len.min(dl);
            if tf >= 2 {
                p.multi_docs.push(doc);
                p.multi_tfs.push(tf);
            }
        }
        let slot = doc as usize;
        self.doc_len.resize(slot + 1, 0);
        self.doc_len[slot] = dl;
        self.nonempty.insert(doc);
        self.total_len += u64::from(dl);
    }

    /// Number of documents added, including those with no tokens.
    pub fn len(&self) -> u64 {
        self.n_docs
    }

    /// Whether no document was added.
    pub fn is_empty(&self) -> bool {
        self.n_docs == 0
    }

    /// The last document added.
    pub fn last_doc(&self) -> Option<u32> {
        self.last_doc
    }

    /// Number of distinct terms.
    pub fn term_count(&self) -> usize {
        self.vocab.len()
    }

    /// Approximate bytes of heap memory held by the index.
    pub fn heap_bytes(&self) -> usize {
        let vocab_table = self.vocab.capacity() * (size_of::<(String, u32)>() + 1);
        let vocab_strings: usize = self.vocab.keys().map(String::capacity).sum();
        let token_ids = self.token_ids.map.capacity() * (size_of::<(Box<str>, u32)>() + 1)
            + self.token_ids.map.keys().map(|k| k.len()).sum::<usize>();
        let postings_vec = self.postings.capacity() * size_of::<Postings>();
        let postings: usize = self.postings.iter().map(Postings::heap_bytes).sum();
        vocab_table
            + vocab_strings
            + token_ids
            + postings_vec
            + postings
            + self.doc_len.capacity() * size_of::<u32>()
            + bitmap_heap_bytes(&self.nonempty)
    }
}

mod encoding;
mod search;

#[cfg(test)]
mod tests {
    use super::search::{TfCursor, gallop};
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;
    use std::sync::OnceLock;

    /// splitmix64: a tiny deterministic generator for test corpora.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    const WORDS: &[&str] = &[
        "memory",
        "agent",
        "graph",
        "vector",
        "retention",
        "policy",
        "incident",
        "tenant",
        "perché",
        "città",
        "rivista",
        "dell'incidente",
        "l'API",
        "backup",
        "restore",
        "v2",
        "2025",
        "conv_993",
        "the",
        "di",
        "è",
        "log",
        "append",
        "Ünïcödé",
        "東京",
        "🚀",
    ];

    /// `n` documents with increasing, gappy ids; some have no text.
    fn corpus(rng: &mut Rng, n: usize) -> Vec<(u32, String)> {
        let vocab = 2 + rng.below(WORDS.len() as u64 - 1) as usize;
        let mut id = rng.below(3) as u32;
        (0..n)
            .map(|_| {
                id += 1 + rng.below(3) as u32;
                let len = if rng.below(10) == 0 {
                    0
                } else {
                    1 + rng.below(12) as usize
                };
                let words: Vec<&str> = (0..len)
                    .map(|_| WORDS[rng.below(vocab as u64) as usize])
                    .collect();
                (id, words.join(" "))
            })
            .collect()
    }

    fn query(rng: &mut Rng) -> String {
        let len = 1 + rng.below(5) as usize;
        let mut q: Vec<&str> = (0..len)
            .map(|_| WORDS[rng.below(WORDS.len() as u64) as usize])
            .collect();
        if rng.below(4) == 0 {
            q.push("absent");
        }
        q.join(" ")
    }

    /// Eligible set: a random subset of the corpus ids plus a few ids that
    /// are not in the index.
    fn eligible(rng: &mut Rng, docs: &[(u32, String)]) -> RoaringBitmap {
        let keep = rng.below(101);
        let mut e: RoaringBitmap = docs
            .iter()
            .map(|d| d.0)
            .filter(|_| rng.below(100) < keep)
            .collect();
        for _ in 0..rng.below(4) {
            e.insert(rng.below(200) as u32);
        }
        e
    }

    fn build(params: Bm25Params, docs: &[(u32, String)]) -> Bm25Index {
        let mut idx = Bm25Index::new(params);
        for (id, text) in docs {
            idx.add(*id, text).unwrap();
        }
        idx
    }

    /// `add` without the token cache: every term of [`terms_of`] looked
    /// up in the vocabulary (the definition the cache must agree with).
    fn add_by_terms(idx: &mut Bm25Index, doc: u32, text: &str) {
        let mut ids: Vec<u32> = terms_of(text).iter().map(|t| idx.vocab_id(t)).collect();
        idx.add_ids(doc, &mut ids);
    }

    fn encoded(idx: &Bm25Index) -> Vec<u8> {
        let mut out = Vec::new();
        idx.write_to(&mut out);
        out
    }

    #[test]
    fn the_token_cache_indexes_what_the_terms_say() {
        // Inflections of one stem, tokens that are their own term, accents,
        // digits, and a cache emptied part way (as when it fills).
        let texts = [
            "Walking walked walks; the walker WALKS",
            "perché Perche\u{301} caffè, run running runner v2 conv_993",
            "walking the dog walked by the walker",
            "",
            "İstanbul straße ﬁnancing financing",
            "running runs ran walking",
        ];
        let mut cached = Bm25Index::new(Bm25Params::default());
        let mut reference = Bm25Index::new(Bm25Params::default());
        for (i, t) in texts.iter().enumerate() {
            if i == 3 {
                cached.token_ids.map.clear();
            }
            cached.add(i as u32, t).unwrap();
            add_by_terms(&mut reference, i as u32, t);
        }
        assert!(!cached.token_ids.map.is_empty());
        assert_eq!(encoded(&cached), encoded(&reference));
        // prepared ahead, with a term added in between (unknown when
        // prepared, known when added): the same index
        let (ahead, between) = ("walkers walk quietly zebras", "zebra crossing");
        let p = cached.prepare(ahead);
        assert!(!p.unknown.is_empty() && !p.ids.is_empty());
        cached.add(6, between).unwrap();
        cached.add_prepared(7, ahead, p).unwrap();
        add_by_terms(&mut reference, 6, between);
        add_by_terms(&mut reference, 7, ahead);
        assert_eq!(encoded(&cached), encoded(&reference));
        // prepared by another instance (a clone): ignored, the text indexed
        let p = cached.clone().prepare("zebra stripes");
        cached.add_prepared(8, "zebra stripes", p).unwrap();
        add_by_terms(&mut reference, 8, "zebra stripes");
        assert_eq!(encoded(&cached), encoded(&reference));
        // out of order is refused, as by `add`
        let p = cached.prepare("late");
        assert!(matches!(
            cached.add_prepared(8, "late", p),
            Err(Bm25Error::DocOutOfOrder { last: 8, got: 8 })
        ));
        // a decoded index starts with an empty cache and goes on the same
        let mut decoded = Bm25Index::read_from(&encoded(&cached)).unwrap();
        assert!(decoded.token_ids.map.is_empty());
        decoded.add(10, "walks walking runner").unwrap();
        add_by_terms(&mut reference, 10, "walks walking runner");
        assert_eq!(encoded(&decoded), encoded(&reference));
    }

    /// Textbook BM25 straight from token lists, in f64, every query token
    /// occurrence summed separately. Returns every matching eligible doc,
    /// best first (ties by doc ascending).
    fn naive(
        params: Bm25Params,
        docs: &[(u32, String)],
        eligible: &RoaringBitmap,
        query: &str,
    ) -> Vec<(u32, f64)> {
        let live: Vec<(u32, Vec<String>)> = docs
            .iter()
            .filter(|(id, _)| eligible.contains(*id))
            .map(|(id, text)| (*id, terms_of(text)))
            .filter(|(_, t)| !t.is_empty())
            .collect();
        let n = live.len() as f64;
        if live.is_empty() {
            return Vec::new();
        }
        let avgdl = live.iter().map(|(_, t)| t.len() as f64).sum::<f64>() / n;
        let (k1, b) = (f64::from(params.k1), f64::from(params.b));
        let mut out = Vec::new();
        for (id, toks) in &live {
            let dl = toks.len() as f64;
            let mut score = 0.0;
            for q in terms_of(query) {
                let tf = toks.iter().filter(|t| **t == q).count() as f64;
                if tf == 0.0 {
                    continue;
                }
                let df = live.iter().filter(|(_, t)| t.contains(&q)).count() as f64;
                let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
                score += idf * tf * (k1 + 1.0) / (tf + k1 * (1.0 - b + b * dl / avgdl));
            }
            if score > 0.0 {
                out.push((*id, score));
            }
        }
        out.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        out
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-4 * b.abs().max(1e-9)
    }

    /// `got` equals the naive top-k up to float rounding: same length, same
    /// score at every rank, every returned doc eligible with its naive
    /// score, and a doc differing from the naive one only where the naive
    /// scores tie within tolerance.
    fn check_against_naive(
        got: &[ScoredDoc],
        want: &[(u32, f64)],
        eligible: &RoaringBitmap,
        k: usize,
    ) -> Result<(), TestCaseError> {
        let naive_score: BTreeMap<u32, f64> = want.iter().copied().collect();
        let want = &want[..want.len().min(k)];
        prop_assert_eq!(got.len(), want.len(), "got {:?} want {:?}", got, want);
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            prop_assert!(eligible.contains(g.doc), "doc {} not eligible", g.doc);
            prop_assert!(
                close(f64::from(g.score), w.1),
                "rank {}: {:?} vs {:?}",
                i,
                g,
                w
            );
            if g.doc != w.0 {
                // A near-tie: the returned doc must score like the naive one.
                let gs = naive_score.get(&g.doc).copied();
                prop_assert!(
                    gs.is_some_and(|s| close(s, w.1)),
                    "rank {}: {:?} vs {:?}",
                    i,
                    g,
                    w
                );
            }
            if i > 0 {
                let p = got[i - 1];
                prop_assert!(p.score > g.score || (p.score == g.score && p.doc < g.doc));
            }
        }
        Ok(())
    }

    /// A corpus whose word `i` of [`WORDS`] is drawn with weight
    /// `1 / (i + 1)`: a few common words and a tail of rare ones, the shape
    /// under which score bounds prune.
    fn zipf_corpus(rng: &mut Rng, n: usize) -> Vec<(u32, String)> {
        (0..n)
            .map(|i| {
                let len = 1 + rng.below(10) as usize;
                let words: Vec<&str> = (0..len).map(|_| zipf_word(rng)).collect();
                (i as u32 * 2, words.join(" "))
            })
            .collect()
    }

    fn zipf_word(rng: &mut Rng) -> &'static str {
        let total: f64 = (1..=WORDS.len()).map(|i| 1.0 / i as f64).sum();
        let mut x = (rng.below(1 << 30) as f64 / f64::from(1u32 << 30)) * total;
        for (i, w) in WORDS.iter().enumerate() {
            x -= 1.0 / (i + 1) as f64;
            if x <= 0.0 {
                return w;
            }
        }
        WORDS[WORDS.len() - 1]
    }

    /// Once a rare term's documents are the only candidates, the terms
    /// left are taken over them one at a time and the candidates they can
    /// no longer lift to the k-th best are dropped, with the exhaustive
    /// results, under either accumulator.
    #[test]
    fn the_terms_left_narrow_the_candidates() {
        let docs: Vec<(u32, String)> = (0..3000u32)
            .map(|i| {
                let mut text = String::from("memory");
                if i % 2 == 0 {
                    text.push_str(" agent");
                }
                if i % 3 == 0 {
                    text.push_str(" graph");
                }
                if i % 100 == 7 {
                    text.push_str(" incident");
                }
                if i % 300 == 7 {
                    text.push_str(" incident");
                }
                (i * 5, text)
            })
            .collect();
        let idx = build(Bm25Params::default(), &docs);
        let all: RoaringBitmap = docs.iter().map(|d| d.0).collect();
        let some: RoaringBitmap = docs.iter().map(|d| d.0).filter(|d| d % 7 != 0).collect();
        for e in [&all, &some] {
            let mut s = LexicalStats::default();
            let q = "incident graph agent memory";
            let want = idx.search_impl(q, e, 3, &mut s, &OnceLock::new(), None, false);
            assert_eq!(want.len(), 3);
            for dense in [Some(true), Some(false)] {
                let before = search::DROPPED.with(|c| c.get());
                let got = idx.search_impl(q, e, 3, &mut s, &OnceLock::new(), dense, true);
                assert_eq!(got, want, "dense {dense:?}");
                let dropped = search::DROPPED.with(|c| c.get()) - before;
                assert!(dropped > 0, "dense {dense:?}: no candidate was dropped");
            }
        }
    }

    /// Pruning reads fewer postings and returns exactly the exhaustive
    /// top k: a common term in every document, a rare one in a few.
    #[test]
    fn pruning_skips_the_postings_of_common_terms() {
        let docs: Vec<(u32, String)> = (0..2000u32)
            .map(|i| {
                let rare = if i % 400 == 7 { " incident" } else { "" };
                (i, format!("memory agent graph{rare}"))
            })
            .collect();
        let idx = build(Bm25Params::default(), &docs);
        let all: RoaringBitmap = (0..2000).collect();
        let some: RoaringBitmap = (0..2000).filter(|i| i % 3 != 0).collect();
        for e in [&all, &some] {
            let (mut full, mut pruned) = (LexicalStats::default(), LexicalStats::default());
            let want = idx.search_impl(
                "memory incident",
                e,
                3,
                &mut full,
                &OnceLock::new(),
                None,
                false,
            );
            let got = idx.search("memory incident", e, 3, &mut pruned);
            assert_eq!(got, want);
            assert_eq!(got.len(), 3);
            assert!(
                pruned.postings_read * 10 < full.postings_read,
                "pruned read {} postings, exhaustive {}",
                pruned.postings_read,
                full.postings_read
            );
            assert!(pruned.docs_scored < full.docs_scored);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// Pruning by score bounds returns exactly the exhaustive top k
        /// (same documents, scores and order), on indexes built in memory
        /// and decoded from their encoding.
        #[test]
        fn pruning_keeps_the_exhaustive_top_k(
            seed in any::<u64>(), k in 1usize..12, n in 20usize..500, pi in 0usize..3,
        ) {
            let params = [Bm25Params::default(), Bm25Params { k1: 0.9, b: 0.4 }, Bm25Params { k1: 0.0, b: 1.0 }][pi];
            let mut rng = Rng(seed);
            let docs = zipf_corpus(&mut rng, n);
            let idx = build(params, &docs);
            let mut bytes = Vec::new();
            idx.write_to(&mut bytes);
            let decoded = Bm25Index::read_from(&bytes).unwrap();
            for round in 0..6 {
                let e = if round % 2 == 0 {
                    docs.iter().map(|d| d.0).collect()
                } else {
                    eligible(&mut rng, &docs)
                };
                let words: Vec<&str> = (0..2 + rng.below(5)).map(|_| zipf_word(&mut rng)).collect();
                let q = words.join(" ");
                let mut s = LexicalStats::default();
                let want = idx.search_impl(&q, &e, k, &mut s, &OnceLock::new(), None, false);
                prop_assert_eq!(&idx.search(&q, &e, k, &mut s), &want, "query {:?}", q);
                prop_assert_eq!(&decoded.search(&q, &e, k, &mut s), &want, "decoded, query {:?}", q);
                // The merged (sorted) accumulator a sparse id span uses.
                prop_assert_eq!(&idx.search_impl(&q, &e, k, &mut s, &OnceLock::new(), Some(false), true), &want, "sorted, query {:?}", q);
                // Corpus statistics kept with the set: the first search
                // stores them (if a term matched), the second reads them.
                let corpus = OnceLock::new();
                prop_assert_eq!(&idx.search_with(&q, &e, k, &mut s, &corpus), &want);
                prop_assert_eq!(&idx.search_with(&q, &e, k, &mut s, &corpus), &want);
                if let Some(c) = corpus.get() {
                    prop_assert_eq!(*c, idx.corpus_stats(&e));
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(40))]

        /// Longer queries over larger corpora leave several terms to be
        /// taken over the candidates once pruning starts (each narrowing
        /// them): the results are still exactly the exhaustive top k,
        /// with either accumulator.
        #[test]
        fn narrowing_the_candidates_keeps_the_exhaustive_top_k(
            seed in any::<u64>(), k in 1usize..40, n in 500usize..3000,
        ) {
            let mut rng = Rng(seed);
            let docs = zipf_corpus(&mut rng, n);
            let idx = build(Bm25Params::default(), &docs);
            for round in 0..4 {
                let e = if round == 0 {
                    docs.iter().map(|d| d.0).collect()
                } else {
                    eligible(&mut rng, &docs)
                };
                let words: Vec<&str> = (0..4 + rng.below(8)).map(|_| zipf_word(&mut rng)).collect();
                let q = words.join(" ");
                let mut s = LexicalStats::default();
                let want = idx.search_impl(&q, &e, k, &mut s, &OnceLock::new(), None, false);
                for dense in [Some(true), Some(false)] {
                    let got = idx.search_impl(&q, &e, k, &mut s, &OnceLock::new(), dense, true);
                    prop_assert_eq!(&got, &want, "query {:?}, dense {:?}", q, dense);
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// The index agrees with the naive scorer on random corpora,
        /// eligibility sets, queries, k and parameters. The failing seed is
        /// part of the reported input.
        #[test]
        fn matches_naive_scorer(seed in any::<u64>(), k in 1usize..25, n in 0usize..120, pi in 0usize..3) {
            let params = [Bm25Params::default(), Bm25Params { k1: 0.9, b: 0.4 }, Bm25Params { k1: 0.0, b: 1.0 }][pi];
            let mut rng = Rng(seed);
            let docs = corpus(&mut rng, n);
            let idx = build(params, &docs);
            for _ in 0..8 {
                let e = eligible(&mut rng, &docs);
                let q = query(&mut rng);
                let mut stats = LexicalStats::default();
                let got = idx.search_impl(&q, &e, k, &mut stats, &OnceLock::new(), None, false);
                let want = naive(params, &docs, &e, &q);
                check_against_naive(&got, &want, &e, k)?;
                prop_assert_eq!(stats.docs_scored, want.len() as u64);
                // Both accumulators, and pruning, give identical results.
                let mut s = LexicalStats::default();
                prop_assert_eq!(&idx.search_impl(&q, &e, k, &mut s, &OnceLock::new(), Some(true), false), &got);
                prop_assert_eq!(&idx.search_impl(&q, &e, k, &mut s, &OnceLock::new(), Some(false), false), &got);
                prop_assert_eq!(&idx.search(&q, &e, k, &mut s), &got);
                // Pruning over either accumulator, whatever the id span.
                prop_assert_eq!(&idx.search_impl(&q, &e, k, &mut s, &OnceLock::new(), Some(true), true), &got);
                prop_assert_eq!(&idx.search_impl(&q, &e, k, &mut s, &OnceLock::new(), Some(false), true), &got);
            }
        }

        /// Documents outside `eligible` never change eligible scores: an
        /// index holding only the tenant's documents gives bit-identical
        /// results to one that also holds other tenants' documents.
        #[test]
        fn other_tenants_never_change_scores(seed in any::<u64>(), k in 1usize..30) {
            let mut rng = Rng(seed);
            let docs = corpus(&mut rng, 100);
            let mine: Vec<(u32, String)> = docs.iter().filter(|_| rng.below(3) == 0).cloned().collect();
            let e: RoaringBitmap = mine.iter().map(|d| d.0).collect();
            let shared = build(Bm25Params::default(), &docs);
            let alone = build(Bm25Params::default(), &mine);
            for _ in 0..8 {
                let q = query(&mut rng);
                let mut stats = LexicalStats::default();
                let a = shared.search(&q, &e, k, &mut stats);
                let b = alone.search(&q, &e, k, &mut stats);
                prop_assert!(a.iter().all(|d| e.contains(d.doc)));
                prop_assert_eq!(a, b);
            }
        }

        /// Accepted bytes re-encode identically; truncations are always
        /// rejected; bit flips and garbage never panic.
        #[test]
        fn corrupted_encodings_never_panic(seed in any::<u64>(), flips in prop::collection::vec(any::<(usize, u8)>(), 1..4)) {
            let mut rng = Rng(seed);
            let docs = corpus(&mut rng, 30);
            let mut bytes = Vec::new();
            build(Bm25Params::default(), &docs).write_to(&mut bytes);
            let cut = rng.below(bytes.len() as u64) as usize;
            prop_assert!(Bm25Index::read_from(&bytes[..cut]).is_err());
            let mut bad = bytes.clone();
            for (pos, bit) in flips {
                let i = pos % bad.len();
                bad[i] ^= 1 << (bit % 8);
            }
            if let Ok(idx) = Bm25Index::read_from(&bad) {
                let mut again = Vec::new();
                idx.write_to(&mut again);
                prop_assert_eq!(again, bad);
            }
            let garbage: Vec<u8> = (0..rng.below(200)).map(|_| rng.next() as u8).collect();
            let mut prefixed = MAGIC.to_vec();
            prefixed.extend_from_slice(&bytes[8..16.min(bytes.len())]);
            prefixed.extend_from_slice(&garbage);
            let _ = Bm25Index::read_from(&garbage);
            let _ = Bm25Index::read_from(&prefixed);
        }
    }

    fn memory_corpus() -> Bm25Index {
        let mut idx = Bm25Index::new(Bm25Params::default());
        let docs = [
            (
                0,
                "The retention policy was revised after the incident review.",
            ),
            (
                2,
                "La policy di retention è stata rivista dopo l'analisi dell'incidente.",
            ),
            (3, ""),
            (5, "Perché il deploy è fallito? Il database era pieno."),
            (
                8,
                "Agent memory stores observations as a graph of entities.",
            ),
            (9, "Il gatto dorme sul divano tutto il giorno."),
            (
                12,
                "Backup and restore of the vector store, version v2 (2025).",
            ),
            (
                13,
                "conv_993: user asked about the retention window of the logs",
            ),
        ];
        for (id, text) in docs {
            idx.add(id, text).unwrap();
        }
        idx
    }

    fn top_doc(idx: &Bm25Index, q: &str) -> Option<u32> {
        let all: RoaringBitmap = (0..100).collect();
        let mut stats = LexicalStats::default();
        idx.search(q, &all, 3, &mut stats).first().map(|d| d.doc)
    }

    #[test]
    fn english_and_italian_queries_find_their_documents() {
        let idx = memory_corpus();
        assert_eq!(top_doc(&idx, "policy di retention rivista"), Some(2));
        assert_eq!(top_doc(&idx, "retention policy revised"), Some(0));
        assert_eq!(top_doc(&idx, "perche"), Some(5));
        assert_eq!(top_doc(&idx, "PERCHÉ è fallito"), Some(5));
        assert_eq!(top_doc(&idx, "incidente"), Some(2));
        assert_eq!(top_doc(&idx, "graph memory"), Some(8));
        assert_eq!(top_doc(&idx, "conv 993"), Some(13));
        assert_eq!(top_doc(&idx, "v2 restore"), Some(12));
        assert_eq!(top_doc(&idx, "gatto"), Some(9));
        assert_eq!(top_doc(&idx, "nothing matches zzz"), None);
        assert_eq!(top_doc(&idx, ""), None);
    }

    #[test]
    fn only_eligible_documents_are_returned() {
        let idx = memory_corpus();
        let mut stats = LexicalStats::default();
        let e: RoaringBitmap = [0, 13].into_iter().collect();
        let got = idx.search("retention policy", &e, 10, &mut stats);
        assert_eq!(got.iter().map(|d| d.doc).collect::<Vec<_>>(), [0, 13]);
        assert!(
            idx.search("retention", &RoaringBitmap::new(), 10, &mut stats)
                .is_empty()
        );
        let all: RoaringBitmap = (0..20).collect();
        assert!(idx.search("retention", &all, 0, &mut stats).is_empty());
    }

    #[test]
    fn duplicate_query_terms_count_per_occurrence() {
        let idx = memory_corpus();
        let all: RoaringBitmap = (0..20).collect();
        let mut stats = LexicalStats::default();
        let once = idx.search("gatto", &all, 1, &mut stats);
        let twice = idx.search("gatto GATTO", &all, 1, &mut stats);
        assert_eq!(once.len(), 1);
        assert_eq!(twice[0].doc, once[0].doc);
        assert_eq!(twice[0].score, 2.0 * once[0].score);
    }

    #[test]
    fn stats_count_work() {
        let idx = memory_corpus();
        let all: RoaringBitmap = (0..20).collect();
        let mut stats = LexicalStats::default();
        let got = idx.search("retention retention zzz", &all, 10, &mut stats);
        assert_eq!(got.len(), 3);
        // "retention" once (deduplicated) and "zzz".
        assert_eq!(stats.terms_looked_up, 2);
        assert_eq!(stats.postings_read, 3);
        assert_eq!(stats.docs_scored, 3);
        idx.search("retention", &all, 10, &mut stats);
        assert_eq!(stats.terms_looked_up, 3, "stats accumulate");
    }

    #[test]
    fn ties_break_by_doc_ascending() {
        let mut idx = Bm25Index::new(Bm25Params::default());
        for id in [7, 3, 9, 1] {
            // Not increasing on purpose for 3 and 1: those are rejected.
            let _ = idx.add(id, "same words here");
        }
        idx.add(20, "same words here").unwrap();
        idx.add(30, "same words here").unwrap();
        let all: RoaringBitmap = (0..40).collect();
        let mut stats = LexicalStats::default();
        let got = idx.search("words", &all, 10, &mut stats);
        assert_eq!(
            got.iter().map(|d| d.doc).collect::<Vec<_>>(),
            [7, 9, 20, 30]
        );
        assert!(got.windows(2).all(|w| w[0].score == w[1].score));
        let top2 = idx.search("words", &all, 2, &mut stats);
        assert_eq!(top2.iter().map(|d| d.doc).collect::<Vec<_>>(), [7, 9]);
    }

    #[test]
    fn out_of_order_add_is_rejected_and_changes_nothing() {
        let mut idx = Bm25Index::new(Bm25Params::default());
        assert!(idx.is_empty());
        idx.add(5, "alpha beta").unwrap();
        let mut before = Vec::new();
        idx.write_to(&mut before);
        for bad in [5, 4, 0] {
            match idx.add(bad, "gamma") {
                Err(Bm25Error::DocOutOfOrder { last, got }) => {
                    assert_eq!((last, got), (5, bad));
                }
                other => panic!("expected DocOutOfOrder, got {other:?}"),
            }
        }
        let mut after = Vec::new();
        idx.write_to(&mut after);
        assert_eq!(before, after);
        assert_eq!(idx.len(), 1);
        idx.add(6, "gamma").unwrap();
        assert_eq!((idx.len(), idx.last_doc()), (2, Some(6)));
        let msg = Bm25Error::DocOutOfOrder { last: 5, got: 4 }.to_string();
        assert!(msg.contains('5') && msg.contains('4'), "{msg}");
    }

    #[test]
    fn empty_documents_count_but_contribute_nothing() {
        let mut with_empty = Bm25Index::new(Bm25Params::default());
        let mut without = Bm25Index::new(Bm25Params::default());
        with_empty.add(0, "alpha beta").unwrap();
        with_empty.add(1, "").unwrap();
        with_empty.add(2, "!!! ...").unwrap();
        with_empty.add(3, "beta gamma").unwrap();
        without.add(0, "alpha beta").unwrap();
        without.add(3, "beta gamma").unwrap();
        assert_eq!((with_empty.len(), without.len()), (4, 2));
        assert_eq!(with_empty.last_doc(), Some(3));
        let all: RoaringBitmap = (0..4).collect();
        let mut stats = LexicalStats::default();
        assert_eq!(
            with_empty.search("beta alpha", &all, 5, &mut stats),
            without.search("beta alpha", &all, 5, &mut stats)
        );
        // A trailing empty document round-trips too.
        with_empty.add(1000, "").unwrap();
        let mut bytes = Vec::new();
        with_empty.write_to(&mut bytes);
        let back = Bm25Index::read_from(&bytes).unwrap();
        assert_eq!((back.len(), back.last_doc()), (5, Some(1000)));
    }

    #[test]
    fn round_trip_preserves_results_and_bytes() {
        for seed in 0..20u64 {
            let mut rng = Rng(seed);
            let docs = corpus(&mut rng, 80);
            let idx = build(Bm25Params { k1: 1.5, b: 0.6 }, &docs);
            let mut bytes = Vec::new();
            idx.write_to(&mut bytes);
            let back = Bm25Index::read_from(&bytes).unwrap();
            assert_eq!(back.params(), idx.params());
            assert_eq!(
                (back.len(), back.last_doc(), back.term_count()),
                (idx.len(), idx.last_doc(), idx.term_count())
            );
            let mut again = Vec::new();
            back.write_to(&mut again);
            assert_eq!(again, bytes, "seed {seed}");
            // An independently built index (different hash-map order) encodes identically.
            let mut other = Vec::new();
            build(Bm25Params { k1: 1.5, b: 0.6 }, &docs).write_to(&mut other);
            assert_eq!(other, bytes, "seed {seed}");
            for _ in 0..10 {
                let e = eligible(&mut rng, &docs);
                let q = query(&mut rng);
                let (mut s1, mut s2) = (LexicalStats::default(), LexicalStats::default());
                assert_eq!(
                    idx.search(&q, &e, 7, &mut s1),
                    back.search(&q, &e, 7, &mut s2)
                );
                assert_eq!(s1, s2);
            }
            // The decoded index keeps accepting documents like the original.
            let (mut a, mut b) = (idx.clone(), back);
            let next = idx.last_doc().map_or(0, |d| d + 1);
            a.add(next, "memory graph memory").unwrap();
            b.add(next, "memory graph memory").unwrap();
            let (mut ba, mut bb) = (Vec::new(), Vec::new());
            a.write_to(&mut ba);
            b.write_to(&mut bb);
            assert_eq!(ba, bb);
        }
        let mut empty = Vec::new();
        Bm25Index::new(Bm25Params::default()).write_to(&mut empty);
        let back = Bm25Index::read_from(&empty).unwrap();
        assert!(back.is_empty() && back.last_doc().is_none());
    }

    #[test]
    fn every_truncation_is_rejected() {
        let idx = memory_corpus();
        let mut bytes = Vec::new();
        idx.write_to(&mut bytes);
        for cut in 0..bytes.len() {
            match Bm25Index::read_from(&bytes[..cut]) {
                Err(Bm25Error::Format { offset, .. }) => assert!(offset <= cut),
                other => panic!("cut {cut}: expected a format error, got {other:?}"),
            }
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(matches!(
            Bm25Index::read_from(&longer),
            Err(Bm25Error::Format {
                reason: "trailing bytes",
                ..
            })
        ));
    }

    #[test]
    fn every_single_bit_flip_is_rejected_or_canonical() {
        let idx = memory_corpus();
        let mut bytes = Vec::new();
        idx.write_to(&mut bytes);
        let mut accepted = 0;
        for i in 0..bytes.len() {
            for bit in 0..8 {
                let mut bad = bytes.clone();
                bad[i] ^= 1 << bit;
                if let Ok(back) = Bm25Index::read_from(&bad) {
                    accepted += 1;
                    let mut again = Vec::new();
                    back.write_to(&mut again);
                    assert_eq!(again, bad, "byte {i} bit {bit}");
                }
            }
        }
        // Only flips that leave a consistent index (e.g. in k1/b) pass.
        assert!(
            accepted < bytes.len(),
            "{accepted} of {} flips accepted",
            bytes.len() * 8
        );
    }

    #[test]
    fn large_postings_survive_round_trip_and_bit_flips() {
        // "common" is in every document: a bitmap container (> 4096 docs).
        let mut idx = Bm25Index::new(Bm25Params::default());
        for d in 0..6000u32 {
            let text = if d % 5 == 0 {
                "common common rare"
            } else {
                "common"
            };
            idx.add(d * 2, text).unwrap();
        }
        let mut bytes = Vec::new();
        idx.write_to(&mut bytes);
        let back = Bm25Index::read_from(&bytes).unwrap();
        let mut again = Vec::new();
        back.write_to(&mut again);
        assert_eq!(again, bytes);
        let mut rng = Rng(42);
        for _ in 0..300 {
            let mut bad = bytes.clone();
            let i = rng.below(bad.len() as u64) as usize;
            bad[i] ^= 1 << rng.below(8);
            if let Ok(back) = Bm25Index::read_from(&bad) {
                let mut again = Vec::new();
                back.write_to(&mut again);
                assert_eq!(again, bad, "byte {i}");
            }
            let cut = rng.below(bytes.len() as u64) as usize;
            assert!(Bm25Index::read_from(&bytes[..cut]).is_err());
        }
        // The same postings encoded with a run container are valid roaring
        // but not what write_to emits: rejected.
        let mut tiny = Bm25Index::new(Bm25Params::default());
        for d in 0..50u32 {
            tiny.add(d, "x").unwrap();
        }
        let mut tb = Vec::new();
        tiny.write_to(&mut tb);
        let mut plain = Vec::new();
        tiny.postings[0].docs.serialize_into(&mut plain).unwrap();
        let mut runs = tiny.postings[0].docs.clone();
        runs.optimize();
        assert!(runs.statistics().n_run_containers > 0);
        let mut with_runs = Vec::new();
        runs.serialize_into(&mut with_runs).unwrap();
        let at = tb.windows(plain.len()).position(|w| w == plain).unwrap();
        // The byte before the bitmap is its (one-byte varint) length.
        assert_eq!(usize::from(tb[at - 1]), plain.len());
        let mut forged = tb[..at - 1].to_vec();
        forged.push(u8::try_from(with_runs.len()).unwrap());
        forged.extend_from_slice(&with_runs);
        forged.extend_from_slice(&tb[at + plain.len()..]);
        assert!(matches!(
            Bm25Index::read_from(&forged),
            Err(Bm25Error::Format {
                reason: "non-canonical postings bitmap",
                ..
            })
        ));
    }

    #[test]
    fn header_errors_are_typed() {
        let mut bytes = Vec::new();
        memory_corpus().write_to(&mut bytes);
        let mut bad = bytes.clone();
        bad[0] = b'X';
        assert!(matches!(
            Bm25Index::read_from(&bad),
            Err(Bm25Error::Format {
                offset: 0,
                reason: "bad magic"
            })
        ));
        let mut bad = bytes.clone();
        bad[8..12].copy_from_slice(&(FORMAT_VERSION + 1).to_le_bytes());
        assert!(matches!(
            Bm25Index::read_from(&bad),
            Err(Bm25Error::VersionMismatch { found, expected }) if found == FORMAT_VERSION + 1 && expected == FORMAT_VERSION
        ));
        let mut bad = bytes.clone();
        bad[12..16].copy_from_slice(&(TERMS_VERSION + 7).to_le_bytes());
        assert!(matches!(
            Bm25Index::read_from(&bad),
            Err(Bm25Error::TokenizerVersionMismatch { found, .. }) if found == TERMS_VERSION + 7
        ));
        let mut bad = bytes.clone();
        bad[16..20].copy_from_slice(&f32::NAN.to_bits().to_le_bytes());
        assert!(matches!(
            Bm25Index::read_from(&bad),
            Err(Bm25Error::Format { offset: 16, .. })
        ));
        let e = Bm25Index::read_from(&bytes[..3]).unwrap_err();
        assert!(e.to_string().contains("malformed"), "{e}");
    }

    #[test]
    fn tf_lookup_handles_repeated_terms() {
        let mut idx = Bm25Index::new(Bm25Params::default());
        idx.add(1, "a b").unwrap();
        idx.add(2, "a a a b").unwrap();
        idx.add(3, "a").unwrap();
        idx.add(4, "b b a a").unwrap();
        let p = &idx.postings[idx.vocab["a"] as usize];
        let tfs = |docs: &[u32]| {
            let mut c = TfCursor::new(p);
            docs.iter().map(|&d| c.tf(d)).collect::<Vec<u32>>()
        };
        assert_eq!(tfs(&[1, 2, 3, 4]), [1, 3, 1, 2]);
        assert_eq!(tfs(&[2, 4]), [3, 2]);
        assert_eq!(tfs(&[3]), [1]);
        assert_eq!(tfs(&[4]), [2]);
        for (s, x, want) in [
            (&[][..], 5, 0),
            (&[1, 3, 5][..], 0, 0),
            (&[1, 3, 5][..], 3, 1),
            (&[1, 3, 5][..], 4, 2),
            (&[1, 3, 5][..], 9, 3),
        ] {
            assert_eq!(gallop(s, x), want, "{s:?} {x}");
        }
        // past the elements counted linearly, and at their edge
        for len in [15usize, 16, 17, 40, 300] {
            let s: Vec<u32> = (0..len as u32).map(|i| 3 * i + 1).collect();
            for x in 0..3 * len as u32 + 3 {
                let want = s.partition_point(|&v| v < x);
                assert_eq!(gallop(&s, x), want, "len {len}, x {x}");
            }
        }
    }

    #[test]
    fn scan_and_intersection_paths_agree() {
        let mut idx = Bm25Index::new(Bm25Params::default());
        for d in 0..5000u32 {
            let text = if d % 7 == 0 {
                "rare common"
            } else {
                "common filler"
            };
            idx.add(d, text).unwrap();
        }
        let p = &idx.postings[idx.vocab["rare"] as usize];
        let e: RoaringBitmap = (0..5000).filter(|d| d % 3 == 0).collect();
        let (mut scan, mut inter, mut all) = (Vec::new(), Vec::new(), Vec::new());
        let read_scan = p.eligible_docs(&e, u64::MAX, false, &mut scan);
        let read_inter = p.eligible_docs(&e, 0, false, &mut inter);
        assert_eq!(scan, inter);
        assert_eq!(
            scan,
            (0..5000).filter(|d| d % 21 == 0).collect::<Vec<u32>>()
        );
        assert_eq!(read_scan, p.docs.len());
        assert_eq!(read_inter, inter.len() as u64);
        let read_all = p.eligible_docs(&e, 0, true, &mut all);
        assert_eq!(all, (0..5000).filter(|d| d % 7 == 0).collect::<Vec<u32>>());
        assert_eq!(read_all, all.len() as u64);
    }

    #[test]
    fn heap_bytes_grows_with_content() {
        let mut idx = Bm25Index::new(Bm25Params::default());
        let empty = idx.heap_bytes();
        for d in 0..1000u32 {
            idx.add(d, &format!("memory record {d} about topic{}", d % 17))
                .unwrap();
        }
        let full = idx.heap_bytes();
        assert!(full > empty + 1000 * 4, "{empty} -> {full}");
        assert!(full < 1 << 22, "{full}");
    }

    #[test]
    #[should_panic(expected = "invalid BM25 parameters")]
    fn invalid_params_panic_in_new() {
        let _ = Bm25Index::new(Bm25Params { k1: -1.0, b: 0.5 });
    }
}
