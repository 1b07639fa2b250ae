//! Kill -9 under load: clients append concurrently over HTTP while the
//! server is SIGKILLed at a random moment, then restarted; every append
//! that was answered 2xx is in the store, and `engram verify` is clean.
//! 20 rounds by default (`ENGRAM_KILL_ROUNDS`); `ENGRAM_TEST_SEED`
//! replays the timing choices.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::harness::*;

const CLIENTS: usize = 4;

#[test]
fn acknowledged_appends_survive_sigkill() {
    let rounds: u64 = std::env::var("ENGRAM_KILL_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let seed: u64 = std::env::var("ENGRAM_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("server kill test seed {seed} (set ENGRAM_TEST_SEED to replay the timing choices)");
    let mut rng = seed | 1;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let (_tmp, dir) = new_store();
    let key = tenant_key(&dir, "t", "writer", "user");
    let acked: Arc<Mutex<Vec<String>>> = Arc::default();
    let mut last_of_round: Option<String> = None;
    let started = Instant::now();
    for round in 0..rounds {
        let mut s = Server::start(&dir, None);
        // what the previous round acknowledged last is there at once
        if let Some(ext) = &last_of_round {
            s.json(
                "GET",
                &format!("/v1/records/ext:{ext}"),
                Some(&key),
                None,
                200,
            );
        }
        let stop = Arc::new(AtomicBool::new(false));
        let handles: Vec<_> = (0..CLIENTS)
            .map(|c| {
                let (addr, key, acked, stop) = (s.addr.clone(), key.clone(), acked.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut last = None;
                    let mut i = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let n = 1 + (i % 3) as usize;
                        let exts: Vec<String> = (0..n).map(|j| format!("r{round}-c{c}-{i}-{j}")).collect();
                        let body = format!(
                            "[{}]",
                            exts.iter()
                                .map(|e| format!(r#"{{"kind": "note", "external_id": "{e}", "text": "round {round} client {c} {}"}}"#, "x".repeat(100)))
                                .collect::<Vec<_>>()
                                .join(",")
                        );
                        match request(&addr, "POST", "/v1/records", Some(&key), Some(body.as_bytes()), "application/json") {
                            Ok(r) if r.status == 200 => {
                                assert_eq!(r.json()["created"], n as u64);
                                acked.lock().unwrap().extend(exts.iter().cloned());
                                last = exts.last().cloned();
                            }
                            Ok(r) => panic!("append answered {}: {}", r.status, r.text()),
                            // killed mid-request: not acknowledged
                            Err(_) => break,
                        }
                        i += 1;
                    }
                    last
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(20 + next() % 230));
        s.kill9();
        stop.store(true, Ordering::Relaxed);
        for h in handles {
            if let Some(l) = h.join().expect("client thread") {
                last_of_round = Some(l);
            }
        }
    }
    let acked = std::mem::take(&mut *acked.lock().unwrap());
    assert!(
        acked.len() as u64 >= rounds,
        "too few appends were acknowledged: {}",
        acked.len()
    );
    // every acknowledged record is there, and the store verifies clean
    let listed = engram(&dir, &["log", "--tenant", "t", "--json"]);
    let present: BTreeSet<String> = listed
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["external_id"].as_str().map(str::to_string))
        .collect();
    let missing: Vec<&String> = acked.iter().filter(|e| !present.contains(*e)).collect();
    assert!(
        missing.is_empty(),
        "seed {seed}: {} of {} acknowledged appends are missing after kill -9, e.g. {:?}",
        missing.len(),
        acked.len(),
        &missing[..missing.len().min(5)]
    );
    engram(&dir, &["verify"]);
    eprintln!(
        "server kill test: {rounds} rounds, {} acknowledged records, all present ({:.1}s)",
        acked.len(),
        started.elapsed().as_secs_f64()
    );
}
