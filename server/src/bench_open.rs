//! `engram bench open`: how long opening a large store takes, from its
//! state checkpoint and by replaying the whole log, with the resident
//! memory after open and the latency of the first recall.
//!
//! The store is built once (`--records` events of about 500 bytes over
//! `--tenants` tenants, a `--vector-share` of them with a `--dim`-dimension
//! vector) and kept in `--dir` for reruns. Each measurement then runs in a
//! fresh child process (so resident memory is the open's own), read-only
//! (nothing on disk changes between runs), alternating the two modes:
//!
//! - `checkpoint`: the store as `close` left it: the state checkpoint, the
//!   lexical snapshot and the vector graphs load, and nothing is replayed;
//! - `replay`: the state checkpoint is moved aside for the run, so the
//!   record table, bitmaps and lineage are rebuilt by replaying every frame
//!   (the lexical and vector snapshots still load).
//!
//! The median of `--runs` runs per mode is reported.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

use clap::Args;
use engram_engine::retrieval::{Mode, RecallRequest};
use engram_engine::{Engram, NewRecord, Options, Principal, Scope};
use serde::{Deserialize, Serialize};

use crate::bench::{fail, has_vector, tenant_name};
use crate::cli::{CliError, CliResult, Ctx};

/// `engram bench open`.
#[derive(Args, Debug)]
pub struct OpenBenchArgs {
    /// Records in the store.
    #[arg(long, default_value_t = 1_000_000)]
    pub records: usize,
    /// Tenants the records are spread over.
    #[arg(long, default_value_t = 1_000)]
    pub tenants: usize,
    /// Share of records carrying a vector (0 to 1).
    #[arg(long, default_value_t = 0.1)]
    pub vector_share: f64,
    /// Dimension of those vectors.
    #[arg(long, default_value_t = 64)]
    pub dim: usize,
    /// Timed opens per mode (the median is reported).
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Directory of the benchmark store (default: a temporary directory,
    /// removed afterwards, or by the next bench when this one is
    /// interrupted). A store built earlier with the same parameters is
    /// reused.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
    /// Measure one open of an already built store and print its figures
    /// as one JSON line, without building anything: DIR is any store, such
    /// as the `store` directory inside a `--dir` an earlier run kept. A
    /// run measures each open this way, in a fresh child process.
    #[arg(long, value_name = "DIR")]
    pub measure: Option<PathBuf>,
}

/// What one measured open gives.
#[derive(Debug, Serialize, Deserialize, Clone)]
pub struct OpenRun {
    /// Seconds in `Engram::open`.
    pub open_s: f64,
    /// Frames replayed by the open.
    pub frames_replayed: u64,
    /// LSN of the checkpoint the open started from (0: none).
    pub checkpoint_lsn: u64,
    /// Resident memory after open, MiB (Linux; 0 elsewhere).
    pub rss_mib: f64,
    /// The first recall after open (keyword), milliseconds.
    pub first_recall_ms: f64,
    /// A second recall (warm), milliseconds.
    pub second_recall_ms: f64,
}

/// The benchmark's result.
#[derive(Debug, Serialize)]
pub struct OpenBenchResult {
    /// Records in the store.
    pub records: usize,
    /// Tenants.
    pub tenants: usize,
    /// Records with a vector.
    pub vectors: usize,
    /// Bytes of the log.
    pub log_bytes: u64,
    /// Bytes of the state checkpoint.
    pub checkpoint_bytes: u64,
    /// Seconds to build the store (0 when reused).
    pub build_s: f64,
    /// Seconds `close` took (vector graphs, lexical snapshot, checkpoint).
    pub close_s: f64,
    /// Median run of each mode.
    pub checkpoint: OpenRun,
    /// Median run with the checkpoint moved aside.
    pub replay: OpenRun,
}

/// Runs `engram bench open`.
pub fn run(ctx: &Ctx, a: OpenBenchArgs) -> CliResult {
    if let Some(dir) = &a.measure {
        let r = measure_once(dir)?;
        crate::outln!(
            "{}",
            serde_json::to_string(&r).map_err(|e| fail(e.to_string()))?
        );
        return Ok(ExitCode::SUCCESS);
    }
    if a.records == 0 || a.tenants == 0 || a.runs == 0 {
        return Err(fail("--records, --tenants and --runs must be at least 1"));
    }
    crate::bench::at_most("--records", a.records, crate::bench::BENCH_RECORDS_MAX)?;
    crate::bench::at_most("--runs", a.runs, 100)?;
    if a.tenants > a.records {
        return Err(fail(format!(
            "--tenants {} is more than --records {}: every tenant needs a record",
            a.tenants, a.records
        )));
    }
    if !(0.0..=1.0).contains(&a.vector_share) {
        return Err(fail("--vector-share must be between 0 and 1"));
    }
    if a.dim == 0 || a.dim > 4096 {
        return Err(fail("--dim must be between 1 and 4096"));
    }
    let kept = crate::bench::KeptStore::open(
        ctx,
        a.dir.as_deref(),
        "open",
        format!(
            "records={} tenants={} vector_share={} dim={}",
            a.records, a.tenants, a.vector_share, a.dim
        ),
    )?;
    let store = kept.store.clone();
    let (build_s, close_s) = if kept.reuse {
        (0.0, 0.0)
    } else {
        let r = build(ctx, &store, &a)?;
        kept.mark_built()?;
        r
    };
    let log_bytes = dir_bytes(&store.join("log"));
    let ckpt = store.join("derived").join("state.snap");
    let checkpoint_bytes = std::fs::metadata(&ckpt).map(|m| m.len()).unwrap_or(0);
    if checkpoint_bytes == 0 {
        return Err(fail(format!(
            "{} has no state checkpoint after close",
            store.display()
        )));
    }
    let aside = store.join("derived").join("state.snap.bench-aside");
    let mut with_ckpt = Vec::new();
    let mut replay = Vec::new();
    let progress = ctx.counter("bench open", 2 * a.runs as u64, "opens");
    for i in 0..a.runs {
        progress.set_message(format!("run {}/{}: from the checkpoint", i + 1, a.runs));
        with_ckpt.push(child(&store)?);
        progress.inc(1);
        progress.set_message(format!("run {}/{}: replaying the log", i + 1, a.runs));
        std::fs::rename(&ckpt, &aside)?;
        let r = child(&store);
        std::fs::rename(&aside, &ckpt)?;
        replay.push(r?);
        progress.inc(1);
    }
    progress.finish();
    let result = OpenBenchResult {
        records: a.records,
        tenants: a.tenants,
        vectors: n_vectors(&a),
        log_bytes,
        checkpoint_bytes,
        build_s,
        close_s,
        checkpoint: median(with_ckpt),
        replay: median(replay),
    };
    if a.json {
        crate::outln!(
            "{}",
            serde_json::to_string_pretty(&result).map_err(|e| fail(e.to_string()))?
        );
    } else {
        print_table(&result);
    }
    Ok(ExitCode::SUCCESS)
}

fn n_vectors(a: &OpenBenchArgs) -> usize {
    (0..a.records)
        .filter(|&i| has_vector(i, a.vector_share))
        .count()
}

fn vector(seed: u64, dim: usize) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..dim)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        })
        .collect()
}

