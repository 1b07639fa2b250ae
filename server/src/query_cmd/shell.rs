//! `engram shell`: statements typed at a prompt, or piped in, run one by
//! one on the session of `--tenant` (and `--principal`), with `\` commands
//! between them. Input is read a line at a time and bounded: a line by
//! [`INPUT_LINE_BYTES_MAX`], a statement by the language's own limit.

use std::io::{BufRead, IsTerminal, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use engram_engine::{Engram, Session};
use engram_query::lang::limits::STATEMENT_BYTES_MAX;
use engram_query::lang::{ParamValue, Params, QueryExt};

use super::interrupt::{Interrupts, Outcome};
use super::{ShellArgs, param_name, print_output};
use crate::cli::{CliError, CliResult, Ctx, INPUT_LINE_BYTES_MAX, read_session_for};

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
  TRACE 'inc-4711/hc-1' BOTH;
See docs/query-language.md for the grammar.";

struct Shell {
    explain: bool,
    timing: bool,
    params: Params,
    /// A statement or command failed (the exit status without a terminal).
    failed: bool,
    /// Input comes from a terminal (not a pipe or a file).
    interactive: bool,
    /// Ctrl-C while a statement runs, when input comes from a terminal:
    /// the prompt comes back instead of the process ending
    /// (`interrupt.rs`). Without a terminal, Ctrl-C ends the run, as for
    /// any command.
    interrupt: Option<Arc<Interrupts>>,
}

/// Runs `engram shell`.
pub fn shell(ctx: &Ctx, a: ShellArgs) -> CliResult {
    let db = ctx.open_store()?;
    let s = read_session_for(&db, &a.tenant, a.principal.as_deref());
    let r = shell_loop(&db, &s, &a);
    crate::cli::close_store(&db);
    r
}

fn history_path(a: &ShellArgs) -> Option<PathBuf> {
    a.history
        .clone()
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".engram_history")))
}

/// Who the session acts as, for the banner and `\tenant`: the tenant
/// admin, or a principal (one named `admin` is not the tenant admin).
fn who(a: &ShellArgs) -> String {
    match a.principal.as_deref() {
        None => format!("the admin of tenant {}", a.tenant),
        Some(p) => format!("principal '{p}' of tenant {}", a.tenant),
    }
}

/// The statement being gathered, line by line.
#[derive(Default)]
struct Pending {
    /// Its text so far (empty once it passed the statement limit).
    text: String,
    /// Where a `;` ends it: carried from line to line, so each line is
    /// scanned once (scanning the whole statement again at every line was
    /// quadratic in its lines).
    scan: Scan,
    /// The input line it starts on.
    first_line: usize,
    /// It passed the statement limit: its text is no longer kept, and it
    /// is refused when it ends.
    oversized: bool,
    /// Something but whitespace was pushed (whitespace before a statement
    /// is not kept: it neither counts toward the limit nor moves
    /// `first_line`).
    started: bool,
}

impl Pending {
    fn is_blank(&self) -> bool {
        !self.started
    }

    /// Adds `piece` (part of line `line`), keeping at most the statement
    /// limit's bytes.
    fn push(&mut self, piece: &str, line: usize) {
        if self.oversized {
            return;
        }
        if !self.started {
            if piece.trim().is_empty() {
                return;
            }
            self.started = true;
            self.first_line = line;
        }
        self.text.push_str(piece);
        if self.text.len() > STATEMENT_BYTES_MAX {
            self.oversized = true;
            self.text = String::new();
        }
    }

    /// The statement gathered so far, leaving this empty (the scan state
    /// is the caller's to set).
    fn take(&mut self) -> Gathered {
        self.started = false;
        // (an oversized statement's text was already dropped)
        if std::mem::take(&mut self.oversized) {
            Gathered::Oversized(self.first_line)
        } else {
            Gathered::Text(std::mem::take(&mut self.text), self.first_line)
        }
    }
}

enum Gathered {
    /// A statement's text and the input line it starts on.
    Text(String, usize),
    /// A statement over the limit, starting on this line.
    Oversized(usize),
}

