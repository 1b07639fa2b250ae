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

/// A small seeded generator (xorshift64) for scenario tests; the seed must
/// be non-zero.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[self.below(v.len() as u64) as usize]
    }
}

/// The seed of a randomized test: `ENGRAM_TEST_SEED` or the clock; printed
/// so that a failure can be replayed.
pub fn seed() -> u64 {
    let s = std::env::var("ENGRAM_TEST_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        });
    eprintln!("seed {s} (ENGRAM_TEST_SEED={s} replays)");
    s
}

/// Appends `chunks` batches of 500 events with vectors for model "m" as
/// `session`; every fifth event of a batch is labelled "secret", the rest
/// "open". Returns every id in append order and the ids labelled secret.
pub fn append_labelled(
    session: &engram::Session,
    chunks: usize,
    mut vector: impl FnMut() -> Vec<f32>,
) -> (
    Vec<engram::RecordId>,
    std::collections::HashSet<engram::RecordId>,
) {
    let (mut all, mut secret) = (Vec::new(), std::collections::HashSet::new());
    for chunk in 0..chunks {
        let recs: Vec<engram::NewRecord> = (0..500)
            .map(|i| {
                let mut r = engram::NewRecord::event("note", format!("{chunk} {i}"))
                    .with_embedding("m", vector());
                r.access = vec![if i % 5 == 0 { "secret" } else { "open" }.into()];
                r
            })
            .collect();
        for (i, got) in session.append(recs).unwrap().iter().enumerate() {
            all.push(got.id);
            if i % 5 == 0 {
                secret.insert(got.id);
            }
        }
    }
    (all, secret)
}
