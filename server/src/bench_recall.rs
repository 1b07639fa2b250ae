//! `engram bench recall`: tenant-filtered hybrid recall (vector + BM25 +
//! recency + graph) on a large, realistic store, in process, from one and
//! from two threads: latency percentiles, queries/s, and resident memory
//! per record.
//!
//! The store is generated once (the generator is described below, at
//! `record` and `Seed`) and kept in `--dir` for reruns. The measurement runs in a fresh child process that opens the
//! store read-only from its checkpoint, so the memory it reports is what a
//! serving process holds, not what the build left behind.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

use clap::Args;
use engram_engine::retrieval::{Mode, RecallRequest};
use engram_engine::{
    AssertionKind, Body, Engram, GraphPrecision, NewRecord, Options, Principal, RecordId,
    RecordRef, Scope,
};
use serde::{Deserialize, Serialize};

use crate::bench::{fail, has_vector, percentile, tenant_name};
use crate::bench_ann::{read_npy, read_texts};
use crate::bench_open::{dir_bytes, rss_mib};
use crate::cli::{CliError, CliResult, Ctx};

/// `engram bench recall`.
#[derive(Args, Debug)]
pub struct RecallBenchArgs {
    /// Records in the store (events, semantic records, entities, relations).
    #[arg(long, default_value_t = 1_000_000)]
    pub records: usize,
    /// Tenants, with Zipf-like sizes (tenant k holds a share proportional
    /// to (k+1)^-0.9; the largest holds about 9.5%).
    #[arg(long, default_value_t = 1_000)]
    pub tenants: usize,
    /// Share of events and semantic records carrying a vector (0 to 1).
    #[arg(long, default_value_t = 0.25)]
    pub vector_share: f64,
    /// Directory of real texts and vectors the generator starts from
    /// (`base.npy`, `base.jsonl`, `queries.npy`, `queries.jsonl`; default:
    /// `../shared/data/pypi-minilm-20k` when it exists). Without one, texts
    /// and vectors are synthetic (384 dimensions).
    #[arg(long, conflicts_with = "synthetic")]
    pub seed_data: Option<PathBuf>,
    /// Synthetic texts and vectors even when the seed data is present.
    #[arg(long)]
    pub synthetic: bool,
    /// Timed queries per thread configuration.
    #[arg(long, default_value_t = 2_000)]
    pub queries: usize,
    /// Thread counts to measure.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    pub threads: Vec<usize>,
    /// Directory of the benchmark store (default: a temporary directory,
    /// removed afterwards, or by the next bench when this one is
    /// interrupted). A store built earlier with the same parameters is
    /// reused.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// What graph walks read: `auto` (the store's choice per space),
    /// `f32` or `int8` (see `engram bench ann --graph`).
    #[arg(long, default_value = "auto")]
    pub graph: GraphPrecision,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
    /// Measure an already built store and print its figures as one JSON
    /// line, without building anything: DIR is the `store` directory inside
    /// a `--dir` an earlier run kept (give the same `--records`,
    /// `--tenants`, `--vector-share` and seed data it was built with). A
    /// run measures its store this way, in a fresh child process.
    #[arg(long, value_name = "DIR")]
    pub measure: Option<PathBuf>,
}

/// One thread configuration's figures.
#[derive(Debug, Serialize, Deserialize, Clone)]
pub struct RecallRun {
    /// Threads issuing queries.
    pub threads: usize,
    /// Queries timed.
    pub queries: usize,
    /// Queries per second over all threads.
    pub qps: f64,
    /// Latency percentiles, milliseconds.
    pub p50_ms: f64,
    /// 95th percentile.
    pub p95_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Slowest query.
    pub max_ms: f64,
}

/// What the measuring child reports.
#[derive(Debug, Serialize, Deserialize, Clone)]
pub struct Measured {
    /// Seconds to open from the checkpoint.
    pub open_s: f64,
    /// Resident memory right after open, MiB.
    pub rss_open_mib: f64,
    /// Resident memory after every query, MiB.
    pub rss_after_mib: f64,
    /// Thread configurations.
    pub runs: Vec<RecallRun>,
    /// Mean eligible records per query (its tenant, visible to its user).
    pub mean_eligible: f64,
    /// Share of queries to which each retriever contributed a candidate:
    /// vector, lexical, recency, graph.
    pub contributed: Vec<(String, f64)>,
    /// Threads of the run the per-query figures (eligible records,
    /// retrievers, stage times) come from: the first of `--threads`.
    pub stages_threads: usize,
    /// Mean stage times over that run, microseconds: eligibility, vector,
    /// lexical, other retrievers, fusion, total.
    pub stages_us: Vec<(String, f64)>,
    /// The 95th percentile of each stage's time over that run,
    /// microseconds (same stages).
    pub stages_p95_us: Vec<(String, f64)>,
    /// Queries that returned no hit.
    pub empty: usize,
}

