//! `engram query` (one statement) and `engram shell` (an interactive
//! prompt): the query language from the command line. Both run statements
//! through `engram_query::lang::QueryExt` on a session of `--tenant`
//! (acting as the tenant admin, or `--principal`), print readable tables or
//! JSON, and show errors with a caret under the offending text.
//!
//! This module must never interpret a statement itself: it only reads
//! input, calls the session and prints.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use engram_query::lang::{ParamValue, Params, QueryExt, QueryOutput};
use serde_json::Value;

use crate::cli::{CliError, CliResult, Ctx, read_input_capped, read_session_for};

/// `engram query`.
#[derive(Args, Debug)]
pub struct QueryArgs {
    /// The statement (or use -f FILE). It may begin with a `--` comment.
    #[arg(allow_hyphen_values = true)]
    pub statement: Option<String>,
    /// Words after the statement: a statement left unquoted (refused,
    /// saying to quote it).
    #[arg(hide = true)]
    pub unquoted: Vec<String>,
    /// Read the statement from a file (`-` for stdin).
    #[arg(short = 'f', long = "file", conflicts_with = "statement")]
    pub file: Option<PathBuf>,
    /// Tenant.
    #[arg(long, value_parser = crate::cli::name_arg)]
    pub tenant: String,
    /// Act as this principal instead of the tenant admin.
    #[arg(long, value_parser = crate::cli::name_arg)]
    pub principal: Option<String>,
    /// A parameter: name=value (value read as JSON when it parses, else as a
    /// string; a value opening with `[` or `{` must parse).
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

/// A refused `--param` or `--param-file`: its message, and the parameter
/// it names when there is one (the `detail` of `--json`'s error, as
/// `POST /v1/query` gives it).
struct ParamError {
    error: CliError,
    invalid: Option<engram_query::lang::LangError>,
}

impl ParamError {
    /// The input could not be read (no parameter to name).
    fn input(error: CliError) -> ParamError {
        ParamError {
            error,
            invalid: None,
        }
    }

    /// `message` about the parameter `name`, refused for `reason`.
    fn named(message: String, name: &str, reason: String) -> ParamError {
        use engram_query::lang::{ErrorKind, LangError, Span};
        ParamError {
            error: CliError::Message(message),
            invalid: Some(LangError::new(
                ErrorKind::InvalidParam {
                    name: name.to_string(),
                    reason,
                },
                Span::default(),
            )),
        }
    }

