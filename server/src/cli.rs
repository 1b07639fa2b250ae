//! Argument parsing and the commands of the `engram` binary.
//!
//! Conventions shared by every command:
//! - `--data DIR` (default `./engram-data`, or `$ENGRAM_DATA`) is the store;
//! - an ID is an internal id, or an external id together with `--tenant T`;
//! - the CLI acts as the tenant's admin unless `--principal P` is given, in
//!   which case it acts as user `P` with exactly `P`'s grants;
//! - `--json` switches to machine output on stdout; messages go to stderr;
//! - exit codes: 0 success, 1 failure or problems found, 2 bad usage.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use engram_engine::settings::StoreSettings;
use engram_engine::time::{format_rfc3339, parse_rfc3339};
use engram_engine::{
    AppendOutcome, EngineError, Engram, ListFilter, Options, Principal, Record, RecordId,
    RecordRef, Session, Status,
};
use engram_query::IngestLine;
use serde::Serialize;

use crate::output::{record_block, record_header};

/// The `engram` command line.
#[derive(Parser, Debug)]
#[command(
    name = "engram",
    version,
    about = "Engram: durable, explainable memory for AI agents",
    long_about = "Engram: durable, explainable memory for AI agents.\n\nAn append-only event log is the system of record; semantic records keep provenance back to it; retrieval applies tenant, access, scope, deletion and time filters before ranking.\n\nStart with `engram demo`."
)]
pub struct Cli {
    /// Data directory of the store.
    #[arg(
        long,
        global = true,
        env = "ENGRAM_DATA",
        default_value = "./engram-data"
    )]
    pub data: PathBuf,
    /// Built-in embedder deriving vectors from text: `none`, `hash` (lexical
    /// feature hashing, 256 dims; not semantic) or `hash-<dims>`. Remembered
    /// by the store; default for a new store: none (clients send vectors).
    #[arg(long, global = true)]
    pub embedder: Option<String>,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// Commands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the guided demo on a fresh store (a temporary directory unless --dir is given).
    Demo(DemoArgs),
    /// Create an empty store in --data (a missing or empty directory).
    Init(JsonArgs),
    /// Ingest a JSONL file of events and records (see docs/ingest.md).
    Ingest(IngestArgs),
    /// Show one record.
    Get(IdArgs),
    /// Show every version of a record's correction chain, oldest first.
    History(IdArgs),
    /// List records in log order.
    Log(LogArgs),
    /// Counts per tenant, kind and status; log and index sizes.
    Stats(JsonArgs),
    /// Check every frame's checksum and the in-memory state against the log (exit 1 on problems).
    Verify(JsonArgs),
    /// Rebuild derived state from the log.
    Rebuild(RebuildArgs),
    /// Show how far a damaged log is intact; with --truncate-after, cut it there
    /// (the cut bytes are moved to quarantine/, never deleted).
    Repair(RepairArgs),
    /// Retrieve records: eligibility first, then vector / lexical / recency / graph, fused.
    Recall(Box<crate::recall_cmd::RecallArgs>),
    /// Run one query-language statement (FIND ... / TRACE ...; see docs/query-language.md).
    Query(crate::query_cmd::QueryArgs),
    /// An interactive prompt for query-language statements.
    Shell(crate::query_cmd::ShellArgs),
    /// Evaluate retrieval on a JSONL file of cases (recall@k, precision@k, MRR, forbidden-hit rate).
    Eval(crate::recall_cmd::EvalArgs),
    /// Assemble the working memory for one model call (procedural, semantic, episodic, recent).
    Context(crate::lifecycle_cmd::ContextArgs),
    /// Lineage of a record: its sources (upstream) and everything built on it (downstream).
    Trace(IdArgs),
    /// The review queue: list, approve, reject.
    #[command(subcommand)]
    Review(crate::lifecycle_cmd::ReviewCommand),
    /// Set a record's end of validity: afterwards it is historical.
    Expire(crate::lifecycle_cmd::ExpireArgs),
    /// Correct a record: the file's record supersedes it (history keeps both).
    Correct(crate::lifecycle_cmd::CorrectArgs),
    /// Delete a record, its versions and its derivatives (bytes purged by `compact`).
    Delete(crate::lifecycle_cmd::DeleteArgs),
    /// Grant a label or role (to a principal, or lift a tenant-wide revocation).
    Grant(crate::lifecycle_cmd::AccessArgs),
    /// Revoke a label or role (from a principal, or from everyone in the tenant).
    Revoke(crate::lifecycle_cmd::AccessArgs),
    /// Set the retention period of a class in a tenant.
    Retention(crate::lifecycle_cmd::RetentionArgs),
    /// Place or lift a legal hold on a scope (suspends purging).
    Hold(crate::lifecycle_cmd::HoldArgs),
    /// Purge deleted and expired-by-retention records' bytes (store must not be in use).
    Compact(JsonArgs),
    /// Back up the store (log, settings, ledger) into a new directory.
    Backup(crate::lifecycle_cmd::DirArgs),
    /// Restore from a backup, re-applying later deletions and revocations.
    Restore(crate::lifecycle_cmd::DirArgs),
    /// Benchmarks (`engram bench ingest`, `engram bench ann`).
    #[command(subcommand)]
    Bench(crate::bench::BenchCommand),
    /// Serve the store over HTTP/1.1 + JSON (API keys from `engram keys create`; see docs/server.md).
    Serve(crate::keys_cmd::ServeArgs),
    /// API keys of the server: create, list, revoke.
    #[command(subcommand)]
    Keys(crate::keys_cmd::KeysCommand),
}