/// The benchmark's result.
#[derive(Debug, Serialize)]
pub struct RecallBenchResult {
    /// Records in the store.
    pub records: usize,
    /// Tenants.
    pub tenants: usize,
    /// Records in the largest tenant.
    pub largest_tenant: usize,
    /// Records with a vector.
    pub vectors: usize,
    /// Records deleted before measuring.
    pub deleted: usize,
    /// Semantic records superseded by a correction.
    pub corrected: usize,
    /// Events carrying the access label `restricted` (the querying users
    /// do not hold it).
    pub restricted: usize,
    /// Where texts and vectors came from.
    pub seed: String,
    /// Bytes of the log.
    pub log_bytes: u64,
    /// Seconds to build (0 when reused).
    pub build_s: f64,
    /// Resident bytes per record after the queries.
    pub rss_bytes_per_record: f64,
    /// The measurement.
    pub measured: Measured,
}

/// Runs `engram bench recall`.
pub fn run(ctx: &Ctx, a: RecallBenchArgs) -> CliResult {
    if a.records == 0 || a.tenants == 0 || a.queries == 0 {
        return Err(fail(
            "--records, --tenants and --queries must be at least 1",
        ));
    }
    crate::bench::at_most("--records", a.records, crate::bench::BENCH_RECORDS_MAX)?;
    crate::bench::at_most("--queries", a.queries, 1_000_000)?;
    if a.threads.is_empty() || a.threads.iter().any(|&t| t == 0 || t > 256) {
        return Err(fail("--threads values must be between 1 and 256"));
    }
    if !(0.0..=1.0).contains(&a.vector_share) {
        return Err(fail("--vector-share must be between 0 and 1"));
    }
    if a.records < a.tenants.saturating_mul(ENTITIES * 2) {
        return Err(fail(format!(
            "--records must be at least {} for {} tenants (each starts with {ENTITIES} entities and their relations)",
            a.tenants.saturating_mul(ENTITIES * 2),
            a.tenants
        )));
    }
    let seed = if a.synthetic {
        Seed::synthetic()
    } else {
        Seed::load(a.seed_data.as_deref())?
    };
    let plan = Plan::new(&a);
    if let Some(dir) = &a.measure {
        let m = measure(dir, &a, &plan, &seed)?;
        crate::outln!(
            "{}",
            serde_json::to_string(&m).map_err(|e| fail(e.to_string()))?
        );
        return Ok(ExitCode::SUCCESS);
    }
    let kept = crate::bench::KeptStore::open(
        ctx,
        a.dir.as_deref(),
        "recall",
        format!(
            "records={} tenants={} vector_share={} seed={} generator={GENERATOR_VERSION}",
            a.records, a.tenants, a.vector_share, seed.name
        ),
    )?;
    let store = &kept.store;
    let built_path = kept.root.join("bench-recall.built");
    let (build_s, built) = if kept.reuse {
        let built: Built = std::fs::read_to_string(&built_path)
            .ok()
            .and_then(|s| serde_json::from_str(&s).ok())
            .ok_or_else(|| fail("bench-recall.built is missing or unreadable; remove --dir"))?;
        (0.0, built)
    } else {
        let t = Instant::now();
        let built = build(ctx, store, &plan, &seed)?;
        let build_s = t.elapsed().as_secs_f64();
        std::fs::write(
            &built_path,
            serde_json::to_string(&built).map_err(|e| fail(e.to_string()))?,
        )?;
        kept.mark_built()?;
        (build_s, built)
    };
    let spinner = ctx.spinner("bench recall");
    spinner.set_message("measuring in a fresh process");
    let measured = child(store, &a)?;
    spinner.finish();
    let result = RecallBenchResult {
        records: a.records,
        tenants: a.tenants,
        largest_tenant: plan.sizes[0],
        vectors: built.vectors,
        deleted: built.deleted,
        corrected: built.corrected,
        restricted: built.restricted,
        seed: seed.name.clone(),
        log_bytes: dir_bytes(&store.join("log")),
        build_s,
        rss_bytes_per_record: measured.rss_after_mib * 1048576.0 / a.records as f64,
        measured,
    };
    if a.json {
        crate::outln!(
            "{}",
            serde_json::to_string_pretty(&result).map_err(|e| fail(e.to_string()))?
        );
    } else {
        print_report(&result);
    }
    Ok(ExitCode::SUCCESS)
}

