//! Micro-benchmarks of the two indexes on their own, with no store around
//! them: `hnsw_search_filtered` (the graph walk with the eligibility test
//! inside it, beside the exact scan of the eligible slots, with recall
//! against brute force) and `bm25_topk` (top-10 over the eligible
//! documents).
//!
//! Data is synthetic and deterministic: vectors from a Gaussian mixture on
//! the unit sphere (64 centres, 128 dimensions, each cluster spread along 24
//! directions of its own), documents of 40 words
//! drawn from a Zipf-like vocabulary of 20,000 words. Each selectivity is a
//! random subset of that share of the slots or documents.
//!
//! Run: `cargo bench -p engram-engine --bench index_micro` (env
//! `ENGRAM_BENCH_VECTORS`, default 20000; `ENGRAM_BENCH_DOCS`, default
//! 100000). Prints one line per case: microseconds per query (median of 5
//! rounds) and, for vectors, recall@10 and distance computations per
//! query. Figures and the command: docs/benchmarks.md.

use std::time::Instant;

use engram_engine::lexical::{Bm25Index, Bm25Params, LexicalStats};
use engram_engine::vector::distance::Metric;
use engram_engine::vector::hnsw::{FlatVectors, Hnsw, HnswParams, SearchScratch, SearchStats};
use roaring::RoaringBitmap;

