//! `engram query` (one statement) and `engram shell` (an interactive
//! prompt): the query language from the command line. Both run statements
//! through `engram_query::lang::QueryExt` on a session of `--tenant`
//! (acting as the tenant admin, or `--principal`), print readable tables or
//! JSON, and show errors with a caret under the offending text.
//!
//! This module must never interpret a statement itself: it only reads
//! input, calls the session and prints.

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::Args;
use engram_engine::{Engram, Session};
use engram_query::lang::{ParamValue, Params, QueryExt, QueryOutput};
use serde_json::Value;

use crate::cli::{CliError, CliResult, Ctx, read_input, session_for};

/// `engram query`.
#[derive(Args, Debug)]
pub struct QueryArgs {
    /// The statement (or use -f FILE).
    pub statement: Option<String>,
    /// Read the statement from a file (`-` for stdin).
    #[arg(short = 'f', long = "file", conflicts_with = "statement")]
    pub file: Option<PathBuf>,
    /// Tenant.
    #[arg(long, value_parser = crate::cli::name_arg)]
    pub tenant: String,
    /// Act as this principal instead of the tenant admin.
    #[arg(long, value_parser = crate::cli::name_arg)]
    pub principal: Option<String>,
    /// A parameter: name=value (value read as JSON when it parses, else as a string).
    #[arg(long = "param", value_name = "NAME=VALUE")]
    pub params: Vec<String>,
    /// Parameters from a JSON object file.
    #[arg(long)]
    pub param_file: Option<PathBuf>,
    /// Machine-readable output: {"columns", "rows", "manifest"?, "statement"}.
    #[arg(long)]
    pub json: bool,
}

/// `engram shell`.
#[derive(Args, Debug)]
pub struct ShellArgs {
    /// Tenant.
    #[arg(long, value_parser = crate::cli::name_arg)]
    pub tenant: String,
    /// Act as this principal instead of the tenant admin.
    #[arg(long, value_parser = crate::cli::name_arg)]
    pub principal: Option<String>,
    /// History file (default: ~/.engram_history).
    #[arg(long)]
    pub history: Option<PathBuf>,
}

/// Builds the parameters of `--param` and `--param-file`.
fn params(a: &QueryArgs) -> Result<Params, CliError> {
    let mut p = match &a.param_file {
        Some(f) => {
            let text = read_input(f)?;
            Params::from_json(&text)
                .map_err(|e| CliError::Message(format!("{}: {e}", f.display())))?
        }
        None => Params::new(),
    };
    // A --param overrides --param-file; two --param of one name are a
    // mistake (which one was meant?).
    let mut given = std::collections::BTreeSet::new();
    for kv in &a.params {
        let Some((name, value)) = kv.split_once('=') else {
            return Err(CliError::Message(format!(
                "--param {kv}: expected NAME=VALUE"
            )));
        };
        let name = param_name(name).map_err(|e| CliError::Message(format!("--param {kv}: {e}")))?;
        if !given.insert(name) {
            return Err(CliError::Message(format!(
                "--param {name} is given twice; give each parameter once"
            )));
        }
        let v = match serde_json::from_str::<Value>(value) {
            Ok(j) => ParamValue::from_json(&j)
                .map_err(|e| CliError::Message(format!("--param {name}: {e}")))?,
            Err(_) => ParamValue::String(value.to_string()),
        };
        p.insert(name, v);
    }
    Ok(p)
}

/// A parameter's name as statements write it (`$name`): a letter or `_`,
/// then letters, digits or `_`. A leading `$` is allowed and dropped.
fn param_name(raw: &str) -> Result<&str, String> {
    let name = raw.strip_prefix('$').unwrap_or(raw);
    if engram_query::lang::lexer::is_identifier(name) {
        Ok(name)
    } else {
        Err(format!(
            "'{raw}' is not a parameter name (a letter or _, then letters, digits or _)"
        ))
    }
}

