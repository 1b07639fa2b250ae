//! Argument parsing and the commands of the `engram` binary.
//!
//! Conventions shared by every command:
//! - `--data DIR` (default `./engram-data`, or `$ENGRAM_DATA`) is the store;
//! - an ID is an internal id, or an external id together with `--tenant T`;
//! - the CLI acts as the tenant's admin unless `--principal P` is given, in
//!   which case it acts as user `P` with exactly `P`'s grants;
//! - `--json` switches to machine output on stdout; messages go to stderr;
//! - long-running commands draw progress on stderr when it is a terminal
//!   (never with `--quiet`; see `progress.rs`);
//! - exit codes: 0 success, 1 failure or problems found, 2 bad usage.
//!
//! The global flags reach the commands as a [`Ctx`] argument; nothing of an
//! invocation is kept in process-wide state.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, CommandFactory, Parser, Subcommand, ValueHint};
use engram_engine::settings::StoreSettings;
use engram_engine::time::format_rfc3339;
use engram_engine::{EngineError, Engram, Options, Principal, RecordId, RecordRef, Session};
use serde::Serialize;

use crate::progress::Progress;

mod error;
pub(crate) mod store_cmds;

pub use error::{CliError, RejectedBatch};
use store_cmds::{cmd_get, cmd_init, cmd_log, cmd_rebuild, cmd_repair, cmd_stats, cmd_verify};

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
        default_value = "./engram-data",
        value_hint = ValueHint::DirPath
    )]
    pub data: PathBuf,
    /// Built-in embedder deriving vectors from text: `none`, `hash` (lexical
    /// feature hashing, 256 dims; not semantic), `hash-<dims>`, or
    /// `minilm:DIR` (all-MiniLM-L6-v2 from a local model directory; builds
    /// with the `minilm` feature). Remembered by the store when a command
    /// that writes to it succeeds (a read, such as recall or query, uses it
    /// for itself only); default for a new store: none (clients send
    /// vectors).
    #[arg(long, global = true)]
    pub embedder: Option<String>,
    /// No progress on stderr (progress is drawn only on a terminal anyway).
    #[arg(long, short = 'q', global = true)]
    pub quiet: bool,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// Commands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the guided demo on a fresh store (a temporary directory unless
    /// --dir is given; --data does not apply, and the demo's store uses
    /// the built-in hash embedder).
    Demo(DemoArgs),
    /// Create an empty store in --data (a missing or empty directory); with
    /// --embedder NAME, the store remembers that built-in embedder.
    Init(JsonArgs),
    /// Ingest a JSONL file of events and records (see docs/ingest.md).
    Ingest(crate::ingest_cmd::IngestArgs),
    /// Show one record.
    Get(IdArgs),
    /// Show every version of a record's correction chain, oldest first.
    History(IdArgs),
    /// List records in log order.
    Log(LogArgs),
    /// Counts per tenant, kind and status; log and index sizes.
    Stats(JsonArgs),
    /// Check every frame's checksums and payload, and the loaded state's records and client vectors against the log (exit 1 on problems; `rebuild --verify` derives everything again and compares).
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
    /// Revoke a label (from a principal, or from everyone in the tenant) or a role (from a principal).
    Revoke(crate::lifecycle_cmd::AccessArgs),
    /// Set the retention period of a class in a tenant.
    Retention(crate::lifecycle_cmd::RetentionArgs),
    /// Place or lift a legal hold on a scope (suspends purging).
    Hold(crate::lifecycle_cmd::HoldArgs),
    /// Purge deleted and expired-by-retention records' bytes (store must not be in use).
    Compact(JsonArgs),
    /// Back up the store (log, settings, ledger) into a new directory.
    Backup(crate::lifecycle_cmd::BackupArgs),
    /// Restore from a backup, re-applying later deletions and revocations.
    Restore(crate::lifecycle_cmd::RestoreArgs),
    /// Benchmarks (`engram bench ingest`, `ann`, `open`, `recall`; see docs/benchmarks.md).
    #[command(subcommand)]
    Bench(crate::bench::BenchCommand),
    /// Serve the store over HTTP/1.1 + JSON (API keys from `engram keys create`; see docs/server.md).
    Serve(crate::keys_cmd::ServeArgs),
    /// API keys of the server: create, list, revoke.
    #[command(subcommand)]
    Keys(crate::keys_cmd::KeysCommand),
    /// Print a shell completion script (e.g. `engram completions bash > /etc/bash_completion.d/engram`).
    Completions(CompletionsArgs),
    /// Print a man page in roff (e.g. `engram man > engram.1 && man ./engram.1`).
    Man(ManArgs),
}

/// `engram man`.
#[derive(Args, Debug)]
pub struct ManArgs {
    /// A command for its own page (e.g. `ingest`, or `bench ingest`); without
    /// one, the page of `engram` itself.
    pub command: Vec<String>,
}

