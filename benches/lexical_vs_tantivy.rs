//! BM25 top-10, side by side in one run: Engram's lexical index (with and
//! without pruning by score bounds) vs tantivy, on the same texts and
//! queries, with and without an eligibility filter.
//!
//! Corpus: the texts of a dataset directory laid out like
//! `../shared/data/pypi-minilm-20k` (`base.jsonl` and `queries.jsonl`, one
//! `{"text": ...}` object per line; filters as `filter_<name>_ids.npy`, the
//! eligible row numbers). `ENGRAM_LEXICAL_SCALE=S` (default 1) adds S - 1
//! variants of every text (its words shuffled, each dropped with
//! probability 1/5, one word of another text added; same filter membership
//! as the original), for a larger corpus of the same vocabulary.
//!
//! Each engine answers every query with its top 10 ids, one query at a
//! time on one thread, timed from the query string (tokenizing included)
//! to the ids; best of 3 rounds. Tantivy indexes the text with its
//! `en_stem` tokenizer and frequencies (no positions: BM25 needs none),
//! one segment; a filter is a `Must` clause on a tag term with a constant
//! score of 0, the way a tantivy user filters. Engram's scores use the
//! statistics of the eligible documents only (docs/retrieval.md), tantivy's
//! those of the whole index, so top-10 lists can differ under a filter;
//! the overlap is printed.
//!
//! Run: `cargo bench --bench lexical_vs_tantivy` (env
//! `ENGRAM_LEXICAL_DATASET`, default `../shared/data/pypi-minilm-20k`; skips
//! when it is absent). Results and the command are in docs/benchmarks.md.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Instant;

use engram_engine::lexical::{Bm25Index, Bm25Params, LexicalStats};
use roaring::RoaringBitmap;
use tantivy::collector::TopDocs;
use tantivy::query::{BooleanQuery, ConstScoreQuery, Occur, Query, TermQuery};
use tantivy::schema::{FAST, IndexRecordOption, STRING, Schema, TextFieldIndexing, TextOptions};
use tantivy::{Index, IndexWriter, Term, doc};

const K: usize = 10;
const ROUNDS: usize = 3;
const FILTERS: [&str; 3] = ["tenant_10pct", "tenants_1pct", "sel_0p1pct"];

/// splitmix64, for the variants.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn texts(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("a JSON object per line");
            v["text"].as_str().unwrap_or_default().to_string()
        })
        .collect()
}

fn variant(rng: &mut Rng, base: &[String], j: usize) -> String {
    let mut words: Vec<&str> = base[j].split_whitespace().collect();
    for i in (1..words.len()).rev() {
        words.swap(i, rng.below(i + 1));
    }
    let mut kept: Vec<&str> = words.into_iter().filter(|_| rng.below(5) != 0).collect();
    let other: Vec<&str> = base[rng.below(base.len())].split_whitespace().collect();
    if !other.is_empty() {
        kept.push(other[rng.below(other.len())]);
    }
    kept.join(" ")
}

/// Queries/s of `f` over all queries, best of [`ROUNDS`], and its answers.
fn timed(queries: &[String], mut f: impl FnMut(&str) -> Vec<u32>) -> (f64, Vec<Vec<u32>>) {
    let mut best = 0.0f64;
    let mut answers = Vec::new();
    for _ in 0..ROUNDS {
        let started = Instant::now();
        answers = queries.iter().map(|q| f(q)).collect();
        best = best.max(queries.len() as f64 / started.elapsed().as_secs_f64());
    }
    (best, answers)
}

fn overlap(a: &[Vec<u32>], b: &[Vec<u32>]) -> f64 {
    let (mut num, mut den) = (0usize, 0usize);
    for (x, y) in a.iter().zip(b) {
        let y: HashSet<u32> = y.iter().copied().collect();
        num += x.iter().filter(|d| y.contains(d)).count();
        den += x.len().max(y.len());
    }
    if den == 0 {
        1.0
    } else {
        num as f64 / den as f64
    }
}

fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .filter_map(|e| e.metadata().ok())
                .filter(|m| m.is_file())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