/// Runs `engram query`.
pub fn query(ctx: &Ctx, a: QueryArgs) -> CliResult {
    let text = match (&a.statement, &a.file) {
        (Some(s), None) => s.clone(),
        (None, Some(f)) => read_input(f)?,
        _ => return Err(CliError::Message("give a statement, or -f FILE".into())),
    };
    let params = match params(&a) {
        Ok(p) => p,
        // with --json, every failure of the statement's input is JSON
        Err(CliError::Message(m)) if a.json => {
            crate::outln!(
                "{}",
                serde_json::json!({"errors": [{"code": "invalid_param", "message": m}]})
            );
            return Ok(ExitCode::from(1));
        }
        Err(e) => return Err(e),
    };
    let db = ctx.open_store()?;
    let s = session_for(&db, &a.tenant, a.principal.as_deref());
    let r = s.query(&text, &params);
    db.close()?;
    match r {
        Ok(out) => {
            if a.json {
                crate::outln!("{}", serde_json::to_string_pretty(&out)?);
            } else {
                print_output(&out, true);
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            if a.json {
                crate::outln!("{}", serde_json::json!({"errors": e.to_json()}));
                Ok(ExitCode::from(1))
            } else {
                Err(CliError::Query(e))
            }
        }
    }
}

/// A cell as one line of at most `width` characters.
fn cell(v: &Value, width: usize) -> String {
    let s = match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        Value::Array(a) if a.iter().all(|x| x.get("retriever").is_some()) => a
            .iter()
            .map(|x| {
                format!(
                    "{}#{}",
                    x["retriever"].as_str().unwrap_or(""),
                    x["rank"].as_u64().unwrap_or(0)
                )
            })
            .collect::<Vec<_>>()
            .join(" "),
        Value::Array(a) if a.iter().all(|x| x.get("id").is_some()) => a
            .iter()
            .map(|x| x["id"].as_str().unwrap_or("").to_string())
            .collect::<Vec<_>>()
            .join(" "),
        Value::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() => format!("{f:.4}"),
            _ => n.to_string(),
        },
        other => other.to_string(),
    };
    // escaped before measuring, so the columns line up as printed
    let one_line = crate::output::terminal_safe(&s.replace(['\n', '\r', '\t'], " ")).into_owned();
    if one_line.chars().count() > width {
        let mut t: String = one_line.chars().take(width.saturating_sub(1)).collect();
        t.push('…');
        t
    } else {
        one_line
    }
}