/// `engram completions`.
#[derive(Args, Debug)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    pub shell: clap_complete::Shell,
}

/// `engram demo`.
#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Put the demo store here instead of a temporary directory (must be empty or absent).
    #[arg(long)]
    pub dir: Option<PathBuf>,
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
    #[arg(long, allow_negative_numbers = true)]
    pub limit: Option<usize>,
    /// Act as this principal instead of the tenant admin.
    #[arg(long, value_parser = crate::cli::name_arg, requires = "tenant")]
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
    /// (exit 1 on any difference; not with --checkpoint, which rebuilds
    /// only the checkpoint).
    #[arg(long, conflicts_with = "checkpoint")]
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
/// engine's limits, with no invisible character (as the engine holds a
/// tenant or principal written in a record: one that prints like another
/// is refused, not read as a tenant holding nothing).
pub fn name_arg(s: &str) -> Result<String, String> {
    engram_engine::model::check_identifier("name", s)
        .map(|()| s.to_string())
        .map_err(|e| match e {
            EngineError::InvalidInput { reason, .. } => reason,
            e => e.to_string(),
        })
}

/// Result of a command.
pub type CliResult = Result<ExitCode, CliError>;

/// What every command is given from the global flags, explicitly: the
/// store directory, this invocation's `--embedder` choice and `--quiet`.
#[derive(Clone, Debug)]
pub struct Ctx {
    /// The store directory (`--data`).
    pub data: PathBuf,
    /// `--embedder`: the built-in embedder to use and remember in the
    /// store's settings; `None` keeps the store's own choice.
    pub embedder: Option<String>,
    /// `--quiet`: no progress on stderr.
    pub quiet: bool,
    /// Set when a command opened an existing store to write with an
    /// `--embedder` choice: the choice is remembered once the command has
    /// succeeded, or has stored something ([`Ctx::remember_pending_embedder`]).
    /// Why: a write that fails changes nothing, its store's settings included.
    pub(crate) embedder_pending: std::cell::Cell<bool>,
}

impl Ctx {
    /// A context for the store in `data`, with no embedder choice, not quiet.
    pub fn new(data: impl Into<PathBuf>) -> Self {
        Ctx {
            data: data.into(),
            embedder: None,
            quiet: false,
            embedder_pending: Default::default(),
        }
    }

    /// Remembers this command's `--embedder` choice in the store if an open
    /// to write left it pending (once; later calls do nothing). Called when
    /// the command has succeeded, and by commands that write in several
    /// steps as soon as one is stored, since their records then carry that
    /// embedder's vectors whatever happens next.
    pub fn remember_pending_embedder(&self) -> Result<(), CliError> {
        if self.embedder_pending.replace(false) {
            remember_embedder(&self.data, self.embedder.as_deref())?;
        }
        Ok(())
    }

    /// Options to open this store with (see [`store_options`]).
    pub fn store_options(&self) -> Result<Options, CliError> {
        store_options(&self.data, self.embedder.as_deref())
    }

    /// Opens the existing store for a command that only reads (an
    /// `--embedder` given is used, not remembered), reporting recovery on
    /// stderr.
    pub fn open_store(&self) -> Result<Engram, CliError> {
        open_store_as(self, OpenFor::Read)
    }

    /// Opens the existing store for a command that writes to it (an
    /// `--embedder` given is remembered).
    pub fn open_store_to_write(&self) -> Result<Engram, CliError> {
        open_store_as(self, OpenFor::Write)
    }

    /// Opens the store to write, creating it when `create` and the
    /// directory is missing or empty (commands that store records: init,
    /// ingest, demo).
    pub fn open_store_with(&self, create: bool) -> Result<Engram, CliError> {
        open_store_as(
            self,
            if create {
                OpenFor::Create
            } else {
                OpenFor::Write
            },
        )
    }

    /// A progress bar over `total` items (hidden unless stderr is a
    /// terminal and not `--quiet`).
    pub fn counter(
        &self,
        label: impl Into<std::borrow::Cow<'static, str>>,
        total: u64,
        unit: &'static str,
    ) -> Progress {
        Progress::counter(self.quiet, label, total, unit)
    }

    /// A spinner with elapsed time (hidden unless stderr is a terminal and
    /// not `--quiet`).
    pub fn spinner(&self, label: impl Into<std::borrow::Cow<'static, str>>) -> Progress {
        Progress::spinner(self.quiet, label)
    }
}

