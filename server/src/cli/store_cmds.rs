//! The store maintenance and inspection commands: `get`, `log`, `stats`,
//! `verify`, `init`, `repair` and `rebuild`.

use std::process::ExitCode;

use engram_engine::time::parse_query_time;
use engram_engine::{EngineError, Engram, ListFilter, Options, Record};

use crate::output::{record_block, record_header};

use super::{
    CliError, CliResult, Ctx, IdArgs, JsonArgs, LogArgs, RebuildArgs, RepairArgs, print_json,
    resolve_cli_id, session_for,
};

pub(super) fn cmd_get(ctx: &Ctx, a: IdArgs, history: bool) -> CliResult {
    let db = ctx.open_store()?;
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
    crate::cli::close_store(&db);
    Ok(ExitCode::SUCCESS)
}

pub(super) fn cmd_log(ctx: &Ctx, a: LogArgs) -> CliResult {
    // (0 would list nothing and say so, as if the store held nothing)
    if a.limit == Some(0) {
        return Err(CliError::msg(
            "--limit must be at least 1 (leave it out to list every record)",
        ));
    }
    let parse = |s: &Option<String>, f: &str| -> Result<Option<i64>, CliError> {
        s.as_deref()
            .map(|t| parse_query_time(t).map_err(|e| CliError::Message(format!("--{f}: {e}"))))
            .transpose()
    };
    let filter = ListFilter {
        since: parse(&a.since, "since")?,
        until: parse(&a.until, "until")?,
        kind: a.kind.clone(),
        limit: a.limit.unwrap_or(usize::MAX),
        ..ListFilter::default()
    };
    let db = ctx.open_store()?;
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
            crate::outln!("{}", serde_json::to_string(r)?);
        } else {
            crate::outln!("{}  {}", r.tenant, record_header(r));
            if let Some(t) = &r.text {
                crate::outln!("    {}", crate::output::one_line(t));
            }
        }
    }
    if !a.json {
        crate::eoutln!("{} record(s)", all.len());
    }
    crate::cli::close_store(&db);
    Ok(ExitCode::SUCCESS)
}

pub(super) fn cmd_stats(ctx: &Ctx, a: JsonArgs) -> CliResult {
    let data = ctx.data.as_path();
    let db = ctx.open_store()?;
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
        if let Some(p) = &s.indexer_problem {
            crate::outln!("indexer problem: {p}");
        }
        crate::outln!(
            "lexical    {} document(s), {} term(s)",
            s.lexical_documents,
            s.lexical_terms
        );
        for v in &s.vector_spaces {
            crate::outln!(
                "vectors    {} of tenant {}: {} x {} dims, {} indexed, walked over {}{}",
                v.model,
                v.tenant,
                v.vectors,
                v.dim,
                v.indexed,
                v.graph_reads,
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
            if ts.awaiting_compaction > 0 {
                crate::outln!(
                    "             {} record(s) out of every read whose content is still on disk: `engram compact` purges it (a server: POST /v1/compact), except what a legal hold keeps",
                    ts.awaiting_compaction
                );
            }
            for (class, period) in &ts.retention {
                crate::outln!("             retention {class}: {period}");
            }
            if !ts.holds.is_empty() {
                crate::outln!("             legal hold on {}", ts.holds.join(", "));
            }
            for r in &ts.review_rules {
                crate::outln!(
                    "             review rule {} by {}: {}",
                    r.kind,
                    r.writer,
                    if r.review {
                        "needs review"
                    } else {
                        "applies at once"
                    }
                );
            }
        }
    }
    crate::cli::close_store(&db);
    Ok(ExitCode::SUCCESS)
}

