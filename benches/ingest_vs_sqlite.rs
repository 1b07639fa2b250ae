//! Durable ingest, side by side in one run: Engram vs SQLite (WAL,
//! synchronous=FULL), plus the raw sequential write bandwidth of the same
//! disk with fsync, and the floor of group commit on this machine: a bare
//! loop of 16 writer threads and one committer, without an engine.
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
        // SQLite's commits are not counted
        groups: 0,
        fsync_us_mean: 0.0,
        index_catch_up_s: 0.0,
    }
}

/// A new, empty file `name` in `dir` (created), for writing.
fn scratch_file(dir: &Path, name: &str) -> (std::path::PathBuf, std::fs::File) {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join(name);
    let f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&path)
        .unwrap();
    (path, f)
}

/// Sequential writes of `chunk` bytes, each followed by fdatasync.
fn raw_bandwidth(dir: &Path, total: usize, chunk: usize) -> f64 {
    let (path, mut f) = scratch_file(dir, "raw.bin");
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

/// The floor of group commit on this machine, without an engine: `writers`
/// threads each send one `bytes`-byte record at a time and wait for its
/// reply; each of `committers` threads takes everything queued, writes it
/// with one positional write and one `fdatasync`, and answers every sender
/// once its group and every earlier group are durable (so with two
/// committers, two fsyncs are in flight). Returns (events/s, mean records
/// per fsync, mean fsync µs). Nothing is parsed, hashed or indexed: what it
/// reaches is what the disk, the thread hand-offs and the wake-ups of this
/// machine allow.
fn bare_group_commit(
    dir: &Path,
    n: usize,
    writers: usize,
    bytes: usize,
    committers: usize,
) -> (f64, f64, f64) {
    use std::os::unix::fs::FileExt;
    use std::sync::mpsc::{Sender, channel};
    let (path, mut f) = scratch_file(dir, "group.bin");
    // Preallocated like Engram's active segment: no size update per fsync.
    f.write_all(&vec![0u8; n * bytes + (1 << 20)]).unwrap();
    f.sync_all().unwrap();
    let f = Arc::new(f);
    type Job = (Vec<u8>, Sender<()>);
    let (tx, rx) = channel::<Job>();
    // The queue, and the groups made durable so far (acknowledged in order).
    let rx = Arc::new(parking_lot::Mutex::new((rx, 0u64, 0u64)));
    let durable = Arc::new((parking_lot::Mutex::new(0u64), parking_lot::Condvar::new()));
    let committer_threads: Vec<_> = (0..committers)
        .map(|_| {
            let (f, rx, durable) = (f.clone(), rx.clone(), durable.clone());
            std::thread::spawn(move || {
                let (mut groups, mut records, mut sync_us) = (0u64, 0u64, 0.0);
                let mut buf = Vec::new();
                let mut replies = Vec::new();
                loop {
                    // Take a group, its place in the file and its sequence number.
                    let (at, seq) = {
                        let mut q = rx.lock();
                        let Ok(first) = q.0.recv() else { break };
                        buf.clear();
                        buf.extend_from_slice(&first.0);
                        replies.push(first.1);
                        while let Ok((rec, reply)) = q.0.try_recv() {
                            buf.extend_from_slice(&rec);
                            replies.push(reply);
                        }
                        let at = q.1;
                        q.1 += buf.len() as u64;
                        q.2 += 1;
                        (at, q.2)
                    };
                    f.write_all_at(&buf, at).unwrap();
                    let t = Instant::now();
                    f.sync_data().unwrap();
                    sync_us += t.elapsed().as_secs_f64() * 1e6;
                    groups += 1;
                    records += replies.len() as u64;
                    let (done, cv) = &*durable;
                    let mut d = done.lock();
                    while *d + 1 != seq {
                        cv.wait(&mut d);
                    }
                    *d = seq;
                    cv.notify_all();
                    drop(d);
                    for r in replies.drain(..) {
                        let _ = r.send(());
                    }
                }
                (groups, records, sync_us)
            })
        })
        .collect();
    let per_writer = n.div_ceil(writers);
    let started = Instant::now();
    let clients: Vec<_> = (0..writers)
        .map(|_| {
            let tx = tx.clone();
            std::thread::spawn(move || {
                let (rtx, rrx) = channel();
                for _ in 0..per_writer {
                    tx.send((vec![0x5A; bytes], rtx.clone())).unwrap();
                    rrx.recv().unwrap();
                }
            })
        })
        .collect();
    for c in clients {
        c.join().unwrap();
    }
    let seconds = started.elapsed().as_secs_f64();
    drop(tx);
    let (mut groups, mut records, mut sync_us) = (0u64, 0u64, 0.0);
    for c in committer_threads {
        let (g, r, s) = c.join().unwrap();
        (groups, records, sync_us) = (groups + g, records + r, sync_us + s);
    }
    let _ = std::fs::remove_file(&path);
    (
        (per_writer * writers) as f64 / seconds,
        records as f64 / groups as f64,
        sync_us / groups as f64,
    )
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
    // (writers, batch, engram ev/s, sqlite ev/s) of every row.
    let mut rows: Vec<(usize, usize, f64, f64)> = Vec::new();
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
        rows.push((w, b, e.events_per_s, s.events_per_s));
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
    // The group-commit ceiling of 16 single-event writers, two ways: 16
    // events per fsync (the disk alone), and a bare group-commit loop
    // (the disk, hand-offs and wake-ups, no engine).
    let e16 = rows
        .iter()
        .find(|(w, b, _, _)| *w == 16 && *b == 1)
        .expect("the 16-writer row");
    let (bare, per_group, sync_us) = bare_group_commit(
        &root.path().join("bare"),
        n,
        16,
        log_bytes_per_event as usize,
        1,
    );
    let ceiling = 16.0 / (sync_us / 1e6);
    println!(
        "bare group commit, 16 writer threads, {log_bytes_per_event:.0} B records, no engine, one fsync in flight: {bare:.0} ev/s ({per_group:.1} records per fsync of {sync_us:.0} us)"
    );
    let (bare2, per_group2, sync_us2) = bare_group_commit(
        &root.path().join("bare2"),
        n,
        16,
        log_bytes_per_event as usize,
        2,
    );
    println!(
        "bare group commit, two fsyncs in flight: {bare2:.0} ev/s ({per_group2:.1} records per fsync of {sync_us2:.0} us)"
    );
    println!(
        "16 writers against the ceiling of 16 events per fsync ({ceiling:.0} ev/s): engram {:.0}%, bare group commit {:.0}%; engram = {:.2}x the bare loop, {:.1}x sqlite",
        100.0 * e16.2 / ceiling,
        100.0 * bare / ceiling,
        e16.2 / bare,
        e16.2 / e16.3
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
