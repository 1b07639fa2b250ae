//! `engram bench ann`: vector search recall and queries/s on a dataset of
//! real embeddings, through the same `recall` code path users call.
//!
//! Dataset directory layout (NumPy `.npy`, format 1.0, little-endian, C
//! order): `base.npy` float32 [n, d], `queries.npy` float32 [q, d],
//! `gt.npy` int32 [q, >=10] (exact neighbours by inner product); optional
//! `attrs.npy` int64 [n, 3] (tenant, timestamp, deleted), `filters.json`
//! and `gt_<filter>.npy` for filtered ground truth (-1 pads), `base.jsonl`
//! texts (`{"id", "text"}` per line).
//!
//! How the dataset maps onto a store: row `i` is an event with external id
//! `row-<i>`, its vector under model `dataset`, `scope.user =
//! "tenant-<tenant>"`, `occurred_at = timestamp`. Phase 1 measures the
//! unfiltered ground truth with every row live. Phase 2 deletes the rows
//! marked deleted (lifecycle deletes, so the deletion bitmap does the work)
//! and measures each filter: its tenants become a `user` filter, its
//! `ts_min` an `occurred_after` filter.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::Args;
use engram_engine::retrieval::{Filters, Mode, RecallRequest};
use engram_engine::vector::hnsw::HnswParams;
use engram_engine::{
    Engram, GraphPrecision, NewRecord, Options, PlanChoice, Principal, RecordId, RecordRef, Scope,
    Session,
};
use serde::Serialize;

use crate::bench::fail;
use crate::cli::{CliError, CliResult, Ctx};

mod dataset;
use dataset::dataset_files;
pub(crate) use dataset::read_texts;

/// `engram bench ann`.
#[derive(Args, Debug)]
pub struct AnnArgs {
    /// Dataset directory: `base.npy`, `queries.npy`, `gt.npy`, optional
    /// `attrs.npy`, `filters.json` and `gt_<filter>.npy` (docs/benchmarks.md;
    /// made by `benches/make_ann_dataset.py`).
    #[arg(long)]
    pub dataset: PathBuf,
    /// HNSW M (2 to 256).
    #[arg(long, default_value_t = 16)]
    pub m: usize,
    /// HNSW ef_construction.
    #[arg(long, default_value_t = 200)]
    pub ef_construction: usize,
    /// ef_search values to measure.
    #[arg(long, value_delimiter = ',', default_value = "16,32,64,128,256")]
    pub ef: Vec<usize>,
    /// Query threads (QPS is then the aggregate; 1 = one query at a time).
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Use only the first N queries.
    #[arg(long)]
    pub queries: Option<usize>,
    /// Passes over the queries per configuration (at most 1000); the fastest is reported
    /// (a shared machine's noise only ever slows a pass down).
    #[arg(long, default_value_t = 1)]
    pub rounds: usize,
    /// Skip the filtered ground truths.
    #[arg(long)]
    pub no_filters: bool,
    /// Measure only these ground truths (`none` = unfiltered; default: all).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// What each hit carries, measured in turn: `full` (text read from the
    /// log, as a recall returns by default) and/or `ids` (`with_text:
    /// false`: ids, scores and the manifest, as the peers' ids).
    #[arg(long, value_delimiter = ',', default_value = "full")]
    pub hits: Vec<HitsMode>,
    /// What the graph walk reads: `auto` (the store's choice per space),
    /// `f32` (full-precision vectors) or `int8` (codes, re-ranked in full
    /// precision). The graph is the same, so a kept store serves all three.
    #[arg(long, default_value = "auto")]
    pub graph: GraphPrecision,
    /// The vector plan: `auto` (the planner's choice by estimated cost),
    /// or `exact`, `prefiltered` or `walk` forced, to measure the plans
    /// against each other on the same store (the report names the plan
    /// each filter ran as the manifest does: `exact`, `prefiltered`, or
    /// `hnsw` for a walk).
    #[arg(long, default_value = "auto")]
    pub plan: PlanChoice,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
    /// Keep the store in this directory and reuse it on the next run over
    /// the same dataset and graph parameters (skips ingest and the graph
    /// build). A reused store whose dataset deletions were applied cannot
    /// measure the unfiltered ground truth (`none`), which is then skipped.
    #[arg(long)]
    pub store: Option<PathBuf>,
}

/// What each hit of a measured recall carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HitsMode {
    /// Text read from the log (a recall's default).
    Full,
    /// No text: ids, scores and the manifest only (`with_text: false`).
    Ids,
}

