//! Shared setup for the scenario tests: a store on a temporary directory
//! (or in memory) with a manual clock and the built-in embedder.
#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;

use engram::{Engram, HashEmbedder, ManualClock, Options, RecordRef};

/// 2026-09-09T14:00:00Z
pub const T0: i64 = 1_788_962_400_000;
pub const MINUTE: i64 = 60_000;

pub fn opts(clock: &ManualClock) -> Options {
    Options {
        clock: Arc::new(clock.clone()),
        embedder: Some(Arc::new(HashEmbedder::default())),
        ..Options::default()
    }
}

pub fn open(dir: &Path, clock: &ManualClock) -> Engram {
    Engram::open(dir, opts(clock)).unwrap()
}

pub fn ext(e: &str) -> RecordRef {
    RecordRef::External(e.to_string())
}

/// Every file under `dir`, recursively.
pub fn files_under(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}

/// Files under `dir` containing `needle`.
pub fn grep(dir: &Path, needle: &str) -> Vec<std::path::PathBuf> {
    files_under(dir)
        .into_iter()
        .filter(|p| {
            std::fs::read(p)
                .map(|b| b.windows(needle.len()).any(|w| w == needle.as_bytes()))
                .unwrap_or(false)
        })
        .collect()
}