/// Builds the store: batches of up to 1,000 events, round-robin over the
/// tenants, each tenant's admin appending its own.
fn build(ctx: &Ctx, store: &Path, a: &OpenBenchArgs) -> Result<(f64, f64), CliError> {
    let progress = ctx.counter("bench open", a.records as u64, "records");
    progress.set_message("building the store");
    let started = Instant::now();
    let db = Engram::open(store, Options::default())?;
    let per_tenant = a.records.div_ceil(a.tenants);
    let batch = 1_000.min(per_tenant).max(1);
    let sessions: Vec<_> = (0..a.tenants)
        .map(|t| db.session(Principal::admin(tenant_name(t))))
        .collect();
    let mut written = 0usize;
    let mut offset = 0usize;
    while written < a.records {
        for (t, s) in sessions.iter().enumerate() {
            let start = offset;
            let n = batch
                .min(per_tenant.saturating_sub(start))
                .min(a.records - written);
            if n == 0 {
                continue;
            }
            let records: Vec<NewRecord> = (0..n)
                .map(|k| {
                    let i = t * per_tenant + start + k;
                    let mut r =
                        NewRecord::event("user_message", crate::bench::event_text(i as u64, 500))
                            .with_scope(Scope {
                                user: Some(format!("user_{}", i % 97)),
                                conversation: Some(format!("conv_{}", i % 1013)),
                                ..Scope::default()
                            });
                    if has_vector(i, a.vector_share) {
                        r = r.with_embedding("bench", vector(i as u64, a.dim));
                    }
                    r
                })
                .collect();
            s.append(records)?;
            written += n;
            progress.inc(n as u64);
            if written >= a.records {
                break;
            }
        }
        offset += batch;
    }
    progress.finish();
    let build_s = started.elapsed().as_secs_f64();
    let spinner = ctx.spinner("bench open");
    spinner.set_message("indexing vectors and writing the checkpoint (close)");
    let t = Instant::now();
    let closed = db.close();
    spinner.finish();
    closed?;
    Ok((build_s, t.elapsed().as_secs_f64()))
}