fn shell_loop(db: &Engram, s: &Session, a: &ShellArgs) -> CliResult {
    let mut sh = Shell {
        explain: false,
        timing: false,
        params: Params::new(),
        failed: false,
        interactive: std::io::stdin().is_terminal(),
        interrupt: None,
    };
    if sh.interactive {
        sh.interrupt = Interrupts::watch();
    }
    let who = who(a);
    if sh.interactive {
        crate::outln!(
            "engram shell: {who} on {} (\\help for help, \\q to quit)",
            db.dir().display()
        );
    }
    let mut pending = Pending::default();
    let mut editor = if sh.interactive {
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
        let prompt = if pending.is_blank() {
            "engram> "
        } else {
            "   ...> "
        };
        line_no += 1;
        let line = match editor.as_mut() {
            Some(e) => match e.readline(prompt) {
                Ok(l) => {
                    let _ = e.add_history_entry(l.as_str());
                    l
                }
                Err(rustyline::error::ReadlineError::Interrupted) => {
                    pending = Pending::default();
                    continue;
                }
                Err(_) => break,
            },
            None => {
                // A line is read up to a bound: an input without line
                // ends (`/dev/zero`) stops here instead of filling memory.
                let mut raw = Vec::new();
                let cap = INPUT_LINE_BYTES_MAX as u64;
                match (&mut stdin).take(cap).read_until(b'\n', &mut raw) {
                    Ok(0) => break,
                    Ok(n) if n as u64 == cap && raw.last() != Some(&b'\n') => {
                        crate::errln!(
                            "error: line {line_no} is longer than {} MiB, the most a line may hold (not a text file?); reading stopped",
                            INPUT_LINE_BYTES_MAX >> 20
                        );
                        sh.failed = true;
                        quit = true;
                        break;
                    }
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
                        pending = Pending::default();
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
        if trimmed.starts_with('\\') && !pending.scan.in_str {
            if !command(&mut sh, s, trimmed, &who) {
                quit = true;
                break;
            }
            continue;
        }
        let piece = format!("{line}\n");
        // A statement ends at a `;` outside a string; a line may hold
        // several, and a command may follow the last.
        let ends = pending.scan.feed(&piece);
        let Some(&last) = ends.last() else {
            pending.push(&piece, line_no);
            continue;
        };
        let mut start = 0;
        let mut interrupted = false;
        for end in ends {
            pending.push(&piece[start..end], line_no);
            start = end;
            match pending.take() {
                Gathered::Oversized(first) => sh.refuse_oversized(first),
                Gathered::Text(text, first) => {
                    if is_statement(&text) && !run_one(&mut sh, s, &text, first) {
                        interrupted = true;
                        break;
                    }
                }
            }
        }
        let _ = std::io::stdout().flush();
        if interrupted {
            // the rest of the line is dropped: Ctrl-C gives the prompt back
            pending = Pending::default();
            continue;
        }
        // what follows the last `;`: the scan's state already describes it
        let rest = &piece[last..];
        if rest.trim_start().starts_with('\\') {
            pending.scan = Scan::default();
            if !command(&mut sh, s, rest.trim(), &who) {
                quit = true;
                break;
            }
        } else if !rest.trim().is_empty() {
            pending.push(rest, line_no);
        }
    }
    // Input ended inside a statement: it runs as if its `;` were there
    // (comments alone are no statement); after `\q` it is dropped.
    if !quit && pending.scan.open() {
        match pending.take() {
            Gathered::Oversized(first) => sh.refuse_oversized(first),
            Gathered::Text(text, first) => {
                run_one(&mut sh, s, &text, first);
            }
        }
    }
    if let (Some(e), Some(h)) = (editor.as_mut(), history_path(a)) {
        let _ = e.save_history(&h);
    }
    // Without a terminal (a script piped in), a failed statement fails
    // the run, as with `engram query`.
    Ok(if sh.failed && !sh.interactive {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// Whether `text` ends with a `;` that is not inside a string or a comment.
/// Whether `text`, a statement up to its `;`, holds anything but
/// whitespace and comments: an empty statement (`;` alone, or after a
/// comment) is skipped, as in other SQL shells.
fn is_statement(text: &str) -> bool {
    let mut scan = Scan::default();
    scan.feed(text.strip_suffix(';').unwrap_or(text));
    scan.open()
}

#[cfg(test)]
fn ends_statement(text: &str) -> bool {
    let (ends, open, _) = statement_ends(text);
    !ends.is_empty() && !open
}

/// Byte offsets just past each `;` outside strings and comments, whether
/// anything but whitespace and comments follows the last one, and whether
/// the text ends inside a string.
#[cfg(test)]
fn statement_ends(text: &str) -> (Vec<usize>, bool, bool) {
    let mut scan = Scan::default();
    let ends = scan.feed(text);
    (ends, scan.open(), scan.in_str)
}

/// Where statements end, scanned a line at a time: what the text so far
/// leaves open (a string; a statement with text after its last `;`).
/// A comment runs to its line's end, so no state is needed for it when
/// whole lines are fed.
#[derive(Clone, Copy, Debug, Default)]
struct Scan {
    /// Text other than whitespace and comments since the last `;`.
    text: bool,
    /// Inside a string.
    in_str: bool,
}

impl Scan {
    /// Whether a statement is open: text after the last `;`, or a string.
    fn open(&self) -> bool {
        self.text || self.in_str
    }

    /// Byte offsets of `text` just past each `;` outside strings and
    /// comments, continuing from what was fed before.
    fn feed(&mut self, text: &str) -> Vec<usize> {
        let mut ends = Vec::new();
        let mut chars = text.char_indices().peekable();
        while let Some((i, c)) = chars.next() {
            if self.in_str {
                if c == '\'' {
                    if chars.peek().map(|p| p.1) == Some('\'') {
                        chars.next();
                    } else {
                        self.in_str = false;
                    }
                }
                continue;
            }
            match c {
                '\'' => {
                    self.in_str = true;
                    self.text = true;
                }
                '-' if chars.peek().map(|p| p.1) == Some('-') => {
                    // (to the end of its line, as the lexer reads it)
                    for (_, c) in chars.by_ref() {
                        if c == '\n' || c == '\r' {
                            break;
                        }
                    }
                }
                ';' => {
                    ends.push(i + 1);
                    self.text = false;
                }
                c if c.is_whitespace() => {}
                _ => self.text = true,
            }
        }
        ends
    }
}

impl Shell {
    fn refuse_oversized(&mut self, first_line: usize) {
        crate::errln!(
            "error[limit_exceeded]: the statement starting on line {first_line} is longer than {} KiB; it was skipped",
            STATEMENT_BYTES_MAX >> 10
        );
        self.failed = true;
    }
}

/// Runs one statement, which starts on input line `first_line`. Its error
/// positions count from the statement's first line; without a terminal,
/// the error says which input line that is. False when Ctrl-C interrupted
/// it (the rest of its input line is dropped: the prompt comes back).
fn run_one(sh: &mut Shell, s: &Session, text: &str, first_line: usize) -> bool {
    // (leading blank lines would shift the statement's own positions)
    let text = text.trim_start();
    // (`\explain on` marks the parsed statement: its text, and so its
    // error positions, stay as typed)
    let (stmt, explain) = (text.to_string(), sh.explain);
    let started = Instant::now();
    let outcome = match &sh.interrupt {
        None => Outcome::Answer(s.query_explained(&stmt, &sh.params, explain)),
        Some(i) => {
            let (session, params) = (s.clone(), sh.params.clone());
            i.run(
                move || session.query_explained(&stmt, &params, explain),
                || {
                    crate::errln!(
                        "waiting for the interrupted statement to finish (Ctrl-C quits the shell)"
                    )
                },
            )
        }
    };
    let answer = match outcome {
        Outcome::Answer(a) => a,
        Outcome::Interrupted => {
            crate::errln!(
                "interrupted after {:.3} ms: its answer is dropped (a read: it changed nothing; it finishes in the background)",
                started.elapsed().as_secs_f64() * 1e3
            );
            sh.failed = true;
            return false;
        }
        Outcome::Failed(why) => {
            crate::errln!("error: the statement failed: {why}");
            sh.failed = true;
            return true;
        }
    };
    match answer {
        Ok(out) => print_output(&out, true),
        Err(e) => {
            if !sh.interactive {
                crate::errln!("in the statement starting on line {first_line}:");
            }
            crate::errln!("{}", e.to_string().trim_start());
            sh.failed = true;
        }
    }
    if sh.timing {
        crate::outln!("time: {:.3} ms", started.elapsed().as_secs_f64() * 1e3);
    }
    true
}

/// A value in single quotes, as statements write strings (`'it''s'`),
/// without them; anything else as it is.
/// The name and the value of a `\param NAME VALUE` line: the value is the
/// rest of the line as written (its inner spaces kept), after the command
/// and the name. `None` when either is missing.
fn param_args(cmd: &str) -> Option<(&str, &str)> {
    let line = cmd.trim_start();
    let after_cmd = line[line.find(char::is_whitespace)?..].trim_start();
    let name_end = after_cmd.find(char::is_whitespace)?;
    let (name, value) = (&after_cmd[..name_end], after_cmd[name_end..].trim());
    (!value.is_empty()).then_some((name, value))
}

/// A `\param` value as written: `'text'` (a quote inside doubled, as in a
/// statement) is that text, checked as a statement's string is; anything
/// else is JSON, or text as it stands.
fn shell_param_value(v: &str) -> Result<ParamValue, String> {
    let Some(open) = v.strip_prefix('\'') else {
        return super::param_value(v, str::to_string);
    };
    // the closing quote: the first single quote not doubled
    let mut text = String::new();
    let mut rest = open.char_indices().peekable();
    while let Some((i, c)) = rest.next() {
        if c != '\'' {
            text.push(c);
        } else if rest.peek().is_some_and(|&(_, n)| n == '\'') {
            rest.next();
            text.push('\'');
        } else if open[i + 1..].trim().is_empty() {
            return Ok(ParamValue::String(text));
        } else {
            return Err(format!(
                "text after the closing quote of {v:.40}: a quote inside the text is doubled ('it''s')"
            ));
        }
    }
    Err(format!(
        "unterminated string {v:.40}: a text value in quotes ends with a quote"
    ))
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
        "\\param" => match param_args(cmd) {
            Some((name, value)) => {
                let v = shell_param_value(value);
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
    fn a_param_line_splits_into_its_name_and_the_rest_as_written() {
        assert_eq!(param_args("\\param q 'a  b'"), Some(("q", "'a  b'")));
        assert_eq!(param_args("  \\param\tq   x  y  "), Some(("q", "x  y")));
        // a value holding the name's text, a wide space between them
        assert_eq!(param_args("\\param q\u{3000}q q"), Some(("q", "q q")));
        assert_eq!(param_args("\\param é 'é'"), Some(("é", "'é'")));
        assert_eq!(param_args("\\param q"), None);
        assert_eq!(param_args("\\param q   "), None);
        assert_eq!(param_args("\\param"), None);
    }

    #[test]
    fn a_quoted_param_value_is_checked_as_a_statement_string() {
        let text = |v: &str| match shell_param_value(v) {
            Ok(ParamValue::String(s)) => Ok(s),
            Ok(other) => panic!("{other:?}"),
            Err(e) => Err(e),
        };
        assert_eq!(text("'a  b'").unwrap(), "a  b", "spaces kept");
        assert_eq!(text("'it''s'").unwrap(), "it's");
        assert_eq!(text("''").unwrap(), "");
        assert!(
            text("'unterminated billing")
                .unwrap_err()
                .contains("unterminated")
        );
        assert!(text("'").unwrap_err().contains("unterminated"));
        assert!(
            text("'a' 'b'")
                .unwrap_err()
                .contains("after the closing quote")
        );
        // unquoted: JSON, else the text as it stands
        assert_eq!(text("plain words").unwrap(), "plain words");
        assert!(matches!(
            shell_param_value("[1, 0.5]"),
            Ok(ParamValue::Vector(_))
        ));
    }

    #[test]
    fn a_statement_ends_at_a_semicolon_outside_strings_and_comments() {
        assert!(ends_statement("FIND ANY;"));
        assert!(ends_statement("FIND ANY\nLIMIT 3 ;  \n"));
        assert!(!ends_statement("FIND ANY MATCH 'a;b'"));
        assert!(ends_statement("FIND ANY MATCH 'it''s;';"));
        assert!(!ends_statement("FIND ANY -- done;\n"));
        // a comment ends at a lone `\r` too, as the lexer ends it
        assert!(ends_statement("FIND ANY -- done\rLIMIT 3;"));
        assert!(!ends_statement("FIND ANY; LIMIT"));
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

    #[test]
    fn a_scan_fed_line_by_line_finds_what_one_scan_finds() {
        let text = "FIND ANY MATCH 'a;\nb' -- c;\nLIMIT 1; FIND\nANY;\n'x'\n";
        let (whole, open, in_str) = statement_ends(text);
        let mut scan = Scan::default();
        let mut ends = Vec::new();
        let mut at = 0;
        for line in text.split_inclusive('\n') {
            ends.extend(scan.feed(line).into_iter().map(|e| e + at));
            at += line.len();
        }
        assert_eq!(ends, whole);
        assert_eq!((scan.open(), scan.in_str), (open, in_str));
        assert_eq!(whole.len(), 2);
    }

    #[test]
    fn a_pending_statement_keeps_at_most_the_limit() {
        let mut p = Pending::default();
        for n in 1..=10_000 {
            p.push("kind = 'x' OR\n", n);
            assert!(p.text.len() <= STATEMENT_BYTES_MAX);
        }
        assert!(matches!(p.take(), Gathered::Oversized(1)));
        assert!(p.is_blank());
    }
}
