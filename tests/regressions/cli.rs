//! Running the `engram` binary from tests.
//!
//! Tests of this binary run one at a time ([`serial`]): a child process
//! forked by one test briefly holds copies of every descriptor of this
//! process, including another test's store lock, which would make that
//! test's next command find its store "in use".

use std::path::Path;
use std::process::{Command, Output};

pub fn engram(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_engram"))
        .args(args)
        .output()
        .expect("the engram binary runs")
}

/// `engram --data DIR args...`
pub fn at(dir: &Path, args: &[&str]) -> Output {
    let mut all = vec!["--data", dir.to_str().unwrap()];
    all.extend_from_slice(args);
    engram(&all)
}

/// Like [`at`], insisting on success.
pub fn ok(dir: &Path, args: &[&str]) -> Output {
    let o = at(dir, args);
    assert!(o.status.success(), "engram {args:?} failed:\n{}", text(&o));
    o
}

/// Like [`at`], insisting on failure.
pub fn fails(dir: &Path, args: &[&str]) -> String {
    let o = at(dir, args);
    assert!(
        !o.status.success(),
        "engram {args:?} succeeded:\n{}",
        text(&o)
    );
    text(&o)
}

pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

pub fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("not JSON ({e}):\n{}", text(o)))
}

/// Writes a JSONL file of `n` events of tenant `tenant`, each ~400 bytes.
pub fn events_file(dir: &Path, name: &str, tenant: &str, n: usize) -> std::path::PathBuf {
    let mut s = String::new();
    for i in 0..n {
        let filler = "lorem ipsum dolor sit amet ".repeat(14);
        s.push_str(&format!(
            "{{\"external_id\":\"e/{i}\",\"tenant\":\"{tenant}\",\"kind\":\"note\",\"text\":\"event {i} {filler}\"}}\n"
        ));
    }
    let p = dir.join(name);
    std::fs::write(&p, s).unwrap();
    p
}

/// Every file under `dir` with its bytes, for before/after comparisons.
pub fn snapshot(dir: &Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut v: Vec<_> = crate::common::files_under(dir)
        .into_iter()
        .filter(|p| p.file_name().is_some_and(|n| n != "LOCK"))
        .map(|p| {
            let b = std::fs::read(&p).unwrap();
            (p, b)
        })
        .collect();
    v.sort();
    v
}

/// Segment files of the store in `dir`, oldest first.
pub fn segments(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir.join("log"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "seg"))
        .collect();
    v.sort();
    v
}

/// Asserts two [`snapshot`]s are equal, naming the files that differ.
pub fn assert_same(
    before: &[(std::path::PathBuf, Vec<u8>)],
    after: &[(std::path::PathBuf, Vec<u8>)],
    what: &str,
) {
    let names =
        |v: &[(std::path::PathBuf, Vec<u8>)]| v.iter().map(|(p, _)| p.clone()).collect::<Vec<_>>();
    assert_eq!(
        names(before),
        names(after),
        "{what}: files added or removed"
    );
    for ((p, a), (_, b)) in before.iter().zip(after) {
        assert!(
            a == b,
            "{what}: {} changed ({} -> {} bytes)",
            p.display(),
            a.len(),
            b.len()
        );
    }
}

/// Serialises the tests of this binary (see the module documentation).
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}