fn main() {
    let dataset = PathBuf::from(
        std::env::var("ENGRAM_LEXICAL_DATASET")
            .unwrap_or_else(|_| "../shared/data/pypi-minilm-20k".into()),
    );
    if !dataset.join("base.jsonl").exists() {
        println!(
            "lexical_vs_tantivy: skipped: no dataset at {} (set ENGRAM_LEXICAL_DATASET)",
            dataset.display()
        );
        return;
    }
    let scale: usize = std::env::var("ENGRAM_LEXICAL_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
        .max(1);
    let base = texts(&dataset.join("base.jsonl"));
    let queries = texts(&dataset.join("queries.jsonl"));
    let mut rng = Rng(7);
    let mut corpus: Vec<String> = base.clone();
    for _ in 1..scale {
        for j in 0..base.len() {
            corpus.push(variant(&mut rng, &base, j));
        }
    }
    let n = corpus.len() as u32;
    let row_of = |doc: u32| doc as usize % base.len();
    // filters: eligible rows of the original texts, and their variants
    let mut filters: Vec<(String, RoaringBitmap)> = vec![("all".into(), (0..n).collect())];
    for name in FILTERS {
        let p = dataset.join(format!("filter_{name}_ids.npy"));
        if !p.exists() {
            continue;
        }
        let ids = engram_server::bench_ann::read_npy::<i32>(&p).expect("filter ids");
        let rows: HashSet<usize> = ids.data.iter().map(|&i| i as usize).collect();
        let e: RoaringBitmap = (0..n).filter(|&d| rows.contains(&row_of(d))).collect();
        filters.push((name.to_string(), e));
    }
    println!(
        "corpus: {} texts ({} x {scale}), {} queries, top {K}, one thread, best of {ROUNDS}",
        corpus.len(),
        base.len(),
        queries.len()
    );

    // Engram
    let t = Instant::now();
    let mut engram = Bm25Index::new(Bm25Params::default());
    for (d, text) in corpus.iter().enumerate() {
        engram.add(d as u32, text).expect("ascending ids");
    }
    let engram_build = t.elapsed().as_secs_f64();
    let mut bytes = Vec::new();
    engram.write_to(&mut bytes);

    // tantivy
    let tdir = tempfile::tempdir().expect("temp dir");
    let mut sb = Schema::builder();
    let text_opts = TextOptions::default().set_indexing_options(
        TextFieldIndexing::default()
            .set_tokenizer("en_stem")
            .set_index_option(IndexRecordOption::WithFreqs),
    );
    let text_f = sb.add_text_field("text", text_opts);
    let id_f = sb.add_u64_field("id", FAST);
    let tag_f = sb.add_text_field("tag", STRING);
    let schema = sb.build();
    let t = Instant::now();
    let index = Index::create_in_dir(tdir.path(), schema).expect("tantivy index");
    {
        let mut w: IndexWriter = index
            .writer_with_num_threads(1, 1_000_000_000)
            .expect("tantivy writer");
        for (d, text) in corpus.iter().enumerate() {
            let mut doc = doc!(text_f => text.as_str(), id_f => d as u64);
            for (name, e) in &filters[1..] {
                if e.contains(d as u32) {
                    doc.add_text(tag_f, name);
                }
            }
            w.add_document(doc).expect("add");
        }
        w.commit().expect("commit");
        let ids = index.searchable_segment_ids().expect("segments");
        if ids.len() > 1 {
            w.merge(&ids).wait().expect("merge");
        }
        w.wait_merging_threads().expect("merge threads");
    }
    let tantivy_build = t.elapsed().as_secs_f64();
    let reader = index.reader().expect("reader");
    reader.reload().expect("reload");
    let searcher = reader.searcher();
    let seg = &searcher.segment_readers()[0];
    assert_eq!(searcher.segment_readers().len(), 1, "one segment");
    let ids_col = seg.fast_fields().u64("id").expect("id column");
    let mut analyzer = index.tokenizer_for_field(text_f).expect("analyzer");
    println!(
        "build: Engram {engram_build:.2} s, {} KiB encoded; tantivy {tantivy_build:.2} s, {} KiB on disk (text index with frequencies, the id column and the tags)",
        bytes.len() / 1024,
        dir_bytes(tdir.path()) / 1024
    );
    println!(
        "{:<14} {:>8} {:>12} {:>12} {:>12} {:>7} {:>9} {:>14} {:>14}",
        "filter",
        "eligible",
        "engram q/s",
        "exhaustive",
        "tantivy q/s",
        "ratio",
        "overlap",
        "postings/q",
        "scored/q"
    );
    for (name, e) in &filters {
        let mut pruned_stats = LexicalStats::default();
        let (eq, ea) = timed(&queries, |q| {
            engram
                .search(q, e, K, &mut pruned_stats)
                .iter()
                .map(|h| h.doc)
                .collect()
        });
        let mut full_stats = LexicalStats::default();
        let (xq, xa) = timed(&queries, |q| {
            engram
                .search_exhaustive(q, e, K, &mut full_stats)
                .iter()
                .map(|h| h.doc)
                .collect()
        });
        assert_eq!(ea, xa, "pruning changed a top {K}");
        let tag = (name != "all").then(|| Term::from_field_text(tag_f, name));
        let (tq, ta) = timed(&queries, |q| {
            let mut terms = Vec::new();
            let mut stream = analyzer.token_stream(q);
            while stream.advance() {
                terms.push(Term::from_field_text(text_f, &stream.token().text));
            }
            if terms.is_empty() {
                return Vec::new();
            }
            let text_q: Box<dyn Query> = Box::new(BooleanQuery::new_multiterms_query(terms));
            let query: Box<dyn Query> = match &tag {
                None => text_q,
                Some(t) => Box::new(BooleanQuery::new(vec![
                    (Occur::Must, text_q),
                    (
                        Occur::Must,
                        Box::new(ConstScoreQuery::new(
                            Box::new(TermQuery::new(t.clone(), IndexRecordOption::Basic)),
                            0.0,
                        )),
                    ),
                ])),
            };
            let top = searcher
                .search(&query, &TopDocs::with_limit(K).order_by_score())
                .expect("search");
            top.iter()
                .map(|(_, a)| ids_col.first(a.doc_id).unwrap_or(u64::MAX) as u32)
                .collect()
        });
        let per_q = |s: u64| s as f64 / (queries.len() * ROUNDS) as f64;
        println!(
            "{:<14} {:>8} {:>12.0} {:>12.0} {:>12.0} {:>6.2}x {:>9.3} {:>6.0} / {:<6.0} {:>6.0} / {:<6.0}",
            name,
            e.len(),
            eq,
            xq,
            tq,
            eq / tq,
            overlap(&ea, &ta),
            per_q(pruned_stats.postings_read),
            per_q(full_stats.postings_read),
            per_q(pruned_stats.docs_scored),
            per_q(full_stats.docs_scored),
        );
    }
}
