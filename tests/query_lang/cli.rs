//! `engram query` and `engram shell` as a user types them: tables, JSON,
//! errors with a caret, and the shell driven through a pseudo-terminal.

use std::io::Write;
use std::process::{Command, Stdio};

fn engram(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_engram"))
        .args(args)
        .output()
        .expect("the engram binary runs")
}

fn text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `engram shell` with `input` on a pipe as its standard input.
fn shell_piped(args: &[&str], input: &[u8]) -> std::process::Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_engram"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.as_mut().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}

fn store() -> (tempfile::TempDir, String) {
    let tmp = tempfile::tempdir().unwrap();
    let (db, _) = super::fixture::build(&tmp.path().join("s"));
    db.close().unwrap();
    let d = tmp.path().join("s").to_str().unwrap().to_string();
    (tmp, d)
}

#[test]
fn engram_query_prints_tables_json_and_located_errors() {
    let (_tmp, d) = store();
    let o = engram(&[
        "--data",
        &d,
        "query",
        "--tenant",
        "t",
        "FIND assertions KIND 'preference' MATCH 'diet'",
    ]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(
        out.contains("external_id") && out.contains("vegan") && out.contains("(2 rows)"),
        "{out}"
    );
    let o = engram(&[
        "--data",
        &d,
        "query",
        "--tenant",
        "t",
        "--json",
        "FIND summaries SIMILAR TO $v MODEL 'text-embedding-3-small' MIN 0.35 RETURN id, score",
        "--param",
        "v=[1, 0.2, 0, 0]",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["columns"], serde_json::json!(["id", "score"]));
    assert!(!j["rows"].as_array().unwrap().is_empty());
    let o = engram(&[
        "--data",
        &d,
        "query",
        "--tenant",
        "t",
        "FIND ANY LIMIT 5000",
    ]);
    assert!(!o.status.success());
    let out = text(&o);
    assert!(out.contains("1:16") && out.contains('^'), "{out}");
    // a statement file that is not UTF-8 names the file, line and byte
    let bad = format!("{d}.bad.eql");
    std::fs::write(&bad, b"FIND ANY\nWHERE kind = 'caf\xe9'").unwrap();
    let o = engram(&["--data", &d, "query", "--tenant", "t", "-f", &bad]);
    assert!(!o.status.success());
    let out = text(&o);
    assert!(
        out.contains(&format!("{bad}: line 2: invalid UTF-8 at byte 18")),
        "{out}"
    );
    // a principal without the tenant's admin rights sees only what it may read
    let o = engram(&["--data", &d, "query", "--tenant", "other", "FIND ANY"]);
    assert!(o.status.success());
    assert!(text(&o).contains("(0 rows)"), "{}", text(&o));
}

#[test]
fn engram_shell_takes_multi_line_statements_and_commands_on_a_terminal() {
    let (_tmp, d) = store();
    let hist = tempfile::NamedTempFile::new().unwrap();
    let script = format!(
        "{} --data {d} shell --tenant t --history {}",
        env!("CARGO_BIN_EXE_engram"),
        hist.path().display()
    );
    // `script` gives the shell a real pseudo-terminal
    let mut child = match Command::new("script")
        .args(["-qec", &script, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("SKIPPED: `script` (util-linux) is not available: {e}");
            return;
        }
    };
    let input = "\\timing\nFIND assertions\n  KIND 'preference'\n  MATCH 'diet';\n\\d\nFIND ANY WHERE kind = ;\n\\q\n";
    {
        let stdin = child.stdin.as_mut().unwrap();
        for line in input.lines() {
            stdin.write_all(line.as_bytes()).unwrap();
            stdin.write_all(b"\r").unwrap();
            stdin.flush().unwrap();
            std::thread::sleep(std::time::Duration::from_millis(150));
        }
    }
    let o = child.wait_with_output().unwrap();
    let out = text(&o);
    assert!(
        out.contains("engram shell"),
        "no banner (not a terminal?): {out}"
    );
    assert!(
        out.contains("vegan"),
        "the multi-line statement did not run: {out}"
    );
    assert!(out.contains("time:"), "\\timing had no effect: {out}");
    assert!(
        out.contains("record(s) readable"),
        "\\d had no effect: {out}"
    );
    assert!(
        out.contains("error[") && out.contains('^'),
        "no located error: {out}"
    );
}

#[test]
fn engram_shell_reads_statements_from_a_pipe() {
    let (_tmp, d) = store();
    let o = shell_piped(
        &["--data", &d, "shell", "--tenant", "t"],
        b"TRACE 'evt_9f2' DERIVATIVES;\n\\tenant\n",
    );
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(out.contains("(3 rows)"), "{out}");
    assert!(out.contains("admin of tenant t"), "{out}");
}

/// `\param` takes a string in single quotes as a statement writes it, and
/// `\d` takes no argument (the shell's tenant is fixed when it starts).
#[test]
fn engram_shell_param_quotes_and_describe_arguments() {
    let (_tmp, d) = store();
    let o = shell_piped(
        &["--data", &d, "shell", "--tenant", "t"],
        b"\\param k 'preference'\nFIND assertions WHERE kind = $k MATCH 'diet';\n",
    );
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(out.contains("(2 rows)"), "{out}");
    let o = shell_piped(&["--data", &d, "shell", "--tenant", "t"], b"\\d other\n");
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("takes no argument"), "{out}");
}

/// With `\explain on`, an error's place is in the statement as typed (the
/// shell wrote `EXPLAIN ` before it, so it said 1:14 for 1:6 and quoted
/// a line never typed); a statement runs explained, and a listing's
/// manifest says no retriever fused it.
#[test]
fn engram_shell_explain_on_keeps_error_places() {
    let (_tmp, d) = store();
    let o = shell_piped(
        &["--data", &d, "shell", "--tenant", "t"],
        b"\\explain on\nFIND bogus;\nFIND ANY LIMIT 1;\n",
    );
    let out = text(&o);
    assert!(out.contains("--> 1:6"), "{out}");
    assert!(!out.contains("EXPLAIN FIND bogus"), "{out}");
    assert!(out.contains("manifest (snapshot LSN"), "{out}");
    assert!(out.contains("fusion     none (no retriever"), "{out}");
}

/// A line that is not UTF-8 skips its statement with an error and the
/// shell goes on; a line may hold several statements.
#[test]
fn engram_shell_goes_on_after_a_line_that_is_not_utf8() {
    let (_tmp, d) = store();
    let o = shell_piped(
        &["--data", &d, "shell", "--tenant", "t"],
        b"FIND ANY LIMIT 1;\nFIND ANY MATCH '\xff';\nFIND ANY LIMIT 2; FIND ANY LIMIT 3;\n",
    );
    let out = text(&o);
    assert!(out.contains("line 2 is not valid UTF-8"), "{out}");
    for n in ["(1 row)", "(2 rows)", "(3 rows)"] {
        assert!(out.contains(n), "{n} missing: {out}");
    }
}

/// From a pipe, results go to stdout and errors to stderr, every
/// statement still runs, and a failed one makes the exit status 1; a
/// command after the last `;` of a line is run as a command.
#[test]
fn engram_shell_reports_errors_on_stderr_and_in_its_exit_status() {
    let (_tmp, d) = store();
    let o = shell_piped(
        &["--data", &d, "shell", "--tenant", "t"],
        b"FIND ANY LIMIT 0;\nFIND ANY LIMIT 2; \\q\nFIND ANY LIMIT 3;\n",
    );
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert_eq!(o.status.code(), Some(1), "{out}{err}");
    assert!(
        err.contains("error[out_of_range]") && !out.contains("error["),
        "{out}|{err}"
    );
    assert!(out.contains("(2 rows)"), "{out}");
    assert!(
        !out.contains("(3 rows)"),
        "\\q after `;` did not quit: {out}"
    );
    let o = shell_piped(
        &["--data", &d, "shell", "--tenant", "t"],
        b"FIND ANY LIMIT 1;\n",
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // a command with a wrong argument fails too
    for cmd in ["\\explain maybe\n", "\\tenant other\n"] {
        let o = shell_piped(&["--data", &d, "shell", "--tenant", "t"], cmd.as_bytes());
        assert_eq!(o.status.code(), Some(1), "{cmd}: {}", text(&o));
    }
    // comments after the last statement are no statement
    let o = shell_piped(
        &["--data", &d, "shell", "--tenant", "t"],
        b"FIND ANY LIMIT 1; -- trailing\n-- done\n",
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // nor is a `;` after a comment, or after nothing: an empty statement
    let o = shell_piped(
        &["--data", &d, "shell", "--tenant", "t"],
        b"-- a note\n;\n ; ;\nFIND ANY LIMIT 1;\n",
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("(1 row"), "{}", text(&o));
    // a command line runs at once and leaves the statement open before
    // it open: the statement goes on with the next lines
    let o = shell_piped(
        &["--data", &d, "shell", "--tenant", "t"],
        b"FIND ANY\n\\tenant\nLIMIT 2;\n",
    );
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("admin of tenant t"), "{out}");
    assert!(
        out.contains("(2 rows)") && !out.contains("(3 rows)"),
        "{out}"
    );
    // `\q` drops a statement left open, and quits
    let o = shell_piped(
        &["--data", &d, "shell", "--tenant", "t"],
        b"FIND ANY\nLIMIT 2\n\\q\nFIND ANY LIMIT 3;\n",
    );
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(!out.contains("rows)"), "{out}");
}

/// Stored text is printed as data: terminal control characters in a
/// record come out escaped (`\u001b`), in tables and in `--json` alike
/// (where the escape is JSON's, the same string).
#[test]
fn terminal_controls_in_stored_text_are_printed_escaped() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("s");
    let d = d.to_str().unwrap();
    assert!(engram(&["--data", d, "init"]).status.success());
    let file = tmp.path().join("x.jsonl");
    std::fs::write(
        &file,
        "{\"tenant\":\"t\",\"kind\":\"note\",\"external_id\":\"esc\",\"text\":\"zz \\u001b]0;PWNED\\u0007 \\u001b[2J \\u009b \\u202e end\"}\n",
    )
    .unwrap();
    assert!(
        engram(&["--data", d, "ingest", file.to_str().unwrap()])
            .status
            .success()
    );
    for args in [
        vec!["query", "--tenant", "t", "FIND ANY MATCH 'zz' RETURN text"],
        vec!["get", "--tenant", "t", "esc"],
        vec!["log"],
        vec![
            "query",
            "--tenant",
            "t",
            "--json",
            "FIND ANY MATCH 'zz' RETURN text",
        ],
    ] {
        let mut all = vec!["--data", d];
        all.extend(args.iter().copied());
        let o = engram(&all);
        assert!(o.status.success(), "{args:?}: {}", text(&o));
        let out = String::from_utf8(o.stdout).unwrap();
        for c in ['\u{1b}', '\u{7}', '\u{9b}', '\u{202e}'] {
            assert!(!out.contains(c), "{args:?} printed {c:?} raw: {out:?}");
        }
        assert!(out.contains("\\u001b]0;PWNED"), "{args:?}: {out}");
    }
}

/// Examples 2 to 5 typed into `engram shell` from a pipe (with a
/// parameter bound by `\param`): the same rows as `engram query`.
#[test]
fn the_examples_run_through_engram_shell() {
    let (_tmp, d) = store();
    let o = shell_piped(
        &["--data", &d, "--embedder", "hash", "shell", "--tenant", "t"],
            b"FIND assertions KIND 'preference' WHERE ingested_at >= 2025-03-01 MATCH 'diet'\n\
              RETURN external_id;\n\
              \\param qvec [1, 0.2, 0, 0]\n\
              FIND summaries WHERE scope.label = 'apollo' OR scope.conversation = 'apollo'\n\
              VALID AT now SIMILAR TO $qvec MODEL 'text-embedding-3-small' MIN 0.35 RETURN external_id;\n\
              FIND assertions SIMILAR TO 'Acme renews in Q3' AS sem MATCH 'Acme renews in Q3' AS kw\n\
              WITH SOURCES DEPTH 3 LIMIT 1 RETURN external_id, text;\n\
              TRACE 'evt_9f2' DERIVATIVES DEPTH 5 INCLUDE SUPERSEDED;\n",
    );
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    for want in ["diet/new", "apollo/s1", "Acme renews in Q3", "(4 rows)"] {
        assert!(out.contains(want), "lacks {want}:\n{out}");
    }
    assert!(!out.contains("error"), "{out}");
}

/// The six acceptance examples of docs/query-language.md, typed as a user
/// would into `engram query` (with the store's built-in embedder named, as
/// the fixture was built with it), give the documented results. The store's
/// transaction times are those of the fixture; `now` is the real clock, so
/// example 6 runs on its outage week ingested now.
#[test]
fn the_six_examples_run_through_engram_query() {
    let (tmp, d) = store();
    let run = |statement: &str, params: &[&str]| -> serde_json::Value {
        let mut args = vec![
            "--data",
            d.as_str(),
            "--embedder",
            "hash",
            "query",
            "--tenant",
            "t",
            "--json",
            statement,
        ];
        for p in params {
            args.push("--param");
            args.push(p);
        }
        let o = engram(&args);
        assert!(o.status.success(), "{statement}: {}", text(&o));
        serde_json::from_slice(&o.stdout).expect("JSON rows")
    };
    let ids = |out: &serde_json::Value| -> Vec<String> {
        out["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["id"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    let by_graph = |out: &serde_json::Value| -> Vec<String> {
        out["rows"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| super::fixture::found_by(&r["ranks"], "graph"))
            .map(|r| r["id"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    let ex1 = run(super::fixture::EXAMPLE_1, &[]);
    let ex2 = run(super::fixture::EXAMPLE_2, &[]);
    let ex3 = run(super::fixture::EXAMPLE_3, &["qvec=[1, 0.2, 0, 0]"]);
    let ex4 = run(super::fixture::EXAMPLE_4, &[]);
    let ex5 = run(super::fixture::EXAMPLE_5, &[]);
    let ex5_current = run("TRACE 'evt_9f2' DERIVATIVES DEPTH 5", &[]);

    // Internal ids to external ids, through the store the CLI left.
    let db = super::fixture::open(
        &tmp.path().join("s"),
        &engram::ManualClock::new(super::fixture::JUNE_1),
    );
    let s = db.session(engram::Principal::admin("t"));
    let ext = |ids: Vec<String>| -> Vec<String> {
        ids.iter()
            .map(|i| {
                let id: engram::RecordId = i.parse().expect("an id");
                s.get(&engram::RecordRef::Id(id))
                    .ok()
                    .and_then(|r| r.external_id)
                    .unwrap_or_default()
            })
            .collect()
    };
    let got = ext(ids(&ex1));
    for want in ["bill/1", "bill/2", "ent_invoice", "ent_team"] {
        assert!(
            got.contains(&want.to_string()),
            "example 1 lacks {want}: {got:?}"
        );
    }
    for not in ["bill/late", "ent_db", "rel_owes"] {
        assert!(
            !got.contains(&not.to_string()),
            "example 1 has {not}: {got:?}"
        );
    }
    assert!(ext(by_graph(&ex1)).contains(&"ent_team".to_string()));
    assert_eq!(ext(ids(&ex2)), ["diet/new"]);
    assert_eq!(ext(ids(&ex3)), ["apollo/s1"]);
    let first = &ex4["rows"][0];
    assert_eq!(first["text"], "Acme renews in Q3", "{ex4}");
    let sources = super::fixture::sources_of(&first["sources"]);
    assert_eq!(
        sources,
        [("acme/sum".to_string(), 1), ("evt_9f2".to_string(), 2)]
    );
    let statuses: Vec<&str> = ex5["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(statuses.len(), 4, "{ex5}");
    assert!(statuses.contains(&"superseded"), "{statuses:?}");
    assert_eq!(ex5_current["rows"].as_array().unwrap().len(), 3);
    db.close().unwrap();

    // Example 6 asks about this week by the real clock: its week is
    // ingested now through `engram ingest` (occurred_at defaults to the
    // ingest time), into a store of its own.
    let week = tmp.path().join("week");
    let file = tmp.path().join("outage.jsonl");
    std::fs::write(&file, super::fixture::OUTAGE_WEEK).unwrap();
    let w = week.to_str().unwrap();
    let o = engram(&[
        "--data",
        w,
        "--embedder",
        "hash",
        "ingest",
        "--tenant",
        "t",
        file.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let o = engram(&[
        "--data",
        w,
        "query",
        "--tenant",
        "t",
        "--json",
        "FIND ANY WHERE record = entity OR occurred_at >= now - 7d \
         SIMILAR TO 'database outage postmortem' TOP 20 AS outage \
         EXPAND FROM outage HOPS 1 VIA ('mentions', 'assigned_to', 'reported_by') AS graph \
         WEIGHTS (outage = 1.0, graph = 1.5) RETURN id, external_id, record, kind, text, score, ranks",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let ex6: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let reached: Vec<String> = ex6["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| super::fixture::found_by(&r["ranks"], "graph"))
        .map(|r| r["external_id"].as_str().unwrap_or_default().to_string())
        .collect();
    for who in ["ent_alice", "ent_bob", "ent_carol"] {
        assert!(
            reached.contains(&who.to_string()),
            "{who} not reached: {reached:?}"
        );
    }
    assert!(
        !reached.contains(&"ent_dave".to_string()),
        "followed `likes`: {reached:?}"
    );
}

#[test]
fn a_parameter_given_twice_is_refused_and_hints_name_the_cli_ways_to_bind() {
    let (_tmp, d) = store();
    let o = engram(&[
        "--data",
        &d,
        "query",
        "--tenant",
        "t",
        "FIND ANY LIMIT $n",
        "--param",
        "n=1",
        "--param",
        "n=3",
    ]);
    assert!(!o.status.success());
    assert!(
        text(&o).contains("--param n is given twice"),
        "{}",
        text(&o)
    );
    let o = engram(&["--data", &d, "query", "--tenant", "t", "FIND ANY LIMIT $n"]);
    assert!(!o.status.success());
    assert!(text(&o).contains("--param n="), "{}", text(&o));
    // with --json, a bad --param is a JSON error too
    let o = engram(&[
        "--data",
        &d,
        "query",
        "--tenant",
        "t",
        "--json",
        "FIND ANY LIMIT $n",
        "--param",
        "n",
    ]);
    assert!(!o.status.success());
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON on stdout");
    assert_eq!(j["errors"][0]["code"], "invalid_param", "{j}");
    // the fields of a language error, with no place in the text
    for k in ["line", "column", "span", "hint", "detail"] {
        assert!(j["errors"][0][k].is_null(), "{k}: {j}");
    }
    assert_eq!(j["errors"][0]["expected"], serde_json::json!([]), "{j}");
    // a refused parameter it can name is named in `detail`, as `POST
    // /v1/query` names it: a bad name, a value, a name given twice, a
    // name in --param-file
    let file = format!("{d}-params.json");
    std::fs::write(&file, r#"{"1abc": 1}"#).unwrap();
    for (args, name) in [
        (vec!["--param", "1abc=1"], "1abc"),
        (vec!["--param", "v=[1,NaN]"], "v"),
        (vec!["--param", "n=1", "--param", "n=2"], "n"),
        (vec!["--param-file", file.as_str()], "1abc"),
    ] {
        let mut all = vec!["--data", &d, "query", "--tenant", "t", "--json", "FIND ANY"];
        all.extend(&args);
        let o = engram(&all);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        let j: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON on stdout");
        let e = &j["errors"][0];
        assert_eq!(e["code"], "invalid_param", "{j}");
        assert_eq!(e["detail"]["name"], name, "{args:?}: {j}");
        assert!(e["detail"]["reason"].is_string(), "{j}");
        // the message says where the parameter came from
        let from = if args[0] == "--param-file" {
            file.as_str()
        } else {
            "--param"
        };
        assert!(e["message"].as_str().unwrap().starts_with(from), "{j}");
    }
    // so is a command line that does not parse (exit status 2, as for
    // every command's usage error), global options before the command
    // or not; without --json it is text on stderr
    for args in [
        vec![
            "--data",
            &d,
            "query",
            "--tenant",
            "t",
            "--json",
            "FIND ANY",
            "--param-file",
        ],
        vec!["-q", "--data", &d, "query", "--json", "--tenant"],
        // an option mistyped before the statement (it was read as the
        // statement, and the statement as words left unquoted), an
        // unknown option alone (read as a `--` comment), no statement
        vec![
            "--data", &d, "query", "--tenant", "t", "--json", "--jsn", "FIND ANY",
        ],
        vec!["--data", &d, "query", "--json", "--tenant", "t", "--bogus"],
        vec!["--data", &d, "query", "--json", "--tenant", "t"],
    ] {
        let o = engram(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
        let j: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON on stdout");
        assert_eq!(j["errors"][0]["code"], "usage", "{j}");
        let message = j["errors"][0]["message"].as_str().unwrap();
        assert!(
            message.contains("--") || message.contains("give a statement"),
            "{message}"
        );
        assert!(!message.contains("Usage:"), "{message}");
    }
    // and in text, the option named
    let o = engram(&["--data", &d, "query", "--tenant", "t", "-x", "FIND ANY"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("unexpected argument '-x'"),
        "{}",
        text(&o)
    );
    // a tenant that prints like another is refused, not read as one
    // holding nothing
    let o = engram(&[
        "--data",
        &d,
        "query",
        "--json",
        "--tenant",
        "t\u{200b}",
        "FIND ANY",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON on stdout");
    let message = j["errors"][0]["message"].as_str().unwrap();
    assert!(message.contains("U+200B"), "{message}");
    let o = engram(&[
        "--data",
        &d,
        "query",
        "--tenant",
        "t",
        "FIND ANY",
        "--param-file",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        o.stdout.is_empty() && text(&o).contains("--param-file"),
        "{}",
        text(&o)
    );
}

/// An error the engine raises while a statement runs carries the engine's
/// code (the one the server gives), and `TRACE` walks as deep as
/// `engram trace` does.
#[test]
fn engine_errors_have_their_code_and_trace_walks_the_engines_depth() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("s");
    let d = d.to_str().unwrap();
    // a chain of 21 records, each derived from the one before
    let mut lines = String::from(
        "{\"external_id\":\"c0\",\"record\":\"event\",\"kind\":\"note\",\"text\":\"origin\"}\n",
    );
    for i in 1..=20 {
        lines.push_str(&format!(
            "{{\"external_id\":\"c{i}\",\"record\":\"summary\",\"generator\":\"g@1\",\"text\":\"level {i}\",\"sources\":[\"c{}\"]}}\n",
            i - 1
        ));
    }
    let file = tmp.path().join("chain.jsonl");
    std::fs::write(&file, lines).unwrap();
    let o = engram(&[
        "--data",
        d,
        "ingest",
        "--tenant",
        "t",
        file.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let query = |stmt: &str| {
        let o = engram(&["--data", d, "query", "--tenant", "t", "--json", stmt]);
        let j: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON on stdout");
        (o.status.success(), j)
    };
    let (ok, j) = query("TRACE 'nope' BOTH");
    assert!(!ok);
    assert_eq!(j["errors"][0]["code"], "not_found", "{j}");
    let (ok, j) = query("TRACE 'c0' DERIVATIVES");
    assert!(ok, "{j}");
    let depths: Vec<u64> = j["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["depth"].as_u64())
        .collect();
    assert_eq!(depths.iter().max(), Some(&20), "{j}");
    let o = engram(&["--data", d, "trace", "c0", "--tenant", "t", "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let t: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON on stdout");
    let deepest = t["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n["depth"].as_u64())
        .max();
    assert_eq!(deepest, Some(20), "{t}");
}

/// A deleted derivative attached to a result shows kind `deleted`, not its
/// own (free text, content like any other), as a trace does.
#[test]
fn an_attached_deleted_derivative_shows_no_kind() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("s");
    let d = d.to_str().unwrap();
    assert!(engram(&["--data", d, "init"]).status.success());
    let file = tmp.path().join("x.jsonl");
    std::fs::write(
        &file,
        concat!(
            "{\"tenant\":\"t\",\"kind\":\"note\",\"external_id\":\"e1\",\"text\":\"first\"}\n",
            "{\"tenant\":\"t\",\"kind\":\"note\",\"external_id\":\"e2\",\"text\":\"second\"}\n",
            "{\"tenant\":\"t\",\"record\":\"summary\",\"kind\":\"private-kind-canary\",\"external_id\":\"s\",\"text\":\"both\",\"sources\":[\"e1\",\"e2\"],\"generator\":\"g\"}\n"
        ),
    )
    .unwrap();
    assert!(
        engram(&["--data", d, "ingest", file.to_str().unwrap()])
            .status
            .success()
    );
    assert!(
        engram(&["--data", d, "delete", "e1", "--tenant", "t"])
            .status
            .success()
    );
    let o = engram(&[
        "--data",
        d,
        "query",
        "--tenant",
        "t",
        "--json",
        "FIND events WITH DERIVATIVES RETURN external_id, derivatives",
    ]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(
        out.contains("\"e2\"") && out.contains("\"deleted\""),
        "{out}"
    );
    assert!(!out.contains("private-kind-canary"), "{out}");
}

/// The shell bounds what it holds: a statement past the language's limit
/// is skipped when it ends (its text is not kept, and each line is scanned
/// once), the statements after it still run, and an error names the input
/// line its statement starts on.
#[test]
fn the_shell_skips_an_oversized_statement_and_names_lines() {
    let (_tmp, d) = store();
    let mut input = String::from("FIND ANY LIMIT 1 RETURN id;\n\nFIND ANY WHERE\n");
    for _ in 0..6000 {
        input.push_str("kind = 'x' OR\n");
    }
    input.push_str("kind = 'y';\nFIND ANY LIMIT 2;\n\nFIND ANY\nLIMIT 0;\n");
    let o = shell_piped(&["--data", &d, "shell", "--tenant", "t"], input.as_bytes());
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("the statement starting on line 3 is longer than 64 KiB"),
        "{out}"
    );
    assert!(out.contains("(1 row)") && out.contains("(2 rows)"), "{out}");
    // LIMIT 0 is refused: its statement starts on input line 6007, and
    // the error's own position counts from there
    assert!(
        out.contains("in the statement starting on line 6007"),
        "{out}"
    );
    assert!(out.contains("--> 2:"), "{out}");
}

/// An input without line ends (`/dev/zero`) stops the shell with an error
/// at the line bound instead of filling memory.
#[test]
fn the_shell_stops_at_a_line_without_an_end() {
    let (_tmp, d) = store();
    let mut child = Command::new(env!("CARGO_BIN_EXE_engram"))
        .args(["--data", &d, "shell", "--tenant", "t"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    // (the shell stops reading: the rest of the write fails, as it should)
    let writer = std::thread::spawn(move || {
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..24 {
            if stdin.write_all(&zeros).is_err() {
                break;
            }
        }
    });
    let o = child.wait_with_output().unwrap();
    writer.join().unwrap();
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("line 1 is longer than 16 MiB"), "{out}");
}

/// A statement given as an argument may begin with a `--` comment, as the
/// acceptance examples of docs/query-language.md do (the command line read
/// it as an unknown flag).
#[test]
fn a_statement_argument_may_begin_with_a_comment() {
    let (_tmp, d) = store();
    let o = engram(&[
        "--data",
        &d,
        "query",
        "--tenant",
        "t",
        "-- what do we know about diets?\nFIND assertions KIND 'preference' MATCH 'diet'",
        "--json",
    ]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(out.contains("vegan"), "{out}");
}

/// A stderr that cannot be written (`2>/dev/full`) does not turn a refused
/// statement into a panic: the exit status stays the command's own.
#[test]
fn an_unwritable_stderr_keeps_the_exit_status() {
    let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") else {
        return; // (no /dev/full on this system)
    };
    let (_tmp, d) = store();
    let o = Command::new(env!("CARGO_BIN_EXE_engram"))
        .args(["--data", &d, "query", "--tenant", "t", "TRACE 'nope' BOTH"])
        .stderr(Stdio::from(full))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{o:?}");
}

/// With `--json`, a statement file that cannot be read is a JSON error too
/// (it was plain text on stderr).
#[test]
fn json_errors_cover_an_unreadable_statement_file() {
    let (tmp, d) = store();
    let missing = tmp.path().join("nope.eql");
    let o = engram(&[
        "--data",
        &d,
        "query",
        "--tenant",
        "t",
        "--json",
        "-f",
        missing.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON on stdout");
    assert_eq!(v["errors"][0]["code"], "invalid_input", "{v}");
    assert!(
        v["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("nope.eql"),
        "{v}"
    );
    // no statement at all: a usage error, as a missing argument is
    let o = engram(&["--data", &d, "query", "--tenant", "t", "--json"]);
    assert_eq!(o.status.code(), Some(2));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON on stdout");
    assert_eq!(v["errors"][0]["code"], "usage", "{v}");
    // and a store that is not there
    let none = tmp.path().join("no-store");
    let o = engram(&[
        "--data",
        none.to_str().unwrap(),
        "query",
        "--tenant",
        "t",
        "--json",
        "FIND ANY",
    ]);
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON on stdout");
    assert_eq!(v["errors"][0]["code"], "no_store", "{v}");
    assert!(
        v["errors"][0].get("line").is_some_and(|l| l.is_null()),
        "{v}"
    );
}

/// Blank lines between statements are not part of the next one: they
/// neither count toward its limit nor move the line its errors name (and
/// are not scanned again at every line).
#[test]
fn the_shell_skips_blank_lines_between_statements() {
    let (_tmp, d) = store();
    let mut input = String::from("FIND ANY LIMIT 1 RETURN id;\n");
    input.push_str(&"\n".repeat(70_000));
    input.push_str("FIND ANY LIMIT 2;\n");
    input.push_str(&"  \n".repeat(1000));
    input.push_str("FIND bad;\n");
    let o = shell_piped(&["--data", &d, "shell", "--tenant", "t"], input.as_bytes());
    let out = text(&o);
    assert!(out.contains("(1 row)") && out.contains("(2 rows)"), "{out}");
    assert!(out.contains("statement starting on line 71003"), "{out}");
    assert!(!out.contains("longer than 64 KiB"), "{out}");
}

/// A store of tenant `t` holding a chain `n0` (an event) <- `n1` <- ... <-
/// `n40`, each assertion built on the one before; `more` then writes in
/// the same session (given the ids of `n0` and `n40`).
fn chain_store(
    more: impl FnOnce(&engram::Session, engram::RecordId, engram::RecordId),
) -> (tempfile::TempDir, String) {
    use engram::{AssertionKind, Engram, NewRecord, Options, Principal, RecordRef};
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let db = Engram::open(&dir, Options::default()).unwrap();
    let s = db.session(Principal::admin("t"));
    let root = s
        .append(vec![NewRecord::event("k", "root").with_external_id("n0")])
        .unwrap()[0]
        .id;
    let mut prev = root;
    for i in 0..40 {
        prev = s
            .append(vec![
                NewRecord::assertion(
                    AssertionKind::Note,
                    format!("level {i}"),
                    vec![RecordRef::Id(prev)],
                )
                .with_external_id(format!("n{}", i + 1)),
            ])
            .unwrap()[0]
            .id;
    }
    more(&s, root, prev);
    drop(s);
    db.close().unwrap();
    let d = dir.to_str().unwrap().to_string();
    (tmp, d)
}

/// Runs a statement with `--json` on tenant `t` of the store in `dir`.
fn json_query(dir: &str) -> impl Fn(&str) -> serde_json::Value + '_ {
    move |stmt| {
        let o = engram(&["--data", dir, "query", "--tenant", "t", "--json", stmt]);
        assert!(o.status.success(), "{}", text(&o));
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()
    }
}

/// A `TRACE` statement at the engine's 32-hop limit says when the lineage
/// goes on past it (it returned 32 levels and said nothing).
#[test]
fn a_trace_statement_at_the_depth_limit_says_it_is_cut() {
    let (_tmp, dir) = chain_store(|_, _, _| {});
    let run = json_query(&dir);
    let v = run("TRACE 'n0' DERIVATIVES");
    assert_eq!(v["rows"].as_array().unwrap().len(), 32);
    assert_eq!(v["truncated"], true, "{v}");
    // only the side the statement lists counts: n0 has no sources, and
    // n39's one derivative is within reach though its sources go on
    let v = run("TRACE 'n0' SOURCES");
    assert!(v.get("truncated").is_none(), "{v}");
    let v = run("TRACE 'n39' DERIVATIVES");
    assert_eq!(v["rows"].as_array().unwrap().len(), 1);
    assert!(v.get("truncated").is_none(), "{v}");
    let v = run("TRACE 'n39' SOURCES");
    assert_eq!(v["rows"].as_array().unwrap().len(), 32);
    assert_eq!(v["truncated"], true, "{v}");
    let v = run("TRACE 'n39' BOTH");
    assert_eq!(v["truncated"], true, "{v}");
    // a smaller DEPTH is the statement's own limit
    let v = run("TRACE 'n0' DERIVATIVES DEPTH 5");
    assert!(v.get("truncated").is_none(), "{v}");
    let o = engram(&[
        "--data",
        &dir,
        "query",
        "--tenant",
        "t",
        "TRACE 'n0' DERIVATIVES",
    ]);
    assert!(text(&o).contains("past 32 hops"), "{}", text(&o));
}

/// Without `INCLUDE SUPERSEDED`, a `TRACE` is cut only where its own walk
/// (which passes no superseded version) reaches the limit: a correction
/// built on the root of a 41-record chain has one source, though the
/// version it corrects has 40 upstream.
#[test]
fn a_trace_past_a_superseded_version_is_not_cut_by_it() {
    use engram::{AssertionKind, NewRecord, RecordRef};
    let (_tmp, dir) = chain_store(|s, root, last| {
        s.append(vec![
            NewRecord::assertion(
                AssertionKind::Note,
                "level 39, corrected",
                vec![RecordRef::Id(root)],
            )
            .superseding(RecordRef::Id(last))
            .with_external_id("fixed"),
        ])
        .unwrap();
    });
    let run = json_query(&dir);
    let v = run("TRACE 'fixed' SOURCES");
    assert_eq!(v["rows"].as_array().unwrap().len(), 1, "{v}");
    assert!(v.get("truncated").is_none(), "{v}");
    // through the corrected version, the lineage goes on past 32 hops
    let v = run("TRACE 'fixed' SOURCES INCLUDE SUPERSEDED");
    assert_eq!(v["truncated"], true, "{v}");
    // n7 corrected: n40's walk reaches n8 at 32 hops, and past it only
    // n7's superseded version: not cut, though a row is at the limit
    let (_tmp, dir) = chain_store(|s, root, _| {
        s.append(vec![
            NewRecord::assertion(
                AssertionKind::Note,
                "level 6, corrected",
                vec![RecordRef::Id(root)],
            )
            .superseding(RecordRef::External("n7".into())),
        ])
        .unwrap();
    });
    let run = json_query(&dir);
    let v = run("TRACE 'n40' SOURCES");
    assert_eq!(v["rows"].as_array().unwrap().len(), 32, "{v}");
    assert!(v.get("truncated").is_none(), "{v}");
    let v = run("TRACE 'n40' SOURCES INCLUDE SUPERSEDED");
    assert_eq!(v["truncated"], true, "{v}");
}

/// A record the engine's walk lists early through an older version, and
/// the statement's walk (which passes none) reaches only past the limit:
/// the statement is cut (the engine keeps the step it took at the limit).
#[test]
fn a_trace_reaching_a_listed_record_only_past_the_limit_is_cut() {
    use engram::{AssertionKind, Engram, NewRecord, Options, Principal, RecordRef};
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let db = Engram::open(&dir, Options::default()).unwrap();
    let s = db.session(Principal::admin("t"));
    let one = |r: NewRecord| s.append(vec![r]).unwrap()[0].id;
    let note = |text: &str, sources: Vec<RecordRef>| {
        NewRecord::assertion(AssertionKind::Note, text.to_string(), sources)
    };
    let src = one(NewRecord::event("k", "the source"));
    let r = one(note("r", vec![RecordRef::Id(src)]));
    // c32 <- c31 <- ... <- c1, c32 built on r
    let mut c = one(note("c32", vec![RecordRef::Id(r)]));
    for i in (1..32).rev() {
        c = one(note(&format!("c{i}"), vec![RecordRef::Id(c)]));
    }
    let old = one(note("o", vec![RecordRef::Id(r)]));
    one(note("target", vec![RecordRef::Id(c), RecordRef::Id(old)]).with_external_id("tt"));
    // o corrected: the statement's walk no longer passes it
    one(note("o, corrected", vec![RecordRef::Id(src)]).superseding(RecordRef::Id(old)));
    drop(s);
    db.close().unwrap();
    let d = dir.to_str().unwrap().to_string();
    let run = json_query(&d);
    let v = run("TRACE 'tt' SOURCES RETURN depth");
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 32, "c1..c32: {v}");
    assert_eq!(
        v["truncated"], true,
        "r and the source lie past 32 hops: {v}"
    );
}

/// A tenant that holds nothing in the store is said on stderr (a typo in
/// `--tenant` otherwise reads as a search that found nothing); the rows
/// stay what they are.
#[test]
fn a_tenant_holding_nothing_is_said() {
    let (_tmp, d) = store();
    let o = engram(&["--data", &d, "query", "--tenant", "tt", "FIND ANY"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("(0 rows)"));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("tenant 'tt' holds nothing"), "{err}");
    let o = engram(&["--data", &d, "query", "--tenant", "t", "FIND ANY LIMIT 1"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(o.stderr.is_empty(), "{}", text(&o));
    // `engram eval`: once per tenant of its cases that holds nothing
    let cases = std::path::Path::new(&d).join("..").join("cases.jsonl");
    std::fs::write(
        &cases,
        "{\"case_id\": \"a\", \"query\": \"x\", \"tenant\": \"tt\", \"relevant\": [\"r\"]}\n\
         {\"case_id\": \"b\", \"query\": \"y\", \"tenant\": \"tt\", \"relevant\": [\"r\"]}\n\
         {\"case_id\": \"c\", \"query\": \"y\", \"tenant\": \"t\", \"relevant\": [\"r\"]}\n",
    )
    .unwrap();
    let o = engram(&["--data", &d, "eval", cases.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.matches("tenant 'tt' holds nothing").count(), 1, "{err}");
    assert!(!err.contains("tenant 't' holds"), "{err}");
}
