//! `engram bench recall` end to end on a small synthetic store.

use std::process::Command;

fn engram(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_engram"))
        .args(args)
        .output()
        .expect("the engram binary runs")
}

#[test]
fn bench_recall_measures_a_generated_store_and_reuses_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let run = || {
        let o = engram(&[
            "bench",
            "recall",
            "--records",
            "3000",
            "--tenants",
            "4",
            "--queries",
            "40",
            "--synthetic",
            "--json",
            "--quiet",
            "--dir",
            d,
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice::<serde_json::Value>(&o.stdout).expect("JSON report")
    };
    let r = run();
    assert_eq!(r["records"], 3000);
    assert!(r["build_s"].as_f64().unwrap() > 0.0);
    assert!(r["vectors"].as_u64().unwrap() > 0);
    assert!(r["deleted"].as_u64().unwrap() > 0);
    let m = &r["measured"];
    assert_eq!(m["empty"], 0, "every query finds something");
    let runs = m["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2, "one and two threads");
    for x in runs {
        assert_eq!(x["queries"], 40);
        let p = |k: &str| x[k].as_f64().unwrap();
        assert!(p("qps") > 0.0);
        assert!(
            p("p50_ms") <= p("p95_ms") && p("p95_ms") <= p("p99_ms") && p("p99_ms") <= p("max_ms")
        );
    }
    for c in m["contributed"].as_array().unwrap() {
        assert!(
            c[1].as_f64().unwrap() > 0.0,
            "retriever {} never contributed",
            c[0]
        );
    }
    if cfg!(target_os = "linux") {
        assert!(r["rss_bytes_per_record"].as_f64().unwrap() > 0.0);
    }
    // The same parameters reuse the store.
    let again = run();
    assert_eq!(again["build_s"], 0.0);
    assert_eq!(again["vectors"], r["vectors"]);
}

#[test]
fn bench_recall_rejects_bad_parameters() {
    for (args, says) in [
        (vec!["--vector-share", "2"], "--vector-share"),
        (
            vec!["--records", "10", "--tenants", "4"],
            "--records must be at least",
        ),
        (vec!["--threads", "0"], "--threads"),
    ] {
        let mut all = vec!["bench", "recall", "--synthetic", "--quiet"];
        all.extend(args);
        let o = engram(&all);
        assert!(!o.status.success());
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(says), "{all:?}: {err}");
    }
}
