//! `engram ingest` (and the other long-running commands) as a user sees
//! them on a terminal, and as a script sees them through pipes.
//!
//! On a pseudo-terminal (util-linux `script`, so no extra crate) a long
//! command draws progress on stderr and `ingest` ends with a summary whose
//! counts are those of the `--json` report; through pipes, stderr carries
//! no progress at all and `--json` keeps its exact shape; `--quiet` and a
//! terminal without cursor movement (`TERM=dumb`) draw nothing. Tests that
//! need `script` say so and pass when it is missing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn engram_bin() -> &'static str {
    env!("CARGO_BIN_EXE_engram")
}

/// Runs `engram args` with stdout and stderr piped.
fn piped(args: &[&str]) -> Output {
    Command::new(engram_bin())
        .args(args)
        .output()
        .expect("the engram binary runs")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Whether util-linux `script` is there to give a command a terminal.
fn have_script() -> bool {
    let found = Command::new("script")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        eprintln!("SKIPPED: util-linux `script` is missing, so no pseudo-terminal test runs");
    }
    found
}

/// Runs `engram args` on a pseudo-terminal (stdout and stderr both on it)
/// with `TERM=term`; returns the exit status's success and what the
/// terminal received.
fn on_terminal(term: &str, args: &[&str]) -> (bool, String) {
    let quoted: Vec<String> = std::iter::once(engram_bin())
        .chain(args.iter().copied())
        .map(|a| format!("'{}'", a.replace('\'', r"'\''")))
        .collect();
    let o = Command::new("script")
        .args(["-qec", &quoted.join(" "), "/dev/null"])
        .env("TERM", term)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("script runs");
    (o.status.success(), text(&o))
}

/// A JSONL file of `n` events: three in four of tenant `acme`, the rest of
/// `beta`, each with an external id `ev/<i + first>`.
fn events(dir: &Path, name: &str, first: usize, n: usize) -> PathBuf {
    let mut s = String::new();
    for i in first..first + n {
        let tenant = if i % 4 == 0 { "beta" } else { "acme" };
        s.push_str(&format!(
            "{{\"tenant\": \"{tenant}\", \"kind\": \"user_message\", \"external_id\": \"ev/{i}\", \"scope\": {{\"user\": \"u{}\"}}, \"text\": \"event {i}: checkout latency rose while the catalog service restarted\"}}\n",
            i % 7
        ));
    }
    let path = dir.join(name);
    std::fs::write(&path, s).unwrap();
    path
}

/// Progress drawing: a bar, cursor movement or a line erased.
fn has_progress(out: &str) -> bool {
    out.contains("records  ") || out.contains("\x1b[") || out.contains('\r')
}

