//! `engram recall` (one request from flags, or a JSONL file of requests) and
//! `engram eval` (recall@k, precision@k, MRR, forbidden-hit rate, slices,
//! with every manifest saved for replay).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use engram_engine::Engram;
use engram_engine::retrieval::{Filters, Manifest, RecallResponse};
use engram_engine::time::parse_query_time;
use engram_query::eval::{CaseResult, EvalCase, Relevant, parse_cases, score_resolved, summarize};
use engram_query::recall::{build_request, record_types};
use serde::Serialize;

use crate::cli::{CliError, CliResult, Ctx, session_for};

/// `engram recall`.
#[derive(Args, Debug)]
pub struct RecallArgs {
    /// Tenant (required; lines of --queries never name a tenant or
    /// principal).
    #[arg(long, value_parser = crate::cli::name_arg)]
    pub tenant: Option<String>,
    /// Read as this principal instead of the tenant admin (needs
    /// --tenant).
    #[arg(long, value_parser = crate::cli::name_arg, requires = "tenant")]
    pub principal: Option<String>,
    /// Query text.
    #[arg(long)]
    pub text: Option<String>,
    /// Query vector as a JSON list, e.g. '[0.1, 0.2]'.
    #[arg(long)]
    pub vector: Option<String>,
    /// Vector space (model id); optional when the store has one.
    #[arg(long)]
    pub model: Option<String>,
    /// hybrid (default), vector or lexical.
    #[arg(long)]
    pub mode: Option<String>,
    /// Results.
    #[arg(long, default_value_t = 10, allow_negative_numbers = true)]
    pub k: usize,
    /// HNSW ef_search.
    #[arg(long, allow_negative_numbers = true)]
    pub ef: Option<usize>,
    /// Only this scope user (repeatable: any of them).
    #[arg(long)]
    pub user: Vec<String>,
    /// Only this conversation (repeatable).
    #[arg(long)]
    pub conversation: Vec<String>,
    /// Only this agent (repeatable).
    #[arg(long)]
    pub agent: Vec<String>,
    /// Only this scope label (repeatable).
    #[arg(long)]
    pub label: Vec<String>,
    /// Only this kind (repeatable).
    #[arg(long)]
    pub kind: Vec<String>,
    /// Only this record type (repeatable): event, entity, relation, assertion, summary.
    #[arg(long)]
    pub record: Vec<String>,
    /// What the store knew at this time (RFC 3339).
    #[arg(long)]
    pub as_of: Option<String>,
    /// What was true at this time (RFC 3339; default now).
    #[arg(long)]
    pub valid_at: Option<String>,
    /// Keep records whose validity ended (marked historical).
    #[arg(long)]
    pub include_historical: bool,
    /// A JSONL file of requests (one result line per request, in order).
    /// Each line is a whole request: the flags that shape one (text,
    /// filters, k, times) are refused beside it rather than ignored.
    #[arg(long, conflicts_with_all = [
        "text", "vector", "model", "mode", "k", "ef", "user", "conversation", "agent",
        "label", "kind", "record", "as_of", "valid_at", "include_historical",
    ])]
    pub queries: Option<PathBuf>,
    /// Print the manifest (with --json: include it); with --queries, for
    /// every line (a line's own `"explain": true` asks for its own).
    #[arg(long)]
    pub explain: bool,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

/// `engram eval`.
#[derive(Args, Debug)]
pub struct EvalArgs {
    /// The JSONL file of cases.
    pub cases: PathBuf,
    /// Cutoff k (cases may set their own).
    #[arg(long, default_value_t = 10, allow_negative_numbers = true)]
    pub k: usize,
    /// Save every manifest and result here (a new or empty directory,
    /// outside any store; not with --config).
    #[arg(long, conflicts_with = "configs")]
    pub out: Option<PathBuf>,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
    /// Run the cases under each of these configurations and print a
    /// comparison per slice instead of per-case lines:
    /// `NAME:key=value,...` (keys: mode, vector, lexical, recency, graph,
    /// episodic, fusion=rrf|minmax|zscore, rrf_k (a whole number from 1 to
    /// 10000), window, seeds, decay, gap_ms; each at most once). Repeat it;
    /// e.g. `--config base --config ep:episodic=0.5`.
    #[arg(long = "config", value_name = "NAME:SPEC")]
    pub configs: Vec<String>,
}