/// `engram demo`.
#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Put the demo store here instead of a temporary directory (must be empty or absent).
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

/// `engram ingest`.
#[derive(Args, Debug)]
pub struct IngestArgs {
    /// The JSONL file (`-` for stdin).
    pub file: PathBuf,
    /// Tenant for lines that do not name one (lines naming another tenant are rejected).
    #[arg(long, value_parser = crate::cli::name_arg)]
    pub tenant: Option<String>,
    /// Records per atomic batch.
    #[arg(long, default_value_t = 1000)]
    pub batch_size: usize,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

/// Commands taking an ID.
#[derive(Args, Debug)]
pub struct IdArgs {
    /// Internal id, or external id with --tenant (`id:<id>` and
    /// `ext:<key>` say which when an external id looks like an internal id).
    pub id: String,
    /// Tenant (needed for external ids).
    #[arg(long, value_parser = crate::cli::name_arg)]
    pub tenant: Option<String>,
    /// Act as this principal instead of the tenant admin.
    #[arg(long, value_parser = crate::cli::name_arg)]
    pub principal: Option<String>,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

/// `engram log`.
#[derive(Args, Debug)]
pub struct LogArgs {
    /// Only this tenant (default: all).
    #[arg(long, value_parser = crate::cli::name_arg)]
    pub tenant: Option<String>,
    /// Only records that occurred at or after this time (RFC 3339).
    #[arg(long)]
    pub since: Option<String>,
    /// Only records that occurred at or before this time (RFC 3339).
    #[arg(long)]
    pub until: Option<String>,
    /// Only this kind.
    #[arg(long)]
    pub kind: Option<String>,
    /// At most this many records.
    #[arg(long)]
    pub limit: Option<usize>,
    /// Act as this principal instead of the tenant admin.
    #[arg(long, value_parser = crate::cli::name_arg)]
    pub principal: Option<String>,
    /// One JSON record per line.
    #[arg(long)]
    pub json: bool,
}

/// Commands with only `--json`.
#[derive(Args, Debug)]
pub struct JsonArgs {
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

/// `engram rebuild`.
#[derive(Args, Debug)]
pub struct RebuildArgs {
    /// Rebuild only the state checkpoint (from a replay of the whole log).
    /// `--catalog` is accepted for stores of earlier versions' scripts.
    #[arg(long, alias = "catalog")]
    pub checkpoint: bool,
    /// Compare the deterministic parts of derived state before and after
    /// (exit 1 on any difference).
    #[arg(long)]
    pub verify: bool,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

/// `engram repair`.
#[derive(Args, Debug)]
pub struct RepairArgs {
    /// Cut the log after this LSN (an intact batch end shown by `engram
    /// repair`); every later byte is moved to quarantine/. Records after it
    /// are lost from the store.
    #[arg(long, value_name = "LSN")]
    pub truncate_after: Option<u64>,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

/// Parses a tenant or principal argument: a non-empty name within the
/// engine's limits.
pub fn name_arg(s: &str) -> Result<String, String> {
    engram_engine::model::check_name("name", s)
        .map(|()| s.to_string())
        .map_err(|e| match e {
            EngineError::InvalidInput { reason, .. } => reason,
            e => e.to_string(),
        })
}

/// A command failure: message for stderr, exit code 1.
#[derive(Debug)]
pub struct CliError(pub String);

impl From<EngineError> for CliError {
    fn from(e: EngineError) -> Self {
        CliError(e.to_string())
    }
}

impl From<std::io::Error> for CliError {
    fn from(e: std::io::Error) -> Self {
        CliError(e.to_string())
    }
}

/// Result of a command.
pub type CliResult = Result<ExitCode, CliError>;

/// Parses `args` and runs the command.
pub fn run<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return match e.kind() {
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => {
                    ExitCode::SUCCESS
                }
                _ => ExitCode::from(2),
            };
        }
    };
    match dispatch(cli) {
        Ok(code) => code,
        Err(CliError(msg)) => {
            eprintln!("error: {msg}");
            ExitCode::from(1)
        }
    }
}

/// `--embedder` of this invocation (the demo sets its own).
static EMBEDDER_FLAG: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

fn embedder_flag() -> Option<String> {
    EMBEDDER_FLAG.lock().map(|g| g.clone()).unwrap_or(None)
}

fn dispatch(cli: Cli) -> CliResult {
    let data = cli.data;
    if let Ok(mut g) = EMBEDDER_FLAG.lock() {
        *g = cli.embedder.clone();
    }
    match cli.command {
        Command::Demo(a) => crate::demo::run(a.dir),
        Command::Init(a) => cmd_init(&data, a),
        Command::Repair(a) => cmd_repair(&data, a),
        Command::Ingest(a) => cmd_ingest(&data, a),
        Command::Get(a) => cmd_get(&data, a, false),
        Command::History(a) => cmd_get(&data, a, true),
        Command::Log(a) => cmd_log(&data, a),
        Command::Stats(a) => cmd_stats(&data, a),
        Command::Verify(a) => cmd_verify(&data, a),
        Command::Rebuild(a) => cmd_rebuild(&data, a),
        Command::Recall(a) => crate::recall_cmd::recall(&data, *a),
        Command::Eval(a) => crate::recall_cmd::eval(&data, a),
        Command::Context(a) => crate::lifecycle_cmd::context(&data, a),
        Command::Trace(a) => crate::lifecycle_cmd::trace(&data, a),
        Command::Review(a) => crate::lifecycle_cmd::review(&data, a),
        Command::Expire(a) => crate::lifecycle_cmd::expire(&data, a),
        Command::Correct(a) => crate::lifecycle_cmd::correct(&data, a),
        Command::Delete(a) => crate::lifecycle_cmd::delete(&data, a),
        Command::Grant(a) => crate::lifecycle_cmd::access(&data, a, false),
        Command::Revoke(a) => crate::lifecycle_cmd::access(&data, a, true),
        Command::Retention(a) => crate::lifecycle_cmd::retention(&data, a),
        Command::Hold(a) => crate::lifecycle_cmd::hold(&data, a),
        Command::Compact(a) => crate::lifecycle_cmd::compact(&data, a.json),
        Command::Backup(a) => crate::lifecycle_cmd::backup(&data, a),
        Command::Restore(a) => crate::lifecycle_cmd::restore(&data, a),
        Command::Bench(b) => crate::bench::run(&data, b),
        Command::Serve(a) => crate::keys_cmd::serve(&data, a),
        Command::Query(a) => crate::query_cmd::query(&data, a),
        Command::Shell(a) => crate::query_cmd::shell(&data, a),
        Command::Keys(k) => crate::keys_cmd::keys(&data, k),
    }
}

/// Options the CLI opens the store in `dir` with: the embedder comes from
/// `--embedder`, else from the store's settings, else none. A new choice is
/// saved in the store's settings.
pub fn store_options(dir: &Path) -> Result<Options, CliError> {
    let opts = Options {
        create_if_missing: false,
        ..Options::default()
    };
    let flag = embedder_flag();
    let saved = match engram_engine::settings::load(opts.backend.as_ref(), dir) {
        Ok(s) => s,
        // A damaged settings file is replaced by an explicit choice.
        Err(_) if flag.is_some() => None,
        Err(e) => {
            return Err(CliError(format!(
                "{e}; the store's embedder choice is unknown: name it again with \
                 `engram --data {} --embedder NAME rebuild` (NAME: none, hash or hash-<dims>), \
                 which rewrites the settings and rebuilds derived vectors",
                dir.display()
            )));
        }
    };
    let name = flag
        .clone()
        .or_else(|| saved.as_ref().and_then(|s| s.embedder.clone()))
        .unwrap_or_else(|| "none".to_string());
    let embedder = engram_engine::settings::embedder_by_name(&name)?;
    let wanted = StoreSettings {
        embedder: (name != "none").then_some(name),
    };
    if flag.is_some()
        && saved.as_ref() != Some(&wanted)
        && engram_engine::store_dir::classify(opts.backend.as_ref(), dir)?
            != engram_engine::store_dir::DirKind::Empty
    {
        engram_engine::settings::save(opts.backend.as_ref(), dir, &wanted)?;
    }
    Ok(Options { embedder, ..opts })
}

/// Saves the `--embedder` choice into a store just created.
fn save_embedder_choice(dir: &Path) -> Result<(), CliError> {
    if let Some(name) = embedder_flag() {
        let wanted = StoreSettings {
            embedder: (name != "none").then_some(name),
        };
        engram_engine::settings::save(Options::default().backend.as_ref(), dir, &wanted)?;
    }
    Ok(())
}

/// Chooses the embedder for stores opened from now on (the demo).
pub fn set_embedder_default(name: &str) {
    if let Ok(mut g) = EMBEDDER_FLAG.lock() {
        *g = Some(name.to_string());
    }
}

/// Opens the existing store at `dir`, reporting recovery on stderr.
pub fn open_store(dir: &Path) -> Result<Engram, CliError> {
    open_store_with(dir, false)
}

/// Opens the store at `dir`, creating it when `create` and the directory is
/// missing or empty (commands that store records: ingest, demo).
pub fn open_store_with(dir: &Path, create: bool) -> Result<Engram, CliError> {
    if let Ok(m) = std::fs::metadata(dir)
        && !m.is_dir()
    {
        return Err(CliError(format!(
            "--data {}: is a file, not a store directory",
            dir.display()
        )));
    }
    let opts = Options {
        create_if_missing: create,
        ..store_options(dir)?
    };
    let (db, report) = Engram::open_with_report(dir, opts).map_err(|e| match e {
        EngineError::NoStore { .. } | EngineError::NotAStore { .. } => CliError(e.to_string()),
        e => CliError(format!("cannot open store {}: {e}", dir.display())),
    })?;
    if create {
        save_embedder_choice(dir)?;
    }
    if let Some(t) = &report.log.truncation {
        eprintln!(
            "recovery: cut {} bytes at segment {} offset {} ({:?}); {} unacknowledged frame(s) dropped",
            t.bytes_dropped,
            t.segment,
            t.offset,
            t.reason,
            t.dropped_lsns.len()
        );
    }
    if let Some(p) = &report.log.removed_incomplete_segment {
        eprintln!(
            "recovery: removed empty segment {} left by an interrupted start",
            p.display()
        );
    }
    if let Some(why) = &report.checkpoint_discarded {
        eprintln!("recovery: state checkpoint not used ({why}); the whole log was replayed");
    }
    for m in &report.vectors_rebuilt {
        eprintln!("recovery: vector index for '{m}' rebuilt from the log");
    }
    Ok(db)
}

/// A session for `tenant`: the admin, or user `principal`.
pub fn session_for(db: &Engram, tenant: &str, principal: Option<&str>) -> Session {
    match principal {
        Some(p) => db.session(Principal::user(tenant, p)),
        None => db.session(Principal::admin(tenant)),
    }
}

/// Resolves a command-line ID to (tenant, reference).
///
/// With `--tenant`, the ID is read in that tenant: `id:<id>`, `ext:<key>`,
/// or unprefixed (an internal id or an external id; refused as ambiguous
/// when it names two records). Without `--tenant` it must be an internal
/// id, and its tenant is looked up: only for the operator acting as the
/// tenant admin. A principal belongs to one tenant, so `--principal` needs
/// `--tenant` and never reaches a record through another tenant's id.
pub fn resolve_cli_id(db: &Engram, a: &IdArgs) -> Result<(String, RecordRef), CliError> {
    let id = a.id.as_str();
    match (&a.tenant, &a.principal) {
        (Some(t), _) => {
            let r = RecordRef::parse_text(id).map_err(|e| CliError(format!("ID: {e}")))?;
            Ok((t.clone(), r))
        }
        (None, Some(p)) => Err(CliError(format!(
            "--principal {p} needs --tenant: a principal belongs to one tenant"
        ))),
        (None, None) => {
            let raw = id.strip_prefix("id:").unwrap_or(id);
            let rid: RecordId = raw.parse().map_err(|_| {
                CliError(format!(
                    "'{id}' is not an internal id; to look up an external id, add --tenant T"
                ))
            })?;
            let t = db
                .tenant_of(rid)
                .ok_or_else(|| CliError(format!("no record {rid} in this store")))?;
            Ok((t, RecordRef::Id(rid)))
        }
    }
}

fn print_json<T: Serialize>(v: &T) -> Result<(), CliError> {
    crate::outln!(
        "{}",
        serde_json::to_string_pretty(v).map_err(|e| CliError(e.to_string()))?
    );
    Ok(())
}

/// One line of an ingest report.
#[derive(Debug, Serialize)]
pub struct IngestedLine {
    /// Line number in the file.
    pub line: usize,
    /// Tenant.
    pub tenant: String,
    /// Record id.
    pub id: RecordId,
    /// External id.
    pub external_id: Option<String>,
    /// created / duplicate.
    pub outcome: AppendOutcome,
    /// Admission status.
    pub status: Status,
}

/// What an ingest did.
#[derive(Debug, Serialize, Default)]
pub struct IngestReport {
    /// Records stored.
    pub created: usize,
    /// Records already present with the same content.
    pub duplicates: usize,
    /// Atomic batches written.
    pub batches: usize,
    /// Per line.
    pub records: Vec<IngestedLine>,
}

/// Ingests parsed lines in atomic batches: windows of `batch_size` lines,
/// one batch per tenant inside a window. Tenants are checked for every line
/// before anything is written.
pub fn ingest_lines(
    db: &Engram,
    lines: Vec<IngestLine>,
    default_tenant: Option<&str>,
    batch_size: usize,
    progress: bool,
) -> Result<IngestReport, CliError> {
    if batch_size == 0 {
        return Err(CliError("--batch-size must be at least 1".into()));
    }
    let mut tenants = Vec::with_capacity(lines.len());
    for l in &lines {
        let t = match (&l.tenant, default_tenant) {
            (Some(t), Some(d)) if t != d => {
                return Err(CliError(format!(
                    "line {}: tenant: '{t}' differs from --tenant '{d}'",
                    l.line
                )));
            }
            (Some(t), _) => t.clone(),
            (None, Some(d)) => d.to_string(),
            (None, None) => {
                return Err(CliError(format!(
                    "line {}: tenant: required (or pass --tenant T)",
                    l.line
                )));
            }
        };
        if let Err(e) = engram_engine::model::check_tenant(&t) {
            return Err(CliError(format!("line {}: {e}", l.line)));
        }
        tenants.push(t);
    }
    let run = db.new_run_id();
    let mut report = IngestReport::default();
    let total = lines.len();
    let mut last_progress = std::time::Instant::now();
    // Windows of `batch_size` lines; inside a window, one atomic batch per
    // tenant (lines keep their order within a tenant; tenants cannot refer
    // to each other, so order across tenants does not matter).
    let mut window_start = 0;
    while window_start < lines.len() {
        let window_end = (window_start + batch_size).min(lines.len());
        let mut order: Vec<&String> = Vec::new();
        for t in &tenants[window_start..window_end] {
            if !order.contains(&t) {
                order.push(t);
            }
        }
        for tenant in order {
            let idxs: Vec<usize> = (window_start..window_end)
                .filter(|&i| &tenants[i] == tenant)
                .collect();
            let session = db.session(Principal::admin(tenant.clone()));
            let records: Vec<_> = idxs.iter().map(|&i| lines[i].record.clone()).collect();
            let results = session.append_run(records, Some(run)).map_err(|e| {
                let at = e
                    .item()
                    .map(|i| format!("line {}: ", lines[idxs[i]].line))
                    .unwrap_or_default();
                let stored = if report.created + report.duplicates > 0 {
                    format!(
                        " ({} earlier record(s) in {} batch(es) were stored)",
                        report.created + report.duplicates,
                        report.batches
                    )
                } else {
                    " (nothing was stored)".to_string()
                };
                CliError(format!(
                    "batch of {} line(s) of tenant '{tenant}' between lines {} and {} rejected, nothing of it stored: {at}{e}{stored}",
                    idxs.len(),
                    lines[window_start].line,
                    lines[window_end - 1].line
                ))
            })?;
            report.batches += 1;
            for (&i, r) in idxs.iter().zip(results) {
                match r.outcome {
                    AppendOutcome::Created => report.created += 1,
                    AppendOutcome::Duplicate => report.duplicates += 1,
                }
                report.records.push(IngestedLine {
                    line: lines[i].line,
                    tenant: tenant.clone(),
                    id: r.id,
                    external_id: r.external_id,
                    outcome: r.outcome,
                    status: r.status,
                });
            }
        }
        if progress && last_progress.elapsed().as_secs() >= 2 {
            eprintln!("ingest: {window_end}/{total} records");
            last_progress = std::time::Instant::now();
        }
        window_start = window_end;
    }
    report.records.sort_by_key(|r| r.line);
    Ok(report)
}

/// Reads an input file (`-`: stdin) as UTF-8 text; an invalid byte is
/// reported with its line.
pub fn read_input(file: &Path) -> Result<String, CliError> {
    let bytes = if file.as_os_str() == "-" {
        let mut b = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut b)?;
        b
    } else {
        std::fs::read(file).map_err(|e| CliError(format!("cannot read {}: {e}", file.display())))?
    };
    engram_query::text::decode(&bytes).map_err(|e| CliError(format!("{}: {e}", file.display())))
}

fn cmd_ingest(data: &Path, a: IngestArgs) -> CliResult {
    let text = read_input(&a.file)?;
    let lines = engram_query::parse_jsonl(&text)
        .map_err(|e| CliError(format!("{}: {e} (nothing was stored)", a.file.display())))?;
    if lines.is_empty() {
        return Err(CliError(format!("{}: no records", a.file.display())));
    }
    let db = open_store_with(data, true)?;
    let started = std::time::Instant::now();
    let result = ingest_lines(&db, lines, a.tenant.as_deref(), a.batch_size, true);
    if result.is_ok() && db.pending_vectors() > 1000 {
        eprintln!("indexing {} vectors ...", db.pending_vectors());
    }
    // The records are durable once appended: a failure to write derived
    // state at close (a full disk, say) is reported, but does not turn a
    // successful ingest into a failed one.
    let closed = db.close();
    let report = result?;
    if let Err(e) = closed {
        eprintln!(
            "warning: every record reported below is stored and durable; writing derived state at close failed ({e}); it is rebuilt from the log at the next open"
        );
    }
    if a.json {
        print_json(&report)?;
    } else {
        crate::outln!(
            "ingested {} record(s): {} created, {} duplicate(s), {} batch(es) in {:.2}s",
            report.records.len(),
            report.created,
            report.duplicates,
            report.batches,
            started.elapsed().as_secs_f64()
        );
        for r in &report.records {
            crate::outln!(
                "  line {:>5}  {}  {:<9} {}{}",
                r.line,
                r.id,
                match r.outcome {
                    AppendOutcome::Created => "created",
                    AppendOutcome::Duplicate => "duplicate",
                },
                r.status.name(),
                r.external_id
                    .as_ref()
                    .map(|e| format!("  ext={e}"))
                    .unwrap_or_default()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn cmd_get(data: &Path, a: IdArgs, history: bool) -> CliResult {
    let db = open_store(data)?;
    let (tenant, r) = resolve_cli_id(&db, &a)?;
    let s = session_for(&db, &tenant, a.principal.as_deref());
    let records: Vec<Record> = if history {
        s.history(&r)?
    } else {
        vec![s.get(&r)?]
    };
    if a.json {
        if history {
            print_json(&records)?;
        } else {
            print_json(&records[0])?;
        }
    } else {
        if history {
            crate::outln!(
                "history of {} ({} version(s), oldest first):",
                a.id,
                records.len()
            );
        }
        for r in &records {
            crate::outln!("{}", record_block(r));
        }
    }
    db.close()?;
    Ok(ExitCode::SUCCESS)
}

fn cmd_log(data: &Path, a: LogArgs) -> CliResult {
    let parse = |s: &Option<String>, f: &str| -> Result<Option<i64>, CliError> {
        s.as_deref()
            .map(|t| parse_rfc3339(t).map_err(|e| CliError(format!("--{f}: {e}"))))
            .transpose()
    };
    let filter = ListFilter {
        since: parse(&a.since, "since")?,
        until: parse(&a.until, "until")?,
        kind: a.kind.clone(),
        limit: a.limit.unwrap_or(usize::MAX),
        ..ListFilter::default()
    };
    let db = open_store(data)?;
    let tenants: Vec<String> = match &a.tenant {
        Some(t) => vec![t.clone()],
        None => db.stats()?.tenants.into_keys().collect(),
    };
    let mut all = Vec::new();
    for t in tenants {
        all.extend(session_for(&db, &t, a.principal.as_deref()).list(&filter)?);
    }
    all.sort_by_key(|r| r.lsn);
    if let Some(l) = a.limit {
        all.truncate(l);
    }
    for r in &all {
        if a.json {
            crate::outln!(
                "{}",
                serde_json::to_string(r).map_err(|e| CliError(e.to_string()))?
            );
        } else {
            crate::outln!("{}  {}", r.tenant, record_header(r));
            if let Some(t) = &r.text {
                crate::outln!("    {t}");
            }
        }
    }
    if !a.json {
        eprintln!("{} record(s)", all.len());
    }
    db.close()?;
    Ok(ExitCode::SUCCESS)
}

fn cmd_stats(data: &Path, a: JsonArgs) -> CliResult {
    let db = open_store(data)?;
    let s = db.stats()?;
    if a.json {
        print_json(&s)?;
    } else {
        crate::outln!("store      {}", data.display());
        crate::outln!(
            "log        {} segment(s), {} bytes, last LSN {}",
            s.log_segments,
            s.log_bytes,
            s.last_lsn
        );
        crate::outln!(
            "records    {} (checkpoint at LSN {})",
            s.records,
            s.checkpoint_lsn
        );
        if let Some(p) = &s.checkpoint_problem {
            crate::outln!("checkpoint problem: {p}");
        }
        crate::outln!(
            "lexical    {} document(s), {} term(s)",
            s.lexical_documents,
            s.lexical_terms
        );
        for v in &s.vector_spaces {
            crate::outln!(
                "vectors    {}: {} x {} dims, {} indexed{}",
                v.model,
                v.vectors,
                v.dim,
                v.indexed,
                if v.derived {
                    " (derived by the built-in lexical embedder)"
                } else {
                    ""
                }
            );
        }
        for (t, ts) in &s.tenants {
            crate::outln!("tenant     {t}: {} record(s)", ts.records);
            for (k, n) in &ts.by_kind {
                crate::outln!("             kind {k:<24} {n}");
            }
            let statuses: Vec<String> = ts
                .by_status
                .iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect();
            crate::outln!("             status {}", statuses.join(", "));
        }
    }
    db.close()?;
    Ok(ExitCode::SUCCESS)
}

fn cmd_verify(data: &Path, a: JsonArgs) -> CliResult {
    // Read-only: verify never changes a byte of the store (a torn tail is
    // reported, and left for the next writable open to cut).
    let mut problems: Vec<String> = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    let opts = match store_options(data) {
        Ok(o) => o,
        Err(CliError(e)) => {
            problems.push(e);
            Options {
                create_if_missing: false,
                ..Options::default()
            }
        }
    };
    let opts = Options {
        read_only: true,
        background_indexing: false,
        ..opts
    };
    let (mut frames, mut records) = (0, 0);
    match Engram::open_with_report(data, opts) {
        Ok((db, report)) => {
            if let Some(t) = &report.log.torn_tail_pending {
                notes.push(format!(
                    "the log ends with an unacknowledged torn write ({} bytes at segment {} offset {}: {:?}); \
                     the next command that writes cuts it",
                    t.bytes_dropped, t.segment, t.offset, t.reason
                ));
            }
            if report.restore_pending {
                notes.push(
                    "a restore's last step (re-applying later deletions) is pending; the next command that writes finishes it"
                        .into(),
                );
            }
            let r = db.verify();
            db.close()?;
            let r = r?;
            frames = r.frames;
            records = r.records;
            problems.extend(r.problems);
        }
        Err(e @ (EngineError::NoStore { .. } | EngineError::NotAStore { .. })) => {
            return Err(CliError(e.to_string()));
        }
        Err(e) => problems.push(e.to_string()),
    }
    let ok = problems.is_empty();
    if a.json {
        print_json(&serde_json::json!({
            "ok": ok, "frames": frames, "records": records, "problems": problems, "notes": notes
        }))?;
    } else {
        for n in &notes {
            crate::outln!("NOTE     {n}");
        }
        for p in &problems {
            crate::outln!("PROBLEM  {p}");
        }
        crate::outln!(
            "{}: {frames} frame(s) checked, {records} record(s) checked against the state, {} problem(s)",
            if ok { "OK" } else { "FAILED" },
            problems.len()
        );
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn cmd_init(data: &Path, a: JsonArgs) -> CliResult {
    use engram_engine::store_dir::{DirKind, classify};
    match classify(Options::default().backend.as_ref(), data)? {
        DirKind::Empty => {}
        DirKind::Store | DirKind::Unmarked => {
            return Err(CliError(format!(
                "{} is already an Engram store; nothing was changed",
                data.display()
            )));
        }
        DirKind::Foreign(_) => {
            return Err(CliError(format!(
                "{} is not empty; a store is created only in a missing or empty directory",
                data.display()
            )));
        }
    }
    let db = open_store_with(data, true)?;
    let embedder = db.embedder_model().unwrap_or_else(|| "none".into());
    db.close()?;
    if a.json {
        print_json(
            &serde_json::json!({"created": data.display().to_string(), "embedder": embedder}),
        )?;
    } else {
        crate::outln!(
            "created an empty store at {} (embedder: {embedder})",
            data.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn cmd_repair(data: &Path, a: RepairArgs) -> CliResult {
    let opts = store_options(data).unwrap_or(Options {
        create_if_missing: false,
        ..Options::default()
    });
    let Some(keep) = a.truncate_after else {
        let i = Engram::inspect_log(data, &opts)?;
        if a.json {
            print_json(&i)?;
            return Ok(ExitCode::SUCCESS);
        }
        match &i.problem {
            None => crate::outln!(
                "the log ({} segment(s)) is intact through LSN {}; nothing to repair",
                i.segments,
                i.intact_through
            ),
            Some(p) => {
                crate::outln!("problem: {p}");
                crate::outln!(
                    "the log is intact from LSN 1 through LSN {} (batch ends nearby: {})",
                    i.intact_through,
                    i.recent_batch_ends
                        .iter()
                        .rev()
                        .take(5)
                        .map(|l| l.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                let lost_to = i.highest_lsn_seen.max(i.durable_lsn);
                if lost_to > i.intact_through {
                    crate::outln!(
                        "cutting there loses LSNs {}..={} at least ({} shows LSN {} was acknowledged; intact frames up to LSN {} exist past the damage)",
                        i.intact_through + 1,
                        lost_to,
                        i.durable_evidence,
                        i.durable_lsn,
                        i.highest_lsn_seen
                    );
                }
                crate::outln!(
                    "{} byte(s) would move to {}/quarantine/ (kept, not deleted); deletions and revocations in ledger.jsonl are applied again",
                    i.bytes_after,
                    data.display()
                );
                crate::outln!(
                    "prefer restoring from a backup; to cut: engram --data {} repair --truncate-after {}",
                    data.display(),
                    i.intact_through
                );
            }
        }
        return Ok(ExitCode::SUCCESS);
    };
    let r = Engram::repair_log(data, &opts, keep)?;
    if a.json {
        print_json(&r)?;
    } else {
        crate::outln!(
            "cut the log after LSN {}; {} byte(s) moved to {}; {} deletion(s) and {} revocation(s) applied again from the ledger; derived state rebuilt",
            r.kept_through,
            r.bytes_quarantined,
            r.quarantine.display(),
            r.reapplied.deletions_reapplied,
            r.reapplied.revocations_reapplied
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn cmd_rebuild(data: &Path, a: RebuildArgs) -> CliResult {
    if !data.join("log").exists() {
        return Err(CliError(format!("no store at {}", data.display())));
    }
    if !a.checkpoint {
        return crate::lifecycle_cmd::rebuild(data, a.verify, a.json);
    }
    let started = std::time::Instant::now();
    let n = Engram::rebuild_checkpoint(data, &store_options(data)?)?;
    if a.json {
        print_json(&serde_json::json!({"records": n, "seconds": started.elapsed().as_secs_f64()}))?;
    } else {
        crate::outln!(
            "rebuilt the state checkpoint ({n} records) from the log in {:.2}s",
            started.elapsed().as_secs_f64()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Formats a timestamp for messages.
pub fn ts(ms: i64) -> String {
    format_rfc3339(ms)
}
