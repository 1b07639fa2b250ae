//! `engram demo`: the guided tour, on a fresh embedded store.
//!
//! It ingests a bundled, realistic sample (an incident-triage timeline and a
//! customer-memory conversation, including a correction) through the same
//! code path as `engram ingest`, then shows what was stored and the
//! correction history.

use std::path::PathBuf;
use std::process::ExitCode;

use engram_engine::{Engram, Principal, RecordRef};

use crate::cli::{CliError, CliResult, ingest_lines, open_store};
use crate::output::{record_block, record_header};

/// The bundled sample (also a worked example of the ingest format).
pub const SAMPLE_JSONL: &str = include_str!("demo/sample.jsonl");

fn section(title: &str) {
    crate::outln!(
        "\n== {title} {}",
        "=".repeat(70usize.saturating_sub(title.len()))
    );
}

/// Runs the demo.
pub fn run(dir: Option<PathBuf>) -> CliResult {
    let tmp;
    let dir = match dir {
        Some(d) => {
            if d.exists() && std::fs::read_dir(&d)?.next().is_some() {
                return Err(CliError(format!(
                    "{} is not empty; the demo needs a fresh directory",
                    d.display()
                )));
            }
            d
        }
        None => {
            tmp = tempfile::Builder::new().prefix("engram-demo-").tempdir()?;
            tmp.path().to_path_buf()
        }
    };
    crate::outln!("Engram demo: a fresh embedded store in {}", dir.display());
    // The demo derives vectors with the built-in lexical embedder (not a
    // semantic model: it hashes words and word pieces).
    crate::cli::set_embedder_default("hash");
    let db = open_store(&dir)?;
    let result = tour(&db);
    db.close()?;
    result?;
    crate::outln!(
        "\nDone. The store is in {} (deleted on exit unless --dir was given).",
        dir.display()
    );
    Ok(ExitCode::SUCCESS)
}

fn tour(db: &Engram) -> Result<(), CliError> {
    section("1. Ingest: two stories, one append-only log");
    let lines = engram_query::parse_jsonl(SAMPLE_JSONL)
        .map_err(|e| CliError(format!("bundled sample: {e}")))?;
    let report = ingest_lines(db, lines, None, 1000, false)?;
    crate::outln!(
        "{} records written in {} atomic batch(es); every append was on disk (fsync) before it was acknowledged.",
        report.created,
        report.batches
    );
    let ops = db.session(Principal::admin("acme-ops"));
    let support = db.session(Principal::admin("acme-support"));

    section("2. What the store holds: the incident timeline (tenant acme-ops)");
    for r in ops.list(&Default::default())? {
        crate::outln!("{}", record_header(&r));
        if let Some(t) = &r.text {
            crate::outln!("    {t}");
        }
    }

    section("3. A correction: nothing is overwritten");
    crate::outln!(
        "A voice transcript said \"by phone\"; after review it was corrected to \"by email\"."
    );
    crate::outln!(
        "The correction is a new event that supersedes the original; history keeps both:\n"
    );
    let hist = support.history(&RecordRef::External("conv-993/17".into()))?;
    for (i, r) in hist.iter().enumerate() {
        crate::outln!(
            "version {} of {}:\n{}\n",
            i + 1,
            hist.len(),
            record_block(r)
        );
    }
    let current = support.current(&RecordRef::External("conv-993/17".into()))?;
    crate::outln!(
        "The external id conv-993/17 now names the current version {} ({}).",
        current.id,
        current.text.as_deref().unwrap_or("")
    );

    section("4. Isolation: one tenant cannot see the other");
    let probe = ops.get(&RecordRef::Id(current.id));
    crate::outln!(
        "acme-ops asks for acme-support's record {}: {}",
        current.id,
        match probe {
            Ok(_) => "FOUND (this would be a bug)".to_string(),
            Err(e) => format!("{e}"),
        }
    );
    let stats = db.stats()?;
    section("5. Store");
    crate::outln!(
        "{} records, {} log segment(s), {} bytes of log; catalog holds {} records.",
        stats.records,
        stats.log_segments,
        stats.log_bytes,
        stats.catalog_records
    );
    Ok(())
}