/// Bumped when the generator changes, so a kept store is rebuilt.
const GENERATOR_VERSION: u32 = 3;
/// Entities per tenant (a chain of `depends_on` relations joins them).
const ENTITIES: usize = 12;
const ENTITY_NAMES: [&str; ENTITIES] = [
    "checkout service",
    "billing api",
    "payments gateway",
    "search cluster",
    "auth service",
    "inventory db",
    "notification queue",
    "analytics pipeline",
    "support portal",
    "mobile app",
    "pricing engine",
    "shipping tracker",
];
const EVENT_KINDS: [&str; 4] = [
    "user_message",
    "agent_message",
    "tool_result",
    "observation",
];
/// Every `SEMANTIC_EVERY`-th record after the entities is a semantic record
/// (a fact drawn from the three events before it).
const SEMANTIC_EVERY: usize = 10;
/// One event in `DELETE_EVERY` is deleted after the build.
const DELETE_EVERY: usize = 100;
/// A semantic record whose index (`j / SEMANTIC_EVERY`) is a multiple of
/// `CORRECT_EVERY` corrects (supersedes) the last one of an earlier batch,
/// at most once per batch: the first of each batch of 1,000 records from
/// a tenant's third on (its first batch has no facts: their sources are
/// events of earlier batches), about one fact in a hundred.
const CORRECT_EVERY: usize = 50;
/// One event in `RESTRICTED_EVERY` carries the access label `restricted`
/// (the querying users do not hold it): those at index 5 mod 10, which is
/// never a semantic record's (0 mod 10). (Generator 2 labelled index 0 mod
/// 10, so only a tenant's first batch, before it had sources for facts,
/// had restricted events: at most 97 per tenant.)
const RESTRICTED_EVERY: usize = 10;
const BASE_TIME_MS: i64 = 1_700_000_000_000;

/// Record counts per tenant (Zipf-like, summing to `--records`).
struct Plan {
    sizes: Vec<usize>,
    vector_share: f64,
}

impl Plan {
    fn new(a: &RecallBenchArgs) -> Plan {
        let w: Vec<f64> = (0..a.tenants)
            .map(|k| ((k + 1) as f64).powf(-0.9))
            .collect();
        let total: f64 = w.iter().sum();
        let floor = ENTITIES * 2;
        let spare = a.records - floor * a.tenants;
        let mut sizes: Vec<usize> = w
            .iter()
            .map(|x| floor + (spare as f64 * x / total) as usize)
            .collect();
        // Rounding leftovers go to the largest tenants, one each.
        let mut left = a.records - sizes.iter().sum::<usize>();
        let mut k = 0;
        while left > 0 {
            sizes[k % a.tenants] += 1;
            left -= 1;
            k += 1;
        }
        Plan {
            sizes,
            vector_share: a.vector_share,
        }
    }
}

/// Real texts and vectors to start from, or none.
struct Seed {
    name: String,
    dim: usize,
    texts: Vec<String>,
    vectors: Vec<f32>,
    query_texts: Vec<String>,
    query_vectors: Vec<f32>,
    /// Words of the texts, most frequent first (for the filler text).
    vocab: Vec<String>,
}

impl Seed {
    fn load(dir: Option<&Path>) -> Result<Seed, CliError> {
        let default = Path::new("../shared/data/pypi-minilm-20k");
        let dir = match dir {
            Some(d) => Some(d.to_path_buf()),
            None if default.join("base.npy").exists() => Some(default.to_path_buf()),
            None => None,
        };
        let Some(dir) = dir else {
            return Ok(Seed::synthetic());
        };
        let base = read_npy::<f32>(&dir.join("base.npy"))?;
        let queries = read_npy::<f32>(&dir.join("queries.npy"))?;
        let texts = read_texts(&dir.join("base.jsonl"))?;
        let query_texts = read_texts(&dir.join("queries.jsonl"))?;
        if base.shape.len() != 2
            || queries.shape.len() != 2
            || base.shape[1] != queries.shape[1]
            || texts.len() != base.shape[0]
            || query_texts.len() != queries.shape[0]
            || texts.is_empty()
            || query_texts.is_empty()
        {
            return Err(fail(format!(
                "{}: base.npy/base.jsonl and queries.npy/queries.jsonl must have matching rows and widths",
                dir.display()
            )));
        }
        let mut counts: std::collections::HashMap<String, usize> = Default::default();
        for t in &texts {
            for w in t.split_whitespace() {
                let w: String = w
                    .chars()
                    .filter(|c| c.is_alphanumeric())
                    .collect::<String>()
                    .to_lowercase();
                if w.len() > 2 {
                    *counts.entry(w).or_default() += 1;
                }
            }
        }
        let mut vocab: Vec<(String, usize)> = counts.into_iter().collect();
        vocab.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        Ok(Seed {
            name: format!("real texts and vectors from {}", dir.display()),
            dim: base.shape[1],
            texts,
            vectors: base.data,
            query_texts,
            query_vectors: queries.data,
            vocab: vocab.into_iter().map(|(w, _)| w).collect(),
        })
    }

