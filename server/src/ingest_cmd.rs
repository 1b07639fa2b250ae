//! `engram ingest`: a JSONL file of events and records into the store, in
//! atomic batches, and what it did: a summary by default, one line per
//! record with `--verbose`, the full report with `--json`.
//!
//! The rule for bad input: a file with any malformed line stores nothing.
//! Every line is parsed (and its tenant checked) before anything is
//! written, and the error names the first [`REJECTED_LINES_SHOWN`] lines at
//! fault, not only the first. A batch the engine refuses (a dangling
//! `supersedes`, a conflicting external id) stores nothing of itself and
//! stops the ingest; the batches before it stay stored, and the error says
//! how many records they hold.
//!
//! This module only builds engine requests and renders results: it never
//! interprets a record beyond its tenant, and never touches store files.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::{Args, ValueHint};
use engram_engine::{AppendOutcome, Engram, Principal, RecordId, Status};
use engram_query::IngestLine;
use serde::Serialize;

use crate::cli::{CliError, CliResult, Ctx, RejectedBatch, print_json, read_ingest_input};
use crate::progress::Progress;

/// Malformed lines named in the error of a rejected file (the count of all
/// of them follows).
pub const REJECTED_LINES_SHOWN: usize = 5;

/// Parsed lines between two updates of the parse bar.
const PARSE_PROGRESS_STEP_LINES: usize = 512;