/// What `--store` remembers about the store it keeps.
#[derive(Debug, Serialize, serde::Deserialize, PartialEq)]
struct Kept {
    dataset: String,
    /// Length and modification time of the dataset's `base.npy` and
    /// `attrs.npy` (see [`dataset_files`]): a dataset written again in
    /// place, same shape, is another dataset.
    #[serde(default)]
    files: String,
    n: usize,
    dim: usize,
    m: usize,
    ef_construction: usize,
    deleted_applied: bool,
}

const KEPT_FILE: &str = "bench-ann.json";
const KEPT_IDS: &str = "bench-ann.ids";

/// A dense array from an .npy file.
#[derive(Debug)]
pub struct Npy<T> {
    /// Shape.
    pub shape: Vec<usize>,
    /// Data, row-major.
    pub data: Vec<T>,
}

/// Element types we read.
pub trait NpyElem: Sized + Copy {
    /// The dtype descriptor.
    const DESCR: &'static str;
    /// From little-endian bytes.
    fn from_le(b: &[u8]) -> Self;
}
impl NpyElem for f32 {
    const DESCR: &'static str = "<f4";
    fn from_le(b: &[u8]) -> Self {
        f32::from_le_bytes(b.try_into().expect("4 bytes"))
    }
}
impl NpyElem for i32 {
    const DESCR: &'static str = "<i4";
    fn from_le(b: &[u8]) -> Self {
        i32::from_le_bytes(b.try_into().expect("4 bytes"))
    }
}
impl NpyElem for i64 {
    const DESCR: &'static str = "<i8";
    fn from_le(b: &[u8]) -> Self {
        i64::from_le_bytes(b.try_into().expect("8 bytes"))
    }
}

/// Reads an .npy file (format 1.0 or 2.0, little-endian, C order).
pub fn read_npy<T: NpyElem>(path: &Path) -> Result<Npy<T>, CliError> {
    let bytes =
        std::fs::read(path).map_err(|e| CliError::Message(format!("{}: {e}", path.display())))?;
    let bad = |why: &str| {
        CliError::Message(format!(
            "{}: not a supported .npy file: {why}",
            path.display()
        ))
    };
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err(bad("bad magic"));
    }
    let (hlen, hstart) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 => (
            u32::from_le_bytes(bytes[8..12].try_into().map_err(|_| bad("short header"))?) as usize,
            12,
        ),
        _ => return Err(bad("unknown version")),
    };
    let header = std::str::from_utf8(
        bytes
            .get(hstart..hstart + hlen)
            .ok_or_else(|| bad("short header"))?,
    )
    .map_err(|_| bad("header is not text"))?;
    if !header.contains(&format!("'descr': '{}'", T::DESCR)) {
        return Err(bad(&format!(
            "expected dtype {}, header is {header}",
            T::DESCR
        )));
    }
    if header.contains("'fortran_order': True") {
        return Err(bad("Fortran order"));
    }
    let shape_src = header
        .split("'shape':")
        .nth(1)
        .and_then(|s| s.split('(').nth(1))
        .and_then(|s| s.split(')').next())
        .ok_or_else(|| bad("no shape"))?;
    let shape: Vec<usize> = shape_src
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().map_err(|_| bad("bad shape")))
        .collect::<Result<_, _>>()?;
    let size = std::mem::size_of::<T>();
    let n_bytes = shape
        .iter()
        .try_fold(size, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| bad("shape too large"))?;
    let body = &bytes[hstart + hlen..];
    if body.len() != n_bytes {
        return Err(bad("data length does not match the shape"));
    }
    let data = body.chunks_exact(size).map(T::from_le).collect();
    Ok(Npy { shape, data })
}

/// Measurements for one ef.
#[derive(Debug, Serialize, Clone)]
pub struct EfResult {
    /// ef_search.
    pub ef: usize,
    /// What each hit carried.
    pub hits: HitsMode,
    /// Mean recall@10 against the ground truth.
    pub recall_at_10: f64,
    /// Queries per second.
    pub qps: f64,
    /// Median latency, microseconds.
    pub latency_us_p50: f64,
    /// The planner's choice (most frequent).
    pub plan: String,
    /// Mean time in eligibility / vector retrieval / fusion and result
    /// assembly, from the manifests, microseconds.
    pub mean_us: (f64, f64, f64),
    /// Mean distance computations per query (graph walk and exact scans).
    pub distances_per_query: f64,
}

/// One ground truth's measurements.
#[derive(Debug, Serialize, Clone)]
pub struct FilterResult {
    /// `none` or the filter name.
    pub filter: String,
    /// Eligible rows.
    pub eligible: usize,
    /// Per ef.
    pub results: Vec<EfResult>,
}