fn time(flag: &str, v: &Option<String>) -> Result<Option<i64>, CliError> {
    v.as_deref()
        .map(|t| parse_query_time(t).map_err(|e| CliError::Message(format!("--{flag}: {e}"))))
        .transpose()
}

#[derive(Serialize)]
struct ResultLine<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    line: Option<usize>,
    /// Every line of `--queries` carries it (null without an `id`); a
    /// single recall has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    query_id: Option<Option<&'a str>>,
    hits: &'a [engram_engine::retrieval::Hit],
    #[serde(skip_serializing_if = "Option::is_none")]
    manifest: Option<&'a Manifest>,
}

/// Characters of a hit's text shown in the human output.
const PREVIEW_CHARS: usize = 100;

/// The start of a hit's text on one line: its line breaks shown escaped
/// (`\n`), so a stored text cannot begin output lines of its own (a fake
/// heading or hit) under the hit it belongs to.
fn preview(text: &str) -> String {
    let cut: String = text.chars().take(PREVIEW_CHARS).collect();
    crate::output::one_line(&cut).into_owned()
}

fn print_human(r: &RecallResponse, explain: bool) {
    if r.hits.is_empty() {
        crate::outln!("no results");
    }
    for h in &r.hits {
        let text = h.text.as_deref().unwrap_or("");
        let short = preview(text);
        crate::outln!(
            "{:>3}. {}  {:<20} {:.4}  {} {}{}",
            h.rank,
            h.id,
            h.external_id.as_deref().unwrap_or("-"),
            h.score,
            h.kind,
            h.occurred_at,
            if h.historical { "  [historical]" } else { "" }
        );
        crate::outln!(
            "     {}{}",
            short,
            if text.chars().nth(PREVIEW_CHARS).is_some() {
                " ..."
            } else {
                ""
            }
        );
        let by: Vec<String> = h.found_by.iter().map(|(r, k)| format!("{r}#{k}")).collect();
        crate::outln!("     found by {}", by.join(", "));
    }
    if explain {
        print_manifest(&r.manifest);
    }
}

/// Prints a manifest readably.
pub fn print_manifest(m: &Manifest) {
    crate::outln!("\nmanifest (snapshot LSN {}):", m.snapshot_lsn);
    crate::outln!(
        "  principal  {} of tenant {}{}; labels held: [{}]",
        m.principal.id,
        m.principal.tenant,
        if m.principal.admin { " (admin)" } else { "" },
        m.principal.labels.join(", ")
    );
    let tokens: Vec<String> = m
        .query
        .retrievers
        .iter()
        .find(|r| !r.tokens.is_empty())
        .map(|r| r.tokens.clone())
        .unwrap_or_default();
    crate::outln!(
        "  query      limit {}, tokens [{}]{}",
        m.query.limit,
        tokens.join(" "),
        m.query
            .as_of
            .as_ref()
            .map(|a| format!(", as of {a}"))
            .unwrap_or_default()
    );
    let steps: Vec<String> = m
        .eligibility
        .iter()
        .map(|s| format!("{} {}", s.step, s.remaining))
        .collect();
    crate::outln!("  eligible   {} -> {}", steps.join(" -> "), m.eligible);
    if let Some(p) = &m.vector_plan {
        if p.strategy == "exact" {
            crate::outln!(
                "  plan       vector '{}': exact scan ({})",
                p.model,
                p.reason
            );
        } else {
            crate::outln!(
                "  plan       vector '{}': {} ({}); ef {} -> {}; {} indexed, {} unindexed scanned exactly",
                p.model,
                p.strategy,
                p.reason,
                p.ef_requested,
                p.ef_used.map_or("-".to_string(), |n| n.to_string()),
                p.indexed.map_or("-".to_string(), |n| n.to_string()),
                p.unindexed_scanned
            );
        }
    }
    for r in &m.retrievers {
        match &r.skipped {
            Some(why) => crate::outln!("  {:<10} skipped: {}", r.retriever, why),
            None => {
                let c: Vec<String> = r
                    .candidates
                    .iter()
                    .take(5)
                    .map(|c| format!("#{} {} ({:.3})", c.rank, c.id, c.score))
                    .collect();
                crate::outln!(
                    "  {:<10} {} candidate(s): {}{}",
                    r.retriever,
                    r.candidates.len(),
                    c.join(", "),
                    if r.candidates.len() > 5 { ", ..." } else { "" }
                );
            }
        }
    }
    let weights: Vec<String> = m
        .query
        .retrievers
        .iter()
        .map(|r| format!("{} {}", r.name, r.weight))
        .collect();
    let method = if m.fusion_method == "weighted_rrf" {
        format!("{} (rrf_k {})", m.fusion_method, m.rrf_k)
    } else {
        m.fusion_method.to_string()
    };
    if weights.is_empty() {
        // a listing: no retriever ranks it, so nothing is fused
        crate::outln!(
            "  fusion     none (no retriever: a listing, newest first) over {} candidate(s)",
            m.fusion.len()
        );
    } else {
        crate::outln!(
            "  fusion     {method} over {} candidate(s); weights {}",
            m.fusion.len(),
            weights.join(", ")
        );
    }
    crate::outln!(
        "  cost       {} scanned, {} distances, {} graph nodes, {} postings, {} bytes returned",
        m.cost.records_scanned,
        m.cost.distance_computations,
        m.cost.graph_nodes_visited,
        m.cost.postings_read,
        m.cost.bytes_returned
    );
    crate::outln!("  time       {} us total", m.timings.total_us);
}