/// `engram ingest`.
#[derive(Args, Debug)]
pub struct IngestArgs {
    /// The JSONL file (`-` for stdin).
    #[arg(value_hint = ValueHint::FilePath)]
    pub file: PathBuf,
    /// Tenant for lines that do not name one (lines naming another tenant are rejected).
    #[arg(long, value_parser = crate::cli::name_arg)]
    pub tenant: Option<String>,
    /// Records per atomic batch (1 to 10000, the most one batch holds).
    #[arg(long, default_value_t = 1000, value_parser = batch_size_arg)]
    pub batch_size: usize,
    /// After the summary, one line per record (line, id, outcome, status).
    #[arg(long, short = 'v')]
    pub verbose: bool,
    /// Machine-readable output: the full report, one entry per record.
    #[arg(long)]
    pub json: bool,
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
    /// What the engine decided beyond what the line said (inherited
    /// fields of a correction, vectors a duplicate did not store).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// What an ingest did. Its serde form is the `--json` output, which
/// scripts read: its fields and their order do not change.
#[derive(Debug, Serialize, Default)]
pub struct IngestReport {
    /// Records stored.
    pub created: usize,
    /// Records already present with the same content.
    pub duplicates: usize,
    /// Atomic batches written.
    pub batches: usize,
    /// Per line, in file order.
    pub records: Vec<IngestedLine>,
    /// Why the ingest stopped, when a batch was refused: `records` then
    /// lists what the batches before it stored (durable, and a duplicate
    /// when the file is sent again).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The tenant a line is written to: its own, else `--tenant`; a line naming
/// another tenant than `--tenant` is refused.
fn line_tenant(l: &IngestLine, default_tenant: Option<&str>) -> Result<String, String> {
    let t = match (&l.tenant, default_tenant) {
        (Some(t), Some(d)) if t != d => {
            return Err(format!(
                "line {}: tenant: '{t}' differs from --tenant '{d}'",
                l.line
            ));
        }
        (Some(t), _) => t.clone(),
        (None, Some(d)) => d.to_string(),
        (None, None) => {
            return Err(format!(
                "line {}: tenant: required (or pass --tenant T)",
                l.line
            ));
        }
    };
    engram_engine::model::check_tenant(&t).map_err(|e| format!("line {}: {e}", l.line))?;
    Ok(t)
}

/// `--batch-size`: checked before the file is read, so a batch the store
/// would refuse as too large fails no ingest midway.
fn batch_size_arg(s: &str) -> Result<usize, String> {
    let max = engram_engine::model::limits::BATCH_RECORDS_MAX;
    match s.parse::<usize>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(format!("expected a number of records from 1 to {max}")),
    }
}

/// Text and data one window of lines holds at most (16 MiB, a third of
/// the log's limit on one batch: frames add ids, hashes and vectors).
const WINDOW_BYTES_MAX: usize = 16 << 20;

/// Ingests parsed lines in atomic batches: windows of `batch_size` lines,
/// one batch per tenant inside a window. Tenants are checked for every line
/// before anything is written. `progress` advances by one per record
/// stored.
pub fn ingest_lines(
    db: &Engram,
    lines: Vec<IngestLine>,
    default_tenant: Option<&str>,
    batch_size: usize,
    progress: &Progress,
) -> Result<IngestReport, CliError> {
    let mut report = IngestReport::default();
    ingest_lines_into(
        db,
        lines,
        default_tenant,
        (batch_size, progress),
        &mut report,
    )?;
    Ok(report)
}

/// [`ingest_lines`], reporting into `report` as batches are stored: on a
/// refused batch, `report` holds what the batches before it stored.
fn ingest_lines_into(
    db: &Engram,
    lines: Vec<IngestLine>,
    default_tenant: Option<&str>,
    (batch_size, progress): (usize, &Progress),
    report: &mut IngestReport,
) -> Result<(), CliError> {
    if batch_size == 0 {
        return Err(CliError::msg("--batch-size must be at least 1"));
    }
    let tenants = lines
        .iter()
        .map(|l| line_tenant(l, default_tenant))
        .collect::<Result<Vec<String>, String>>()
        .map_err(CliError::Message)?;
    let run = db.new_run_id();
    // Windows of `batch_size` lines; inside a window, one atomic batch per
    // tenant (lines keep their order within a tenant; tenants cannot refer
    // to each other, so order across tenants does not matter).
    let mut window_start = 0;
    while window_start < lines.len() {
        // (and at most WINDOW_BYTES_MAX of text and data, after its first
        // line: a batch of the largest records would pass the log's limit
        // on one batch's bytes)
        let mut window_end = window_start;
        let mut bytes = 0usize;
        while window_end < lines.len() && window_end - window_start < batch_size {
            bytes = bytes.saturating_add(lines[window_end].record.content_bytes());
            if window_end > window_start && bytes > WINDOW_BYTES_MAX {
                break;
            }
            window_end += 1;
        }
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
                report.records.sort_by_key(|r| r.line);
                RejectedBatch {
                    n_lines: idxs.len(),
                    tenant: tenant.clone(),
                    first_line: lines[window_start].line,
                    last_line: lines[window_end - 1].line,
                    line: e.item().map(|i| lines[idxs[i]].line),
                    n_stored_before: report.created + report.duplicates,
                    n_batches_before: report.batches,
                    source: e,
                }
            })?;
            report.batches += 1;
            progress.inc(idxs.len() as u64);
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
                    notes: r.notes,
                });
            }
        }
        window_start = window_end;
    }
    report.records.sort_by_key(|r| r.line);
    Ok(())
}

/// Malformed lines of a file: the first few with their errors, and how
/// many in all.
#[derive(Debug, Default)]
struct RejectedLines {
    /// `line N: field: reason`, at most [`REJECTED_LINES_SHOWN`].
    shown: Vec<String>,
    n_rejected: usize,
}

impl RejectedLines {
    fn push(&mut self, error: String) {
        self.n_rejected += 1;
        if self.shown.len() < REJECTED_LINES_SHOWN {
            self.shown.push(error);
        }
    }

    /// The error for the file: one malformed line reads as it always did;
    /// several are listed under a header.
    fn into_error(self, file: &Path) -> CliError {
        // A file of one JSON document (an array, or an object written over
        // several lines) is the likeliest mistake behind these: said once.
        let whole_document = self.shown.first().is_some_and(|e| {
            e == "line 1: expected a JSON object, found a list"
                || e.starts_with("line 1: not valid JSON: EOF while parsing a")
        });
        let hint = if whole_document {
            "\nhint: an ingest file holds one JSON object per line (JSON Lines), not a JSON array or an object written over several lines (`jq -c '.[]' in.json > in.jsonl` writes an array's objects one per line)"
        } else {
            ""
        };
        if self.n_rejected == 1 {
            let e = &self.shown[0];
            return CliError::Message(format!(
                "{}: {e} (nothing was stored){hint}",
                file.display()
            ));
        }
        let mut msg = format!(
            "{}: {} line(s) rejected, nothing was stored:",
            file.display(),
            self.n_rejected
        );
        for e in &self.shown {
            msg.push_str("\n  ");
            msg.push_str(e);
        }
        if self.n_rejected > self.shown.len() {
            msg.push_str(&format!(
                "\n  ... and {} more line(s)",
                self.n_rejected - self.shown.len()
            ));
        }
        msg.push_str(hint);
        CliError::Message(msg)
    }
}