    fn synthetic() -> Seed {
        const DIM: usize = 384;
        const CENTERS: usize = 256;
        let mut rng = Rng(0x5EED);
        let unit = |rng: &mut Rng| {
            let mut v: Vec<f32> = (0..DIM).map(|_| rng.gauss()).collect();
            normalize(&mut v);
            v
        };
        let vectors: Vec<f32> = (0..CENTERS).flat_map(|_| unit(&mut rng)).collect();
        let query_vectors: Vec<f32> = (0..CENTERS).flat_map(|_| unit(&mut rng)).collect();
        let texts = (0..CENTERS)
            .map(|i| crate::bench::event_text(i as u64, 80))
            .collect();
        let query_texts = (0..CENTERS)
            .map(|i| crate::bench::event_text(1_000_000 + i as u64, 24))
            .collect();
        Seed {
            name: "synthetic (no seed data)".into(),
            dim: DIM,
            texts,
            vectors,
            query_texts,
            query_vectors,
            vocab: crate::bench::event_text(7, 4000)
                .split_whitespace()
                .map(|w| w.trim_end_matches('.').to_string())
                .collect(),
        }
    }

    fn rows(&self) -> usize {
        self.texts.len()
    }

    /// The vector of generated record `i`: the seed row's own for the first
    /// pass over the rows, then that row perturbed by Gaussian noise and
    /// renormalised (a Gaussian mixture on the unit sphere whose centres
    /// are the seed vectors; cosine to the centre about 0.85).
    fn vector(&self, i: usize) -> Vec<f32> {
        let row = i % self.rows();
        let c = &self.vectors[row * self.dim..(row + 1) * self.dim];
        if i < self.rows() {
            return c.to_vec();
        }
        let sigma = 0.62 / (self.dim as f32).sqrt();
        let mut rng = Rng(i as u64 ^ 0xA5A5_5A5A);
        let mut v: Vec<f32> = c.iter().map(|x| x + sigma * rng.gauss()).collect();
        normalize(&mut v);
        v
    }

    /// About 500 bytes: the seed row's text, then words drawn from its
    /// vocabulary with Zipf-like frequencies.
    fn text(&self, i: usize) -> String {
        let mut s = self.texts[i % self.rows()].clone();
        let mut rng = Rng(i as u64 ^ 0x7E57);
        let n = self.vocab.len().max(1);
        while s.len() < 500 {
            // Inverse-CDF draw for P(rank r) ~ 1/r over n words.
            let u = rng.unit();
            let r = ((n as f64).powf(u) - 1.0) as usize;
            s.push(' ');
            s.push_str(&self.vocab[r.min(n - 1)]);
        }
        s
    }

    fn query(&self, q: usize) -> (String, Vec<f32>) {
        let row = q % self.query_texts.len();
        let entity = ENTITY_NAMES[q % ENTITIES];
        (
            format!("{} {entity}", self.query_texts[row]),
            self.query_vectors[row * self.dim..(row + 1) * self.dim].to_vec(),
        )
    }
}

fn normalize(v: &mut [f32]) {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if n > 0.0 {
        v.iter_mut().for_each(|x| *x /= n);
    }
}

/// xorshift64* with a Box-Muller Gaussian.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0 | 1;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn gauss(&mut self) -> f32 {
        let u1 = self.unit().max(1e-12);
        let u2 = self.unit();
        ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32
    }
}

/// What the build did (kept beside the store for reruns).
#[derive(Debug, Serialize, Deserialize)]
struct Built {
    vectors: usize,
    deleted: usize,
    corrected: usize,
    restricted: usize,
}

