//! `engram bench`: measurements a user can rerun on their own machine.
//!
//! - `engram bench open`: open time of a large store from its state
//!   checkpoint and by replaying the log (see `bench_open`).
//! - `engram bench ingest`: durable appends of realistic events (~500 bytes
//!   of text) from 1, 4 and 16 concurrent writers, each append acknowledged
//!   only once durable; reports events/s and p50/p99 acknowledgement latency;
//!   plus batches of 1000 appended by one writer and by four concurrent
//!   writers (`--batch-writers`).
//!
//! Numbers from a shared or virtual machine are noisy: compare ratios
//! measured in one run, not absolute figures across runs.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use clap::{Args, Subcommand};
use engram_engine::model::limits;
use engram_engine::{Engram, NewRecord, Options, Principal, Scope};
use serde::Serialize;

use crate::cli::{CliError, CliResult, Ctx};
use crate::progress::Progress;

/// Benchmark commands.
#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Durable ingest throughput and acknowledgement latency.
    Ingest(IngestBenchArgs),
    /// Vector search recall and queries/s on a dataset (see docs/benchmarks.md).
    Ann(crate::bench_ann::AnnArgs),
    /// Open time of a large store, from its checkpoint and by replay; memory
    /// after open; the first recall's latency.
    Open(crate::bench_open::OpenBenchArgs),
    /// Tenant-filtered hybrid recall on a generated million-record store:
    /// latency percentiles and queries/s from 1 and 2 threads, memory per
    /// record.
    Recall(crate::bench_recall::RecallBenchArgs),
}