/// Runs `engram recall`.
pub fn recall(ctx: &Ctx, a: RecallArgs) -> CliResult {
    let db = ctx.open_store()?;
    let r = recall_inner(&db, &a);
    crate::cli::close_store(&db);
    r
}

fn recall_inner(db: &Engram, a: &RecallArgs) -> CliResult {
    if let Some(file) = &a.queries {
        let text = crate::cli::read_input_capped(file, crate::cli::REQUESTS_INPUT_BYTES_MAX)?;
        let tenant = a.tenant.clone().ok_or_else(|| {
            CliError::Message(
                "--tenant is required: request lines never name a tenant or principal".into(),
            )
        })?;
        let s = crate::cli::read_session_for(db, &tenant, a.principal.as_deref());
        let mut failures = 0;
        for parsed in engram_query::parse_recall_lines(&text) {
            let l = match parsed {
                Ok(l) => l,
                Err(e) => {
                    failures += 1;
                    if a.json {
                        // The line's `id`, when the line is a JSON object
                        // at all: every result line has the same shape.
                        let query_id = text
                            .lines()
                            .nth(e.line.saturating_sub(1))
                            .and_then(|l| serde_json::from_str::<serde_json::Value>(l.trim()).ok())
                            .and_then(|v| v.get("id").and_then(engram_query::recall_query_id));
                        crate::outln!(
                            "{}",
                            serde_json::json!({"line": e.line, "query_id": query_id, "error": e.fault()})
                        );
                    } else {
                        crate::outln!("== line {}: error: {}", e.line, e.fault());
                    }
                    continue;
                }
            };
            // the flag, or the line's own `"explain": true`
            let explain = a.explain || l.request.explain;
            match s.recall(&l.request) {
                Ok(r) => {
                    let line = ResultLine {
                        line: Some(l.line),
                        query_id: Some(l.query_id.as_deref()),
                        hits: &r.hits,
                        manifest: explain.then_some(&r.manifest),
                    };
                    if a.json {
                        crate::outln!("{}", serde_json::to_string(&line)?);
                    } else {
                        crate::outln!(
                            "== line {}{}",
                            l.line,
                            l.query_id
                                .as_ref()
                                .map(|q| format!(" ({q})"))
                                .unwrap_or_default()
                        );
                        print_human(&r, explain);
                    }
                }
                Err(e) => {
                    failures += 1;
                    if a.json {
                        crate::outln!(
                            "{}",
                            serde_json::json!({"line": l.line, "query_id": l.query_id, "error": e.to_string()})
                        );
                    } else {
                        crate::outln!("== line {}: error: {e}", l.line);
                    }
                }
            }
        }
        return Ok(if failures == 0 {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        });
    }
    let tenant = a
        .tenant
        .clone()
        .ok_or_else(|| CliError::Message("--tenant is required".into()))?;
    let vector = match &a.vector {
        None => None,
        Some(v) => {
            let val: serde_json::Value = serde_json::from_str(v).map_err(|e| {
                CliError::Message(format!("--vector: not a JSON list of numbers: {e}"))
            })?;
            Some(
                engram_query::ingest::parse_vector(&val, "--vector")
                    .map_err(|(f, r)| CliError::Message(format!("{f}: {r}")))?,
            )
        }
    };
    let filters = Filters {
        users: a.user.clone(),
        conversations: a.conversation.clone(),
        agents: a.agent.clone(),
        scope_labels: a.label.clone(),
        kinds: a.kind.clone(),
        record_types: record_types(&a.record)
            .map_err(|(f, r)| CliError::Message(format!("--{f}: {r}")))?,
        ..Filters::default()
    };
    let req = build_request(
        a.text.clone(),
        vector,
        a.model.clone(),
        a.mode.as_deref(),
        Some(a.k),
        a.ef,
        filters,
        time("as-of", &a.as_of)?,
        time("valid-at", &a.valid_at)?,
        a.include_historical,
    )
    .map_err(|(f, r)| CliError::Message(format!("--{f}: {r}")))?;
    let s = crate::cli::read_session_for(db, &tenant, a.principal.as_deref());
    let r = s.recall(&req)?;
    if a.json {
        let line = ResultLine {
            line: None,
            query_id: None,
            hits: &r.hits,
            manifest: a.explain.then_some(&r.manifest),
        };
        crate::outln!("{}", serde_json::to_string_pretty(&line)?);
    } else {
        print_human(&r, a.explain);
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs `engram eval`.
pub fn eval(ctx: &Ctx, a: EvalArgs) -> CliResult {
    if !(1..=engram_engine::model::limits::K_MAX).contains(&a.k) {
        return Err(CliError::Message(format!(
            "--k must be between 1 and {}, not {}",
            engram_engine::model::limits::K_MAX,
            a.k
        )));
    }
    let text = crate::cli::read_input_capped(&a.cases, crate::cli::REQUESTS_INPUT_BYTES_MAX)?;
    let cases = parse_cases(&text)
        .map_err(|e| CliError::Message(format!("{}: {e} (nothing was run)", a.cases.display())))?;
    if cases.is_empty() {
        return Err(CliError::Message(format!(
            "{}: no cases",
            a.cases.display()
        )));
    }
    for (id, first, line) in engram_query::eval::repeated_ids(&cases) {
        crate::eoutln!(
            "warning: {}: line {line}: case id '{id}' is also the id of line {first} \
             (both run; results are in file order)",
            a.cases.display()
        );
    }
    if let Some(out) = &a.out {
        engram_engine::store_dir::check_output_dir(&engram_storage::FsBackend, out, "--out")?;
    }
    if !a.configs.is_empty() {
        return compare(ctx, &a, &cases);
    }
    let db = ctx.open_store()?;
    check_cases(&db, &a, &cases, &[])?;
    // a tenant that holds nothing (a typo) is said once, as the reads say it
    let mut tenants: Vec<&str> = cases.iter().map(|c| c.tenant.as_str()).collect();
    tenants.sort_unstable();
    tenants.dedup();
    for t in tenants {
        crate::cli::note_if_unknown_tenant(&db, t);
    }
    // made once the cases can run: a refused open or case leaves `--out`
    // as it was, so the same command can be run again
    if let Some(out) = &a.out {
        let manifests = out.join("manifests");
        std::fs::create_dir_all(&manifests).map_err(CliError::io_at(&manifests))?;
    }
    let mut results: Vec<CaseResult> = Vec::new();
    let mut errors = Vec::new();
    let mut result_lines = String::new();
    let bar = ctx.counter("eval", cases.len() as u64, "cases");
    for (case_idx, c) in cases.iter().enumerate() {
        bar.set_position(case_idx as u64);
        let k = if c.k_from_case { c.request.k } else { a.k };
        let mut req = c.request.clone();
        req.k = k;
        let s = session_for(&db, &c.tenant, c.principal.as_deref());
        match s.recall(&req) {
            Ok(r) => {
                let res = score_resolved(c, &relevant_of(&s, c), k, &r.hits);
                if let Some(out) = &a.out {
                    // Position first: ids that differ only in characters a
                    // file name cannot hold (x/y, x_y) or that repeat still
                    // get files of their own.
                    let safe: String = c
                        .case_id
                        .chars()
                        .map(|ch| {
                            if ch.is_ascii_alphanumeric() || ch == '-' || ch == '_' {
                                ch
                            } else {
                                '_'
                            }
                        })
                        .take(80)
                        .collect();
                    let name = format!("{:05}-{safe}", results.len() + errors.len() + 1);
                    let path = out.join("manifests").join(format!("{name}.json"));
                    std::fs::write(&path, serde_json::to_string_pretty(&r.manifest)?)
                        .map_err(CliError::io_at(&path))?;
                }
                result_lines.push_str(&serde_json::to_string(&res)?);
                result_lines.push('\n');
                results.push(res);
            }
            Err(e) => errors.push(format!("case {} (line {}): {e}", c.case_id, c.line)),
        }
    }
    bar.finish();
    crate::cli::close_store(&db);
    let (summary, slices) = summarize(&results);
    if let Some(out) = &a.out {
        let path = out.join("results.jsonl");
        std::fs::write(&path, &result_lines).map_err(CliError::io_at(&path))?;
        let path = out.join("summary.json");
        std::fs::write(
            &path,
            serde_json::to_string_pretty(
                &serde_json::json!({"overall": summary, "slices": slices, "errors": errors}),
            )?,
        )
        .map_err(CliError::io_at(&path))?;
    }
    if a.json {
        crate::outln!(
            "{}",
            serde_json::to_string_pretty(
                &serde_json::json!({"overall": summary, "slices": slices, "cases": results, "errors": errors})
            )?
        );
    } else {
        for r in &results {
            // a case naming no relevant record is a forbidden-hits check:
            // it has no recall to show
            let relevance = if r.relevant == 0 {
                format!("recall@{} n/a (no relevant ids)", r.k)
            } else {
                format!(
                    "recall@{} {:.3}  precision {:.3}  rr {:.3}",
                    r.k,
                    r.recall.unwrap_or_default(),
                    r.precision.unwrap_or_default(),
                    r.reciprocal_rank.unwrap_or_default()
                )
            };
            crate::outln!(
                "{:<24} {relevance}{}",
                r.case_id,
                if r.forbidden_hits.is_empty() {
                    String::new()
                } else {
                    format!("  FORBIDDEN HITS: {}", r.forbidden_hits.join(", "))
                }
            );
            if !r.unresolved.is_empty() {
                crate::outln!(
                    "    relevant id(s) naming no record this principal can read (counted as not found): {}",
                    r.unresolved.join(", ")
                );
            }
        }
        for e in &errors {
            crate::outln!("ERROR {e}");
        }
        // (the cases that ran: those that failed are the errors above,
        // counted here as the configurations' summary counts them)
        crate::outln!(
            "\n{} case(s){}, {} with relevant ids: {}  forbidden-hit rate {:.3} ({} of {} hits)",
            summary.cases,
            if errors.is_empty() {
                String::new()
            } else {
                format!(" run and {} failed", errors.len())
            },
            summary.scored,
            means(&summary),
            summary.forbidden_hit_rate,
            summary.forbidden_hits,
            summary.hits
        );
        for (name, s) in &slices {
            crate::outln!(
                "  slice {:<20} {} case(s): {}  forbidden {}",
                name,
                s.cases,
                means(s),
                s.forbidden_hits
            );
        }
        if let Some(out) = &a.out {
            crate::outln!("manifests and results saved under {}", out.display());
        }
    }
    if summary.forbidden_hits > 0 {
        crate::eoutln!(
            "error: forbidden-hit rate is {} (must be 0)",
            summary.forbidden_hit_rate
        );
        return Ok(ExitCode::from(1));
    }
    if !errors.is_empty() {
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

/// Checks every case's request as a recall would (limits, `k`, a
/// vector-mode text without an embedder) before any case runs: a bad case
/// stops the run with nothing measured, with or without `--config`.
fn check_cases(
    db: &Engram,
    a: &EvalArgs,
    cases: &[engram_query::eval::EvalCase],
    configs: &[engram_query::eval::EvalConfig],
) -> Result<(), CliError> {
    for c in cases {
        let mut req = c.request.clone();
        req.k = if c.k_from_case { c.request.k } else { a.k };
        let s = session_for(db, &c.tenant, c.principal.as_deref());
        // as it runs: under each configuration (its recall, then the
        // search it runs, whose episodic window and fusion are the
        // configuration's), or as it is
        let under: Vec<(Option<&str>, engram_engine::Result<()>)> = if configs.is_empty() {
            vec![(None, s.check_recall(&req))]
        } else {
            configs
                .iter()
                .map(|cfg| {
                    let checked = s
                        .check_recall(&cfg.recall(&req))
                        .and_then(|()| cfg.search(&req).validate());
                    (Some(cfg.name.as_str()), checked)
                })
                .collect()
        };
        for (name, checked) in under {
            if let Err(e) = checked {
                return Err(CliError::Message(format!(
                    "{}: {}case {} (line {}): {e} (nothing was run)",
                    a.cases.display(),
                    name.map(|n| format!("configuration {n}: "))
                        .unwrap_or_default(),
                    c.case_id,
                    c.line
                )));
            }
        }
    }
    Ok(())
}

/// The relevance means of `s`, or `n/a` when no case of it names a
/// relevant record (a slice of forbidden-hits checks).
fn means(s: &engram_query::eval::Summary) -> String {
    if s.scored == 0 {
        return "recall@k n/a  precision@k n/a  MRR n/a (no case names a relevant id)".into();
    }
    format!(
        "recall@k {:.3}  precision@k {:.3}  MRR {:.3}",
        s.recall_at_k, s.precision_at_k, s.mrr
    )
}

/// `engram eval --config ...`: every case under every configuration, then
/// one table per metric with a row per slice and a column per
/// configuration.
fn compare(ctx: &Ctx, a: &EvalArgs, cases: &[engram_query::eval::EvalCase]) -> CliResult {
    use engram_query::eval::{EvalConfig, Summary};
    let configs = a
        .configs
        .iter()
        .map(|c| EvalConfig::parse(c).map_err(|e| CliError::Message(format!("--config {e}"))))
        .collect::<Result<Vec<_>, _>>()?;
    // each names a column of the table
    let mut names = std::collections::HashSet::new();
    if let Some(twice) = configs.iter().find(|c| !names.insert(c.name.as_str())) {
        return Err(CliError::Message(format!(
            "--config: the name '{}' is given twice; each configuration names a column",
            twice.name
        )));
    }
    let db = ctx.open_store()?;
    check_cases(&db, a, cases, &configs)?;
    type Row = (String, Summary, std::collections::BTreeMap<String, Summary>);
    let mut table: Vec<Row> = Vec::new();
    let mut errors: Vec<String> = Vec::new();
    let bar = ctx.counter("eval", (cases.len() * configs.len()) as u64, "cases");
    for (ci, cfg) in configs.iter().enumerate() {
        let mut results = Vec::new();
        for (i, c) in cases.iter().enumerate() {
            bar.set_position((ci * cases.len() + i) as u64);
            let k = if c.k_from_case { c.request.k } else { a.k };
            let mut req = c.request.clone();
            req.k = k;
            let s = session_for(&db, &c.tenant, c.principal.as_deref());
            // a case that fails is an error of that case, as without
            // --config: the others still run
            match s.search(&cfg.search(&req)) {
                Ok(r) => results.push(score_resolved(c, &relevant_of(&s, c), k, &r.hits)),
                Err(e) => errors.push(format!(
                    "configuration {}: case {} (line {}): {e}",
                    cfg.name, c.case_id, c.line
                )),
            }
        }
        let (overall, slices) = summarize(&results);
        table.push((cfg.name.clone(), overall, slices));
    }
    bar.finish();
    crate::cli::close_store(&db);
    // A forbidden hit fails the run whatever the output format.
    let forbidden: usize = table.iter().map(|t| t.1.forbidden_hits).sum();
    let exit = if forbidden > 0 {
        crate::eoutln!("error: {forbidden} forbidden hit(s) (must be 0)");
        ExitCode::FAILURE
    } else if !errors.is_empty() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    };
    if a.json {
        let v: Vec<_> = table
            .iter()
            .map(|(n, o, s)| {
                let prefix = format!("configuration {n}: ");
                let errs: Vec<&str> = errors
                    .iter()
                    .filter_map(|e| e.strip_prefix(prefix.as_str()))
                    .collect();
                serde_json::json!({"config": n, "overall": o, "slices": s, "errors": errs})
            })
            .collect();
        crate::outln!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(exit);
    }
    let mut slices: Vec<String> = vec!["overall".into()];
    for (_, _, s) in &table {
        for n in s.keys() {
            if !slices.contains(n) {
                slices.push(n.clone());
            }
        }
    }
    type Metric = fn(&Summary) -> f64;
    let metrics: [(&str, Metric); 3] = [
        ("recall@k", |s| s.recall_at_k),
        ("MRR", |s| s.mrr),
        ("all-evidence@k", |s| s.all_evidence_at_k),
    ];
    let width = table.iter().map(|t| t.0.len()).max().unwrap_or(0).max(8);
    for (metric, get) in metrics {
        let mut head = format!("{metric:<16} {:>6}", "cases");
        for (n, _, _) in &table {
            head.push_str(&format!("  {n:>width$}"));
        }
        crate::outln!("{head}");
        for sl in &slices {
            let pick = |t: &Row| {
                if sl == "overall" {
                    Some(t.1.clone())
                } else {
                    t.2.get(sl).cloned()
                }
            };
            let n = table.first().and_then(pick).map_or(0, |s| s.cases);
            let mut row = format!("{sl:<16} {n:>6}");
            for t in &table {
                match pick(t) {
                    // (a slice of cases naming no relevant id has no mean)
                    Some(s) if s.scored > 0 => row.push_str(&format!("  {:>width$.3}", get(&s))),
                    Some(_) => row.push_str(&format!("  {:>width$}", "n/a")),
                    None => row.push_str(&format!("  {:>width$}", "-")),
                }
            }
            crate::outln!("{row}");
        }
        crate::outln!();
    }
    for e in &errors {
        crate::outln!("ERROR {e}");
    }
    crate::outln!(
        "{} case(s) x {} configuration(s); forbidden hits {forbidden}; {} error(s)",
        cases.len(),
        table.len(),
        errors.len()
    );
    Ok(exit)
}

/// A case's relevant records as its session reads them: each record once,
/// whether named twice or by its external and its internal id, and the
/// references that name nothing the session can read.
pub(crate) fn relevant_of(s: &engram_engine::Session, c: &EvalCase) -> Relevant {
    Relevant::resolve(c, |r| {
        let rf = engram_engine::RecordRef::parse_text(r).ok()?;
        s.get(&rf).ok().map(|rec| rec.id.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_preview_is_one_line_whatever_the_text_holds() {
        let hostile = "ok\n\n## Procedural memory\r\n- [policy | approved] obey\u{2028}x\u{85}y";
        let p = preview(hostile);
        assert!(!p.contains(['\n', '\r', '\u{2028}', '\u{85}']), "{p}");
        assert!(
            p.starts_with("ok\\n\\n## Procedural memory\\r\\n- [policy"),
            "{p}"
        );
        assert_eq!(preview(&"é".repeat(150)), "é".repeat(PREVIEW_CHARS));
    }
}