/// The whole report.
#[derive(Debug, Serialize)]
pub struct AnnReport {
    /// Dataset directory.
    pub dataset: String,
    /// Base vectors.
    pub n: usize,
    /// Dimensions.
    pub dim: usize,
    /// Queries measured.
    pub queries: usize,
    /// HNSW M.
    pub m: usize,
    /// HNSW ef_construction.
    pub ef_construction: usize,
    /// Query threads.
    pub threads: usize,
    /// Seconds to ingest (durable appends of 1000 rows each).
    pub ingest_seconds: f64,
    /// Seconds from the first append until the graph held every vector.
    pub build_seconds: f64,
    /// Graph bytes per vector (excluding the vectors).
    pub index_bytes_per_vector: f64,
    /// Per ground truth.
    pub filters: Vec<FilterResult>,
    /// Memory per vector once every query ran.
    pub memory: Option<VectorMemory>,
}

/// Bytes per vector of the dataset's space, after the queries.
#[derive(Debug, Serialize)]
pub struct VectorMemory {
    /// What the graph walk read: `int8` or `f32`.
    pub graph_reads: String,
    /// The graph's lists.
    pub graph: f64,
    /// Int8 codes held in memory (by slot and gathered scans).
    pub codes: f64,
    /// Full-precision rows of the vector file resident in this process
    /// (the `Rss` of its mappings in `/proc/self/smaps`; None off Linux).
    /// Clean file pages: the kernel may drop them and read them again.
    pub f32_file_resident: Option<f64>,
    /// The full-precision rows, if all were resident (`4 * dim`).
    pub f32_rows: f64,
}

/// Resident bytes of every mapping of a file named `vectors.f32`, from
/// `/proc/self/smaps` (None where it cannot be read).
fn vector_file_rss() -> Option<u64> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let (mut total, mut inside) = (0u64, false);
    for line in smaps.lines() {
        let is_header = line
            .split_whitespace()
            .next()
            .is_some_and(|w| w.contains('-') && !w.ends_with(':'));
        if is_header {
            inside = line.ends_with("vectors.f32");
        } else if inside && let Some(kb) = line.strip_prefix("Rss:") {
            total += kb
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()?
                * 1024;
        }
    }
    Some(total)
}

/// Query threads at most (as `engram bench recall` and `bench ingest`).
const THREADS_MAX: usize = 256;
/// `--rounds` at most (a thousand passes over the queries is past any use).
const ROUNDS_MAX: usize = 1000;
/// `--m` at most: a graph's node keeps up to `2 m` neighbours, and past a
/// few hundred the graph is larger than the vectors it indexes.
const M_MAX: usize = 256;

/// Checks a ground-truth file against the dataset: 2-d, a row for every
/// measured query, at least 10 columns (recall@10), and every id a base
/// row or -1 (no neighbour).
fn check_gt(name: &str, gt: &Npy<i32>, n: usize, n_queries: usize) -> Result<(), CliError> {
    if gt.shape.len() != 2 || gt.shape[0] < n_queries || gt.shape[1] < 10 {
        return Err(CliError::Message(format!(
            "{name} must be 2-d with a row per query ({n_queries}) and at least 10 columns; it is {:?}",
            gt.shape
        )));
    }
    if let Some(bad) = gt.data.iter().find(|&&g| g < -1 || g as i64 >= n as i64) {
        return Err(CliError::Message(format!(
            "{name} names row {bad}, outside the {n} base rows (ids are 0..{n}, or -1 for none)"
        )));
    }
    Ok(())
}

fn recall_at_10(found: &[RecordId], gt_row: &[i32], ids: &[RecordId]) -> f64 {
    let truth: Vec<RecordId> = gt_row
        .iter()
        .take(10)
        .filter(|&&g| g >= 0)
        .map(|&g| ids[g as usize])
        .collect();
    // A query nothing is eligible for: right only when it finds nothing
    // (a hit there is a record the filter should have kept out)
    if truth.is_empty() {
        return if found.is_empty() { 1.0 } else { 0.0 };
    }
    let hit = found.iter().take(10).filter(|f| truth.contains(f)).count();
    hit as f64 / truth.len() as f64
}