/// Parses every line of `text` and checks its tenant, with a bar over the
/// lines. Any malformed line rejects the file (see the module doc).
fn parse_file(ctx: &Ctx, a: &IngestArgs, text: &str) -> Result<Vec<IngestLine>, CliError> {
    let n_lines = text.lines().count();
    let bar = ctx.counter("parse ", n_lines as u64, "lines");
    let mut lines = Vec::new();
    let mut rejected = RejectedLines::default();
    for (n_parsed, item) in engram_query::parse_jsonl_lines(text).enumerate() {
        if n_parsed % PARSE_PROGRESS_STEP_LINES == 0 {
            let line = match &item {
                Ok(l) => l.line,
                Err(e) => e.line,
            };
            bar.set_position(line as u64);
        }
        let error = match item {
            Ok(l) => match line_tenant(&l, a.tenant.as_deref()) {
                // a line's own fields, as the store would refuse it in its
                // batch, after earlier batches were stored (a correction
                // command names its target after its body: not a parse
                // error there)
                Ok(_) => match l.record.misplaced_replace_access() {
                    Some((field, why)) => Some(format!("line {}: {field}: {why}", l.line)),
                    None => {
                        lines.push(l);
                        None
                    }
                },
                Err(e) => Some(e),
            },
            Err(e) => Some(e.to_string()),
        };
        if let Some(e) = error {
            rejected.push(e);
        }
    }
    bar.finish();
    if rejected.n_rejected > 0 {
        return Err(rejected.into_error(&a.file));
    }
    if lines.is_empty() {
        return Err(CliError::Message(format!(
            "{}: no records",
            a.file.display()
        )));
    }
    Ok(lines)
}