/// A tenant's progress through the build.
struct TenantBuild {
    next: usize,
    /// Ids of its events so far (sources and deletions pick from these).
    events: Vec<RecordId>,
    last_semantic: Option<RecordId>,
}

/// Tenant `t`'s record `j`, the store's `seq`-th: it occurred one second
/// after the one before it (records arrive in time order, as an agent's
/// memory does).
fn record(
    t: usize,
    j: usize,
    seq: usize,
    tb: &mut TenantBuild,
    plan: &Plan,
    seed: &Seed,
    built: &mut Built,
) -> NewRecord {
    let g = t.wrapping_mul(1_000_003).wrapping_add(j);
    let at = BASE_TIME_MS + (seq as i64) * 1_000;
    if j < ENTITIES {
        return NewRecord {
            body: Body::Entity {
                entity_type: "service".into(),
                name: ENTITY_NAMES[j].into(),
                aliases: vec![],
            },
            kind: "entity".into(),
            external_id: Some(format!("svc/{j}")),
            occurred_at: Some(at),
            ..NewRecord::default()
        };
    }
    if j < 2 * ENTITIES {
        let a = j - ENTITIES;
        return NewRecord {
            body: Body::Relation {
                subject: RecordRef::External(format!("svc/{a}")),
                predicate: "depends_on".into(),
                object: RecordRef::External(format!("svc/{}", (a + 1) % ENTITIES)),
            },
            kind: "relation".into(),
            occurred_at: Some(at),
            ..NewRecord::default()
        };
    }
    let vector = has_vector(j, plan.vector_share);
    let mut r = if j.is_multiple_of(SEMANTIC_EVERY) && tb.events.len() >= 3 {
        let n = tb.events.len();
        let sources = tb.events[n - 3..]
            .iter()
            .map(|&id| RecordRef::Id(id))
            .collect();
        let statement = format!(
            "{} depends on {}: {}",
            ENTITY_NAMES[g % ENTITIES],
            ENTITY_NAMES[(g / ENTITIES) % ENTITIES],
            &seed.texts[g % seed.rows()]
        );
        let mut r = NewRecord::assertion(AssertionKind::Fact, statement, sources);
        // At most one correction per batch: the record it supersedes is
        // the last semantic record of an earlier batch.
        if (j / SEMANTIC_EVERY).is_multiple_of(CORRECT_EVERY)
            && let Some(prev) = tb.last_semantic.take()
        {
            r = r.superseding(RecordRef::Id(prev));
            built.corrected += 1;
        }
        r
    } else {
        let mut r =
            NewRecord::event(EVENT_KINDS[g % EVENT_KINDS.len()], seed.text(g)).with_scope(Scope {
                user: Some(format!("user_{}", j % 97)),
                conversation: Some(format!("conv_{}", j / 50)),
                ..Scope::default()
            });
        if j % RESTRICTED_EVERY == RESTRICTED_EVERY / 2 {
            r = r.with_access(&["restricted"]);
            built.restricted += 1;
        }
        r
    };
    r = r.at(at);
    if vector {
        r = r.with_embedding("minilm", seed.vector(g));
        built.vectors += 1;
    }
    r
}