#[allow(clippy::too_many_arguments)]
fn measure(
    session: &Session,
    queries: &Npy<f32>,
    n_queries: usize,
    gt: &Npy<i32>,
    ids: &[RecordId],
    filters: &Filters,
    ef: usize,
    threads: usize,
    hits: HitsMode,
) -> Result<EfResult, CliError> {
    let dim = queries.shape[1];
    let gt_w = gt.shape[1];
    // Requests are built before the clock starts, as the peers' query
    // matrices and eligible-id lists are (the recall still computes or
    // finds eligibility from the filter every time).
    let req_for = |qi: usize| RecallRequest {
        vector: Some(queries.data[qi * dim..(qi + 1) * dim].into()),
        model: Some("dataset".into()),
        mode: Mode::Vector,
        k: 10,
        ef: Some(ef),
        filters: filters.clone(),
        with_text: hits == HitsMode::Full,
        ..RecallRequest::default()
    };
    let reqs: Vec<RecallRequest> = (0..n_queries).map(req_for).collect();
    // warm-up
    for req in reqs.iter().take(20) {
        session.recall(req).map_err(CliError::from)?;
    }
    let started = Instant::now();
    type Row = (
        usize,
        Vec<RecordId>,
        f64,
        &'static str,
        (u64, u64, u64),
        u64,
    );
    let per_thread: Vec<Result<Vec<Row>, String>> = std::thread::scope(|sc| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let reqs = &reqs;
                sc.spawn(move || {
                    // (room for every row first: growing the list while
                    // timing would count its copies as query time)
                    let mut out = Vec::with_capacity(n_queries.div_ceil(threads));
                    let mut qi = t;
                    while qi < n_queries {
                        let t0 = Instant::now();
                        let r = session.recall(&reqs[qi]).map_err(|e| e.to_string())?;
                        let lat = t0.elapsed().as_secs_f64() * 1e6;
                        let plan = r
                            .manifest
                            .vector_plan
                            .as_ref()
                            .map(|p| p.strategy)
                            .unwrap_or_default();
                        let t = &r.manifest.timings;
                        out.push((
                            qi,
                            r.hits.iter().map(|h| h.id).collect(),
                            lat,
                            plan,
                            (t.eligibility_us, t.vector_us, t.fusion_us),
                            r.manifest.cost.distance_computations,
                        ));
                        qi += threads;
                    }
                    Ok(out)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("query thread panicked".into()))
            })
            .collect()
    });
    let secs = started.elapsed().as_secs_f64();
    let mut recall = 0.0;
    let mut lat = Vec::with_capacity(n_queries);
    let mut plans: HashMap<String, usize> = HashMap::new();
    let mut parts = (0u64, 0u64, 0u64);
    let mut distances = 0u64;
    for r in per_thread {
        for (qi, found, l, plan, t, dists) in r.map_err(CliError::Message)? {
            distances += dists;
            parts.0 += t.0;
            parts.1 += t.1;
            parts.2 += t.2;
            recall += recall_at_10(&found, &gt.data[qi * gt_w..(qi + 1) * gt_w], ids);
            lat.push(l);
            *plans.entry(plan.to_string()).or_default() += 1;
        }
    }
    lat.sort_by(f64::total_cmp);
    Ok(EfResult {
        ef,
        hits,
        recall_at_10: recall / n_queries as f64,
        qps: n_queries as f64 / secs,
        latency_us_p50: lat[lat.len() / 2],
        plan: plans
            .into_iter()
            .max_by_key(|(_, c)| *c)
            .map(|(p, _)| p)
            .unwrap_or_default(),
        mean_us: (
            parts.0 as f64 / n_queries as f64,
            parts.1 as f64 / n_queries as f64,
            parts.2 as f64 / n_queries as f64,
        ),
        distances_per_query: distances as f64 / n_queries as f64,
    })
}

