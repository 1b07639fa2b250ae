//! What a new user runs before anything else: `engram init` with an
//! embedder, shell completions and the man page, through the real binary.
//! Completions and pages come from the clap definition, so they name every
//! command; `init --embedder` creates a store that remembers its embedder.

use std::process::{Command, Output};

fn engram(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_engram"))
        .args(args)
        .output()
        .expect("the engram binary runs")
}

fn stdout_ok(args: &[&str]) -> String {
    let o = engram(args);
    assert!(
        o.status.success(),
        "engram {args:?} failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.stderr.is_empty(), "engram {args:?} wrote to stderr");
    String::from_utf8(o.stdout).expect("UTF-8 output")
}

#[test]
fn init_with_an_embedder_creates_a_store_that_remembers_it() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("memory");
    let d = store.to_str().unwrap();
    let out = stdout_ok(&["--data", d, "init", "--embedder", "hash-64", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["embedder"], "engram-lexical-hash-64@1", "{v}");

    // Later commands use the remembered embedder without the flag.
    let file = tmp.path().join("one.jsonl");
    std::fs::write(
        &file,
        "{\"tenant\": \"t\", \"kind\": \"note\", \"text\": \"the billing service restarted\"}\n",
    )
    .unwrap();
    stdout_ok(&["--data", d, "ingest", file.to_str().unwrap()]);
    let stats: serde_json::Value =
        serde_json::from_str(&stdout_ok(&["--data", d, "stats", "--json"])).unwrap();
    let spaces = stats["vector_spaces"].as_array().expect("vector spaces");
    assert_eq!(spaces.len(), 1, "{stats}");
    assert_eq!(spaces[0]["model"], "engram-lexical-hash-64@1", "{stats}");
    assert_eq!(spaces[0]["dim"], 64, "{stats}");

    // A second init changes nothing; an unknown embedder creates nothing.
    let again = engram(&["--data", d, "init", "--embedder", "hash"]);
    assert_eq!(again.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&again.stderr).contains("already an Engram store"));
    let other = tmp.path().join("other");
    let bad = engram(&[
        "--data",
        other.to_str().unwrap(),
        "init",
        "--embedder",
        "nope",
    ]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("unknown embedder 'nope'"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
    assert!(
        !other.exists(),
        "a refused init created {}",
        other.display()
    );
}

#[test]
fn completions_for_each_shell_name_the_commands_and_their_flags() {
    let bash = stdout_ok(&["completions", "bash"]);
    assert!(bash.contains("_engram()") && bash.contains("complete -F _engram"));
    let zsh = stdout_ok(&["completions", "zsh"]);
    assert!(zsh.starts_with("#compdef engram"), "{}", &zsh[..40]);
    let fish = stdout_ok(&["completions", "fish"]);
    assert!(fish.contains("complete -c engram"));
    for script in [&bash, &zsh, &fish] {
        for word in ["ingest", "completions", "batch-size", "quiet", "embedder"] {
            assert!(script.contains(word), "a completion script lacks {word}");
        }
    }
    // Bash parses the script it is given.
    if let Ok(o) = Command::new("bash").args(["-n", "-c", &bash]).output() {
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let o = engram(&["completions", "tcsh"]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "an unknown shell is a usage error"
    );
}

#[test]
fn man_pages_are_roff_for_engram_and_for_each_command() {
    let page = stdout_ok(&["man"]);
    assert!(page.contains(".TH engram 1"), "{}", &page[..200]);
    assert!(page.contains(".SH SUBCOMMANDS") && page.contains("engram\\-ingest(1)"));
    let ingest = stdout_ok(&["man", "ingest"]);
    assert!(ingest.contains(".TH engram-ingest 1"), "{}", &ingest[..200]);
    assert!(ingest.contains("\\-\\-verbose"));
    let nested = stdout_ok(&["man", "bench", "ingest"]);
    assert!(nested.contains(".TH engram-bench-ingest 1"));
    // quoted as one argument, as the help's example reads
    assert_eq!(stdout_ok(&["man", "bench ingest"]), nested);
    let o = engram(&["man", "nope"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no command `nope`"));
}
