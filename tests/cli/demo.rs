//! The README's main command, `engram demo`, and the commands its closing
//! hint suggests, run through the real binary: the demo succeeds on a fresh
//! directory, leaves a store that verifies clean, and that store answers the
//! suggested recall. Bad input exits non-zero with a message naming it.

use std::process::{Command, Output};

fn engram(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_engram"))
        .args(args)
        .output()
        .expect("the engram binary runs")
}

/// Runs `engram args` and insists it succeeds.
fn engram_ok(args: &[&str]) -> Output {
    let o = engram(args);
    assert!(o.status.success(), "engram {args:?} failed:\n{}", text(&o));
    o
}

/// The recall the demo's closing hint suggests, as JSON.
fn suggested_recall(d: &str) -> Output {
    engram_ok(&[
        "--data",
        d,
        "recall",
        "--tenant",
        "acme-ops",
        "--text",
        "checkout latency",
        "--json",
    ])
}

/// The README's `engram --data demo-store query --tenant T "..."`
/// commands, as (tenant, statement): a statement may go on over lines
/// until its closing quote.
fn readme_demo_queries() -> Vec<(String, String)> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    let prefix = "engram --data demo-store query --tenant ";
    let mut out = Vec::new();
    let mut lines = readme.lines();
    while let Some(line) = lines.next() {
        let Some(rest) = line.strip_prefix(prefix) else {
            continue;
        };
        let (tenant, quoted) = rest.split_once(" \"").expect("a quoted statement");
        let mut statement = quoted.to_string();
        while !statement.ends_with('"') {
            statement.push('\n');
            statement.push_str(lines.next().expect("the statement's closing quote"));
        }
        statement.pop();
        out.push((tenant.to_string(), statement));
    }
    out
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn the_demo_runs_and_leaves_a_sound_store() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("demo-store");
    let d = dir.to_str().unwrap();
    let out = text(&engram_ok(&["demo", "--dir", d]));
    for section in [
        "1. Ingest",
        "6. Working memory",
        "7. Isolation",
        "0 hit(s) from acme-ops",
    ] {
        assert!(out.contains(section), "demo output lacks {section:?}");
    }
    assert!(out.contains(&format!("engram --data {d} recall")), "{out}");

    engram_ok(&["--data", d, "verify"]);
    // the README's query examples on the demo's store answer rows
    let examples = readme_demo_queries();
    assert_eq!(examples.len(), 2, "{examples:?}");
    for (tenant, statement) in &examples {
        let out = text(&engram_ok(&[
            "--data", d, "query", "--tenant", tenant, statement,
        ]));
        assert!(
            out.contains(" rows)") && !out.contains("(0 rows)"),
            "{statement}: {out}"
        );
    }
    let r = suggested_recall(d);
    let json: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    let hits = json["hits"].as_array().expect("hits");
    assert!(!hits.is_empty(), "the suggested recall finds nothing");
    for h in hits {
        assert!(h["id"].is_string() && h.get("external_id").is_some(), "{h}");
    }

    // Backup and restore through the binary leave a store that verifies.
    let b = tmp.path().join("backup");
    engram_ok(&["--data", d, "backup", b.to_str().unwrap()]);
    engram_ok(&["--data", d, "restore", b.to_str().unwrap()]);
    engram_ok(&["--data", d, "verify"]);
    suggested_recall(d);

    // A second demo into the same, now non-empty, directory is refused.
    let again = engram(&["demo", "--dir", d]);
    assert!(!again.status.success());
    assert!(text(&again).contains("not empty"), "{}", text(&again));
    // Nor is one inside that store, and it is refused before the tour's
    // banner.
    let inside = format!("{d}/sub");
    let o = engram(&["demo", "--dir", &inside]);
    assert!(!o.status.success());
    assert!(text(&o).contains("inside the store"), "{}", text(&o));
    assert!(
        o.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
}

#[test]
fn bad_input_names_what_is_wrong() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let d = store.to_str().unwrap();
    let file = tmp.path().join("bad.jsonl");
    std::fs::write(
        &file,
        "{\"tenant\": \"t\", \"kind\": \"note\", \"text\": \"fine\"}\n{\"tenant\": \"t\", \"kind\": \"note\"}\n",
    )
    .unwrap();
    let o = engram(&["--data", d, "ingest", file.to_str().unwrap()]);
    assert!(!o.status.success());
    let msg = text(&o);
    assert!(msg.contains("line 2") && msg.contains("text"), "{msg}");
    // a file rejected whole does not even create the store
    assert!(!store.exists(), "a rejected ingest created {d}");
    engram_ok(&["--data", d, "init"]);
    let o = engram(&["--data", d, "ingest", file.to_str().unwrap()]);
    assert!(!o.status.success());
    // the whole batch was rejected: nothing stored
    let s = engram(&["--data", d, "stats", "--json"]);
    assert!(s.status.success(), "{}", text(&s));
    let stats: serde_json::Value = serde_json::from_slice(&s.stdout).unwrap();
    assert_eq!(
        stats["records"], 0,
        "a rejected batch left records: {stats}"
    );
    assert_eq!(
        stats["last_lsn"], 0,
        "a rejected batch reached the log: {stats}"
    );
    let k = engram(&[
        "--data", d, "recall", "--tenant", "t", "--text", "x", "--k", "0",
    ]);
    assert!(!k.status.success());
    assert!(text(&k).contains("k: 0 is out of range"), "{}", text(&k));
}