fn child(store: &Path) -> Result<OpenRun, CliError> {
    let exe = std::env::current_exe()?;
    crate::bench::child_json(
        Command::new(exe)
            .args(["bench", "open", "--measure"])
            .arg(store),
    )
}

fn measure_once(store: &Path) -> Result<OpenRun, CliError> {
    let opts = Options {
        read_only: true,
        create_if_missing: false,
        ..Options::default()
    };
    let t = Instant::now();
    let (db, report) = Engram::open_with_report(store, opts)?;
    let open_s = t.elapsed().as_secs_f64();
    let rss_mib = rss_mib();
    let s = db.session(Principal::admin(tenant_name(0)));
    let req = RecallRequest {
        text: Some("checkout latency incident".into()),
        mode: Mode::Lexical,
        k: 10,
        ..RecallRequest::default()
    };
    let t = Instant::now();
    let hits = s.recall(&req)?;
    let first_recall_ms = t.elapsed().as_secs_f64() * 1e3;
    if hits.hits.is_empty() {
        return Err(fail("the first recall found nothing"));
    }
    let t = Instant::now();
    s.recall(&req)?;
    let second_recall_ms = t.elapsed().as_secs_f64() * 1e3;
    Ok(OpenRun {
        open_s,
        frames_replayed: report.frames_replayed,
        checkpoint_lsn: report.checkpoint_lsn,
        rss_mib,
        first_recall_ms,
        second_recall_ms,
    })
}

/// Resident memory of this process, MiB (0 where /proc is missing).
pub(crate) fn rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

pub(crate) fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

fn median(mut runs: Vec<OpenRun>) -> OpenRun {
    runs.sort_by(|a, b| a.open_s.total_cmp(&b.open_s));
    runs.swap_remove(runs.len() / 2)
}

fn print_table(r: &OpenBenchResult) {
    crate::outln!(
        "store: {} records over {} tenants, {} with vectors; log {:.0} MiB, checkpoint {:.0} MiB",
        r.records,
        r.tenants,
        r.vectors,
        r.log_bytes as f64 / 1048576.0,
        r.checkpoint_bytes as f64 / 1048576.0
    );
    if r.build_s > 0.0 {
        crate::outln!(
            "built in {:.1} s, close (graphs, snapshots, checkpoint) {:.1} s",
            r.build_s,
            r.close_s
        );
    }
    crate::outln!(
        "{:<12} {:>9} {:>16} {:>10} {:>14} {:>14}",
        "open",
        "seconds",
        "frames replayed",
        "RSS MiB",
        "1st recall ms",
        "2nd recall ms"
    );
    for (name, x) in [("checkpoint", &r.checkpoint), ("replay", &r.replay)] {
        crate::outln!(
            "{:<12} {:>9.3} {:>16} {:>10.0} {:>14.2} {:>14.2}",
            name,
            x.open_s,
            x.frames_replayed,
            x.rss_mib,
            x.first_recall_ms,
            x.second_recall_ms
        );
    }
}
