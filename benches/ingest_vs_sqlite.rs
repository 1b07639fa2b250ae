//! Durable ingest, side by side in one run: Engram vs SQLite (WAL,
//! synchronous=FULL), plus the raw sequential write bandwidth of the same
//! disk with fsync.
//!
//! SQLite runs twice: a plain table (the least it can do), and the same
//! table with an FTS5 full-text index on the text, which is what a store
//! that answers keyword queries needs and what Engram maintains on every
//! append (BM25 postings, eligibility bitmaps, content hash, catalog).
//!
//! Same workload for both engines: N events of ~500 bytes of text with a
//! user and a conversation, appended by 1, 4 and 16 concurrent writers, one
//! event per durable commit; then batches of 1000 committed by one writer
//! and by four concurrent writers.
//! Every commit is durable before it returns.
//!
//! Run: `cargo bench --bench ingest_vs_sqlite` (env `ENGRAM_BENCH_N` sets N,
//! default 20000). Results and the command are recorded in
//! docs/benchmarks.md.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use engram_server::bench::{IngestResult, event_text, measure};

fn sqlite_measure(dir: &Path, n: usize, writers: usize, batch: usize, fts: bool) -> IngestResult {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join("events.db");
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.pragma_update(None, "journal_mode", "WAL").unwrap();
        c.pragma_update(None, "synchronous", "FULL").unwrap();
        c.execute_batch(
            "CREATE TABLE events (id INTEGER PRIMARY KEY, tenant TEXT NOT NULL, user TEXT, conversation TEXT, kind TEXT NOT NULL, text TEXT, occurred_at INTEGER NOT NULL);",
        )
        .unwrap();
        if fts {
            c.execute_batch(
                "CREATE VIRTUAL TABLE events_fts USING fts5(text, content='events', content_rowid='id');",
            )
            .unwrap();
        }
    }
    let per_writer = n.div_ceil(writers);
    let path = Arc::new(path);
    let started = Instant::now();
    let handles: Vec<_> = (0..writers)
        .map(|w| {
            let path = path.clone();
            std::thread::spawn(move || {
                let mut c = rusqlite::Connection::open(&*path).unwrap();
                c.pragma_update(None, "synchronous", "FULL").unwrap();
                c.busy_timeout(std::time::Duration::from_secs(60)).unwrap();
                let mut lat = Vec::new();
                let mut i = 0;
                while i < per_writer {
                    let take = batch.min(per_writer - i);
                    let t = Instant::now();
                    let tx = c
                        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                        .unwrap();
                    {
                        let mut st = tx
                            .prepare_cached("INSERT INTO events (tenant, user, conversation, kind, text, occurred_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)")
                            .unwrap();
                        let mut fts_st = fts.then(|| {
                            tx.prepare_cached("INSERT INTO events_fts (rowid, text) VALUES (?1, ?2)")
                                .unwrap()
                        });
                        for k in 0..take {
                            let e = w * per_writer + i + k;
                            let text = event_text(e as u64, 500);
                            let rowid = st
                                .insert(rusqlite::params![
                                    "bench",
                                    format!("user_{}", e % 97),
                                    format!("conv_{}", e % 1013),
                                    "user_message",
                                    &text,
                                    e as i64
                                ])
                                .unwrap();
                            if let Some(f) = fts_st.as_mut() {
                                f.execute(rusqlite::params![rowid, &text]).unwrap();
                            }
                        }
                    }
                    tx.commit().unwrap();
                    lat.push(t.elapsed().as_secs_f64() * 1e6);
                    i += take;
                }
                lat
            })
        })
        .collect();
    let mut lat: Vec<f64> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    let seconds = started.elapsed().as_secs_f64();
    lat.sort_by(f64::total_cmp);
    let pct = |p: f64| lat[((lat.len() as f64 - 1.0) * p).round() as usize];
    let events = per_writer * writers;
    IngestResult {
        writers,
        batch,
        events,
        seconds,
        events_per_s: events as f64 / seconds,
        mb_per_s: 500.0 * events as f64 / seconds / 1e6,
        ack_latency_us_p50: pct(0.5),
        ack_latency_us_p99: pct(0.99),
        groups: 0,
        index_catch_up_s: 0.0,
    }
}