/// Builds the store: batches of up to 1,000 records, round-robin over the
/// tenants, each tenant's admin appending its own; then one event in
/// [`DELETE_EVERY`] is deleted; then `close` indexes and checkpoints.
fn build(ctx: &Ctx, store: &Path, plan: &Plan, seed: &Seed) -> Result<Built, CliError> {
    let total: usize = plan.sizes.iter().sum();
    let progress = ctx.counter("bench recall", total as u64, "records");
    progress.set_message("building the store");
    let db = Engram::open(store, Options::default())?;
    let sessions: Vec<_> = (0..plan.sizes.len())
        .map(|t| db.session(Principal::admin(tenant_name(t))))
        .collect();
    let mut tenants: Vec<TenantBuild> = plan
        .sizes
        .iter()
        .map(|_| TenantBuild {
            next: 0,
            events: Vec::new(),
            last_semantic: None,
        })
        .collect();
    let mut built = Built {
        vectors: 0,
        deleted: 0,
        corrected: 0,
        restricted: 0,
    };
    let mut left = total;
    while left > 0 {
        for (t, s) in sessions.iter().enumerate() {
            let end = plan.sizes[t].min(tenants[t].next + 1_000);
            if tenants[t].next >= end {
                continue;
            }
            // A semantic record names its sources by id: the last three
            // events of earlier batches.
            let tb = &mut tenants[t];
            let start = tb.next;
            let mut semantic = Vec::with_capacity(end - start);
            let batch: Vec<NewRecord> = (start..end)
                .map(|j| {
                    let seq = total - left + (j - start);
                    let r = record(t, j, seq, tb, plan, seed, &mut built);
                    semantic.push(matches!(r.body, Body::Assertion { .. }));
                    r
                })
                .collect();
            let n = batch.len();
            let results = s.append(batch)?;
            for (res, &is_semantic) in results.iter().zip(&semantic) {
                if is_semantic {
                    tb.last_semantic = Some(res.id);
                } else if tb.next >= 2 * ENTITIES {
                    tb.events.push(res.id);
                }
                tb.next += 1;
            }
            left -= n;
            progress.inc(n as u64);
        }
    }
    progress.finish();
    let deletions: Vec<(usize, RecordId)> = tenants
        .iter()
        .enumerate()
        .flat_map(|(t, tb)| {
            tb.events
                .iter()
                .step_by(DELETE_EVERY)
                .map(move |&id| (t, id))
        })
        .collect();
    let progress = ctx.counter("bench recall", deletions.len() as u64, "deletions");
    progress.set_message("deleting one event in a hundred");
    for (t, id) in deletions {
        sessions[t].delete(&RecordRef::Id(id), Some("bench"))?;
        built.deleted += 1;
        progress.inc(1);
    }
    progress.finish();
    let spinner = ctx.spinner("bench recall");
    spinner.set_message("indexing vectors and writing the checkpoint (close)");
    let closed = db.close();
    spinner.finish();
    closed?;
    Ok(built)
}

fn child(store: &Path, a: &RecallBenchArgs) -> Result<Measured, CliError> {
    let exe = std::env::current_exe()?;
    let mut cmd = Command::new(exe);
    cmd.args(["bench", "recall", "--measure"])
        .arg(store)
        .args(["--records", &a.records.to_string()])
        .args(["--tenants", &a.tenants.to_string()])
        .args(["--vector-share", &a.vector_share.to_string()])
        .args(["--queries", &a.queries.to_string()])
        .args(["--graph", a.graph.name()]);
    let threads: Vec<String> = a.threads.iter().map(|t| t.to_string()).collect();
    cmd.args(["--threads", &threads.join(",")]);
    if let Some(s) = &a.seed_data {
        cmd.arg("--seed-data").arg(s);
    }
    if a.synthetic {
        cmd.arg("--synthetic");
    }
    crate::bench::child_json(&mut cmd)
}

/// Query `q`: a tenant drawn in proportion to its size (so large tenants
/// are queried most, as they would be), one of its users, a real query
/// text with an entity name appended (seeding the graph), the query's
/// vector.
fn request(q: usize, plan: &Plan, seed: &Seed, cumulative: &[usize]) -> (Principal, RecallRequest) {
    let total = *cumulative.last().unwrap_or(&1);
    let mut rng = Rng(q as u64 ^ 0x0051_E7E5);
    let pick = (rng.next() % total as u64) as usize;
    let t = cumulative.partition_point(|&c| c <= pick);
    let (text, vector) = seed.query(q);
    let principal = Principal::user(tenant_name(t), format!("user_{}", q % 97));
    let req = RecallRequest {
        text: Some(text),
        vector: (plan.vector_share > 0.0).then_some(vector.into()),
        mode: Mode::Hybrid,
        k: 10,
        ..RecallRequest::default()
    };
    (principal, req)
}

