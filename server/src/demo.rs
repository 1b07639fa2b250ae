//! `engram demo`: the guided tour, on a fresh embedded store.
//!
//! 1. ingest a bundled, realistic sample (an incident-triage timeline and a
//!    customer-memory conversation) through the same code path as
//!    `engram ingest`;
//! 2. show what was stored, and a correction with its history;
//! 3. a hybrid recall with its manifest (eligibility before ranking);
//! 4. one lifecycle story: an observation, a summary built on it, a
//!    correction that makes the summary stale, a deletion that purges it,
//!    and a trace at each step;
//! 5. the working memory assembled for a model call;
//! 6. isolation between tenants.

use std::path::PathBuf;
use std::process::ExitCode;

use engram_engine::context::ContextRequest;
use engram_engine::retrieval::RecallRequest;
use engram_engine::trace::render_trace;
use engram_engine::{AssertionKind, Body, Derivation, Engram, NewRecord, Principal, RecordRef};

use crate::cli::{CliError, CliResult, Ctx};
use crate::ingest_cmd::ingest_lines;
use crate::output::{record_block, record_header};
use crate::progress::Progress;
use crate::recall_cmd::print_manifest;

/// The bundled sample (also a worked example of the ingest format).
pub const SAMPLE_JSONL: &str = include_str!("demo/sample.jsonl");

fn section(title: &str) {
    crate::outln!(
        "\n== {title} {}",
        "=".repeat(70usize.saturating_sub(title.len()))
    );
}