/// `engram bench ingest`.
#[derive(Args, Debug)]
pub struct IngestBenchArgs {
    /// Events per configuration.
    #[arg(long, default_value_t = 20_000)]
    pub n: usize,
    /// Concurrent writer counts to measure (single-event appends).
    #[arg(long, value_delimiter = ',', default_value = "1,4,16")]
    pub writers: Vec<usize>,
    /// Batch sizes to measure (in addition), each with every count of
    /// `--batch-writers` (a size of 1 adds nothing: it is what `--writers`
    /// measures).
    #[arg(long, value_delimiter = ',', default_value = "1000")]
    pub batch: Vec<usize>,
    /// Concurrent writer counts for the batch configurations (`0`: no
    /// batch configuration).
    #[arg(long, value_delimiter = ',', default_value = "1,4")]
    pub batch_writers: Vec<usize>,
    /// Directory for the benchmark stores (default: a temporary directory,
    /// removed afterwards, or by the next bench when this one is
    /// interrupted). Each configuration's store, `ingest-I-wW-bB`, is made
    /// there and removed after it; one already there is refused.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Open the stores without the background indexer: the graphs are
    /// built after the last acknowledgement (`wait_indexed`, every core).
    /// Beside a run without it, this separates what indexing costs
    /// ingest from what embedding does.
    #[arg(long)]
    pub no_indexer: bool,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

/// One measured configuration.
#[derive(Debug, Serialize, Clone)]
pub struct IngestResult {
    /// Concurrent writers.
    pub writers: usize,
    /// Events per append call: the configuration's batch, or a writer's
    /// share of the events when that is smaller.
    pub batch: usize,
    /// Events appended.
    pub events: usize,
    /// Wall-clock seconds.
    pub seconds: f64,
    /// Events per second.
    pub events_per_s: f64,
    /// Payload megabytes per second (text bytes).
    pub mb_per_s: f64,
    /// Median acknowledgement latency of one append call, microseconds.
    pub ack_latency_us_p50: f64,
    /// 99th percentile acknowledgement latency, microseconds.
    pub ack_latency_us_p99: f64,
    /// Group commits of the configuration (each one or more fsyncs of
    /// appended frames).
    pub groups: u64,
    /// Mean time of one `fdatasync` of appended frames, microseconds: the
    /// disk's share of an acknowledgement, beside which the engine's is
    /// read (a group's appends wait for it, however little the engine does).
    pub fsync_us_mean: f64,
    /// Seconds from the last acknowledgement until the background indexer
    /// had every vector a graph batch can take in its graph (0 without an
    /// embedder).
    pub index_catch_up_s: f64,
}

/// Dispatches `engram bench ...`.
pub fn run(ctx: &Ctx, cmd: BenchCommand) -> CliResult {
    match cmd {
        BenchCommand::Ingest(a) => ingest(ctx, a),
        BenchCommand::Ann(a) => crate::bench_ann::run(ctx, a),
        BenchCommand::Open(a) => crate::bench_open::run(ctx, a),
        BenchCommand::Recall(a) => crate::bench_recall::run(ctx, a),
    }
}

const WORDS: &[&str] = &[
    "checkout",
    "service",
    "latency",
    "catalog",
    "dependency",
    "timeout",
    "customer",
    "billing",
    "invoice",
    "retention",
    "policy",
    "deploy",
    "rollback",
    "database",
    "connection",
    "pool",
    "error",
    "rate",
    "health",
    "check",
    "failed",
    "recovered",
    "engineer",
    "restarted",
    "pods",
    "release",
    "preference",
    "email",
    "phone",
    "contact",
    "account",
    "enterprise",
    "plan",
    "migration",
    "quarter",
    "decision",
    "incident",
    "runbook",
    "alert",
    "threshold",
    "p99",
    "region",
    "cache",
    "queue",
    "backlog",
    "request",
    "response",
    "user",
    "agent",
    "summary",
];

/// A benchmark store kept between runs in `--dir` (or in a temporary
/// directory removed on drop), with a stamp file naming the parameters it
/// was built with.
pub(crate) struct KeptStore {
    _tmp: Option<tempfile::TempDir>,
    /// Directory holding the store and its stamp files.
    pub root: PathBuf,
    /// The store.
    pub store: PathBuf,
    stamp: PathBuf,
    params: String,
    /// Whether a store built with the same parameters is there to reuse.
    pub reuse: bool,
}

impl KeptStore {
    /// Opens `dir` (or a temporary directory) for a store built with
    /// `params`. When it cannot be reused, any old store and stamp are
    /// removed, so a build interrupted half-way is never reused.
    pub(crate) fn open(
        ctx: &Ctx,
        dir: Option<&Path>,
        bench: &str,
        params: String,
    ) -> Result<KeptStore, CliError> {
        let (tmp, root) = match dir {
            Some(d) => (None, d.to_path_buf()),
            None => {
                let t = bench_tempdir()?;
                let root = t.path().to_path_buf();
                (Some(t), root)
            }
        };
        check_bench_dir("--dir", &root)?;
        let store = root.join("store");
        let stamp = root.join(format!("bench-{bench}.params"));
        // Only a directory this bench made is written to: a missing or
        // empty one, or one holding its stamp (the user's own files, or a
        // real store, are never replaced).
        let ours =
            stamp.exists() || std::fs::read_dir(&root).map_or(true, |mut d| d.next().is_none());
        if !ours {
            return Err(fail(format!(
                "--dir {}: not empty and not a directory `engram bench {bench}` made \
                 (no {}); give a new or empty directory",
                root.display(),
                stamp
                    .file_name()
                    .map_or_else(String::new, |f| f.to_string_lossy().into_owned()),
            )));
        }
        let reuse = std::fs::read_to_string(&stamp).is_ok_and(|s| s == params)
            && store.join("ENGRAM").exists();
        if reuse {
            if !ctx.quiet {
                crate::eoutln!("bench {bench}: reusing the store in {}", store.display());
            }
        } else {
            if store.exists() {
                std::fs::remove_dir_all(&store)?;
            }
            // Marks the directory as this bench's before anything is
            // built: an interrupted build is rebuilt, never reused.
            std::fs::create_dir_all(&root)
                .and_then(|()| std::fs::write(&stamp, "building"))
                .map_err(|e| fail(format!("--dir {}: {e}", root.display())))?;
        }
        Ok(KeptStore {
            _tmp: tmp,
            root,
            store,
            stamp,
            params,
            reuse,
        })
    }