/// SplitMix64: a small deterministic generator.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Standard normal (Box-Muller).
    fn normal(&mut self) -> f32 {
        let u1 = self.unit().max(f64::MIN_POSITIVE);
        let u2 = self.unit();
        ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

fn normalize(v: &mut [f32]) {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
    v.iter_mut().for_each(|x| *x /= n);
}

/// `n` unit vectors around 64 random centres, each cluster spread along 24
/// random directions of its own (plus a little isotropic noise), so that,
/// like text embeddings, the data has a low intrinsic dimension: isotropic
/// noise in all 128 dimensions makes every point nearly equidistant from
/// its cluster, which no real embedding model produces.
fn mixture(rng: &mut Rng, n: usize, dim: usize) -> Vec<f32> {
    let unit = |rng: &mut Rng| {
        let mut c: Vec<f32> = (0..dim).map(|_| rng.normal()).collect();
        normalize(&mut c);
        c
    };
    let clusters: Vec<(Vec<f32>, Vec<Vec<f32>>)> = (0..64)
        .map(|_| (unit(rng), (0..24).map(|_| unit(rng)).collect()))
        .collect();
    let mut out = Vec::with_capacity(n * dim);
    for _ in 0..n {
        let (c, dirs) = &clusters[rng.below(clusters.len())];
        let mut v: Vec<f32> = c.iter().map(|x| x + 0.03 * rng.normal()).collect();
        for d in dirs {
            let a = 0.2 * rng.normal();
            v.iter_mut().zip(d).for_each(|(x, y)| *x += a * y);
        }
        normalize(&mut v);
        out.extend_from_slice(&v);
    }
    out
}

/// A random subset holding `share` of `0..n` (at least one).
fn subset(rng: &mut Rng, n: usize, share: f64) -> RoaringBitmap {
    let mut b = RoaringBitmap::new();
    for i in 0..n {
        if rng.unit() < share {
            b.insert(i as u32);
        }
    }
    if b.is_empty() {
        b.insert(0);
    }
    b
}

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Median of 5 rounds of `f` over `queries` queries, in µs per query.
fn time_per_query(queries: usize, mut f: impl FnMut(usize)) -> f64 {
    let mut rounds: Vec<f64> = (0..5)
        .map(|_| {
            let t = Instant::now();
            for q in 0..queries {
                f(q);
            }
            t.elapsed().as_secs_f64() * 1e6 / queries as f64
        })
        .collect();
    rounds.sort_by(f64::total_cmp);
    rounds[2]
}

fn hnsw_search_filtered() {
    let n = env("ENGRAM_BENCH_VECTORS", 20_000);
    let dim = 128;
    let k = 10;
    let mut rng = Rng(7);
    // queries come from the same clusters as the data (held out)
    let mut data = mixture(&mut rng, n + 200, dim);
    let queries = data.split_off(n * dim);
    let vectors = FlatVectors { data: &data, dim };
    let t = Instant::now();
    let mut g = Hnsw::new(HnswParams::default(), Metric::Dot);
    for s in 0..n as u32 {
        g.insert(s, &vectors).expect("insert");
    }
    println!(
        "hnsw_search_filtered: {n} vectors, {dim} dims, M 16, ef_construction 200, built in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    println!(
        "{:<24} {:>9} {:>6} {:>10} {:>9} {:>12}",
        "case", "eligible", "ef", "us/query", "recall@10", "distances/q"
    );
    let q = |i: usize| &queries[i * dim..(i + 1) * dim];
    let mut scratch = SearchScratch::new();
    for share in [1.0, 0.1, 0.01] {
        let eligible = subset(&mut rng, n, share);
        // ground truth: exact scan of the eligible slots
        let truth: Vec<Vec<u32>> = (0..200)
            .map(|i| {
                let mut st = SearchStats::default();
                g.exact_search(q(i), k, &vectors, eligible.iter(), &mut st)
                    .iter()
                    .map(|h| h.slot)
                    .collect()
            })
            .collect();
        let filter = |s: u32| eligible.contains(s);
        for ef in [32, 64, 128] {
            let mut stats = SearchStats::default();
            let mut found = 0usize;
            let us = time_per_query(200, |i| {
                let hits = g.search(
                    q(i),
                    k,
                    ef,
                    &vectors,
                    Some(&filter),
                    &mut scratch,
                    &mut stats,
                );
                found += hits.iter().filter(|h| truth[i].contains(&h.slot)).count();
            });
            let runs = 5 * 200;
            println!(
                "{:<24} {:>9} {:>6} {:>10.1} {:>9.3} {:>12.0}",
                format!("graph, {}%", share * 100.0),
                eligible.len(),
                ef,
                us,
                found as f64 / (runs * k) as f64,
                stats.distance_computations as f64 / runs as f64
            );
        }
        let mut stats = SearchStats::default();
        let us = time_per_query(200, |i| {
            std::hint::black_box(g.exact_search(q(i), k, &vectors, eligible.iter(), &mut stats));
        });
        println!(
            "{:<24} {:>9} {:>6} {:>10.1} {:>9.3} {:>12.0}",
            format!("exact scan, {}%", share * 100.0),
            eligible.len(),
            "-",
            us,
            1.0,
            stats.distance_computations as f64 / 1000.0
        );
    }
}

fn bm25_topk() {
    let n = env("ENGRAM_BENCH_DOCS", 100_000);
    let vocab: Vec<String> = (0..20_000).map(|i| format!("w{i:x}q")).collect();
    let mut rng = Rng(11);
    // Zipf-like: word rank r drawn with probability ~ 1/r
    let zipf = |rng: &mut Rng| -> usize {
        let u = rng.unit();
        ((vocab.len() as f64).powf(u) as usize).saturating_sub(1)
    };
    let t = Instant::now();
    let mut idx = Bm25Index::new(Bm25Params::default());
    let mut text = String::new();
    for d in 0..n as u32 {
        text.clear();
        for _ in 0..40 {
            text.push_str(&vocab[zipf(&mut rng)]);
            text.push(' ');
        }
        idx.add(d, &text).expect("add");
    }
    println!(
        "\nbm25_topk: {n} documents of 40 words, vocabulary {}, built in {:.1} s",
        vocab.len(),
        t.elapsed().as_secs_f64()
    );
    println!(
        "{:<24} {:>9} {:>10} {:>14}",
        "case", "eligible", "us/query", "postings/q"
    );
    // queries: three words from the middle of the distribution
    let queries: Vec<String> = (0..200)
        .map(|_| {
            (0..3)
                .map(|_| vocab[10 + rng.below(2_000)].clone())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    for share in [1.0, 0.1, 0.01] {
        let eligible = subset(&mut rng, n, share);
        let mut stats = LexicalStats::default();
        let us = time_per_query(queries.len(), |i| {
            std::hint::black_box(idx.search(&queries[i], &eligible, 10, &mut stats));
        });
        println!(
            "{:<24} {:>9} {:>10.1} {:>14.0}",
            format!("top-10, {}%", share * 100.0),
            eligible.len(),
            us,
            stats.postings_read as f64 / (5 * queries.len()) as f64
        );
    }
}

fn main() {
    hnsw_search_filtered();
    bm25_topk();
}