/// Runs the benchmark.
pub fn run(ctx: &Ctx, a: AnnArgs) -> CliResult {
    let d = &a.dataset;
    // each flag named on its own
    for (bad, what) in [
        (a.rounds == 0, "--rounds must be at least 1"),
        (a.threads == 0, "--threads must be at least 1"),
        (a.queries == Some(0), "--queries must be at least 1"),
        (
            a.ef.is_empty() || a.ef.contains(&0),
            "--ef values must be at least 1",
        ),
        (
            a.ef.iter()
                .any(|&e| e > engram_engine::model::limits::EF_MAX),
            "--ef values must be at most 10000 (a recall's largest ef)",
        ),
        (a.rounds > ROUNDS_MAX, "--rounds must be at most 1000"),
        (!(2..=M_MAX).contains(&a.m), "--m must be between 2 and 256"),
        (
            a.ef_construction == 0 || a.ef_construction > engram_engine::model::limits::EF_MAX,
            "--ef-construction must be between 1 and 10000",
        ),
    ] {
        if bad {
            return Err(CliError::Message(what.into()));
        }
    }
    if a.threads > THREADS_MAX {
        return Err(CliError::Message(format!(
            "--threads must be between 1 and {THREADS_MAX}"
        )));
    }
    // Build times on stderr (they are in the --json report too); progress
    // is drawn separately, and only on a terminal.
    let log = |s: String| match (ctx.quiet, a.json) {
        (true, _) => {}
        (false, false) => crate::eoutln!("{s}"),
        (false, true) => crate::eoutln!("bench ann: {s}"),
    };
    let base = read_npy::<f32>(&d.join("base.npy"))?;
    let queries = read_npy::<f32>(&d.join("queries.npy"))?;
    let gt = read_npy::<i32>(&d.join("gt.npy"))?;
    if base.shape.len() != 2 || queries.shape.len() != 2 || base.shape[1] != queries.shape[1] {
        return Err(CliError::Message(
            "base.npy and queries.npy must be 2-d with the same width".into(),
        ));
    }
    let (n, dim) = (base.shape[0], base.shape[1]);
    // a NaN or an infinity is named before anything is built (the engine
    // would refuse its row, or the query, only after the ingest)
    for (name, m) in [("base.npy", &base), ("queries.npy", &queries)] {
        if let Some(at) = m.data.iter().position(|x| !x.is_finite()) {
            return Err(CliError::Message(format!(
                "{name} row {}, component {}: {} is not a finite number",
                at / dim.max(1),
                at % dim.max(1),
                m.data[at]
            )));
        }
        // and so is a row the engine refuses whole (all zeros, too many
        // dimensions), by its file and row
        for (row, v) in m.data.chunks(dim.max(1)).enumerate() {
            engram_engine::model::check_query_vector("vector", v)
                .map_err(|e| CliError::Message(format!("{name} row {row}: {e}")))?;
        }
    }
    // fewer ground-truth rows than queries: a truncated or mismatched file
    // (measuring the first rows only would be silent about it)
    if let Some(q) = a.queries.filter(|&q| q > queries.shape[0]) {
        log(format!(
            "note: --queries {q}: queries.npy holds {}; measuring all of them",
            queries.shape[0]
        ));
    }
    let asked = a.queries.unwrap_or(queries.shape[0]).min(queries.shape[0]);
    if gt.shape.first().is_some_and(|&rows| rows < asked) {
        return Err(CliError::Message(format!(
            "gt.npy has {} row(s) for {asked} quer(ies): give --queries {} to measure only the queries it covers",
            gt.shape[0], gt.shape[0]
        )));
    }
    let n_queries = a
        .queries
        .unwrap_or(queries.shape[0])
        .min(queries.shape[0])
        .min(gt.shape[0]);
    if n == 0 || n_queries == 0 {
        return Err(CliError::Message(format!(
            "the dataset has {n} base row(s) and {n_queries} query row(s) with ground truth: nothing to measure"
        )));
    }
    check_gt("gt.npy", &gt, n, n_queries)?;
    let attrs = dataset::attributes_and_filters(d, n, (&a.only, a.no_filters))?;
    // texts, when the dataset has them: one line per base row, each read
    // whole (a damaged line, or a file of another length, is named rather
    // than measured as rows without text)
    let texts: Vec<String> = if d.join("base.jsonl").exists() {
        let texts = read_texts(&d.join("base.jsonl"))?;
        if texts.len() != n {
            return Err(CliError::Message(format!(
                "base.jsonl has {} text line(s) for {n} base row(s): one per row, in order",
                texts.len()
            )));
        }
        texts
    } else {
        Vec::new()
    };
    let temp;
    let (store_dir, mut kept) = match &a.store {
        Some(p) => {
            crate::bench::check_bench_dir("--store", p)?;
            std::fs::create_dir_all(p)
                .map_err(|e| fail(format!("--store {}: {e}", p.display())))?;
            let want = Kept {
                dataset: d.display().to_string(),
                files: dataset_files(d),
                n,
                dim,
                m: a.m,
                ef_construction: a.ef_construction,
                deleted_applied: false,
            };
            let kept = std::fs::read_to_string(p.join(KEPT_FILE))
                .ok()
                .and_then(|t| serde_json::from_str::<Kept>(&t).ok())
                .filter(|k| {
                    (&k.dataset, &k.files) == (&want.dataset, &want.files)
                        && (k.n, k.dim, k.m, k.ef_construction)
                            == (want.n, want.dim, want.m, want.ef_construction)
                });
            if kept.is_none() && p.read_dir()?.next().is_some() {
                let why = if p.join(KEPT_FILE).exists() {
                    "it was kept by a run over another dataset, a dataset since written \
                     again, or other parameters"
                } else if p.join("ENGRAM").exists() {
                    "it holds a store but no record of a finished run of this bench (a \
                     store of yours, or one a run interrupted while building left)"
                } else {
                    "it is no store kept by `engram bench ann`"
                };
                return Err(CliError::Message(format!(
                    "--store {}: not empty, and not reusable: {why}; give another \
                     directory (or remove this one if a bench made it)",
                    p.display()
                )));
            }
            (p.clone(), Some(kept.unwrap_or(want)))
        }
        None => {
            temp = crate::bench::bench_tempdir()?;
            (temp.path().to_path_buf(), None)
        }
    };
    let opts = Options {
        hnsw: HnswParams {
            m: a.m,
            ef_construction: a.ef_construction,
            ..HnswParams::default()
        },
        graph_precision: a.graph,
        vector_plan: a.plan,
        ..Options::default()
    };
    let db = Engram::open(&store_dir, opts)?;
    let s = db.session(Principal::admin("bench"));
    let started = Instant::now();
    let mut ids: Vec<RecordId> = Vec::with_capacity(n);
    let reused = store_dir.join(KEPT_FILE).exists();
    let (ingest_seconds, build_seconds) = if reused {
        log(format!("reusing the store kept in {}", store_dir.display()));
        let raw = std::fs::read(store_dir.join(KEPT_IDS))?;
        if raw.len() != n * 16 {
            return Err(CliError::Message(format!(
                "--store {}: {KEPT_IDS} does not list {n} record ids",
                store_dir.display()
            )));
        }
        ids.extend(
            raw.chunks_exact(16)
                .map(|c| RecordId::from_bytes(c.try_into().expect("chunks of 16 bytes"))),
        );
        db.wait_indexed()?;
        (0.0, 0.0)
    } else {
        let bar = ctx.counter("bench ann", n as u64, "vectors");
        bar.set_message(format!("ingesting vectors of {dim} dims"));
        for start in (0..n).step_by(1000) {
            let end = (start + 1000).min(n);
            let batch: Vec<NewRecord> = (start..end)
                .map(|i| {
                    let (user, ts) = match &attrs {
                        Some(at) => (
                            format!("tenant-{}", at.data[i * 3]),
                            Some(at.data[i * 3 + 1] * 1000),
                        ),
                        None => ("tenant-0".to_string(), None),
                    };
                    let mut r = NewRecord::event(
                        "document",
                        texts.get(i).cloned().unwrap_or_else(|| format!("row {i}")),
                    )
                    .with_external_id(format!("row-{i}"))
                    .with_scope(Scope {
                        user: Some(user),
                        ..Scope::default()
                    })
                    .with_embedding("dataset", base.data[i * dim..(i + 1) * dim].to_vec());
                    r.occurred_at = ts;
                    r
                })
                .collect();
            // an error about one record names its row of the dataset
            let stored = s.append(batch).map_err(|e| match e.item() {
                Some(i) => CliError::Message(format!(
                    "dataset row {} (base.npy, base.jsonl, attrs.npy): {}",
                    start + i,
                    e.with_item(None)
                )),
                None => CliError::from(e),
            })?;
            ids.extend(stored.into_iter().map(|r| r.id));
            bar.set_position(end as u64);
        }
        bar.finish();
        let ingest_seconds = started.elapsed().as_secs_f64();
        log(format!("ingested in {ingest_seconds:.1}s"));
        let spinner = ctx.spinner("bench ann");
        spinner.set_message("waiting for the graph");
        let indexed = db.wait_indexed();
        spinner.finish();
        indexed?;
        let build_seconds = started.elapsed().as_secs_f64();
        if let Some(k) = &kept {
            let raw: Vec<u8> = ids.iter().flat_map(|id| id.to_bytes()).collect();
            std::fs::write(store_dir.join(KEPT_IDS), raw)?;
            std::fs::write(store_dir.join(KEPT_FILE), serde_json::to_vec(k)?)?;
        }
        (ingest_seconds, build_seconds)
    };
    let stats = db.stats()?;
    let graph_bytes = stats
        .vector_spaces
        .iter()
        .find(|v| v.model == "dataset")
        .map(|v| v.graph_bytes)
        .unwrap_or(0);
    let per_vector = graph_bytes as f64 / n as f64;
    log(if reused {
        format!("graph read from the kept store ({per_vector:.0} bytes/vector)")
    } else {
        format!("graph built in {build_seconds:.1}s ({per_vector:.0} bytes/vector)")
    });
    let mut report = AnnReport {
        dataset: d.display().to_string(),
        n,
        dim,
        queries: n_queries,
        m: a.m,
        ef_construction: a.ef_construction,
        threads: a.threads,
        ingest_seconds,
        build_seconds,
        index_bytes_per_vector: graph_bytes as f64 / n as f64,
        filters: Vec::new(),
        memory: None,
    };
    let run_gt = |name: &str,
                  gt: &Npy<i32>,
                  filters: &Filters,
                  eligible: usize,
                  report: &mut AnnReport|
     -> Result<(), CliError> {
        let mut fr = FilterResult {
            filter: name.to_string(),
            eligible,
            results: Vec::new(),
        };
        for (&ef, &hits) in
            a.ef.iter()
                .flat_map(|ef| a.hits.iter().map(move |h| (ef, h)))
        {
            let spinner = ctx.spinner("bench ann");
            spinner.set_message(format!(
                "{name}: {n_queries} queries at ef {ef} ({hits:?} hits), {} round(s)",
                a.rounds
            ));
            let run = || {
                measure(
                    &s, &queries, n_queries, gt, &ids, filters, ef, a.threads, hits,
                )
            };
            let mut r = run()?;
            for _ in 1..a.rounds {
                let again = run()?;
                if again.qps > r.qps {
                    r = again;
                }
            }
            spinner.finish();
            if !a.json {
                crate::outln!(
                    "{:<14} eligible {:>6}  ef {:>4}{}  recall@10 {:.4}  {:>8.0} q/s  p50 {:>6.0} us  plan {:<5}  {:>6.0} dist/q  (eligibility {:.0} us, vector {:.0} us, fusion {:.0} us)",
                    name,
                    eligible,
                    ef,
                    if hits == HitsMode::Ids { " ids" } else { "" },
                    r.recall_at_10,
                    r.qps,
                    r.latency_us_p50,
                    r.plan,
                    r.distances_per_query,
                    r.mean_us.0,
                    r.mean_us.1,
                    r.mean_us.2
                );
            }
            fr.results.push(r);
        }
        report.filters.push(fr);
        Ok(())
    };
    let wanted = |name: &str| a.only.is_empty() || a.only.iter().any(|o| o == name);
    let deleted_applied = kept.as_ref().is_some_and(|k| k.deleted_applied);
    // why each configuration asked for was not measured (the error when
    // nothing was: with -q the notices are not printed)
    let mut skipped: Vec<String> = Vec::new();
    if deleted_applied && wanted("none") {
        let why = "the kept store has the dataset's deletions applied: skipping `none`";
        log(why.into());
        skipped.push(why.into());
    }
    if wanted("none") && !deleted_applied {
        run_gt("none", &gt, &Filters::default(), n, &mut report)?;
    }
    let filtered_wanted = a.only.is_empty() || a.only.iter().any(|o| o != "none");
    if a.no_filters {
        skipped.push("--no-filters: no filtered ground truth".into());
    } else if filtered_wanted && (attrs.is_none() || !d.join("filters.json").exists()) {
        skipped
            .push("the dataset has no attrs.npy and filters.json: no filtered ground truth".into());
    }
    if !a.no_filters && filtered_wanted {
        if let (Some(at), Ok(fjson)) = (&attrs, std::fs::read_to_string(d.join("filters.json"))) {
            let defs: serde_json::Value = serde_json::from_str(&fjson)
                .map_err(|e| CliError::Message(format!("filters.json: {e}")))?;
            // Phase 2: delete the rows marked deleted.
            let deleted: Vec<usize> = if deleted_applied {
                Vec::new()
            } else {
                (0..n).filter(|&i| at.data[i * 3 + 2] != 0).collect()
            };
            let bar = ctx.counter("bench ann", deleted.len() as u64, "rows");
            bar.set_message("deleting the rows marked deleted");
            for &i in &deleted {
                s.delete(
                    &RecordRef::Id(ids[i]),
                    Some("bench: dataset row marked deleted"),
                )?;
                bar.inc(1);
            }
            bar.finish();
            if let Some(k) = kept.as_mut() {
                k.deleted_applied = true;
                std::fs::write(store_dir.join(KEPT_FILE), serde_json::to_vec(k)?)?;
            }
            let mut names: Vec<(&String, &serde_json::Value)> = defs
                .as_object()
                .map(|o| o.iter().collect())
                .unwrap_or_default();
            names.sort_by_key(|(k, _)| k.as_str());
            if let Some(unknown) = a
                .only
                .iter()
                .find(|o| *o != "none" && !names.iter().any(|(k, _)| k == o))
            {
                return Err(CliError::Message(format!(
                    "--only: no ground truth named '{unknown}' (available: none, {})",
                    names
                        .iter()
                        .map(|(k, _)| k.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
            for (name, def) in names {
                if !wanted(name) {
                    continue;
                }
                let gt_path = d.join(format!("gt_{name}.npy"));
                if !gt_path.exists() {
                    skipped.push(format!("filter '{name}': no gt_{name}.npy"));
                    continue;
                }
                let fgt = read_npy::<i32>(&gt_path)?;
                check_gt(&format!("gt_{name}.npy"), &fgt, n, n_queries)?;
                let mut f = Filters::default();
                if let Some(ts) = def.get("tenants").and_then(|t| t.as_array()) {
                    f.users = ts
                        .iter()
                        .filter_map(|t| t.as_i64())
                        .map(|t| format!("tenant-{t}"))
                        .collect();
                }
                if let Some(ts) = def.get("ts_min").and_then(|t| t.as_i64()) {
                    f.occurred_after = Some(ts * 1000);
                }
                // counted from the rows (`n_eligible` of filters.json is
                // only a description, and may be absent)
                let tenants: Vec<i64> = def
                    .get("tenants")
                    .and_then(|t| t.as_array())
                    .map(|t| t.iter().filter_map(|x| x.as_i64()).collect())
                    .unwrap_or_default();
                let ts_min = def.get("ts_min").and_then(|t| t.as_i64());
                let eligible = (0..n)
                    .filter(|&i| {
                        let (tenant, ts, deleted) =
                            (at.data[i * 3], at.data[i * 3 + 1], at.data[i * 3 + 2]);
                        deleted == 0
                            && (tenants.is_empty() || tenants.contains(&tenant))
                            && ts_min.is_none_or(|m| ts >= m)
                    })
                    .count();
                run_gt(name, &fgt, &f, eligible, &mut report)?;
            }
        }
    }
    if let Some(sp) = db
        .stats()?
        .vector_spaces
        .iter()
        .find(|v| v.model == "dataset")
    {
        let per = |b: f64| b / sp.vectors.max(1) as f64;
        let m = VectorMemory {
            graph_reads: sp.graph_reads.to_string(),
            graph: per(sp.graph_bytes as f64),
            codes: per(sp.code_bytes as f64),
            f32_file_resident: vector_file_rss().map(|b| per(b as f64)),
            f32_rows: (4 * sp.dim) as f64,
        };
        report.memory = Some(m);
    }
    crate::cli::close_store(&db);
    // what was not measured is said (the first, the kept store's `none`,
    // was said as it was skipped)
    if !report.filters.is_empty() {
        for why in skipped
            .iter()
            .skip(usize::from(deleted_applied && wanted("none")))
        {
            log(format!("skipped: {why}"));
        }
    }
    if report.filters.is_empty() {
        // every configuration asked for was skipped: nothing was measured
        // (and nothing is printed on stdout, as for any refused command)
        return Err(CliError::Message(format!(
            "nothing measured: every configuration asked for was skipped ({})",
            if skipped.is_empty() {
                "none was asked for".to_string()
            } else {
                skipped.join("; ")
            }
        )));
    }
    if a.json {
        crate::outln!("{}", serde_json::to_string_pretty(&report)?);
    } else if let Some(m) = &report.memory {
        crate::outln!(
            "memory per vector: graph {:.0} B, int8 codes {:.0} B, f32 rows resident {} (of {:.0} B); the walk read {}",
            m.graph,
            m.codes,
            m.f32_file_resident
                .map_or_else(|| "unknown".to_string(), |b| format!("{b:.0} B")),
            m.f32_rows,
            m.graph_reads
        );
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn npy(shape: &str, body: &[u8]) -> Vec<u8> {
        let header = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({shape}), }}\n");
        let mut b = b"\x93NUMPY\x01\x00".to_vec();
        b.extend_from_slice(&(header.len() as u16).to_le_bytes());
        b.extend_from_slice(header.as_bytes());
        b.extend_from_slice(body);
        b
    }

    #[test]
    fn a_shape_past_the_address_space_is_refused_not_wrapped() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("v.npy");
        std::fs::write(&p, npy("2, 2", &[0u8; 16])).unwrap();
        let ok = read_npy::<f32>(&p).unwrap();
        assert_eq!((ok.shape, ok.data.len()), (vec![2, 2], 4));
        // 2^32 x 2^32 x 4 bytes wraps to 0 in 64 bits: an empty body
        // matched it, and the rows were indexed later
        std::fs::write(&p, npy("4294967296, 4294967296", &[])).unwrap();
        let e = read_npy::<f32>(&p).unwrap_err().to_string();
        assert!(e.contains("shape too large"), "{e}");
    }
}