    /// Records that the store is built with these parameters.
    pub(crate) fn mark_built(&self) -> Result<(), CliError> {
        std::fs::write(&self.stamp, &self.params)?;
        Ok(())
    }
}

/// A deterministic event text of about `bytes` bytes.
pub fn event_text(seed: u64, bytes: usize) -> String {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut s = String::with_capacity(bytes + 16);
    while s.len() < bytes {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if !s.is_empty() {
            s.push(' ');
        }
        s.push_str(WORDS[(x % WORDS.len() as u64) as usize]);
        if x.is_multiple_of(11) {
            s.push('.');
        }
    }
    s
}

fn event(i: usize) -> NewRecord {
    NewRecord::event("user_message", event_text(i as u64, 500)).with_scope(Scope {
        user: Some(format!("user_{}", i % 97)),
        conversation: Some(format!("conv_{}", i % 1013)),
        ..Scope::default()
    })
}

/// A temporary directory for a bench's stores, removed on drop
/// ([`crate::cli::scratch_dir`]: one a bench interrupted by a signal left
/// is removed by the next bench).
pub(crate) fn bench_tempdir() -> std::io::Result<tempfile::TempDir> {
    crate::cli::scratch_dir("bench")
}

/// The `p` quantile (0..=1) of sorted values, nearest rank (0 when empty).
pub(crate) fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Runs `cmd` (this binary measuring in a fresh process) and parses the
/// JSON it prints; a failed child's stderr becomes the error.
pub(crate) fn child_json<T: serde::de::DeserializeOwned>(
    cmd: &mut std::process::Command,
) -> Result<T, CliError> {
    let out = cmd.output()?;
    if !out.status.success() {
        return Err(fail(format!(
            "the measuring child failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| fail(format!("child output: {e}")))
}

/// A benchmark's own error (bad parameters, a failed child run).
pub(crate) fn fail(msg: impl Into<String>) -> CliError {
    CliError::Message(msg.into())
}

/// The name of generated tenant `t` (the open and recall benchmarks).
pub(crate) fn tenant_name(t: usize) -> String {
    format!("tenant-{t:04}")
}

/// Whether generated record `i` carries a vector when a `share` of records
/// do: spread evenly, record `i` has one when the running count moves.
pub(crate) fn has_vector(i: usize, share: f64) -> bool {
    ((i + 1) as f64 * share).floor() > (i as f64 * share).floor()
}

/// Runs one configuration on a fresh store in `dir`, without an embedder.
pub fn measure(
    dir: &Path,
    n: usize,
    writers: usize,
    batch: usize,
) -> Result<IngestResult, CliError> {
    measure_with_progress(
        dir,
        n,
        writers,
        batch,
        &Options::default(),
        &Progress::hidden(),
    )
}

/// [`measure`] on a store opened with `opts` (its embedder, if any, gives
/// every event a vector), advancing `progress` by the events of each
/// acknowledged append (outside the timed acknowledgement).
pub fn measure_with_progress(
    dir: &Path,
    n: usize,
    writers: usize,
    batch: usize,
    opts: &Options,
    progress: &Progress,
) -> Result<IngestResult, CliError> {
    let db = Engram::open(dir, opts.clone())?;
    // exactly `n` events: the first `n % writers` writers take one more
    let share = move |w: usize| n / writers + usize::from(w < n % writers);
    let first_of = move |w: usize| w * (n / writers) + w.min(n % writers);
    let started = Instant::now();
    let mut handles = Vec::new();
    let db = Arc::new(db);
    for w in 0..writers {
        let db = db.clone();
        let progress = progress.clone();
        handles.push(std::thread::spawn(move || -> Result<Vec<f64>, String> {
            let s = db.session(Principal::system("bench", format!("writer-{w}")));
            let (per_writer, first) = (share(w), first_of(w));
            let mut lat = Vec::with_capacity(per_writer / batch + 1);
            let mut i = 0;
            while i < per_writer {
                let take = batch.min(per_writer - i);
                let records: Vec<NewRecord> = (0..take).map(|k| event(first + i + k)).collect();
                let t = Instant::now();
                s.append(records).map_err(|e| e.to_string())?;
                lat.push(t.elapsed().as_secs_f64() * 1e6);
                progress.inc(take as u64);
                i += take;
            }
            Ok(lat)
        }));
    }
    let mut lat = Vec::new();
    for h in handles {
        lat.extend(
            h.join()
                .map_err(|_| CliError::Message("a writer thread panicked".into()))?
                .map_err(CliError::Message)?,
        );
    }
    let seconds = started.elapsed().as_secs_f64();
    let events = n;
    let log = db.log_stats();
    let groups = log.n_groups;
    let fsync_us_mean = log.fsync_us_total as f64 / log.n_fsyncs.max(1) as f64;
    // How long the graphs lag behind the last acknowledgement: the
    // background indexer alone (no `wait_indexed`), or, with no indexer
    // running (`--no-indexer`), `wait_indexed` on every core.
    let catching_up = Instant::now();
    let mut polls = 0u64;
    if !opts.background_indexing {
        db.wait_indexed()?;
    }
    while db.pending_vectors() > 0 {
        // `stats` walks the records: once a second.
        if polls % 200 == 199
            && let Some(p) = db.stats()?.indexer_problem
        {
            return Err(fail(format!("the indexer stopped: {p}")));
        }
        polls += 1;
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let index_catch_up_s = if opts.embedder.is_some() {
        catching_up.elapsed().as_secs_f64()
    } else {
        0.0
    };
    lat.sort_by(f64::total_cmp);
    let text_bytes = 500.0 * events as f64;
    let db = Arc::try_unwrap(db).map_err(|_| CliError::Message("store still shared".into()))?;
    crate::cli::close_store(&db);
    Ok(IngestResult {
        writers,
        // the largest append made: a writer's share may be below `batch`
        batch: batch.min(share(0)),
        events,
        seconds,
        events_per_s: events as f64 / seconds,
        mb_per_s: text_bytes / seconds / 1e6,
        ack_latency_us_p50: percentile(&lat, 0.5),
        ack_latency_us_p99: percentile(&lat, 0.99),
        groups,
        fsync_us_mean,
        index_catch_up_s,
    })
}

/// Writer threads one configuration may start (each is an OS thread).
const WRITERS_MAX: usize = 256;

/// The most records (or events per configuration) a bench generates: ten
/// times the million the benchmarks are about, and a store of some 10 GB,
/// where a mistyped count would otherwise start a build of terabytes or
/// allocate its timings past memory.
pub const BENCH_RECORDS_MAX: usize = 10_000_000;

/// Refuses `value` of `flag` past `max`, naming both.
pub fn at_most(flag: &str, value: usize, max: usize) -> Result<(), CliError> {
    if value > max {
        return Err(CliError::Message(format!(
            "{flag} {value} is over the limit of {max}"
        )));
    }
    Ok(())
}

/// Every numeric flag of `bench ingest`, before any work starts.
fn check_ingest_args(a: &IngestBenchArgs) -> Result<(), CliError> {
    let refuse = |m: String| Err(CliError::Message(m));
    if a.n == 0 {
        return refuse("--n must be at least 1 (events per configuration)".into());
    }
    at_most("--n", a.n, BENCH_RECORDS_MAX)?;
    for (flag, values, min) in [
        ("--writers", &a.writers, 1),
        ("--batch-writers", &a.batch_writers, 0),
    ] {
        if let Some(w) = values.iter().find(|&&w| w < min || w > WRITERS_MAX) {
            return refuse(format!(
                "{flag} values must be between {min} and {WRITERS_MAX}, not {w}"
            ));
        }
    }
    if let Some(b) = a
        .batch
        .iter()
        .find(|&&b| b == 0 || b > limits::BATCH_RECORDS_MAX)
    {
        return refuse(format!(
            "--batch values must be between 1 and {} (records in one batch), not {b}",
            limits::BATCH_RECORDS_MAX
        ));
    }
    Ok(())
}

/// A directory a bench builds stores in (`name` its flag): not a file,
/// and not inside a store (whose maintenance removes what it owns under
/// its directories), checked before anything is written there.
pub(crate) fn check_bench_dir(name: &str, dir: &Path) -> Result<(), CliError> {
    // (a link leading nowhere cannot be checked against the stores, and
    // a directory cannot be made in its place)
    if dir.symlink_metadata().is_ok() && !dir.exists() {
        let to = std::fs::read_link(dir)
            .map(|t| format!(" (to {})", t.display()))
            .unwrap_or_default();
        return Err(fail(format!(
            "{name} {}: a link that leads nowhere{to}; give a directory, or a path where one can be made",
            dir.display()
        )));
    }
    if dir.exists() && !dir.is_dir() {
        return Err(fail(format!(
            "{name} {}: a file, not a directory",
            dir.display()
        )));
    }
    engram_engine::store_dir::refuse_inside_store(
        &engram_storage::FsBackend,
        dir,
        name,
        "give a directory outside every store",
    )?;
    Ok(())
}

fn ingest(ctx: &Ctx, a: IngestBenchArgs) -> CliResult {
    let tmp;
    let root = match &a.dir {
        Some(d) => {
            check_bench_dir("--dir", d)?;
            d.clone()
        }
        None => {
            tmp = bench_tempdir()?;
            tmp.path().to_path_buf()
        }
    };
    check_ingest_args(&a)?;
    let mut configs: Vec<(usize, usize)> = a.writers.iter().map(|&w| (w, 1)).collect();
    if a.batch.contains(&1) && !ctx.quiet {
        crate::eoutln!(
            "note: --batch 1 adds no configuration: single-event appends are what --writers measures"
        );
    }
    for &b in a.batch.iter().filter(|&&b| b > 1) {
        configs.extend(a.batch_writers.iter().filter(|&&w| w > 0).map(|&w| (w, b)));
    }
    // a configuration named twice (`--writers 1,1`) is measured once
    let mut seen = std::collections::HashSet::new();
    configs.retain(|c| seen.insert(*c));
    // The global `--embedder` gives every event a vector (the bench's
    // stores are fresh: nothing saved to follow).
    let opts = Options {
        embedder: engram_engine::settings::embedder_by_name(
            ctx.embedder.as_deref().unwrap_or("none"),
        )?,
        background_indexing: !a.no_indexer,
        ..Options::default()
    };
    let config_dir = |i: usize, (w, b): (usize, usize)| root.join(format!("ingest-{i}-w{w}-b{b}"));
    // Each configuration's store is made fresh and removed after it: a
    // directory of that name already there (a store of the user's, say)
    // is refused before anything runs, never measured or removed.
    for (i, &c) in configs.iter().enumerate() {
        let dir = config_dir(i, c);
        if std::fs::symlink_metadata(&dir).is_ok() {
            return Err(fail(format!(
                "--dir {}: {} already exists; `engram bench ingest` makes each configuration's \
                 store there and removes it afterwards: give a directory without it (one an interrupted run left can be removed)",
                root.display(),
                dir.display()
            )));
        }
    }
    let mut results = Vec::new();
    let n_configs = configs.len();
    for (i, (w, b)) in configs.into_iter().enumerate() {
        let dir = config_dir(i, (w, b));
        let bar = ctx.counter("bench ingest", a.n as u64, "events");
        bar.set_message(format!(
            "configuration {}/{n_configs}: {w} writer(s), {b} event(s) per append",
            i + 1
        ));
        let r = measure_with_progress(&dir, a.n, w, b, &opts, &bar);
        bar.finish();
        let r = r?;
        let _ = std::fs::remove_dir_all(&dir);
        if r.batch < b && !ctx.quiet {
            crate::eoutln!(
                "note: {w} writer(s) of {} events each append at most {} at once, not {b} (raise --n)",
                a.n / w,
                r.batch
            );
        }
        if !a.json {
            crate::outln!(
                "writers {:>3}  batch {:>5}  {:>10.0} events/s  {:>7.1} MB/s  ack p50 {:>8.0} us  p99 {:>8.0} us  ({} fsync groups, fsync {:.0} us)",
                r.writers,
                r.batch,
                r.events_per_s,
                r.mb_per_s,
                r.ack_latency_us_p50,
                r.ack_latency_us_p99,
                r.groups,
                r.fsync_us_mean
            );
            if opts.embedder.is_some() {
                crate::outln!(
                    "  vectors: the graph {} {:.2} s after the last acknowledgement",
                    if a.no_indexer {
                        "was built (no indexer during ingest)"
                    } else {
                        "caught up"
                    },
                    r.index_catch_up_s
                );
            }
        }
        results.push(r);
    }
    if a.json {
        crate::outln!(
            "{}",
            serde_json::to_string_pretty(
                &serde_json::json!({"bench": "ingest", "event_text_bytes": 500, "results": results})
            )?
        );
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The directory of an interrupted bench (its process gone) is removed
    /// by the next bench; a directory of a running process is not.
    #[test]
    fn a_bench_removes_the_directories_of_interrupted_benches() {
        if !Path::new("/proc/self").exists() {
            return; // the sweep needs /proc (Linux)
        }
        let tmp = std::env::temp_dir();
        // no process has this id (above the kernel's pid limit)
        let stale = tmp.join("engram-bench-4000000000-test");
        std::fs::create_dir_all(stale.join("store")).unwrap();
        let mine = tmp.join(format!("engram-bench-{}-test-own", std::process::id()));
        std::fs::create_dir_all(&mine).unwrap();
        let d = bench_tempdir().unwrap();
        assert!(d.path().exists());
        assert!(!stale.exists(), "the interrupted bench's directory is left");
        assert!(mine.exists(), "a running bench's directory was removed");
        std::fs::remove_dir_all(&mine).unwrap();
        // the demo's scratch stores likewise (a demo stopped by Ctrl-C left
        // them for good), and only the demo's
        let demo = tmp.join("engram-demo-4000000001-test");
        let bench = tmp.join("engram-bench-4000000001-test");
        std::fs::create_dir_all(&demo).unwrap();
        std::fs::create_dir_all(&bench).unwrap();
        let d = crate::cli::scratch_dir("demo").unwrap();
        assert!(d.path().exists());
        assert!(!demo.exists(), "the interrupted demo's directory is left");
        assert!(bench.exists(), "a demo removed a bench's directory");
        std::fs::remove_dir_all(&bench).unwrap();
    }
}