/// Parses `args` and runs the command.
pub fn run<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    let cli = match Cli::try_parse_from(&args) {
        Ok(c) => c,
        Err(e) => {
            return match e.kind() {
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => {
                    let _ = e.print();
                    ExitCode::SUCCESS
                }
                // `engram query --json` answers in JSON whatever goes wrong,
                // its command line included
                _ if query_json(&args) => {
                    // (the error, without the usage and help lines after it)
                    let message = e.render().to_string();
                    let message = message.trim_start_matches("error: ");
                    let message = message.split("\n\n").next().unwrap_or("").trim_end();
                    crate::outln!(
                        "{}",
                        serde_json::json!({"errors": [engram_query::lang::unplaced_error_json("usage", message)]})
                    );
                    ExitCode::from(2)
                }
                // an error quotes the argument: plain text, controls escaped
                _ => {
                    crate::output::emit_err(format_args!(
                        "{}",
                        crate::output::terminal_safe(e.render().to_string().trim_end_matches('\n'))
                    ));
                    ExitCode::from(2)
                }
            };
        }
    };
    match dispatch(cli) {
        Ok(code) => code,
        Err(e) => {
            match &e {
                // Located query errors carry their own `error[code]` heading.
                // (an engine error met while running one has none)
                CliError::Query(_) => {
                    let text = e.to_string();
                    let text = text.trim_start();
                    if text.starts_with("error") {
                        crate::errln!("{text}");
                    } else {
                        crate::errln!("error: {text}");
                    }
                }
                _ => crate::errln!("error: {e}"),
            }
            ExitCode::from(1)
        }
    }
}

/// Whether a command line that did not parse is `engram query ... --json`
/// (the first word that is not a global option names the command).
fn query_json(args: &[OsString]) -> bool {
    let mut words = args.iter().skip(1).map(|a| a.to_str().unwrap_or(""));
    let mut command = None;
    while let Some(w) = words.next() {
        match w {
            "--data" | "--embedder" => {
                words.next();
            }
            w if w.starts_with('-') => {}
            w => {
                command = Some(w);
                break;
            }
        }
    }
    command == Some("query") && words.any(|w| w == "--json")
}

fn dispatch(cli: Cli) -> CliResult {
    let ctx = Ctx {
        data: cli.data,
        embedder: cli.embedder,
        quiet: cli.quiet,
        embedder_pending: Default::default(),
    };
    let ctx = &ctx;
    let r = run_command(ctx, cli.command);
    // A command that failed leaves the store's embedder choice as it was
    // (unless it stored records first: those remembered it already).
    if matches!(r, Ok(code) if code == ExitCode::SUCCESS)
        && let Err(e) = ctx.remember_pending_embedder()
    {
        crate::eoutln!(
            "warning: the command succeeded, but its --embedder choice was not remembered: {e}"
        );
    }
    r
}

fn run_command(ctx: &Ctx, command: Command) -> CliResult {
    match command {
        Command::Demo(a) => crate::demo::run(ctx, a.dir),
        Command::Init(a) => cmd_init(ctx, a),
        Command::Repair(a) => cmd_repair(ctx, a),
        Command::Ingest(a) => crate::ingest_cmd::ingest(ctx, a),
        Command::Get(a) => cmd_get(ctx, a, false),
        Command::History(a) => cmd_get(ctx, a, true),
        Command::Log(a) => cmd_log(ctx, a),
        Command::Stats(a) => cmd_stats(ctx, a),
        Command::Verify(a) => cmd_verify(ctx, a),
        Command::Rebuild(a) => cmd_rebuild(ctx, a),
        Command::Recall(a) => crate::recall_cmd::recall(ctx, *a),
        Command::Eval(a) => crate::recall_cmd::eval(ctx, a),
        Command::Context(a) => crate::lifecycle_cmd::context(ctx, a),
        Command::Trace(a) => crate::lifecycle_cmd::trace(ctx, a),
        Command::Review(a) => crate::lifecycle_cmd::review(ctx, a),
        Command::Expire(a) => crate::lifecycle_cmd::expire(ctx, a),
        Command::Correct(a) => crate::lifecycle_cmd::correct(ctx, a),
        Command::Delete(a) => crate::lifecycle_cmd::delete(ctx, a),
        Command::Grant(a) => crate::lifecycle_cmd::access(ctx, a, false),
        Command::Revoke(a) => crate::lifecycle_cmd::access(ctx, a, true),
        Command::Retention(a) => crate::lifecycle_cmd::retention(ctx, a),
        Command::Hold(a) => crate::lifecycle_cmd::hold(ctx, a),
        Command::Compact(a) => crate::lifecycle_cmd::compact(ctx, a.json),
        Command::Backup(a) => crate::lifecycle_cmd::backup(ctx, a),
        Command::Restore(a) => crate::lifecycle_cmd::restore(ctx, a),
        Command::Bench(b) => crate::bench::run(ctx, b),
        Command::Serve(a) => crate::keys_cmd::serve(ctx, a),
        Command::Query(a) => crate::query_cmd::query(ctx, a),
        Command::Shell(a) => crate::query_cmd::shell(ctx, a),
        Command::Keys(k) => crate::keys_cmd::keys(&ctx.data, k),
        Command::Completions(a) => cmd_completions(a),
        Command::Man(a) => cmd_man(a),
    }
}

