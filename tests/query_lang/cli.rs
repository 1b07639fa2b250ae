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
    let mut child = Command::new(env!("CARGO_BIN_EXE_engram"))
        .args(["--data", &d, "shell", "--tenant", "t"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .as_mut()
        .unwrap()
        .write_all(b"TRACE 'evt_9f2' DERIVATIVES;\n\\tenant\n")
        .unwrap();
    let o = child.wait_with_output().unwrap();
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(out.contains("(3 rows)"), "{out}");
    assert!(out.contains("admin of tenant t"), "{out}");
}
