//! Lifecycle and maintenance commands: review, trace, expire, correct,
//! delete, grant/revoke, retention, hold, compact, backup, restore,
//! rebuild, context.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use engram_engine::context::ContextRequest;
use engram_engine::time::{parse_retention_period, parse_rfc3339};
use engram_engine::trace::render_trace;
use engram_engine::{EngineError, Engram, Options, RecordRef};
use serde::Serialize;

use crate::cli::{CliError, CliResult, Ctx, IdArgs, resolve_cli_id, session_for};
use crate::output::record_block;

fn json<T: Serialize>(v: &T) -> Result<(), CliError> {
    crate::cli::print_json(v)
}

/// `engram review`.
#[derive(Subcommand, Debug)]
pub enum ReviewCommand {
    /// List review candidates.
    List {
        /// Only this tenant (default: all).
        #[arg(long, value_parser = crate::cli::name_arg)]
        tenant: Option<String>,
        /// The queue of this principal (a reviewer's holds what it may
        /// decide, not its own candidates) instead of the tenant admin's.
        #[arg(long, requires = "tenant", value_parser = crate::cli::name_arg)]
        principal: Option<String>,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Approve a candidate (needs the reviewer role; the admin has it).
    Approve {
        #[command(flatten)]
        target: IdArgs,
        /// Reviewer's note.
        #[arg(long)]
        note: Option<String>,
    },
    /// Reject a candidate.
    Reject {
        #[command(flatten)]
        target: IdArgs,
        /// Reviewer's note.
        #[arg(long)]
        note: Option<String>,
    },
    /// Set whether an assertion kind from a writer kind waits for review
    /// in a tenant (the tenant admin's; `engram stats` lists the rules).
    Rule {
        /// Tenant.
        #[arg(long, value_parser = crate::cli::name_arg)]
        tenant: String,
        /// Assertion kind: observation, hypothesis, fact, preference, note,
        /// instruction, policy or procedure.
        #[arg(long)]
        kind: String,
        /// Writer kind: user, system or model.
        #[arg(long)]
        writer: String,
        /// `true`: such assertions wait for review; `false`: they apply at
        /// once.
        #[arg(long, action = clap::ArgAction::Set)]
        review: bool,
        /// Act as this principal of the tenant instead of the tenant admin.
        #[arg(long = "as", value_name = "PRINCIPAL", value_parser = crate::cli::name_arg)]
        act_as: Option<String>,
    },
}

/// `engram expire`.
#[derive(Args, Debug)]
pub struct ExpireArgs {
    #[command(flatten)]
    target: IdArgs,
    /// End of validity (RFC 3339): after it the record is historical.
    #[arg(long)]
    at: String,
}

/// `engram correct`.
#[derive(Args, Debug)]
pub struct CorrectArgs {
    #[command(flatten)]
    target: IdArgs,
    /// A JSON file holding the corrected record (ingest format, one object).
    /// The correction keeps the corrected record's access labels, and its
    /// scope and external id when the file gives none.
    file: PathBuf,
    /// The file's `access` replaces the corrected record's labels instead of
    /// adding to them (dropping a label needs the tenant admin).
    #[arg(long)]
    replace_access: bool,
}

/// `engram delete`.
#[derive(Args, Debug)]
pub struct DeleteArgs {
    #[command(flatten)]
    target: IdArgs,
    /// Why (recorded in the ledger).
    #[arg(long)]
    reason: Option<String>,
}

/// `engram grant` / `engram revoke`.
#[derive(Args, Debug)]
pub struct AccessArgs {
    /// Tenant.
    #[arg(long, value_parser = crate::cli::name_arg)]
    tenant: String,
    /// Access label.
    #[arg(long)]
    label: Option<String>,
    /// Role (reviewer, admin).
    #[arg(long)]
    role: Option<String>,
    /// Principal (without it: revoke takes the label from everyone in the
    /// tenant, the admin included; grant lifts that revocation).
    #[arg(long, value_parser = crate::cli::name_arg)]
    principal: Option<String>,
    /// Act as this principal of the tenant instead of the tenant admin.
    #[arg(long = "as", value_name = "PRINCIPAL", value_parser = crate::cli::name_arg)]
    act_as: Option<String>,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

/// `engram retention`.
#[derive(Args, Debug)]
pub struct RetentionArgs {
    /// Tenant.
    #[arg(long, value_parser = crate::cli::name_arg)]
    tenant: String,
    /// Retention class (e.g. ephemeral, standard, audit).
    #[arg(long)]
    class: String,
    /// Period: 90s, 15m, 6h, 30d, 7y, or `forever`.
    #[arg(long)]
    period: String,
    /// Act as this principal of the tenant instead of the tenant admin.
    #[arg(long = "as", value_name = "PRINCIPAL", value_parser = crate::cli::name_arg)]
    act_as: Option<String>,
}

/// `engram hold`.
#[derive(Args, Debug)]
pub struct HoldArgs {
    /// Tenant.
    #[arg(long, value_parser = crate::cli::name_arg)]
    tenant: String,
    /// tenant, user:ID, conversation:ID, agent:ID or label:LABEL.
    #[arg(long)]
    scope: String,
    /// Lift the hold instead of placing it.
    #[arg(long)]
    off: bool,
    /// Act as this principal of the tenant instead of the tenant admin.
    #[arg(long = "as", value_name = "PRINCIPAL", value_parser = crate::cli::name_arg)]
    act_as: Option<String>,
}

/// `engram backup`.
#[derive(Args, Debug)]
pub struct BackupArgs {
    /// Backup directory (new, or empty).
    pub dir: PathBuf,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

/// `engram restore`.
#[derive(Args, Debug)]
pub struct RestoreArgs {
    /// Backup directory.
    pub dir: PathBuf,
    /// A ledger.jsonl kept outside the store, re-applied too (it must
    /// exist).
    #[arg(long)]
    pub ledger: Option<PathBuf>,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

/// `engram context`.
#[derive(Args, Debug)]
pub struct ContextArgs {
    /// Tenant.
    #[arg(long, value_parser = crate::cli::name_arg)]
    tenant: String,
    /// Act as this principal instead of the tenant admin.
    #[arg(long, value_parser = crate::cli::name_arg)]
    principal: Option<String>,
    /// The user served.
    #[arg(long)]
    user: Option<String>,
    /// The conversation continued.
    #[arg(long)]
    conversation: Option<String>,
    /// The agent calling.
    #[arg(long)]
    agent: Option<String>,
    /// What the call is about.
    #[arg(long)]
    text: String,
    /// Byte budget.
    #[arg(long, default_value_t = engram_engine::context::CONTEXT_BUDGET_BYTES_DEFAULT)]
    budget_bytes: usize,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

/// `engram review ...`.
pub fn review(ctx: &Ctx, cmd: ReviewCommand) -> CliResult {
    let db = match cmd {
        ReviewCommand::List { .. } => ctx.open_store()?,
        _ => ctx.open_store_to_write()?,
    };
    let r = review_inner(&db, cmd);
    crate::cli::close_store(&db);
    r
}

fn review_inner(db: &Engram, cmd: ReviewCommand) -> CliResult {
    match cmd {
        ReviewCommand::List {
            tenant,
            principal,
            json: j,
        } => {
            let tenants: Vec<String> = match tenant {
                Some(t) => vec![t],
                None => db.stats()?.tenants.into_keys().collect(),
            };
            let mut all = Vec::new();
            for t in tenants {
                all.extend(session_for(db, &t, principal.as_deref()).review_queue()?);
            }
            if j {
                json(&all)?;
            } else {
                for r in &all {
                    crate::outln!("{}  {}", r.tenant, record_block(r));
                }
                crate::outln!("{} candidate(s)", all.len());
            }
        }
        ReviewCommand::Approve { target, note } => decide(db, target, note, true)?,
        ReviewCommand::Reject { target, note } => decide(db, target, note, false)?,
        ReviewCommand::Rule {
            tenant,
            kind,
            writer,
            review,
            act_as,
        } => {
            let res = session_for(db, &tenant, act_as.as_deref())
                .set_review_rule_named(&kind, &writer, review)?;
            crate::output::change_made(format!("set the review rule (operation {})", res.op_id));
            crate::outln!(
                "in tenant '{tenant}', a {kind} written by a {writer} {} (operation {})",
                if review {
                    "waits for review"
                } else {
                    "applies at once"
                },
                res.op_id
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn decide(db: &Engram, t: IdArgs, note: Option<String>, approve: bool) -> Result<(), CliError> {
    let (tenant, r) = resolve_cli_id(db, &t)?;
    let s = session_for(db, &tenant, t.principal.as_deref());
    let res = if approve {
        s.approve(&r, note.as_deref())?
    } else {
        s.reject(&r, note.as_deref())?
    };
    crate::output::change_made(format!(
        "{} {} (operation {})",
        if approve { "approved" } else { "rejected" },
        res.affected[0],
        res.op_id
    ));
    if t.json {
        json(&res)?;
    } else {
        crate::outln!(
            "{} {} (operation {}, by {})",
            if approve { "approved" } else { "rejected" },
            res.affected[0],
            res.op_id,
            s.principal().id()
        );
    }
    Ok(())
}

/// `engram trace`.
pub fn trace(ctx: &Ctx, t: IdArgs) -> CliResult {
    let db = ctx.open_store()?;
    let r = (|| -> CliResult {
        let (tenant, r) = resolve_cli_id(&db, &t)?;
        let tr = session_for(&db, &tenant, t.principal.as_deref()).trace(&r)?;
        if t.json {
            json(&tr)?;
        } else {
            crate::outln!(
                "lineage of {} (^ upstream, * the record, v downstream):",
                tr.target
            );
            crate::outln!("{}", render_trace(&tr).trim_end());
        }
        Ok(ExitCode::SUCCESS)
    })();
    crate::cli::close_store(&db);
    r
}

/// `engram expire`.
pub fn expire(ctx: &Ctx, a: ExpireArgs) -> CliResult {
    let at = parse_rfc3339(&a.at).map_err(|e| CliError::Message(format!("--at: {e}")))?;
    let db = ctx.open_store_to_write()?;
    let r = (|| -> CliResult {
        let (tenant, r) = resolve_cli_id(&db, &a.target)?;
        let res = session_for(&db, &tenant, a.target.principal.as_deref()).expire(&r, at)?;
        crate::output::change_made(format!(
            "expired {} (operation {})",
            res.affected[0], res.op_id
        ));
        if a.target.json {
            json(&res)?;
        } else {
            // (the time as stored, to the millisecond, not as typed)
            crate::outln!(
                "{} is historical after {} (operation {})",
                res.affected[0],
                crate::cli::ts(at),
                res.op_id
            );
        }
        Ok(ExitCode::SUCCESS)
    })();
    crate::cli::close_store(&db);
    r
}

/// `engram correct`.
pub fn correct(ctx: &Ctx, a: CorrectArgs) -> CliResult {
    let text = crate::cli::read_input_capped(&a.file, crate::cli::SMALL_INPUT_BYTES_MAX)?;
    // One JSON object, over as many lines as it likes: checked as JSON
    // whole first (a raw line break inside a string is no JSON, and joining
    // the lines would make it a space), then read as one ingest line.
    if let Err(e) = serde_json::from_str::<serde::de::IgnoredAny>(&text) {
        return Err(CliError::Message(format!(
            "{}: not one JSON object ({e}) (nothing was stored)",
            a.file.display()
        )));
    }
    let one_line: String = text.lines().map(str::trim).collect::<Vec<_>>().join(" ");
    let parsed = engram_query::parse_line(&one_line, 1).map_err(|e| {
        CliError::Message(format!(
            "{}: {} (nothing was stored)",
            a.file.display(),
            e.fault()
        ))
    })?;
    let db = ctx.open_store_to_write()?;
    let r = (|| -> CliResult {
        let (tenant, target) = resolve_cli_id(&db, &a.target)?;
        if let Some(t) = &parsed.tenant {
            if t != &tenant {
                return Err(CliError::Message(format!(
                    "{}: tenant '{t}' differs from the corrected record's tenant '{tenant}'",
                    a.file.display()
                )));
            }
        }
        let s = session_for(&db, &tenant, a.target.principal.as_deref());
        let target_id = s.resolve(&target)?;
        let mut rec = parsed.record.clone();
        rec.replace_access |= a.replace_access;
        match &rec.supersedes {
            None => rec.supersedes = Some(RecordRef::Id(target_id)),
            Some(other) if s.resolve(other)? == target_id => {}
            Some(other) => {
                return Err(CliError::Message(format!(
                    "{}: supersedes names {other}, not {}",
                    a.file.display(),
                    a.target.id
                )));
            }
        }
        let res = s.append(vec![rec]).map_err(|e| e.with_item(None))?;
        crate::output::change_made(format!("stored the correction {}", res[0].id));
        // The new version is stored whatever happens next: one this
        // principal cannot read (a label it does not hold, or a deletion
        // that raced it) is said so, never reported as a failure.
        let new = match s.get(&RecordRef::Id(res[0].id)) {
            Ok(r) => r,
            Err(EngineError::NotFound { .. }) => {
                let r = &res[0];
                if a.target.json {
                    json(&serde_json::json!({"result": r, "record": null}))?;
                } else {
                    crate::outln!(
                        "{target_id} is superseded by {} (stored, {}), which this principal cannot read: it carries a label the principal does not hold, or was deleted since",
                        r.id,
                        r.status.name()
                    );
                }
                for n in &r.notes {
                    crate::eoutln!("note: {n}");
                }
                return Ok(ExitCode::SUCCESS);
            }
            Err(e) => return Err(e.into()),
        };
        if a.target.json {
            // the shape of `POST /v1/records/{ref}/correct`: the append
            // result (outcome, status, notes) beside the new version
            json(&serde_json::json!({"result": &res[0], "record": new}))?;
        } else {
            // (sent again: the version it repeats is stored already)
            let head = if res[0].outcome == engram_engine::AppendOutcome::Duplicate {
                format!("nothing new was stored: {} already says this", new.id)
            } else {
                format!("{target_id} is superseded by:")
            };
            crate::outln!("{head}\n{}", record_block(&new));
            for n in &res[0].notes {
                crate::outln!("note: {n}");
            }
        }
        Ok(ExitCode::SUCCESS)
    })();
    crate::cli::close_store(&db);
    r
}

/// `engram delete`.
pub fn delete(ctx: &Ctx, a: DeleteArgs) -> CliResult {
    let db = ctx.open_store_to_write()?;
    let r = (|| -> CliResult {
        let (tenant, r) = resolve_cli_id(&db, &a.target)?;
        let res = session_for(&db, &tenant, a.target.principal.as_deref())
            .delete(&r, a.reason.as_deref())?;
        crate::output::change_made(format!(
            "deleted {} record(s) (operation {})",
            res.affected.len(),
            res.op_id
        ));
        if a.target.json {
            json(&res)?;
        } else {
            crate::outln!(
                "deleted {} record(s) (the record, its versions and everything derived from them); operation {}",
                res.affected.len(),
                res.op_id
            );
            for id in &res.affected {
                crate::outln!("  {id}");
            }
            crate::outln!("they are ineligible now; `engram compact` purges their bytes");
        }
        Ok(ExitCode::SUCCESS)
    })();
    crate::cli::close_store(&db);
    r
}

/// `engram grant` (`revoke = false`) and `engram revoke`.
pub fn access(ctx: &Ctx, a: AccessArgs, revoke: bool) -> CliResult {
    let db = ctx.open_store_to_write()?;
    let r = (|| -> CliResult {
        let s = session_for(&db, &a.tenant, a.act_as.as_deref());
        let res = if revoke {
            s.revoke(
                a.principal.as_deref(),
                a.label.as_deref(),
                a.role.as_deref(),
            )?
        } else {
            s.grant(
                a.principal.as_deref(),
                a.label.as_deref(),
                a.role.as_deref(),
            )?
        };
        crate::output::change_made(format!(
            "{} (operation {})",
            if revoke { "revoked" } else { "granted" },
            res.op_id
        ));
        if a.json {
            json(&res)?;
        } else {
            // both, when both were given: the operation carries both
            let what = [
                a.label.as_ref().map(|l| format!("label '{l}'")),
                a.role.as_ref().map(|r| format!("role '{r}'")),
            ]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join(" and ");
            match (&a.principal, revoke) {
                (Some(p), _) => crate::outln!(
                    "{} {what} {} principal '{p}' in tenant '{}' (operation {}); applies to every read from now on",
                    if revoke { "revoked" } else { "granted" },
                    if revoke { "from" } else { "to" },
                    a.tenant,
                    res.op_id
                ),
                (None, true) => crate::outln!(
                    "revoked {what} from everyone in tenant '{}', the admin included (operation {}); applies to every read from now on",
                    a.tenant,
                    res.op_id
                ),
                // a tenant-wide grant gives nobody the label: it lifts a
                // tenant-wide revocation, and principals read it again with
                // the grants they hold
                (None, false) => crate::outln!(
                    "lifted the tenant-wide revocation of {what} in tenant '{}' (operation {}); each principal reads it again with its own grants, from the next read",
                    a.tenant,
                    res.op_id
                ),
            }
            if let Some(n) = &res.note {
                crate::outln!("note: {n}");
            }
        }
        Ok(ExitCode::SUCCESS)
    })();
    crate::cli::close_store(&db);
    r
}

/// `engram retention`.
pub fn retention(ctx: &Ctx, a: RetentionArgs) -> CliResult {
    let period = parse_retention_period(&a.period)
        .map_err(|why| CliError::Message(format!("--period: {why}")))?;
    let db = ctx.open_store_to_write()?;
    let r = session_for(&db, &a.tenant, a.act_as.as_deref()).set_retention(&a.class, period);
    crate::cli::close_store(&db);
    let res = r?;
    crate::output::change_made(format!("set the retention (operation {})", res.op_id));
    crate::outln!(
        "retention of class '{}' in tenant '{}': {} (operation {})",
        a.class,
        a.tenant,
        a.period,
        res.op_id
    );
    Ok(ExitCode::SUCCESS)
}

/// `engram hold`.
pub fn hold(ctx: &Ctx, a: HoldArgs) -> CliResult {
    let db = ctx.open_store_to_write()?;
    let r = session_for(&db, &a.tenant, a.act_as.as_deref()).hold(&a.scope, !a.off);
    crate::cli::close_store(&db);
    let res = r?;
    crate::output::change_made(format!("set the legal hold (operation {})", res.op_id));
    crate::outln!(
        "legal hold on '{}' in tenant '{}' {} (operation {})",
        a.scope,
        a.tenant,
        if a.off { "lifted" } else { "placed" },
        res.op_id
    );
    Ok(ExitCode::SUCCESS)
}

/// `engram compact`.
pub fn compact(ctx: &Ctx, json_out: bool) -> CliResult {
    let data = ctx.data.as_path();
    crate::cli::store_cmds::require_store(data)?;
    let opts = ctx.store_options()?;
    let spinner = ctx.spinner("compact");
    spinner.set_message("rewriting segments, then rebuilding derived state");
    let r = Engram::compact(data, &opts);
    spinner.finish();
    let r = r.map_err(|e| match e {
        EngineError::Storage(e @ engram_storage::StorageError::Locked { .. }) => {
            CliError::Message(format!(
                "{e}; nothing was changed. A running server compacts its store online with POST /v1/compact (store key)"
            ))
        }
        e => CliError::Engine(e),
    })?;
    crate::output::change_made(format!("compacted, {} record(s) purged", r.purged));
    if let Some(t) = &r.tail_cut {
        crate::eoutln!("recovery: {t}");
    }
    crate::cli::remember_embedder(data, ctx.embedder.as_deref())?;
    if json_out {
        json(&r)?;
    } else {
        crate::outln!(
            "compacted: {} record(s) purged to tombstones ({} past retention), {} kept under legal hold; {} segment(s) rewritten; log {} -> {} bytes; derived state rebuilt",
            r.purged,
            r.retention_deleted,
            r.held,
            r.segments_rewritten,
            r.log_bytes_before,
            r.log_bytes_after
        );
    }
    // Bytes `engram repair` cut from the log are the operator's, never
    // compacted: they may hold content deleted since.
    let quarantined = walk_files(&data.join("quarantine"));
    if quarantined > 0 {
        crate::eoutln!(
            "note: {} holds {quarantined} file(s) of log bytes cut by `engram repair`; compaction does not touch them and they may hold content deleted since: remove the directory once nothing in it is needed",
            data.join("quarantine").display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Files under `dir` (0 when it does not exist or cannot be read).
fn walk_files(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |entries| {
        entries
            .flatten()
            .map(|e| match e.file_type() {
                Ok(t) if t.is_dir() => walk_files(&e.path()),
                Ok(_) => 1,
                Err(_) => 0,
            })
            .sum()
    })
}

/// `engram backup`.
pub fn backup(ctx: &Ctx, a: BackupArgs) -> CliResult {
    // Read-only: a backup changes nothing in the store (and works on a
    // store the user may not write, e.g. a read-only mount).
    let data = ctx.data.as_path();
    let db = Engram::open(
        data,
        engram_engine::Options {
            read_only: true,
            background_indexing: false,
            ..ctx.store_options()?
        },
    )
    .map_err(|source| match source {
        EngineError::Storage(e @ engram_storage::StorageError::Locked { .. }) => {
            CliError::Message(format!(
                "{e}; nothing was copied. A running server backs up its store with POST /v1/backup (store key)"
            ))
        }
        source => CliError::Open {
            path: data.to_path_buf(),
            source,
        },
    })?;
    let spinner = ctx.spinner("backup ");
    spinner.set_message(format!("copying the log to {}", a.dir.display()));
    let r = db.backup(&a.dir);
    spinner.finish();
    crate::cli::close_store(&db);
    let r = r?;
    crate::output::change_made(format!("wrote the backup to {}", a.dir.display()));
    if a.json {
        json(&r)?;
    } else {
        crate::outln!(
            "backup of {} record(s) up to LSN {} written to {}",
            r.records,
            r.last_lsn,
            a.dir.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `engram restore`.
pub fn restore(ctx: &Ctx, a: RestoreArgs) -> CliResult {
    // The restored store takes the backup's settings, so without
    // `--embedder` it is opened with the backup's embedder: the directory
    // may hold no store yet (or one remembering another embedder), and the
    // derived vectors rebuilt now must be those every later open expects.
    // (An unreadable choice is left to the restore, which names the file.)
    let from_backup = match ctx.embedder {
        Some(_) => None,
        None => engram_engine::settings::load(Options::default().backend.as_ref(), &a.dir)
            .ok()
            .flatten()
            .map(|s| s.embedder.unwrap_or_else(|| "none".to_string())),
    };
    let opts = match from_backup {
        // (an embedder this build cannot make: the restore refuses the
        // backup, naming its settings file and what to do)
        Some(name) => {
            crate::cli::store_options(&ctx.data, Some(&name)).or_else(|_| ctx.store_options())?
        }
        None => ctx.store_options()?,
    };
    let spinner = ctx.spinner("restore");
    spinner.set_message(format!(
        "from {}, then re-applying later deletions",
        a.dir.display()
    ));
    let r = Engram::restore(&ctx.data, &a.dir, &opts, a.ledger.as_deref());
    spinner.finish();
    let r = r?;
    crate::output::change_made(format!("restored {} record(s)", r.restored_records));
    crate::cli::remember_embedder_as(&ctx.data, ctx.embedder.as_deref(), true)?;
    if a.json {
        json(&r)?;
    } else {
        crate::outln!(
            "restored {} record(s) from {}; re-applied {} recorded after the backup ({} deletion(s) concerned records not in the backup); {} record(s) purged",
            r.restored_records,
            a.dir.display(),
            reapplied_counts(&r),
            r.not_in_backup,
            r.purged
        );
        if r.skipped > 0 {
            crate::outln!(
                "{} malformed ledger entr(y/ies) could not be re-applied",
                r.skipped
            );
        }
        if r.ledger_lines_not_after_backup > 0 {
            crate::outln!(
                "{} ledger line(s) left out: the backup's log lacks their operation and holds newer ones, so they were not written after it (deletions of records an earlier restore left out, a line edited, or one from another store's ledger)",
                r.ledger_lines_not_after_backup
            );
        }
        if let Some(n) = r.later_records_replaced.filter(|&n| n > 0) {
            crate::outln!(
                "{n} record(s) the store held past the backup's end (written after it was taken) are not in the restored store"
            );
        }
        if let Some(n) = r.later_operations_replaced.filter(|&n| n > 0) {
            crate::outln!(
                "{n} operation(s) written after the backup (expiries, reviews, retractions, review rules) are not in the restored store"
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `engram rebuild` (all derived state; `--verify` compares).
pub fn rebuild(ctx: &Ctx, verify: bool, json_out: bool) -> CliResult {
    let opts = ctx.store_options()?;
    let spinner = ctx.spinner("rebuild");
    spinner.set_message(if verify {
        "rebuilding derived state from the log and comparing"
    } else {
        "rebuilding derived state from the log"
    });
    let r = Engram::rebuild(&ctx.data, &opts, verify);
    spinner.finish();
    let r = r?;
    if let Some(t) = &r.tail_cut {
        crate::eoutln!("recovery: {t}");
    }
    crate::cli::remember_embedder(&ctx.data, ctx.embedder.as_deref())?;
    if json_out {
        json(&r)?;
    } else {
        for d in &r.differences {
            crate::outln!("{d}");
        }
        crate::outln!(
            "rebuilt derived state of {} record(s) from the log in {:.2}s{}",
            r.records,
            r.seconds,
            if verify {
                format!(
                    "; compared {} line(s): {}",
                    r.checked_lines,
                    if r.differences.is_empty() {
                        "identical".to_string()
                    } else {
                        format!("{} DIFFERENCE(S)", r.differences.len())
                    }
                )
            } else {
                String::new()
            }
        );
    }
    Ok(if r.differences.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// `engram context`.
pub fn context(ctx: &Ctx, a: ContextArgs) -> CliResult {
    let db = ctx.open_store()?;
    let r = (|| -> CliResult {
        let s = crate::cli::read_session_for(&db, &a.tenant, a.principal.as_deref());
        let mut req = ContextRequest::new(a.text.clone());
        req.user = a.user.clone();
        req.conversation = a.conversation.clone();
        req.agent = a.agent.clone();
        req.budget_bytes = a.budget_bytes;
        let c = s.context(&req)?;
        if a.json {
            let mut v = serde_json::to_value(&c)?;
            v["text"] = serde_json::Value::String(c.render());
            json(&v)?;
        } else {
            crate::outln!("{}", c.render().trim_end());
            // on stderr: stdout is the rendered context alone, within the
            // budget, ready to go into a prompt
            crate::errln!(
                "({} of {} bytes used; snapshot LSN {}; not stored)",
                c.used_bytes,
                c.budget_bytes,
                c.snapshot_lsn
            );
        }
        Ok(ExitCode::SUCCESS)
    })();
    crate::cli::close_store(&db);
    r
}

/// The operations a restore, a repair or a recovery applied again from the
/// ledger, counted by kind ("2 deletion(s), 0 revocation(s), ...").
pub(crate) fn reapplied_counts(r: &engram_engine::maintenance::RestoreReport) -> String {
    format!(
        "{} deletion(s), {} revocation(s), {} grant(s), {} legal hold change(s) and {} retention setting(s)",
        r.deletions_reapplied,
        r.revocations_reapplied,
        r.grants_reapplied,
        r.holds_reapplied,
        r.retention_reapplied
    )
}