/// Runs the demo (in `dir`, or a temporary directory). Of the caller's
/// context only `--quiet` counts: the demo picks its own store and embedder.
pub fn run(ctx: &Ctx, dir: Option<PathBuf>) -> CliResult {
    // the tour shows vector recall with the built-in hash embedder
    if let Some(e) = ctx.embedder.as_deref().filter(|e| *e != "hash") {
        return Err(CliError::Message(format!(
            "--embedder {e}: the demo's store uses the built-in hash embedder; run it without --embedder"
        )));
    }
    let tmp;
    let kept = dir.is_some();
    let dir = match dir {
        Some(d) => {
            if d.exists()
                && std::fs::read_dir(&d)
                    .map_err(CliError::io_at(&d))?
                    .next()
                    .is_some()
            {
                return Err(CliError::Message(format!(
                    "{} is not empty; the demo needs a fresh directory",
                    d.display()
                )));
            }
            // (before the banner: a store is never made inside another)
            engram_engine::store_dir::refuse_inside_store(
                &engram_storage::FsBackend,
                &d,
                "--dir",
                "give a directory outside it",
            )?;
            d
        }
        None => {
            tmp = crate::cli::scratch_dir("demo")?;
            tmp.path().to_path_buf()
        }
    };
    crate::outln!("Engram demo: a fresh embedded store in {}", dir.display());
    crate::outln!(
        "(vectors come from the built-in embedder, which hashes words: lexical, not semantic)"
    );
    // The demo derives vectors with the built-in lexical embedder.
    let demo = Ctx {
        data: dir.clone(),
        embedder: Some("hash".to_string()),
        quiet: ctx.quiet,
        embedder_pending: Default::default(),
    };
    tour(&demo)?;
    let recall = "recall --tenant acme-ops --text \"checkout latency\" --explain";
    if kept {
        crate::outln!(
            "\nDone. The store stays in {}: try `engram --data {} {recall}`.",
            dir.display(),
            dir.display()
        );
    } else {
        crate::outln!(
            "\nDone. This store was temporary and is now deleted. Keep one with `engram demo --dir ./demo-store`, then try `engram --data ./demo-store {recall}`."
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn tour(ctx: &Ctx) -> Result<(), CliError> {
    let db = ctx.open_store_with(true)?;
    let r = first_half(&db);
    crate::cli::close_store(&db);
    r?;
    lifecycle_story(ctx)
}

fn first_half(db: &Engram) -> Result<(), CliError> {
    section("1. Ingest: two stories, one append-only log");
    let lines = engram_query::parse_jsonl(SAMPLE_JSONL)
        .map_err(|e| CliError::Message(format!("bundled sample: {e}")))?;
    let report = ingest_lines(db, lines, None, 1000, &Progress::hidden())?;
    crate::outln!(
        "{} records written in {} atomic batch(es); each append was on disk (fsync) before it was acknowledged.",
        report.created,
        report.batches
    );
    let ops = db.session(Principal::admin("acme-ops"));
    let support = db.session(Principal::admin("acme-support"));

    section("2. The incident timeline as stored (tenant acme-ops)");
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

    section("4. Hybrid recall, explained");
    crate::outln!("Query: \"is catalog_api failing right now?\" as the acme-ops admin.");
    crate::outln!(
        "The 14:00 health check had current_evidence_until 14:05, so it is historical now:"
    );
    crate::outln!("eligibility removes it before any ranking (see the `validity` step).\n");
    db.wait_indexed()?;
    let r = ops.recall(&RecallRequest {
        k: 4,
        ..RecallRequest::text("is catalog_api failing right now?")
    })?;
    for h in &r.hits {
        crate::outln!(
            "{:>2}. {} {:<18} {:.4}  {}",
            h.rank,
            h.id,
            h.external_id.as_deref().unwrap_or("-"),
            h.score,
            h.text.as_deref().unwrap_or("")
        );
    }
    print_manifest(&r.manifest);
    Ok(())
}

const SECRET: &str = "probe-misconfig-canary-9431";

fn lifecycle_story(ctx: &Ctx) -> Result<(), CliError> {
    let dir = ctx.data.as_path();
    let db = ctx.open_store_to_write()?;
    let s = db.session(Principal::admin("acme-ops"));
    section("5. Lifecycle: observation -> summary -> correction -> stale -> deletion -> purge");
    let mut obs = NewRecord::assertion(
        AssertionKind::Observation,
        format!("catalog_api was unhealthy at 14:00 (health check 503; raw probe log {SECRET})"),
        vec![RecordRef::External("inc-4711/hc-1".into())],
    )
    .with_external_id("inc-4711/obs-1");
    obs.derivation = Some(Derivation {
        extractor: "triage-extractor@2".into(),
        model_config: Some("model=local-7b temperature=0".into()),
        generated: true,
    });
    s.append(vec![obs])?;
    let summary = NewRecord {
        body: Body::Summary {
            generator: "episode-summary@1".into(),
        },
        kind: "summary".into(),
        text: Some("Incident 4711: checkout slowed because catalog_api was unhealthy; pods restarted, release rolled back.".into()),
        sources: vec![
            RecordRef::External("inc-4711/obs-1".into()),
            RecordRef::External("inc-4711/decision".into()),
        ],
        external_id: Some("inc-4711/summary".into()),
        ..NewRecord::default()
    };
    s.append(vec![summary])?;
    crate::outln!(
        "An observation (derived from the 14:00 health check) and an episode summary built on it:\n"
    );
    let t = s.trace(&RecordRef::External("inc-4711/summary".into()))?;
    crate::outln!("{}", render_trace(&t).trim_end());

    crate::outln!(
        "\nThe next day the team finds the health check probe was misconfigured. A correction"
    );
    crate::outln!(
        "supersedes the observation; the summary built on it goes stale (excluded from retrieval):\n"
    );
    let fix = NewRecord::assertion(
        AssertionKind::Fact,
        "catalog_api was healthy; its health check probe was misconfigured. The slowdown came from the database connection pool.",
        vec![RecordRef::External("inc-4711/decision".into())],
    )
    .with_external_id("inc-4711/obs-1")
    .superseding(RecordRef::External("inc-4711/obs-1".into()));
    s.append(vec![fix])?;
    let sum = s.get(&RecordRef::External("inc-4711/summary".into()))?;
    crate::outln!("summary {} is now [{}]", sum.id, sum.status.name());
    let t = s.trace(&RecordRef::External("inc-4711/hc-1".into()))?;
    crate::outln!("\ntrace of the 14:00 health check (downstream: what was built on it):");
    crate::outln!("{}", render_trace(&t).trim_end());

    crate::outln!(
        "\nThe raw probe log contained data that must go. Deleting the health-check event"
    );
    crate::outln!("deletes it, every version built on it and every derivative, at once:");
    let hc = s.resolve(&RecordRef::External("inc-4711/hc-1".into()))?;
    let d = s.delete(&RecordRef::Id(hc), Some("probe log held credentials"))?;
    for id in &d.affected {
        crate::outln!("  deleted {id}");
    }
    db.checkpoint()?;
    let backend = ctx.store_options()?.backend;
    let before = engram_storage::files::files_containing(backend.as_ref(), dir, SECRET.as_bytes())?;
    crate::outln!(
        "before compaction, the deleted text is still in {} file(s) (ineligible, but on disk)",
        before.len()
    );
    crate::cli::close_store(&db);
    let c = Engram::compact(dir, &ctx.store_options()?)?;
    let after = engram_storage::files::files_containing(backend.as_ref(), dir, SECRET.as_bytes())?;
    crate::outln!(
        "`engram compact` purged {} record(s) to tombstones and rebuilt derived state; the text is now in {} file(s)",
        c.purged,
        after.len()
    );
    let db = ctx.open_store_to_write()?;
    let s = db.session(Principal::admin("acme-ops"));
    let t = s.trace(&RecordRef::Id(hc))?;
    crate::outln!(
        "\ntrace of the deleted health check: identity and lineage remain, content is gone:"
    );
    crate::outln!("{}", render_trace(&t).trim_end());

    section("6. Working memory for one model call");
    let mut req = ContextRequest::new("What caused the checkout slowdown in incident 4711?");
    req.conversation = Some("inc-4711".into());
    req.budget_bytes = 2400;
    let ctx = s.context(&req)?;
    crate::outln!("{}", ctx.render().trim_end());
    crate::outln!(
        "({} of {} bytes; assembled per request, never stored)",
        ctx.used_bytes,
        ctx.budget_bytes
    );

    section("7. Isolation: one tenant cannot see the other");
    let other = db.session(Principal::admin("acme-support"));
    let probe = other.recall(&RecallRequest::text("catalog_api incident checkout"))?;
    crate::outln!(
        "acme-support searches for acme-ops' incident: {} hit(s) from acme-ops (eligibility starts from the session's tenant)",
        probe
            .hits
            .iter()
            .filter(|h| h
                .external_id
                .as_deref()
                .is_some_and(|e| e.starts_with("inc-")))
            .count()
    );
    let stats = db.stats()?;
    crate::outln!(
        "\nstore: {} records in {} tenant(s), {} log segment(s), {} bytes of log",
        stats.records,
        stats.tenants.len(),
        stats.log_segments,
        stats.log_bytes
    );
    crate::cli::close_store(&db);
    Ok(())
}