    /// The error as `--json` prints it: the CLI's message, the refused
    /// parameter in `detail`.
    fn to_json(&self) -> Value {
        let message = self.error.to_string();
        match &self.invalid {
            Some(e) => {
                let mut j = e.to_json();
                j["message"] = Value::String(message);
                j
            }
            None => engram_query::lang::unplaced_error_json("invalid_param", &message),
        }
    }
}

/// Builds the parameters of `--param` and `--param-file`.
fn params(a: &QueryArgs) -> Result<Params, Box<ParamError>> {
    let mut p = match &a.param_file {
        Some(f) => {
            let text = read_input_capped(f, crate::cli::SMALL_INPUT_BYTES_MAX)
                .map_err(|e| Box::new(ParamError::input(e)))?;
            Params::from_json(&text).map_err(|e| {
                Box::new(ParamError {
                    error: CliError::Message(format!("{}: {e}", f.display())),
                    invalid: Some(e),
                })
            })?
        }
        None => Params::new(),
    };
    // A --param overrides --param-file; two --param of one name are a
    // mistake (which one was meant?).
    let mut given = std::collections::BTreeSet::new();
    for kv in &a.params {
        let Some((name, value)) = kv.split_once('=') else {
            return Err(Box::new(ParamError::input(CliError::Message(format!(
                "--param {kv}: expected NAME=VALUE"
            )))));
        };
        let name = param_name(name).map_err(|e| {
            let raw = engram_query::lang::lexer::truncated(name);
            Box::new(ParamError::named(format!("--param {kv}: {e}"), &raw, e))
        })?;
        if !given.insert(name) {
            let reason = "given twice; give each parameter once".to_string();
            return Err(Box::new(ParamError::named(
                format!("--param {name} is {reason}"),
                name,
                reason,
            )));
        }
        let v = param_value(value, |v| v.to_string())
            .map_err(|e| Box::new(ParamError::named(format!("--param {name}: {e}"), name, e)))?;
        p.insert(name, v);
    }
    Ok(p)
}

/// A parameter's value: JSON when it parses, else the text `text(value)`.
/// A value that opens like a JSON list or object (`[`, `{`) and does not
/// parse is refused: a vector with `NaN`, a number out of range or a cut
/// end would otherwise run as a text query and answer something else.
pub(crate) fn param_value(
    value: &str,
    text: impl FnOnce(&str) -> String,
) -> Result<ParamValue, String> {
    // strictly, as `--param-file` and `POST /v1/query` read parameters: an
    // integer past 2^53 was rounded to the nearest double
    match engram_query::strict::parse(value) {
        Ok(j) => ParamValue::from_json(&j),
        // (only a value that is JSON, opens like a list or an object, or
        // is a number alone: text that merely opens with a long number,
        // `20240612093015123Z`, is text, as before)
        Err(Ok((at, reason)))
            if serde_json::from_str::<Value>(value).is_ok()
                || value.trim_start().starts_with(['[', '{'])
                || number_shaped(value) =>
        {
            Err(format!(
                "{}{reason} (write it as a JSON string, '\"...\"', to bind it as text)",
                if at == "-" {
                    String::new()
                } else {
                    format!("{at}: ")
                }
            ))
        }
        Err(Ok(_)) => Ok(ParamValue::String(text(value))),
        Err(Err(e)) if value.trim_start().starts_with(['[', '{']) => Err(format!(
            "'{}' opens like a JSON list or object but does not parse ({e}); a vector is a \
             JSON list of finite numbers (a text starting with '[' is written as a JSON string)",
            value.chars().take(40).collect::<String>()
        )),
        // (a number JSON cannot hold is no text either: `1e400` was bound
        // as a string, and refused as the wrong type where it was used;
        // text that only opens with one, `1e400x`, is text)
        Err(Err(e)) if e.to_string().starts_with("number out of range") && number_shaped(value) => {
            Err(format!(
                "'{}' is a number past the range of a 64-bit float",
                value.chars().take(40).collect::<String>()
            ))
        }
        Err(Err(_)) => Ok(ParamValue::String(text(value))),
    }
}

/// Whether `value` is written as a number alone (digits, sign, point,
/// exponent), whatever its size.
fn number_shaped(value: &str) -> bool {
    let v = value.trim();
    !v.is_empty()
        && v.bytes()
            .all(|b| b.is_ascii_digit() || b"eE+-.".contains(&b))
}

/// A parameter's name as statements write it (`$name`): a letter or `_`,
/// then letters, digits or `_`. A leading `$` is allowed and dropped.
fn param_name(raw: &str) -> Result<&str, String> {
    let name = raw.strip_prefix('$').unwrap_or(raw);
    if engram_query::lang::lexer::is_param_name(name) {
        Ok(name)
    } else {
        Err(format!(
            "'{}' is not a parameter name (a letter or _, then letters, digits or _, at most {} \
             bytes)",
            raw.chars().take(80).collect::<String>(),
            engram_query::lang::limits::IDENT_BYTES_MAX
        ))
    }
}

/// Runs `engram query`.
pub fn query(ctx: &Ctx, a: QueryArgs) -> CliResult {
    // with --json, every failure of the statement's input is JSON
    let input_error = |code: &str, e: CliError| -> CliResult {
        if !a.json {
            return Err(e);
        }
        crate::outln!(
            "{}",
            serde_json::json!({"errors": [engram_query::lang::unplaced_error_json(code, &e.to_string())]})
        );
        Ok(ExitCode::from(1))
    };
    // a command line that does not parse, as clap's own refusals: exit 2
    let usage_error = |message: String| -> CliResult {
        if a.json {
            crate::outln!(
                "{}",
                serde_json::json!({"errors": [engram_query::lang::unplaced_error_json("usage", &message)]})
            );
        } else {
            crate::output::emit_err(format_args!(
                "error: {}",
                crate::output::terminal_safe(&message)
            ));
        }
        Ok(ExitCode::from(2))
    };
    // `--jsn`, `-x`: an option mistyped before the statement (the statement
    // may begin with a `--` comment, so it is taken as one; a comment alone,
    // on one line with nothing after it, is no statement either)
    if let Some(first) = a
        .statement
        .as_deref()
        .filter(|s| s.starts_with('-') && s.len() > 1 && !s.contains(char::is_whitespace))
    {
        return usage_error(format!(
            "unexpected argument '{first}' (see engram query --help; a statement beginning with a `--` comment continues on its next line)"
        ));
    }
    if let (Some(first), false) = (&a.statement, a.unquoted.is_empty()) {
        return usage_error(format!(
            "the statement is one argument: quote it, as in engram query --tenant T \"{first} {} ...\" (or give it with -f FILE)",
            a.unquoted[0]
        ));
    }
    let text = match (&a.statement, &a.file) {
        (Some(s), None) => s.clone(),
        (None, Some(f)) => match read_input_capped(f, crate::cli::SMALL_INPUT_BYTES_MAX) {
            Ok(t) => t,
            Err(e) => return input_error("invalid_input", e),
        },
        (None, None) => {
            return usage_error("give a statement, or -f FILE".into());
        }
        _ => {
            return input_error(
                "invalid_input",
                CliError::Message("give a statement, or -f FILE".into()),
            );
        }
    };
    let params = match params(&a) {
        Ok(p) => p,
        Err(e) if a.json => {
            crate::outln!("{}", serde_json::json!({"errors": [e.to_json()]}));
            return Ok(ExitCode::from(1));
        }
        Err(e) => return Err(e.error),
    };
    let db = match ctx.open_store() {
        Ok(db) => db,
        Err(e) => {
            let code = match &e {
                CliError::Open { source, .. } | CliError::Engine(source) => match source {
                    engram_engine::EngineError::NoStore { .. }
                    | engram_engine::EngineError::NotAStore { .. } => "no_store",
                    other => other.code(),
                },
                _ => "unavailable",
            };
            return input_error(code, e);
        }
    };
    let s = read_session_for(&db, &a.tenant, a.principal.as_deref());
    let r = s.query(&text, &params);
    crate::cli::close_store(&db);
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
    if out.truncated {
        crate::outln!(
            "(the lineage goes on past {} hops: records further away are not listed)",
            engram_engine::trace::TRACE_DEPTH_MAX
        );
    }
    if let Some(m) = &out.manifest {
        crate::recall_cmd::print_manifest(m);
    }
}

mod interrupt;
mod shell;
pub use shell::shell;

#[cfg(test)]
mod tests {