/// `engram completions SHELL`: the script, generated from this definition.
fn cmd_completions(a: CompletionsArgs) -> CliResult {
    let mut script = Vec::new();
    clap_complete::generate(a.shell, &mut Cli::command(), "engram", &mut script);
    write_stdout(&script)?;
    Ok(ExitCode::SUCCESS)
}

/// `engram man [COMMAND...]`: a man page in roff, generated from this
/// definition (`engram-ingest(1)` and the like for commands).
fn cmd_man(a: ManArgs) -> CliResult {
    let mut cmd = Cli::command().disable_help_subcommand(true);
    // Building names every command for its page (`engram-ingest`).
    cmd.build();
    let mut page_of = &cmd;
    // (`bench ingest` as one argument names the same page as two)
    for name in a.command.iter().flat_map(|c| c.split_whitespace()) {
        page_of = page_of.find_subcommand(name).ok_or_else(|| {
            CliError::Message(format!(
                "no command `{}` (see `engram --help`)",
                a.command.join(" ")
            ))
        })?;
    }
    let mut page = Vec::new();
    clap_mangen::Man::new(page_of.clone())
        .source(format!("engram {}", env!("CARGO_PKG_VERSION")))
        .render(&mut page)?;
    write_stdout(&page)?;
    Ok(ExitCode::SUCCESS)
}

/// Writes generated text to stdout (a closed pipe ends quietly).
fn write_stdout(bytes: &[u8]) -> Result<(), CliError> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r.map_err(CliError::from),
    }
}

/// Options the CLI opens the store in `dir` with: the embedder is
/// `embedder` (the `--embedder` flag), else the one in the store's
/// settings, else none. Nothing is saved here: a new choice is remembered
/// by [`remember_embedder`] once a command that writes has opened the
/// store (a command that only reads, a refused open, a backup or a
/// directory that is not a store keeps its settings).
pub fn store_options(dir: &Path, embedder: Option<&str>) -> Result<Options, CliError> {
    let opts = Options {
        create_if_missing: false,
        ..Options::default()
    };
    let saved = match engram_engine::settings::load(opts.backend.as_ref(), dir) {
        Ok(s) => s,
        // A damaged settings file is replaced by an explicit choice.
        Err(_) if embedder.is_some() => None,
        Err(e) => {
            return Err(CliError::Message(format!(
                "{e}; the store's embedder choice is unknown: name it again with \
                 `engram --data {} --embedder NAME rebuild` (NAME: none, hash, hash-<dims> or minilm:DIR), \
                 which rewrites the settings and rebuilds derived vectors",
                dir.display()
            )));
        }
    };
    let name = embedder
        .map(str::to_string)
        .or_else(|| saved.as_ref().and_then(|s| s.embedder.clone()))
        .unwrap_or_else(|| "none".to_string());
    let chosen = engram_engine::settings::embedder_by_name(&name)?;
    Ok(Options {
        embedder: chosen,
        ..opts
    })
}

/// Closes a command's store. What closing can fail at is writing derived
/// state (the graphs' last nodes, the checkpoint): everything the command
/// stored is durable in the log by then, and derived state is rebuilt from
/// the log at the next open, so the failure is a warning and the command's
/// answer stands. (Why: an exit code of 1 after an acknowledged deletion
/// told a script the deletion had not happened.)
///
/// Vectors still waiting for their HNSW graph (a server stopped without its
/// close, a large load) are indexed for at most [`CLOSE_INDEX_MS`], as a
/// server's shutdown does by default: the next open goes on from there in
/// the background (waiting vectors are searched exactly meanwhile). (Why:
/// a `log --limit 1` after a killed server spent minutes finishing every
/// graph.) `ingest` closes with every graph finished instead: a load is
/// followed by searches.
pub fn close_store(db: &Engram) {
    match db.close_within(std::time::Duration::from_millis(CLOSE_INDEX_MS)) {
        Ok(0) => {}
        Ok(left) => crate::eoutln!(
            "note: {left} vector(s) still wait for their HNSW graph; the next open indexes them in the background (searched exactly meanwhile)"
        ),
        Err(e) => crate::eoutln!(
            "warning: writing derived state at close failed ({e}); every acknowledged write is durable in the log, and derived state is rebuilt from it at the next open"
        ),
    }
}

/// How long a command's close indexes waiting vectors at most (the default
/// of `engram serve`'s `limits.shutdown_index_ms`).
pub const CLOSE_INDEX_MS: u64 = crate::http::config::SHUTDOWN_INDEX_MS_DEFAULT;