/// Runs `engram ingest`.
pub fn ingest(ctx: &Ctx, a: IngestArgs) -> CliResult {
    let text = read_ingest_input(&a.file)?;
    let lines = parse_file(ctx, &a, &text)?;
    drop(text);
    let db = ctx.open_store_with(true)?;
    let started = Instant::now();
    let bar = ctx.counter("ingest", lines.len() as u64, "records");
    let at_open = db.applied_lsn();
    let mut report = IngestReport::default();
    let result = ingest_lines_into(
        &db,
        lines,
        a.tenant.as_deref(),
        (a.batch_size, &bar),
        &mut report,
    );
    // (a run whose every line was already stored changed nothing)
    if report.created > 0 {
        crate::output::change_made(format!(
            "stored {} new record(s) ({} already there)",
            report.created, report.duplicates
        ));
    }
    if db.applied_lsn() > at_open {
        // stored records carry this embedder's vectors, even if a later
        // batch failed
        ctx.remember_pending_embedder()?;
    }
    let store_seconds = started.elapsed().as_secs_f64();
    bar.finish();
    let closing = if result.is_ok() && db.pending_vectors() > 0 {
        let s = ctx.spinner("close ");
        s.set_message(format!("indexing {} vectors", db.pending_vectors()));
        s
    } else {
        Progress::hidden()
    };
    // The records are durable once appended: a failure to write derived
    // state at close (a full disk, say) is reported, but does not turn a
    // successful ingest into a failed one.
    let closed = db.close();
    closing.finish();
    if let Err(e) = result {
        // with --json, what the batches before the refused one stored is
        // still machine output: a script learns their ids
        if a.json {
            report.error = Some(e.to_string());
            print_json(&report)?;
        }
        return Err(e);
    }
    if let Err(e) = closed {
        crate::eoutln!(
            "warning: every record reported below is stored and durable; writing derived state at close failed ({e}); it is rebuilt from the log at the next open"
        );
    }
    if a.json {
        print_json(&report)?;
        return Ok(ExitCode::SUCCESS);
    }
    print_summary(ctx, &a, &report, store_seconds);
    if a.verbose {
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
            for n in &r.notes {
                crate::outln!("              note: {n}");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The summary: counts, batches, time and rate, then records per tenant
/// and per admission status.
fn print_summary(ctx: &Ctx, a: &IngestArgs, report: &IngestReport, store_seconds: f64) {
    let n_records = report.records.len();
    crate::outln!(
        "ingested {n_records} record(s): {} created, {} duplicate(s), {} batch(es) in {store_seconds:.2}s ({:.0} records/s)",
        report.created,
        report.duplicates,
        report.batches,
        n_records as f64 / store_seconds.max(1e-9)
    );
    let mut by_tenant: BTreeMap<&str, usize> = BTreeMap::new();
    let mut by_status: BTreeMap<&str, usize> = BTreeMap::new();
    for r in &report.records {
        *by_tenant.entry(r.tenant.as_str()).or_default() += 1;
        *by_status.entry(r.status.name()).or_default() += 1;
    }
    let counts = |m: &BTreeMap<&str, usize>| {
        m.iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    crate::outln!("  from     {}", a.file.display());
    crate::outln!("  into     {}", ctx.data.display());
    crate::outln!("  tenants  {}", counts(&by_tenant));
    crate::outln!("  status   {}", counts(&by_status));
    crate::outln!(
        "  batches  atomic, up to {} line(s) and 16 MiB of text and data each, each on disk (fsync) before it was acknowledged",
        a.batch_size
    );
    if !a.verbose {
        crate::outln!("(one line per record: --verbose; machine output: --json)");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rejected(n: usize) -> RejectedLines {
        let mut r = RejectedLines::default();
        for i in 1..=n {
            r.push(format!("line {i}: text: required"));
        }
        r
    }

    #[test]
    fn one_malformed_line_reads_as_it_always_did() {
        let e = rejected(1).into_error(Path::new("f.jsonl"));
        assert_eq!(
            e.to_string(),
            "f.jsonl: line 1: text: required (nothing was stored)"
        );
    }

    /// A JSON array, or an object over several lines, gets the hint that
    /// a file holds one object per line; other malformed lines do not.
    #[test]
    fn a_whole_json_document_is_told_the_file_format() {
        for first in [
            "line 1: expected a JSON object, found a list",
            "line 1: not valid JSON: EOF while parsing an object at line 1 column 1",
            "line 1: not valid JSON: EOF while parsing a list at line 1 column 1",
        ] {
            let mut r = RejectedLines::default();
            r.push(first.to_string());
            let e = r.into_error(Path::new("f.json")).to_string();
            assert!(e.contains("one JSON object per line"), "{e}");
        }
        let e = rejected(2).into_error(Path::new("f.jsonl")).to_string();
        assert!(!e.contains("hint"), "{e}");
        // a field of a line holding a list is no whole document
        let mut r = RejectedLines::default();
        r.push("line 1: scope: expected an object, found a list".into());
        let e = r.into_error(Path::new("f.jsonl")).to_string();
        assert!(!e.contains("hint"), "{e}");
    }

    #[test]
    fn many_malformed_lines_are_listed_up_to_the_limit_then_counted() {
        let n = REJECTED_LINES_SHOWN + 3;
        let text = rejected(n).into_error(Path::new("f.jsonl")).to_string();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            format!("f.jsonl: {n} line(s) rejected, nothing was stored:")
        );
        assert_eq!(lines.len(), 1 + REJECTED_LINES_SHOWN + 1, "{text}");
        assert_eq!(lines[1], "  line 1: text: required");
        assert_eq!(lines[REJECTED_LINES_SHOWN + 1], "  ... and 3 more line(s)");
        let exact = rejected(2).into_error(Path::new("f.jsonl")).to_string();
        assert_eq!(exact.lines().count(), 3, "no '... more' line: {exact}");
    }
}