    #[test]
    fn a_parameter_opening_like_json_that_does_not_parse_is_refused() {
        for bad in ["[NaN]", "[1e400]", "[0.1, 0.2", "{\"a\": }"] {
            let e = param_value(bad, str::to_string).unwrap_err();
            assert!(e.contains("does not parse"), "{bad}: {e}");
        }
        assert!(matches!(
            param_value("[0.5, -0.5]", str::to_string),
            Ok(ParamValue::Vector(_))
        ));
        assert!(matches!(
            param_value("checkout latency", str::to_string),
            Ok(ParamValue::String(s)) if s == "checkout latency"
        ));
        assert!(matches!(
            param_value("\"[x]\"", str::to_string),
            Ok(ParamValue::String(s)) if s == "[x]"
        ));
        // an integer a double cannot carry is refused, as `--param-file`
        // and `POST /v1/query` refuse it (it was rounded)
        let e = param_value("9007199254740993", str::to_string).unwrap_err();
        assert!(e.contains("beyond 2^53"), "{e}");
        let e = param_value("[1, 2, 9007199254740993]", str::to_string).unwrap_err();
        assert!(e.starts_with("[2]: ") && e.contains("beyond 2^53"), "{e}");
        assert!(matches!(
            param_value("9007199254740992", str::to_string),
            Ok(ParamValue::Number(_))
        ));
        // a number too long even for a double, alone or in a list, is
        // refused as a number, not bound as text
        let long = "9".repeat(400);
        for v in [
            long.clone(),
            format!("[0.5, {long}]"),
            "[9007199254740993, 1".to_string(),
        ] {
            assert!(param_value(&v, str::to_string).is_err(), "{v}");
        }
        // text that only opens with such a number is text, as before
        for text in [
            "20240612093015123Z",
            "9007199254740993 apples",
            "1e400x",
            "-1e999 z",
        ] {
            assert!(
                matches!(param_value(text, str::to_string), Ok(ParamValue::String(ref s)) if s == text),
                "{text}"
            );
        }
        // a number past f64 is refused as one, not bound as text
        for big in ["1e400", "-1e999"] {
            let e = param_value(big, str::to_string).unwrap_err();
            assert!(e.contains("past the range"), "{big}: {e}");
        }
    }
    use super::*;

    #[test]
    fn parameter_names_are_identifiers() {
        assert_eq!(param_name("v"), Ok("v"));
        assert_eq!(param_name("$user_1"), Ok("user_1"));
        for bad in ["", "$", "1x", "a-b", "a b", "é"] {
            assert!(param_name(bad).is_err(), "{bad:?}");
        }
    }
}