fn measure(
    store: &Path,
    a: &RecallBenchArgs,
    plan: &Plan,
    seed: &Seed,
) -> Result<Measured, CliError> {
    let opts = Options {
        read_only: true,
        create_if_missing: false,
        graph_precision: a.graph,
        ..Options::default()
    };
    let t = Instant::now();
    let db = Engram::open(store, opts)?;
    let open_s = t.elapsed().as_secs_f64();
    let rss_open_mib = rss_mib();
    let cumulative: Vec<usize> = plan
        .sizes
        .iter()
        .scan(0, |acc, &s| {
            *acc += s;
            Some(*acc)
        })
        .collect();
    // A client sends a query vector only where its principal has a vector
    // space: a small tenant may hold no vector at all (a vector sent there
    // is refused as an unknown model, and would end the run).
    let mut has_space = std::collections::HashMap::new();
    let reqs: Vec<(Principal, RecallRequest)> = (0..a.queries)
        .map(|q| {
            let (p, mut r) = request(q, plan, seed, &cumulative);
            let key = (p.tenant().to_string(), p.id().to_string());
            let spaces = *has_space
                .entry(key)
                .or_insert_with(|| !db.session(p.clone()).vector_models().is_empty());
            if !spaces {
                r.vector = None;
            }
            (p, r)
        })
        .collect();
    // Warm-up: a tenth of the queries (pages of the log, caches).
    for (p, r) in reqs.iter().take(a.queries / 10 + 1) {
        db.session(p.clone()).recall(r)?;
    }
    let mut runs = Vec::new();
    let mut stage_sums = [0f64; 6];
    let mut stage_all: [Vec<f64>; 6] = Default::default();
    let mut contributed = [0usize; 4];
    let mut eligible_sum = 0f64;
    let mut empty = 0usize;
    for &threads in &a.threads {
        // per-query figures from the first run, whatever its threads
        let first = runs.is_empty();
        let chunk = reqs.len().div_ceil(threads);
        let started = Instant::now();
        let per_thread: Vec<Result<Vec<Timed>, CliError>> = std::thread::scope(|s| {
            let handles: Vec<_> = reqs
                .chunks(chunk)
                .map(|part| {
                    let db = &db;
                    s.spawn(move || {
                        part.iter()
                            .map(|(p, r)| {
                                let session = db.session(p.clone());
                                let t = Instant::now();
                                let resp = session.recall(r)?;
                                let ms = t.elapsed().as_secs_f64() * 1e3;
                                Ok((ms, first.then(|| Stats::of(&resp))))
                            })
                            .collect()
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(fail("a query thread panicked")))
                })
                .collect()
        });
        let wall = started.elapsed().as_secs_f64();
        let mut lat = Vec::with_capacity(reqs.len());
        for part in per_thread {
            for (ms, stats) in part? {
                lat.push(ms);
                if let Some(st) = stats {
                    for ((sum, all), x) in stage_sums.iter_mut().zip(&mut stage_all).zip(st.stages)
                    {
                        *sum += x;
                        all.push(x);
                    }
                    for (c, x) in contributed.iter_mut().zip(st.contributed) {
                        *c += usize::from(x);
                    }
                    eligible_sum += st.eligible as f64;
                    empty += usize::from(st.empty);
                }
            }
        }
        lat.sort_by(f64::total_cmp);
        runs.push(RecallRun {
            threads,
            queries: lat.len(),
            qps: lat.len() as f64 / wall,
            p50_ms: percentile(&lat, 0.50),
            p95_ms: percentile(&lat, 0.95),
            p99_ms: percentile(&lat, 0.99),
            max_ms: lat.last().copied().unwrap_or(0.0),
        });
    }
    let single = if runs.is_empty() { 0 } else { a.queries };
    let per = |x: f64| if single == 0 { 0.0 } else { x / single as f64 };
    Ok(Measured {
        open_s,
        rss_open_mib,
        rss_after_mib: rss_mib(),
        runs,
        mean_eligible: per(eligible_sum),
        contributed: ["vector", "lexical", "recency", "graph"]
            .iter()
            .zip(contributed)
            .map(|(n, c)| (n.to_string(), per(c as f64)))
            .collect(),
        stages_us: STAGES
            .iter()
            .zip(stage_sums)
            .map(|(n, s)| (n.to_string(), per(s)))
            .collect(),
        stages_p95_us: STAGES
            .iter()
            .zip(stage_all)
            .map(|(n, mut all)| {
                all.sort_by(f64::total_cmp);
                (n.to_string(), percentile(&all, 0.95))
            })
            .collect(),
        empty,
        stages_threads: a.threads.first().copied().unwrap_or(1),
    })
}

/// The stages a manifest times.
const STAGES: [&str; 6] = [
    "eligibility",
    "vector",
    "lexical",
    "other",
    "fusion",
    "total",
];

/// One query's latency (ms) and, on the single-thread run, its manifest's
/// figures.
type Timed = (f64, Option<Stats>);

/// What one single-thread query's manifest says.
struct Stats {
    stages: [f64; 6],
    contributed: [bool; 4],
    eligible: u64,
    empty: bool,
}

impl Stats {
    fn of(resp: &engram_engine::retrieval::RecallResponse) -> Stats {
        let m = &resp.manifest;
        let t = &m.timings;
        let gave = |name: &str| {
            m.retrievers
                .iter()
                .any(|r| *r.retriever == *name && r.skipped.is_none() && !r.candidates.is_empty())
        };
        Stats {
            stages: [
                t.eligibility_us as f64,
                t.vector_us as f64,
                t.lexical_us as f64,
                t.other_us as f64,
                t.fusion_us as f64,
                t.total_us as f64,
            ],
            contributed: [
                gave("vector"),
                gave("lexical"),
                gave("recency"),
                gave("graph"),
            ],
            eligible: m.eligible,
            empty: resp.hits.is_empty(),
        }
    }
}

fn print_report(r: &RecallBenchResult) {
    let m = &r.measured;
    crate::outln!(
        "store: {} records over {} tenants (largest {}), {} with vectors, {} deleted, {} corrected, {} restricted; log {:.0} MiB",
        r.records,
        r.tenants,
        r.largest_tenant,
        r.vectors,
        r.deleted,
        r.corrected,
        r.restricted,
        r.log_bytes as f64 / 1048576.0
    );
    crate::outln!("texts and vectors: {}", r.seed);
    if r.build_s > 0.0 {
        crate::outln!("built in {:.1} s", r.build_s);
    }
    crate::outln!(
        "open {:.2} s; RSS {:.0} MiB after open, {:.0} MiB after the queries ({:.0} bytes per record)",
        m.open_s,
        m.rss_open_mib,
        m.rss_after_mib,
        r.rss_bytes_per_record
    );
    crate::outln!(
        "{:>8} {:>8} {:>10} {:>9} {:>9} {:>9} {:>9}",
        "threads",
        "queries",
        "queries/s",
        "p50 ms",
        "p95 ms",
        "p99 ms",
        "max ms"
    );
    for x in &m.runs {
        crate::outln!(
            "{:>8} {:>8} {:>10.0} {:>9.3} {:>9.3} {:>9.3} {:>9.3}",
            x.threads,
            x.queries,
            x.qps,
            x.p50_ms,
            x.p95_ms,
            x.p99_ms,
            x.max_ms
        );
    }
    let fmt = |v: &[(String, f64)], unit: &str| {
        v.iter()
            .map(|(n, x)| format!("{n} {x:.1}{unit}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    crate::outln!("mean eligible per query: {:.0}", m.mean_eligible);
    let pct: Vec<(String, f64)> = m
        .contributed
        .iter()
        .map(|(n, x)| (n.clone(), x * 100.0))
        .collect();
    crate::outln!("retrievers with candidates: {}", fmt(&pct, "%"));
    let run = match m.stages_threads {
        1 => "1 thread".to_string(),
        n => format!("{n} threads"),
    };
    crate::outln!("mean stage times ({run}): {}", fmt(&m.stages_us, " µs"));
    crate::outln!("p95 stage times ({run}): {}", fmt(&m.stages_p95_us, " µs"));
    if m.empty > 0 {
        crate::outln!("queries with no hit: {}", m.empty);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(records: usize, tenants: usize) -> RecallBenchArgs {
        RecallBenchArgs {
            records,
            tenants,
            vector_share: 0.25,
            seed_data: None,
            synthetic: true,
            queries: 1,
            threads: vec![1],
            dir: None,
            graph: GraphPrecision::Auto,
            json: false,
            measure: None,
        }
    }

    #[test]
    fn tenant_sizes_sum_to_the_records_and_fall_with_rank() {
        for (records, tenants) in [(1_000_000, 1_000), (5_000, 7), (240, 10)] {
            let p = Plan::new(&args(records, tenants));
            assert_eq!(p.sizes.iter().sum::<usize>(), records);
            assert!(
                p.sizes.windows(2).all(|w| w[0] >= w[1]),
                "{:?}",
                &p.sizes[..7.min(tenants)]
            );
            assert!(p.sizes.iter().all(|&s| s >= 2 * ENTITIES));
        }
        let p = Plan::new(&args(1_000_000, 1_000));
        let share = p.sizes[0] as f64 / 1e6;
        assert!(
            (0.08..0.11).contains(&share),
            "largest tenant share {share}"
        );
    }

    #[test]
    fn generated_vectors_are_unit_length_and_near_their_centre() {
        let seed = Seed::synthetic();
        let c = seed.vector(3);
        for i in [3 + seed.rows(), 3 + 5 * seed.rows()] {
            let v = seed.vector(i);
            let norm: f32 = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            assert!((norm - 1.0).abs() < 1e-4, "norm {norm}");
            let cos: f32 = v.iter().zip(&c).map(|(a, b)| a * b).sum();
            assert!((0.75..0.95).contains(&cos), "cosine to the centre {cos}");
            assert_ne!(v, c);
        }
        assert!(seed.text(12_345).len() >= 500);
    }
}