/// Sequential writes of `chunk` bytes, each followed by fdatasync.
fn raw_bandwidth(dir: &Path, total: usize, chunk: usize) -> f64 {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join("raw.bin");
    let mut f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&path)
        .unwrap();
    let buf = vec![0x5Au8; chunk];
    let started = Instant::now();
    let mut written = 0;
    while written < total {
        f.write_all(&buf).unwrap();
        f.sync_data().unwrap();
        written += chunk;
    }
    let s = started.elapsed().as_secs_f64();
    let _ = std::fs::remove_file(&path);
    written as f64 / s / 1e6
}

fn main() {
    let n: usize = std::env::var("ENGRAM_BENCH_N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000);
    let root = tempfile::tempdir().unwrap();
    println!(
        "durable ingest, {n} events of ~500 B text per configuration; every commit fsynced before it returns"
    );
    println!(
        "{:<8} {:>6} | {:>12} {:>9} {:>9} | {:>12} {:>9} {:>9} | {:>12} {:>9} | {:>7} {:>7}",
        "writers",
        "batch",
        "engram ev/s",
        "p50 us",
        "p99 us",
        "sqlite ev/s",
        "p50 us",
        "p99 us",
        "+fts5 ev/s",
        "p50 us",
        "vs sql",
        "vs fts5"
    );
    let mut batch1000 = Vec::new();
    for (i, (w, b)) in [(1, 1), (4, 1), (16, 1), (1, 1000), (4, 1000)]
        .into_iter()
        .enumerate()
    {
        let e = measure(&root.path().join(format!("e{i}")), n, w, b).expect("engram run");
        let s = sqlite_measure(&root.path().join(format!("s{i}")), n, w, b, false);
        let f = sqlite_measure(&root.path().join(format!("f{i}")), n, w, b, true);
        println!(
            "{:<8} {:>6} | {:>12.0} {:>9.0} {:>9.0} | {:>12.0} {:>9.0} {:>9.0} | {:>12.0} {:>9.0} | {:>6.1}x {:>6.1}x",
            w,
            b,
            e.events_per_s,
            e.ack_latency_us_p50,
            e.ack_latency_us_p99,
            s.events_per_s,
            s.ack_latency_us_p50,
            s.ack_latency_us_p99,
            f.events_per_s,
            f.ack_latency_us_p50,
            e.events_per_s / s.events_per_s,
            e.events_per_s / f.events_per_s
        );
        if b == 1000 {
            batch1000.push(e);
        }
    }
    // Log bytes per event, measured on the batch-of-1000 store layout: frame
    // header + archived record. Measured directly:
    let probe = root.path().join("probe");
    let db = engram::Engram::open(&probe, engram::Options::default()).unwrap();
    let before = db.log_stats().bytes;
    let s = db.session(engram::Principal::system("bench", "probe"));
    let records: Vec<_> = (0..1000)
        .map(|i| {
            engram::NewRecord::event("user_message", event_text(i, 500)).with_scope(engram::Scope {
                user: Some(format!("user_{}", i % 97)),
                conversation: Some(format!("conv_{}", i % 1013)),
                ..engram::Scope::default()
            })
        })
        .collect();
    s.append(records).unwrap();
    let log_bytes_per_event = (db.log_stats().bytes - before) as f64 / 1000.0;
    db.close().unwrap();
    let chunk = (log_bytes_per_event * 1000.0) as usize;
    let raw = raw_bandwidth(&root.path().join("raw"), 64 << 20, chunk);
    let raw_big = raw_bandwidth(&root.path().join("raw2"), 256 << 20, 8 << 20);
    println!();
    println!(
        "log bytes per event: {log_bytes_per_event:.0} (500 B text + scope, ids, hashes, frame)"
    );
    println!(
        "raw sequential write + fdatasync, {chunk} B chunks (= one 1000-event batch): {raw:.1} MB/s; 8 MiB chunks: {raw_big:.1} MB/s"
    );
    for e in &batch1000 {
        let engram_log_mb_s = e.events_per_s * log_bytes_per_event / 1e6;
        println!(
            "engram, batches of 1000, {} writer(s): {engram_log_mb_s:.1} MB/s of log = {:.2}x slower than raw 1000-event commits",
            e.writers,
            raw / engram_log_mb_s
        );
    }
}