#[test]
fn ingest_on_a_terminal_shows_progress_then_a_true_summary() {
    if !have_script() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let d = store.to_str().unwrap();
    // 400 events first; then 6000 events of which those 400 are the first
    // (same external id, same content: duplicates).
    let first = events(tmp.path(), "first.jsonl", 0, 400);
    let o = piped(&["--data", d, "ingest", first.to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let all = events(tmp.path(), "all.jsonl", 0, 6000);

    let (ok, out) = on_terminal("xterm", &["--data", d, "ingest", all.to_str().unwrap()]);
    assert!(ok, "ingest failed on a terminal:\n{out}");
    // Progress was drawn: the bar with its counts, its rate, its ETA.
    assert!(out.contains("ingest ["), "no ingest bar:\n{out}");
    assert!(out.contains("/6,000 records"), "no record counts:\n{out}");
    assert!(
        out.contains("/s") && out.contains("ETA"),
        "no rate or ETA:\n{out}"
    );
    assert!(out.contains("parse  ["), "no parse bar:\n{out}");

    // The summary: 6000 lines in windows of 1000, each window one batch
    // per tenant (two tenants in every window).
    let summary_at = out.rfind("ingested ").expect("a summary");
    let summary = &out[summary_at..];
    assert!(
        summary.starts_with(
            "ingested 6000 record(s): 5600 created, 400 duplicate(s), 12 batch(es) in "
        ),
        "{summary}"
    );
    assert!(summary.contains("records/s)"), "no rate: {summary}");
    assert!(
        summary.contains("tenants  acme 4500, beta 1500"),
        "{summary}"
    );
    assert!(summary.contains("status   active 6000"), "{summary}");
    assert!(
        !summary.contains("line     1"),
        "the per-record listing is only for --verbose: {summary}"
    );
    // The bar was erased before the summary: nothing of it after.
    assert!(
        !summary.contains("ETA") && !summary.contains('\u{1b}'),
        "{summary:?}"
    );

    // What the store holds agrees with the summary.
    let s = piped(&["--data", d, "stats", "--json"]);
    let stats: serde_json::Value = serde_json::from_slice(&s.stdout).unwrap();
    assert_eq!(stats["records"], 6000, "{stats}");
}

#[test]
fn piped_ingest_has_no_progress_noise_and_json_keeps_its_shape() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let d = store.to_str().unwrap();
    let file = events(tmp.path(), "ev.jsonl", 0, 2500);
    let f = file.to_str().unwrap();

    let o = piped(&["--data", d, "ingest", f]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        o.stderr.is_empty(),
        "stderr of a piped ingest: {:?}",
        String::from_utf8_lossy(&o.stderr)
    );
    let out = String::from_utf8(o.stdout).unwrap();
    assert!(!has_progress(&out), "{out:?}");
    assert!(
        out.starts_with("ingested 2500 record(s): 2500 created, 0 duplicate(s), 6 batch(es) in "),
        "{out}"
    );
    assert!(
        out.lines().count() < 10,
        "a summary, not a line per record:\n{out}"
    );

    // --verbose: the summary, then one line per record, in file order.
    let again = events(tmp.path(), "again.jsonl", 0, 3);
    let o = piped(&["--data", d, "ingest", again.to_str().unwrap(), "--verbose"]);
    assert!(o.status.success() && o.stderr.is_empty(), "{}", text(&o));
    let out = String::from_utf8(o.stdout).unwrap();
    let listed: Vec<&str> = out.lines().filter(|l| l.starts_with("  line ")).collect();
    assert_eq!(listed.len(), 3, "{out}");
    assert!(
        listed[0].starts_with("  line     1  ") && listed[0].contains("duplicate"),
        "{out}"
    );
    assert!(listed[2].contains("ext=ev/2"), "{out}");

    // --json: exactly the report scripts read, and no progress anywhere.
    let more = events(tmp.path(), "more.jsonl", 2500, 2);
    let o = piped(&["--data", d, "ingest", more.to_str().unwrap(), "--json"]);
    assert!(o.status.success() && o.stderr.is_empty(), "{}", text(&o));
    let out = String::from_utf8(o.stdout).unwrap();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys, ["created", "duplicates", "batches", "records"]);
    let rec = v["records"][0].as_object().unwrap();
    let keys: Vec<&str> = rec.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        ["line", "tenant", "id", "external_id", "outcome", "status"]
    );
    assert_eq!(
        out,
        format!("{}\n", serde_json::to_string_pretty(&v).unwrap()),
        "pretty-printed as before"
    );
    assert_eq!(
        (v["created"].as_u64(), v["batches"].as_u64()),
        (Some(2), Some(2))
    );

    // Other long commands are silent on stderr too when it is a pipe.
    for args in [
        vec!["--data", d, "verify"],
        vec!["--data", d, "rebuild"],
        vec!["--data", d, "compact"],
    ] {
        let o = piped(&args);
        assert!(o.status.success(), "{args:?}: {}", text(&o));
        assert!(
            o.stderr.is_empty(),
            "{args:?} wrote to a piped stderr: {:?}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

#[test]
fn quiet_or_a_dumb_terminal_draws_no_progress() {
    if !have_script() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let file = events(tmp.path(), "ev.jsonl", 0, 1500);
    let f = file.to_str().unwrap();
    for (i, (term, quiet)) in [("xterm", true), ("dumb", false)].into_iter().enumerate() {
        let store = tmp.path().join(format!("store-{i}"));
        let d = store.to_str().unwrap();
        let mut args = vec!["--data", d, "ingest", f];
        if quiet {
            args.insert(0, "--quiet");
        }
        let (ok, out) = on_terminal(term, &args);
        assert!(ok, "{out}");
        let out = out.replace("\r\n", "\n");
        assert!(!has_progress(&out), "TERM={term} quiet={quiet}: {out:?}");
        assert!(
            out.starts_with("ingested 1500 record(s): 1500 created"),
            "{out}"
        );
    }
}

#[test]
fn commands_without_progress_callbacks_show_a_spinner_on_a_terminal() {
    if !have_script() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let d = store.to_str().unwrap();
    let file = events(tmp.path(), "ev.jsonl", 0, 300);
    let o = piped(&["--data", d, "ingest", file.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    for (cmd, shows, result) in [
        ("verify", "checking every frame", "OK: "),
        (
            "rebuild",
            "rebuilding derived state",
            "rebuilt derived state of 300 record(s)",
        ),
    ] {
        let (ok, out) = on_terminal("xterm", &["--data", d, cmd]);
        assert!(ok, "{cmd}: {out}");
        let drawn = out
            .rfind(shows)
            .unwrap_or_else(|| panic!("{cmd} drew no spinner:\n{out:?}"));
        // The spinner was erased, then the result printed.
        let after = &out[drawn..];
        let erased = after.find("\x1b[2K").expect("the spinner is erased");
        assert!(after[erased..].contains(result), "{cmd}: {out:?}");
    }
}

#[test]
fn a_malformed_file_names_its_first_bad_lines_and_stores_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let d = store.to_str().unwrap();
    let mut s = String::new();
    for i in 1..=12 {
        if i % 3 == 0 {
            s.push_str("{\"tenant\": \"t\", \"kind\": \"note\", \"text\": \"fine\"}\n");
        } else {
            s.push_str("{\"tenant\": \"t\", \"kind\": \"note\"}\n");
        }
    }
    let file = tmp.path().join("bad.jsonl");
    std::fs::write(&file, s).unwrap();
    let o = piped(&["--data", d, "ingest", file.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = String::from_utf8(o.stderr).unwrap();
    let lines: Vec<&str> = err.lines().collect();
    assert!(
        lines[0].starts_with("error: ")
            && lines[0].ends_with("8 line(s) rejected, nothing was stored:"),
        "{err}"
    );
    let named: Vec<&str> = lines[1..6].iter().map(|l| l.trim()).collect();
    for (l, n) in named.iter().zip([1, 2, 4, 5, 7]) {
        assert!(l.starts_with(&format!("line {n}: text: ")), "{err}");
    }
    assert_eq!(lines[6].trim(), "... and 3 more line(s)", "{err}");
    assert!(!store.exists(), "a rejected file created the store");
}