/// Saves the `--embedder` choice into the store in `dir` when it differs
/// from what the store remembers (or the settings file is damaged), saying
/// so on stderr. Called once a command that opened the store to write has
/// succeeded (or stored records), so it only ever changes a store that
/// command was allowed to change, and a failed write changes nothing.
pub fn remember_embedder(dir: &Path, embedder: Option<&str>) -> Result<(), CliError> {
    remember_embedder_as(dir, embedder, false)
}

/// [`remember_embedder`] for a command whose open computed every record's
/// vectors with that embedder (a restore): the note names no rebuild.
pub fn remember_embedder_as(
    dir: &Path,
    embedder: Option<&str>,
    vectors_derived: bool,
) -> Result<(), CliError> {
    let Some(name) = embedder else {
        return Ok(());
    };
    let backend = Options::default().backend;
    let wanted = StoreSettings {
        embedder: (name != "none").then(|| name.to_string()),
    };
    // what the store remembers now (no settings file: none)
    let before = match engram_engine::settings::load(backend.as_ref(), dir) {
        Ok(s) => {
            let current = s.and_then(|s| s.embedder);
            if current == wanted.embedder {
                return Ok(());
            }
            current.unwrap_or_else(|| "none".to_string())
        }
        Err(_) => "unreadable settings".to_string(),
    };
    engram_engine::settings::save(backend.as_ref(), dir, &wanted)?;
    let rebuild = if vectors_derived {
        String::new()
    } else {
        format!(
            "; records stored before get its vectors from `engram --data {} rebuild`",
            dir.display()
        )
    };
    crate::eoutln!(
        "note: {} now remembers the embedder '{name}' (it was '{before}'); later commands use it without --embedder{rebuild}",
        dir.display()
    );
    Ok(())
}

/// Whether an open failed because the store's file system is read-only.
fn on_read_only_media(e: &EngineError) -> bool {
    matches!(
        e,
        EngineError::Storage(engram_storage::StorageError::Io { source, .. })
            if source.kind() == std::io::ErrorKind::ReadOnlyFilesystem
    )
}

/// Saves the `--embedder` choice into a store just created.
fn save_embedder_choice(ctx: &Ctx) -> Result<(), CliError> {
    if let Some(name) = &ctx.embedder {
        let wanted = StoreSettings {
            embedder: (name != "none").then(|| name.clone()),
        };
        engram_engine::settings::save(Options::default().backend.as_ref(), &ctx.data, &wanted)?;
    }
    Ok(())
}

/// What a command opens the store for: what it does with `--embedder`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum OpenFor {
    /// Reads: the embedder given is used for this command only.
    Read,
    /// Writes: the embedder given is remembered.
    Write,
    /// Writes, creating the store if needed.
    Create,
}