pub(super) fn cmd_verify(ctx: &Ctx, a: JsonArgs) -> CliResult {
    let data = ctx.data.as_path();
    // Read-only: verify never changes a byte of the store (a torn tail is
    // reported, and left for the next writable open to cut).
    let mut problems: Vec<String> = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    let opts = match ctx.store_options() {
        Ok(o) => o,
        Err(e) => {
            problems.push(e.to_string());
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
    let spinner = ctx.spinner("verify");
    spinner.set_message("checking every frame, and the state against the log");
    // A backup's log must run to the LSN its backup.json records: it was
    // copied whole, so a shorter one is damage, never a torn write.
    let backup = backup_manifest(data)
        .map_err(|why| problems.push(why))
        .ok()
        .flatten();
    let opened = Engram::open_with_report(data, opts);
    let did_open = opened.is_ok();
    match opened {
        Ok((db, report)) => {
            if let Some(b) = &backup {
                let last = db.stats()?.last_lsn;
                if last != b.last_lsn {
                    problems.push(format!(
                        "this backup's log ends at LSN {last}{} but its backup.json records LSN {}: \
                         the copy is damaged (restore refuses it); take a new backup",
                        if report.log.torn_tail_pending.is_some() {
                            " before damaged bytes"
                        } else {
                            ""
                        },
                        b.last_lsn
                    ));
                } else if let Some(t) = &report.log.torn_tail_pending {
                    // every frame the backup recorded is whole: a restore
                    // takes them and stops there
                    notes.push(format!(
                        "this backup's log holds every frame its backup.json records (to LSN {last}), \
                         then {} byte(s) that are no frame at segment {} offset {} ({}{}): restore \
                         ignores them; the backup file was changed after it was taken",
                        t.bytes_dropped,
                        t.segment,
                        t.offset,
                        t.reason,
                        with_batch(t)
                    ));
                }
            }
            if let Some(t) = report
                .log
                .torn_tail_pending
                .as_ref()
                .filter(|_| backup.is_none())
            {
                notes.push(format!(
                    "the log ends with a torn write, which nothing proves was acknowledged ({} bytes at segment {} offset {}, {}: {}{}); \
                     the next command that opens the store for writing (every command but verify and backup) cuts it",
                    t.bytes_dropped,
                    t.segment,
                    t.offset,
                    t.after(),
                    t.reason,
                    with_batch(t)
                ));
            }
            if report.ledger_lines_missing > 0 {
                notes.push(format!(
                    "ledger.jsonl lacks {} operation(s) the log holds (an operation whose line was not written, \
                     or a file cut short); the next command that opens the store for writing (every command \
                     but verify and backup) writes them from the log",
                    report.ledger_lines_missing
                ));
            }
            // derived state is rebuilt from the log, so no problem; but a
            // damaged derived file is worth saying (the reads say it too)
            if let Some(why) = &report.checkpoint_discarded {
                notes.push(format!(
                    "the state checkpoint is not used ({why}): the whole log was replayed for this check, \
                     and the next command that opens the store for writing writes a new one when it closes"
                ));
            }
            for m in &report.vectors_rebuilt {
                notes.push(format!(
                    "the vector index of '{m}' was not usable and is built again from the log by every open \
                     until one that writes closes the store"
                ));
            }
            if report.restore_pending {
                notes.push(
                    "a restore's last step (re-applying later deletions) is pending; the next command that opens the store for writing (every command but verify and backup) finishes it"
                        .into(),
                );
            }
            let r = db.verify();
            crate::cli::close_store(&db);
            let r = r?;
            frames = r.frames;
            records = r.records;
            problems.extend(r.problems);
        }
        Err(e @ (EngineError::NoStore { .. } | EngineError::NotAStore { .. })) => {
            return Err(CliError::Engine(e));
        }
        // not damage: the store could not be checked at all
        Err(EngineError::Storage(e @ engram_storage::StorageError::Locked { .. })) => {
            return Err(CliError::Message(format!(
                "{e}; nothing was checked. A running server verifies its store with GET /v1/verify (store key)"
            )));
        }
        Err(e) => problems.push(e.to_string()),
    }
    spinner.finish();
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
        if did_open {
            crate::outln!(
                "{}: {frames} frame(s) checked, {records} record(s) checked against the state, {} problem(s)",
                if ok { "OK" } else { "FAILED" },
                problems.len()
            );
        } else {
            crate::outln!(
                "FAILED: the store did not open, so no frame or record was checked further; {} problem(s)",
                problems.len()
            );
        }
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The complete frames of an unfinished batch a pending cut takes too,
/// as a clause to add after its reason (empty when there are none).
fn with_batch(t: &engram_storage::log::Truncation) -> String {
    t.unfinished_batch()
        .map_or_else(String::new, |b| format!("; {b}, goes with it"))
}

/// The `backup.json` of a backup directory (None: `data` is not a backup).
fn backup_manifest(
    data: &std::path::Path,
) -> Result<Option<engram_engine::maintenance::BackupReport>, String> {
    let path = data.join(engram_engine::store_dir::BACKUP_FILE);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| format!("{}: does not parse ({e})", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("{}: cannot read ({e})", path.display())),
    }
}

pub(super) fn cmd_init(ctx: &Ctx, a: JsonArgs) -> CliResult {
    let data = ctx.data.as_path();
    use engram_engine::store_dir::{DirKind, classify, refuse_unfinished};
    refuse_unfinished(Options::default().backend.as_ref(), data)?;
    match classify(Options::default().backend.as_ref(), data)? {
        DirKind::Empty => {}
        DirKind::Store | DirKind::Unmarked => {
            return Err(CliError::Message(format!(
                "{} is already an Engram store; nothing was changed",
                data.display()
            )));
        }
        DirKind::Foreign(_) => {
            return Err(CliError::Message(format!(
                "{} is not empty; a store is created only in a missing or empty directory",
                data.display()
            )));
        }
    }
    let db = ctx.open_store_with(true)?;
    let embedder = db.embedder_model().unwrap_or_else(|| "none".into());
    crate::cli::close_store(&db);
    crate::output::change_made(format!("created the store at {}", data.display()));
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

pub(super) fn cmd_repair(ctx: &Ctx, a: RepairArgs) -> CliResult {
    let data = ctx.data.as_path();
    let opts = ctx.store_options().unwrap_or(Options {
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
            // frames intact, but fewer than were acknowledged: a segment
            // removed, or one cut or zeroed at a frame's edge
            // (held to the last frame: a compacted segment's header may
            // record an end past it)
            None if i.durable_lsn > i.last_frame_lsn => {
                crate::outln!(
                    "the log ({} segment(s)) holds frames through LSN {}, but {} shows LSN {} was acknowledged: LSNs {}..={} are missing (a segment file removed, or cut or zeroed at a frame's edge)",
                    i.segments,
                    i.last_frame_lsn,
                    i.durable_evidence,
                    i.durable_lsn,
                    i.last_frame_lsn + 1,
                    i.durable_lsn
                );
                crate::outln!(
                    "put the missing segment files back, or restore from a backup; to accept the loss: engram --data {} repair --truncate-after {} (the operations ledger.jsonl records are applied again: deletions, revocations, grants, legal holds, retention)",
                    data.display(),
                    i.last_frame_lsn
                );
            }
            None => {
                crate::outln!(
                    "the log ({} segment(s)) is intact through LSN {}; nothing to repair",
                    i.segments,
                    i.intact_through
                );
                // (its frames' checksums hold; a frame may still break a
                // rule of the state, which only an open finds)
                crate::outln!(
                    "(frames checked, not applied: if the store still does not open because a frame \"could not be applied\", `engram verify` names it; when it ends the log, --truncate-after the LSN before it cuts it, into quarantine/)"
                );
            }
            Some(p) => {
                crate::outln!("problem: {p}");
                if i.segments == 0 {
                    crate::outln!("no segment is left: a cut at 0 starts an empty log");
                } else if i.intact_through == 0 {
                    crate::outln!(
                        "no whole batch of the log is intact: the damage is in its first batch, so a cut would keep nothing"
                    );
                } else {
                    // earlier places a cut may keep whole batches up to
                    let earlier: Vec<String> = i
                        .recent_batch_ends
                        .iter()
                        .rev()
                        .filter(|&&l| l != 0 && l != i.intact_through)
                        .take(5)
                        .map(|l| l.to_string())
                        .collect();
                    let earlier = if earlier.is_empty() {
                        String::new()
                    } else {
                        format!(
                            "; earlier batch ends, where a cut may be made too: LSN {}",
                            earlier.join(", ")
                        )
                    };
                    crate::outln!(
                        "the log is intact from LSN 1 through LSN {}{earlier}",
                        i.intact_through
                    );
                }
                let lost_to = i.highest_lsn_seen.max(i.durable_lsn);
                if lost_to > i.intact_through {
                    // (only what proves the loss is named: no derived
                    // state proves nothing)
                    let mut why = Vec::new();
                    if i.durable_lsn > i.intact_through {
                        why.push(format!(
                            "{} shows LSN {} was acknowledged",
                            i.durable_evidence, i.durable_lsn
                        ));
                    }
                    if i.highest_lsn_seen > i.intact_through {
                        why.push(format!(
                            "the log holds intact frames up to LSN {} past the cut",
                            i.highest_lsn_seen
                        ));
                    }
                    crate::outln!(
                        "cutting there loses LSNs {}..={} at least ({})",
                        i.intact_through + 1,
                        lost_to,
                        why.join("; ")
                    );
                }
                crate::outln!(
                    "{} byte(s) would move to {}/quarantine/ (kept, not deleted); the operations ledger.jsonl records (deletions, revocations, grants, legal holds, retention) are applied again",
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
    crate::output::change_made(format!("cut the log after LSN {}", r.kept_through));
    if a.json {
        print_json(&r)?;
    } else if r.bytes_quarantined == 0 {
        // a cut at the log's end: nothing moved
        crate::outln!(
            "the log already ends at LSN {}: nothing cut; {} applied again from the ledger; derived state rebuilt",
            r.kept_through,
            crate::lifecycle_cmd::reapplied_counts(&r.reapplied)
        );
    } else {
        crate::outln!(
            "cut the log after LSN {}; {} byte(s) moved to {}; {} applied again from the ledger; derived state rebuilt",
            r.kept_through,
            r.bytes_quarantined,
            r.quarantine.display(),
            crate::lifecycle_cmd::reapplied_counts(&r.reapplied)
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Refuses a directory that holds no store ("no store at"), or another
/// program's files, before a maintenance command that opens the store
/// its own way (`rebuild`, `compact`). A store whose log is missing is
/// left to the engine, which names what is missing.
pub(crate) fn require_store(data: &std::path::Path) -> Result<(), CliError> {
    engram_engine::store_dir::prepare(Options::default().backend.as_ref(), data, false, false)
        .map_err(CliError::Engine)
}

pub(super) fn cmd_rebuild(ctx: &Ctx, a: RebuildArgs) -> CliResult {
    let data = ctx.data.as_path();
    require_store(data)?;
    if !a.checkpoint {
        return crate::lifecycle_cmd::rebuild(ctx, a.verify, a.json);
    }
    let started = std::time::Instant::now();
    let opts = ctx.store_options()?;
    let spinner = ctx.spinner("rebuild");
    spinner.set_message("rebuilding the state checkpoint from the log");
    let n = Engram::rebuild_checkpoint(data, &opts);
    spinner.finish();
    let n = n?;
    crate::cli::remember_embedder(data, ctx.embedder.as_deref())?;
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