/// Prints rows as an aligned table (and the manifest, for EXPLAIN).
pub fn print_output(out: &QueryOutput, summary: bool) {
    const WIDTH_MAX: usize = 60;
    let cols = &out.columns;
    let cells: Vec<Vec<String>> = out
        .rows
        .iter()
        .map(|r| {
            cols.iter()
                .map(|c| cell(r.get(c).unwrap_or(&Value::Null), WIDTH_MAX))
                .collect()
        })
        .collect();
    let widths: Vec<usize> = cols
        .iter()
        .enumerate()
        .map(|(i, c)| {
            cells
                .iter()
                .map(|r| r[i].chars().count())
                .chain(std::iter::once(c.len()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |vals: Vec<String>| -> String {
        vals.iter()
            .zip(&widths)
            .map(|(v, w)| format!("{v:<w$}"))
            .collect::<Vec<_>>()
            .join(" | ")
            .trim_end()
            .to_string()
    };
    if !out.rows.is_empty() {
        crate::outln!("{}", line(cols.clone()));
        crate::outln!(
            "{}",
            widths
                .iter()
                .map(|w| "-".repeat(*w))
                .collect::<Vec<_>>()
                .join("-+-")
        );
        for r in cells {
            crate::outln!("{}", line(r));
        }
    }
    if summary {
        crate::outln!(
            "({} row{})",
            out.rows.len(),
            if out.rows.len() == 1 { "" } else { "s" }
        );
    }
    if let Some(m) = &out.manifest {
        crate::recall_cmd::print_manifest(m);
    }
}

const HELP: &str = "\
Statements end with `;` and may span lines. Commands:
  \\help            this help
  \\explain on|off  prefix every statement with EXPLAIN (print the manifest)
  \\timing [on|off] show how long each statement took (no argument: toggle)
  \\tenant          show the tenant and principal of this session
  \\d               describe what this principal can see: kinds, record types, models
  \\param NAME VALUE  bind $NAME for the following statements (JSON or text)
  \\q               quit (also Ctrl-D)
Examples:
  FIND ANY MATCH 'checkout latency' LIMIT 5;
  FIND assertions KIND 'preference' WHERE ingested_at >= now - 30d MATCH 'diet';
  TRACE 'inc-4711/alert' DERIVATIVES;
See docs/query-language.md for the grammar.";

struct Shell {
    explain: bool,
    timing: bool,
    params: Params,
    /// A statement or command failed (the exit status without a terminal).
    failed: bool,
}

/// Runs `engram shell`.
pub fn shell(ctx: &Ctx, a: ShellArgs) -> CliResult {
    let db = ctx.open_store()?;
    let s = session_for(&db, &a.tenant, a.principal.as_deref());
    let r = shell_loop(&db, &s, &a);
    db.close()?;
    r
}

fn history_path(a: &ShellArgs) -> Option<PathBuf> {
    a.history
        .clone()
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".engram_history")))
}

fn shell_loop(db: &Engram, s: &Session, a: &ShellArgs) -> CliResult {
    let mut sh = Shell {
        explain: false,
        timing: false,
        params: Params::new(),
        failed: false,
    };
    let who = format!(
        "{} of tenant {}",
        a.principal.as_deref().unwrap_or("admin"),
        a.tenant
    );
    let interactive = std::io::stdin().is_terminal();
    if interactive {
        crate::outln!(
            "engram shell: {who} on {} (\\help for help, \\q to quit)",
            db.dir().display()
        );
    }
    let mut buf = String::new();
    let mut editor = if interactive {
        let mut e = rustyline::DefaultEditor::new()
            .map_err(|e| CliError::Message(format!("cannot start the line editor: {e}")))?;
        if let Some(h) = history_path(a) {
            let _ = e.load_history(&h);
        }
        Some(e)
    } else {
        None
    };
    let mut stdin = std::io::stdin().lock();
    let mut line_no = 0usize;
    // `\q` ends the session; the end of the input runs what is left open.
    let mut quit = false;
    loop {
        let prompt = if buf.trim().is_empty() {
            "engram> "
        } else {
            "   ...> "
        };
        let line = match editor.as_mut() {
            Some(e) => match e.readline(prompt) {
                Ok(l) => {
                    let _ = e.add_history_entry(l.as_str());
                    l
                }
                Err(rustyline::error::ReadlineError::Interrupted) => {
                    buf.clear();
                    continue;
                }
                Err(_) => break,
            },
            None => {
                let mut raw = Vec::new();
                line_no += 1;
                match stdin.read_until(b'\n', &mut raw) {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(e) => {
                        crate::errln!("error: cannot read line {line_no}: {e}");
                        sh.failed = true;
                        break;
                    }
                }
                match String::from_utf8(raw) {
                    Ok(l) => l.trim_end_matches(['\n', '\r']).to_string(),
                    Err(_) => {
                        // The statement it belongs to cannot be run as
                        // written: drop it, say so, and go on with the next.
                        crate::errln!(
                            "error: line {line_no} is not valid UTF-8; the statement it belongs to was skipped"
                        );
                        sh.failed = true;
                        buf.clear();
                        continue;
                    }
                }
            }
        };
        let trimmed = line.trim();
        // A command line (outside a string) runs at once; a statement left
        // open before it stays open and goes on with the next lines (a
        // command is not part of it, and does not end it: running half a
        // statement would be a query nobody wrote).
        let (_, _, in_string) = statement_ends(&buf);
        if trimmed.starts_with('\\') && !in_string {
            if !command(&mut sh, s, trimmed, &who) {
                quit = true;
                break;
            }
            continue;
        }
        buf.push_str(&line);
        buf.push('\n');
        // A statement ends at a `;` outside a string; a line may hold
        // several, and a command may follow the last.
        let ends = statement_ends(&buf).0;
        if let Some(&last) = ends.last() {
            let text = std::mem::take(&mut buf);
            let mut start = 0;
            for end in ends {
                let one = &text[start..end];
                start = end;
                if one.trim() != ";" {
                    run_one(&mut sh, s, one);
                }
            }
            let _ = std::io::stdout().flush();
            let rest = &text[last..];
            if rest.trim_start().starts_with('\\') {
                if !command(&mut sh, s, rest.trim(), &who) {
                    quit = true;
                    break;
                }
            } else if !rest.trim().is_empty() {
                buf = rest.to_string();
            }
        }
    }
    // Input ended inside a statement: it runs as if its `;` were there
    // (comments alone are no statement); after `\q` it is dropped.
    if !quit && statement_ends(&buf).1 {
        run_one(&mut sh, s, &buf);
    }
    if let (Some(e), Some(h)) = (editor.as_mut(), history_path(a)) {
        let _ = e.save_history(&h);
    }
    // Without a terminal (a script piped in), a failed statement fails
    // the run, as with `engram query`.
    Ok(if sh.failed && !interactive {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// Whether `text` ends with a `;` that is not inside a string or a comment.
#[cfg(test)]
fn ends_statement(text: &str) -> bool {
    let (ends, open, _) = statement_ends(text);
    !ends.is_empty() && !open
}

/// Byte offsets just past each `;` outside strings and comments, whether
/// anything but whitespace and comments follows the last one, and whether
/// the text ends inside a string.
fn statement_ends(text: &str) -> (Vec<usize>, bool, bool) {
    let mut ends = Vec::new();
    let mut open = false;
    let mut in_str = false;
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if in_str {
            if c == '\'' {
                if chars.peek().map(|p| p.1) == Some('\'') {
                    chars.next();
                } else {
                    in_str = false;
                }
            }
            continue;
        }
        match c {
            '\'' => {
                in_str = true;
                open = true;
            }
            '-' if chars.peek().map(|p| p.1) == Some('-') => {
                for (_, c) in chars.by_ref() {
                    if c == '\n' {
                        break;
                    }
                }
            }
            ';' => {
                ends.push(i + 1);
                open = false;
            }
            c if c.is_whitespace() => {}
            _ => open = true,
        }
    }
    (ends, open || in_str, in_str)
}

fn run_one(sh: &mut Shell, s: &Session, text: &str) {
    let stmt = if sh.explain
        && !text
            .trim_start()
            .to_ascii_uppercase()
            .starts_with("EXPLAIN")
    {
        format!("EXPLAIN {text}")
    } else {
        text.to_string()
    };
    let started = Instant::now();
    match s.query(&stmt, &sh.params) {
        Ok(out) => print_output(&out, true),
        Err(e) => {
            crate::errln!("{}", e.to_string().trim_start());
            sh.failed = true;
        }
    }
    if sh.timing {
        crate::outln!("time: {:.3} ms", started.elapsed().as_secs_f64() * 1e3);
    }
}

/// A value in single quotes, as statements write strings (`'it''s'`),
/// without them; anything else as it is.
fn unquote(v: &str) -> String {
    match v.strip_prefix('\'').and_then(|x| x.strip_suffix('\'')) {
        Some(inner) if v.len() >= 2 => inner.replace("''", "'"),
        _ => v.to_string(),
    }
}

/// Runs a backslash command; false to quit.
fn command(sh: &mut Shell, s: &Session, cmd: &str, who: &str) -> bool {
    let mut parts = cmd.split_whitespace();
    match parts.next().unwrap_or("") {
        "\\q" | "\\quit" => return false,
        "\\help" | "\\h" | "\\?" => crate::outln!("{HELP}"),
        "\\explain" => match parts.next() {
            Some("on") => sh.explain = true,
            Some("off") => sh.explain = false,
            None => crate::outln!("explain is {}", if sh.explain { "on" } else { "off" }),
            Some(other) => {
                crate::errln!("\\explain {other}: expected on or off");
                sh.failed = true;
            }
        },
        "\\timing" => match parts.next() {
            Some("on") => sh.timing = true,
            Some("off") => sh.timing = false,
            None => {
                sh.timing = !sh.timing;
                crate::outln!("timing is {}", if sh.timing { "on" } else { "off" });
            }
            Some(other) => {
                crate::errln!("\\timing {other}: expected on or off (or nothing, to toggle)");
                sh.failed = true;
            }
        },
        "\\tenant" if parts.next().is_none() => crate::outln!("{who}"),
        "\\tenant" => {
            // the session's tenant is chosen when the shell starts
            crate::errln!(
                "\\tenant takes no argument: start `engram shell --tenant T` for another tenant"
            );
            sh.failed = true;
        }
        "\\param" => match (parts.next(), parts.next()) {
            (Some(name), Some(value)) => {
                let rest: Vec<&str> = std::iter::once(value).chain(parts).collect();
                let value = rest.join(" ");
                let v = match serde_json::from_str::<Value>(&value) {
                    Ok(j) => ParamValue::from_json(&j),
                    // 'text', as a statement writes a string, is the text
                    Err(_) => Ok(ParamValue::String(unquote(&value))),
                };
                match (param_name(name), v) {
                    (Ok(name), Ok(v)) => {
                        sh.params.insert(name, v);
                    }
                    (Err(e), _) | (_, Err(e)) => {
                        crate::errln!("error: {e}");
                        sh.failed = true;
                    }
                }
            }
            _ => {
                crate::errln!("usage: \\param NAME VALUE");
                sh.failed = true;
            }
        },
        "\\d" if parts.next().is_none() => describe(s),
        "\\d" => {
            crate::errln!(
                "\\d takes no argument: it describes this session's tenant (start `engram shell --tenant T` for another)"
            );
            sh.failed = true;
        }
        other => {
            crate::errln!("unknown command {other}; \\help lists them");
            sh.failed = true;
        }
    }
    true
}

/// What the principal can see: counts by record type and kind of the
/// records it may read, and its tenant's vector spaces.
fn describe(s: &Session) {
    let filter = engram_engine::ListFilter::default();
    match s.list(&filter) {
        Ok(records) => {
            let mut by_type: std::collections::BTreeMap<String, u64> = Default::default();
            let mut by_kind: std::collections::BTreeMap<String, u64> = Default::default();
            for r in &records {
                *by_type.entry(r.record.name().to_string()).or_default() += 1;
                *by_kind.entry(r.kind.clone()).or_default() += 1;
            }
            crate::outln!("{} record(s) readable", records.len());
            for (t, n) in by_type {
                crate::outln!("  record {t:<12} {n}");
            }
            for (k, n) in by_kind {
                crate::outln!("  kind   {k:<24} {n}");
            }
        }
        Err(e) => crate::outln!("error: {e}"),
    }
    let models = s.vector_models();
    if models.is_empty() {
        crate::outln!("no vector spaces");
    }
    for (m, d) in models {
        crate::outln!("  model  {m} ({d} dims)");
    }
    if let Some(e) = s.engram().embedder_model() {
        crate::outln!("  embedder {e} (SIMILAR TO 'text' embeds with it)");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_statement_ends_at_a_semicolon_outside_strings_and_comments() {
        assert!(ends_statement("FIND ANY;"));
        assert!(ends_statement("FIND ANY\nLIMIT 3 ;  \n"));
        assert!(!ends_statement("FIND ANY MATCH 'a;b'"));
        assert!(ends_statement("FIND ANY MATCH 'it''s;';"));
        assert!(!ends_statement("FIND ANY -- done;\n"));
        assert!(!ends_statement("FIND ANY; LIMIT"));
    }

    #[test]
    fn parameter_names_are_identifiers() {
        assert_eq!(param_name("v"), Ok("v"));
        assert_eq!(param_name("$user_1"), Ok("user_1"));
        for bad in ["", "$", "1x", "a-b", "a b", "é"] {
            assert!(param_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_line_may_hold_several_statements() {
        let text = "FIND ANY; FIND ANY MATCH 'a;b' LIMIT 1;\n-- note;\n";
        let (ends, open, _) = statement_ends(text);
        assert!(!open);
        let parts: Vec<&str> = ends
            .iter()
            .scan(0, |start, &e| {
                let p = &text[*start..e];
                *start = e;
                Some(p.trim())
            })
            .collect();
        assert_eq!(parts, ["FIND ANY;", "FIND ANY MATCH 'a;b' LIMIT 1;"]);
    }
}