fn open_store_as(ctx: &Ctx, why: OpenFor) -> Result<Engram, CliError> {
    let create = why == OpenFor::Create;
    let dir = ctx.data.as_path();
    // (a store this open creates takes the choice silently; an existing
    // one says it changed)
    let new_store = create
        && matches!(
            engram_engine::store_dir::classify(Options::default().backend.as_ref(), dir),
            Ok(engram_engine::store_dir::DirKind::Empty)
        );
    if let Ok(m) = std::fs::metadata(dir)
        && !m.is_dir()
    {
        return Err(CliError::Message(format!(
            "--data {}: is a file, not a store directory",
            dir.display()
        )));
    }
    let opts = Options {
        create_if_missing: create,
        ..ctx.store_options()?
    };
    // A store on read-only media (its lock file cannot be opened for
    // writing) is opened read-only: reads work, writes say why they fail.
    let opened = match Engram::open_with_report(dir, opts.clone()) {
        Err(e) if !create && on_read_only_media(&e) => {
            crate::eoutln!(
                "note: {} is on a read-only file system: opened read-only (writes are refused)",
                dir.display()
            );
            Engram::open_with_report(
                dir,
                Options {
                    read_only: true,
                    ..opts
                },
            )
        }
        r => r,
    };
    let (db, report) = opened.map_err(|e| match e {
        EngineError::NoStore { .. } | EngineError::NotAStore { .. } => CliError::Engine(e),
        e => CliError::Open {
            path: dir.to_path_buf(),
            source: e,
        },
    })?;
    if new_store {
        save_embedder_choice(ctx)?;
    } else if why != OpenFor::Read && !db.options().read_only && ctx.embedder.is_some() {
        ctx.embedder_pending.set(true);
    }
    if let Some(t) = &report.log.truncation {
        crate::eoutln!("recovery: {t}");
    }
    if let Some(r) = &report.ledger_reapplied {
        crate::eoutln!(
            "recovery: the cut tail held operations the ledger proves acknowledged; applied again: {}",
            crate::lifecycle_cmd::reapplied_counts(r)
        );
    }
    if let Some(p) = &report.log.removed_incomplete_segment {
        crate::eoutln!(
            "recovery: removed empty segment {} left by an interrupted start",
            p.display()
        );
    }
    if let Some(why) = &report.checkpoint_discarded {
        crate::eoutln!("recovery: state checkpoint not used ({why}); the whole log was replayed");
    }
    for m in &report.vectors_rebuilt {
        crate::eoutln!("recovery: vector index for '{m}' rebuilt from the log");
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

/// [`session_for`] for a read (query, recall, eval, context, shell): a
/// tenant that holds nothing in the store is said on stderr, since its
/// empty answers would otherwise look like a search that found nothing.
pub fn read_session_for(db: &Engram, tenant: &str, principal: Option<&str>) -> Session {
    note_if_unknown_tenant(db, tenant);
    session_for(db, tenant, principal)
}

/// Says on stderr that `tenant` holds nothing in the store, when it does
/// not: a typo would otherwise read as a search that found nothing.
pub fn note_if_unknown_tenant(db: &Engram, tenant: &str) {
    if !db.has_tenant(tenant) {
        crate::eoutln!(
            "note: tenant '{tenant}' holds nothing in this store (`engram stats` lists its tenants)"
        );
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
            let r = RecordRef::parse_text(id).map_err(|e| CliError::Message(format!("ID: {e}")))?;
            Ok((t.clone(), r))
        }
        (None, Some(p)) => Err(CliError::Message(format!(
            "--principal {p} needs --tenant: a principal belongs to one tenant"
        ))),
        (None, None) => {
            let raw = id.strip_prefix("id:").unwrap_or(id);
            let rid: RecordId = raw.parse().map_err(|_| {
                CliError::Message(format!(
                    "'{id}' is not an internal id; to look up an external id, add --tenant T"
                ))
            })?;
            let t = db
                .tenant_of(rid)
                .ok_or_else(|| CliError::Message(format!("no record {rid} in this store")))?;
            Ok((t, RecordRef::Id(rid)))
        }
    }
}

/// Prints `v` as pretty JSON on stdout.
pub(crate) fn print_json<T: Serialize>(v: &T) -> Result<(), CliError> {
    crate::outln!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

/// Bytes `engram ingest` reads whole before its first batch (its lines
/// are all parsed and checked before any is stored).
pub const INGEST_INPUT_BYTES_MAX: usize = 1 << 30;

/// Lines `engram ingest` reads whole: a parsed line takes about a
/// kilobyte more than its text in memory, so an endless input of short
/// lines (`yes | engram ingest -`) stops here, at about 2 GiB, rather
/// than at the byte cap.
pub const INGEST_LINES_MAX: usize = 2_000_000;

/// Reads the file (`-`: stdin) of `engram ingest` as UTF-8 text, within
/// [`INGEST_INPUT_BYTES_MAX`] and [`INGEST_LINES_MAX`]; an invalid byte is
/// reported with its line.
pub fn read_ingest_input(file: &Path) -> Result<String, CliError> {
    read_input_within(
        file,
        (INGEST_INPUT_BYTES_MAX, INGEST_LINES_MAX),
        "; give it in parts (`split -l 1000000`), or stream it to a server's POST /v1/records/bulk",
    )
}

/// Bytes a statement, a parameter file or one record to correct may
/// hold, read whole (a statement is at most 64 KiB, a record's text and
/// data 1 MiB each): an endless input stops here instead of filling
/// memory.
pub const SMALL_INPUT_BYTES_MAX: usize = 16 << 20;

/// Bytes a file of requests (`recall --queries`, `eval` cases) may hold,
/// read whole.
pub const REQUESTS_INPUT_BYTES_MAX: usize = 256 << 20;

/// An input file (`-`: stdin) read whole as UTF-8 text (an invalid byte
/// reported with its line), refused past `cap` bytes (naming the cap)
/// without reading further.
pub fn read_input_capped(file: &Path, cap: usize) -> Result<String, CliError> {
    read_input_within(file, (cap, usize::MAX), "")
}

/// [`read_input_capped`] within `(bytes, lines)`; `hint` ends the message
/// of a cap reached.
fn read_input_within(file: &Path, cap: (usize, usize), hint: &str) -> Result<String, CliError> {
    let read_err = |source| CliError::Read {
        path: file.to_path_buf(),
        source,
    };
    let bytes = if file.as_os_str() == "-" {
        read_lines_bounded(&mut std::io::stdin().lock(), file, cap, hint)?
    } else {
        let mut f = std::fs::File::open(file).map_err(read_err)?;
        read_lines_bounded(&mut f, file, cap, hint)?
    };
    // (decoding fails for the file as a whole: no field to name)
    engram_query::text::decode(&bytes).map_err(|e| {
        CliError::Message(format!("{}: line {}: {}", file.display(), e.line, e.reason))
    })
}

/// A temporary directory for a command's scratch stores (`kind`: bench,
/// demo), removed on drop. Named `engram-<kind>-<pid>-…`, so that a
/// command interrupted by a signal (which skips the drop) leaves a
/// directory the next such command removes: before creating its own, it
/// removes those of processes that no longer run (Linux: `/proc/<pid>` is
/// gone).
pub(crate) fn scratch_dir(kind: &str) -> std::io::Result<tempfile::TempDir> {
    let tmp = std::env::temp_dir();
    let prefix = format!("engram-{kind}-");
    if Path::new("/proc/self").exists() {
        if let Ok(entries) = std::fs::read_dir(&tmp) {
            for e in entries.flatten() {
                let name = e.file_name();
                let Some(pid) = name
                    .to_str()
                    .and_then(|n| n.strip_prefix(prefix.as_str()))
                    .and_then(|rest| rest.split('-').next())
                    .and_then(|p| p.parse::<u32>().ok())
                else {
                    continue;
                };
                if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
    }
    tempfile::Builder::new()
        .prefix(&format!("{prefix}{}-", std::process::id()))
        .tempdir_in(tmp)
}

/// Bytes one line of an input file may hold: far above any valid line (a
/// record's text and data are at most 1 MiB each), so that an input
/// without line ends (`/dev/zero`, a binary file) stops with an error
/// instead of filling memory.
pub(crate) const INPUT_LINE_BYTES_MAX: usize = 16 << 20;

/// Reads `r` whole, refusing a line longer than [`INPUT_LINE_BYTES_MAX`]
/// and an input longer than `cap` (bytes, lines); `hint` ends the
/// message of a cap reached.
fn read_lines_bounded(
    r: &mut impl std::io::Read,
    file: &Path,
    (cap, lines_cap): (usize, usize),
    hint: &str,
) -> Result<Vec<u8>, CliError> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    let (mut line_len, mut line_no) = (0usize, 1usize);
    loop {
        let n = match r.read(&mut buf) {
            Ok(0) => return Ok(out),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(source) => {
                return Err(CliError::Read {
                    path: file.to_path_buf(),
                    source,
                });
            }
        };
        let chunk = &buf[..n];
        match chunk.iter().rposition(|&b| b == b'\n') {
            Some(last) => {
                line_no += chunk.iter().filter(|&&b| b == b'\n').count();
                line_len = n - last - 1;
            }
            None => line_len += n,
        }
        if line_len > INPUT_LINE_BYTES_MAX {
            return Err(CliError::Message(format!(
                "{}: line {line_no}: longer than {} MiB, the most a line may hold (not a JSONL or text file?)",
                file.display(),
                INPUT_LINE_BYTES_MAX >> 20
            )));
        }
        if out.len().saturating_add(n) > cap {
            return Err(CliError::Message(format!(
                "{}: longer than {} MiB, the most this input may hold (nothing was done){hint}",
                file.display(),
                cap >> 20
            )));
        }
        // (line_no - 1 lines have ended; a line started after the last
        // one is one more)
        if line_no.saturating_sub(usize::from(line_len == 0)) > lines_cap {
            return Err(CliError::Message(format!(
                "{}: more than {lines_cap} lines, the most this input may hold (nothing was done){hint}",
                file.display(),
            )));
        }
        out.extend_from_slice(&buf[..n]);
    }
}

/// Formats a timestamp for messages.
pub fn ts(ms: i64) -> String {
    format_rfc3339(ms)
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;
    use engram_query::lang::QueryError;

    /// An input without line ends (`/dev/zero`) stops at the line bound
    /// instead of filling memory; lines below it read whole.
    #[test]
    fn an_endless_line_is_refused_not_read_whole() {
        use std::io::Read;
        let p = Path::new("zero");
        let mut endless = std::io::repeat(0u8).take((INPUT_LINE_BYTES_MAX + (1 << 20)) as u64);
        let e = read_lines_bounded(&mut endless, p, (usize::MAX, usize::MAX), "")
            .unwrap_err()
            .to_string();
        assert!(e.contains("zero: line 1: longer than 16 MiB"), "{e}");
        let text = "a\nbb\n".repeat(1000);
        let got =
            read_lines_bounded(&mut text.as_bytes(), p, (usize::MAX, usize::MAX), "").unwrap();
        assert_eq!(got, text.as_bytes());
        let mut third = "x\ny\n".to_string();
        third.push_str(&"z".repeat(INPUT_LINE_BYTES_MAX + 1));
        let e = read_lines_bounded(&mut third.as_bytes(), p, (usize::MAX, usize::MAX), "")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 3"), "{e}");
    }

    /// An endless input of short lines (`yes`) stops at the input's cap,
    /// named, instead of filling memory; one below it reads whole.
    #[test]
    fn an_input_past_its_cap_is_refused_not_read_whole() {
        let p = Path::new("yes");
        let lines = "FIND ANY MATCH 'x'\n".repeat(100_000);
        let e = read_lines_bounded(&mut lines.as_bytes(), p, (1 << 20, usize::MAX), "")
            .unwrap_err()
            .to_string();
        assert!(e.contains("yes: longer than 1 MiB"), "{e}");
        let got = read_lines_bounded(&mut lines.as_bytes(), p, (2 << 20, usize::MAX), "").unwrap();
        assert_eq!(got, lines.as_bytes());
        // the cap in lines: as many as it allows read whole, with or
        // without a last line end; one more refused, with the hint
        let got = read_lines_bounded(&mut lines.as_bytes(), p, (usize::MAX, 100_000), "").unwrap();
        assert_eq!(got, lines.as_bytes());
        let cut = lines.trim_end();
        let got = read_lines_bounded(&mut cut.as_bytes(), p, (usize::MAX, 100_000), "").unwrap();
        assert_eq!(got, cut.as_bytes());
        let more = format!("{lines}x");
        let e = read_lines_bounded(&mut more.as_bytes(), p, (usize::MAX, 100_000), "; in parts")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("yes: more than 100000 lines") && e.ends_with("; in parts"),
            "{e}"
        );
    }

    #[test]
    fn errors_keep_their_source_and_print_as_before() {
        let engine = || EngineError::invalid("text", "too long");
        let e = CliError::from(engine());
        assert_eq!(e.to_string(), engine().to_string());
        assert!(matches!(
            e,
            CliError::Engine(EngineError::InvalidInput { .. })
        ));

        let e = CliError::Open {
            path: PathBuf::from("/s"),
            source: engine(),
        };
        assert_eq!(e.to_string(), format!("cannot open store /s: {}", engine()));
        let source = e.source().expect("a source");
        assert!(source.downcast_ref::<EngineError>().is_some());

        let io = || std::io::Error::new(std::io::ErrorKind::NotFound, "gone");
        let e = CliError::from(io());
        assert_eq!(e.to_string(), "gone");
        assert!(
            e.source()
                .unwrap()
                .downcast_ref::<std::io::Error>()
                .is_some()
        );
        let e = CliError::io_at(Path::new("out/x.json"))(io());
        assert_eq!(e.to_string(), "out/x.json: gone");
        let e = CliError::Read {
            path: PathBuf::from("in.jsonl"),
            source: io(),
        };
        assert_eq!(e.to_string(), "cannot read in.jsonl: gone");

        let e = CliError::from(QueryError::Engine(engine()));
        assert_eq!(e.to_string(), engine().to_string());
        assert!(e.source().unwrap().downcast_ref::<QueryError>().is_some());

        let e = CliError::from(RejectedBatch {
            n_lines: 3,
            tenant: "t".into(),
            first_line: 4,
            last_line: 6,
            line: Some(5),
            n_stored_before: 0,
            n_batches_before: 0,
            source: engine(),
        });
        assert_eq!(
            e.to_string(),
            format!(
                "batch of 3 line(s) of tenant 't' between lines 4 and 6 rejected, nothing of it stored: line 5: {} (nothing was stored)",
                engine()
            )
        );
        assert!(e.source().unwrap().downcast_ref::<EngineError>().is_some());
        // the file line stands in for the engine's position in the batch
        let e = CliError::from(RejectedBatch {
            n_lines: 3,
            tenant: "t".into(),
            first_line: 4,
            last_line: 6,
            line: Some(6),
            n_stored_before: 0,
            n_batches_before: 0,
            source: engine().at_item(2),
        });
        assert_eq!(
            e.to_string(),
            "batch of 3 line(s) of tenant 't' between lines 4 and 6 rejected, nothing of it stored: line 6: invalid text: too long (nothing was stored)"
        );
        // records of earlier batches may be duplicates: they are in the
        // store, not necessarily stored by this run
        let e = CliError::from(RejectedBatch {
            n_lines: 1,
            tenant: "t".into(),
            first_line: 2,
            last_line: 2,
            line: Some(2),
            n_stored_before: 1,
            n_batches_before: 1,
            source: engine(),
        });
        assert!(
            e.to_string()
                .contains("1 record(s) in 1 batch(es) sent before this one are in the store, created by this run or already there"),
            "{e}"
        );
        assert_eq!(CliError::msg("plain").to_string(), "plain");
    }
}
