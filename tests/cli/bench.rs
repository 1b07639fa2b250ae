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
    // one event in ten carries the label the querying users do not hold
    // (a generator labelled only a tenant's first batch: at most 97 each)
    let restricted = r["restricted"].as_u64().unwrap();
    assert!((240..=330).contains(&restricted), "restricted {restricted}");
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
    assert_eq!(again["restricted"], r["restricted"]);
}

/// The smallest store a bench accepts runs: tenants too small to hold a
/// vector are queried without one (a vector sent there ended the run as
/// an unknown model), and a run without one thread still reports the
/// per-query figures, from its first configuration.
#[test]
fn bench_recall_runs_at_its_smallest_size_and_without_one_thread() {
    let o = engram(&[
        "bench",
        "recall",
        "--records",
        "240",
        "--tenants",
        "10",
        "--queries",
        "30",
        "--threads",
        "2",
        "--synthetic",
        "--json",
        "--quiet",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON report");
    let m = &r["measured"];
    assert_eq!(m["stages_threads"], 2, "{m}");
    assert!(m["mean_eligible"].as_f64().unwrap() > 0.0, "{m}");
    assert!(m["stages_us"][5][1].as_f64().unwrap() > 0.0, "{m}");
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

/// A NumPy 1.0 `.npy` file of little-endian `descr` values.
fn write_npy(path: &std::path::Path, descr: &str, shape: (usize, usize), data: &[u8]) {
    let mut header = format!(
        "{{'descr': '{descr}', 'fortran_order': False, 'shape': ({}, {}), }}",
        shape.0, shape.1
    );
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&u16::try_from(header.len()).unwrap().to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    std::fs::write(path, out).unwrap();
}

/// A dataset for `bench ann` in `ds`: `n` random unit vectors of 8 dims
/// (from `seed`), `q` queries, and their exact top 10 by inner product.
/// Returns the base and query vectors.
fn write_dataset(
    ds: &std::path::Path,
    n: usize,
    q: usize,
    seed: u64,
) -> (Vec<Vec<f32>>, Vec<Vec<f32>>) {
    let dim = 8;
    let mut x = seed;
    let mut unit = || {
        let v: Vec<f32> = (0..dim)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 40) as f32 / (1u64 << 24) as f32 - 0.5
            })
            .collect();
        let norm = v.iter().map(|a| a * a).sum::<f32>().sqrt();
        v.into_iter().map(|a| a / norm).collect::<Vec<f32>>()
    };
    let base: Vec<Vec<f32>> = (0..n).map(|_| unit()).collect();
    let queries: Vec<Vec<f32>> = (0..q).map(|_| unit()).collect();
    let f32s = |rows: &[Vec<f32>]| -> Vec<u8> {
        rows.iter()
            .flatten()
            .flat_map(|v| v.to_le_bytes())
            .collect()
    };
    let mut gt = Vec::new();
    for qv in &queries {
        let mut order: Vec<usize> = (0..n).collect();
        let dot = |i: usize| base[i].iter().zip(qv).map(|(a, b)| a * b).sum::<f32>();
        order.sort_by(|&a, &b| dot(b).total_cmp(&dot(a)));
        gt.extend(order[..10].iter().flat_map(|&i| (i as i32).to_le_bytes()));
    }
    write_npy(&ds.join("base.npy"), "<f4", (n, dim), &f32s(&base));
    write_npy(&ds.join("queries.npy"), "<f4", (q, dim), &f32s(&queries));
    write_npy(&ds.join("gt.npy"), "<i4", (q, 10), &gt);
    (base, queries)
}

#[test]
fn bench_ann_measures_full_hits_and_ids_only() {
    let dir = tempfile::tempdir().unwrap();
    let ds = dir.path().join("ds");
    std::fs::create_dir(&ds).unwrap();
    let (n, q) = (300usize, 8usize);
    let (base, queries) = write_dataset(&ds, n, q, 0x9E37_79B9_7F4A_7C15);
    let data = dir.path().join("store");
    let o = engram(&[
        "bench",
        "ann",
        "--dataset",
        ds.to_str().unwrap(),
        "--data",
        data.to_str().unwrap(),
        "--ef",
        "64",
        "--hits",
        "full,ids",
        "--json",
        "--quiet",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON report");
    assert_eq!(r["n"], n);
    let results = r["filters"][0]["results"].as_array().unwrap();
    let hits: Vec<&str> = results
        .iter()
        .map(|x| x["hits"].as_str().unwrap())
        .collect();
    assert_eq!(hits, ["full", "ids"]);
    for x in results {
        // 300 vectors at ef 64: the graph finds the exact neighbours
        assert!(x["recall_at_10"].as_f64().unwrap() >= 0.9, "{x}");
        assert!(x["qps"].as_f64().unwrap() > 0.0);
    }
    // a filtered ground truth: its eligible rows are counted from
    // attrs.npy (tenant 1, not deleted), with no `n_eligible` given
    let attrs: Vec<u8> = (0..n)
        .flat_map(|i| [(i % 3) as i64, i as i64, i64::from(i % 50 == 0)])
        .flat_map(|v| v.to_le_bytes())
        .collect();
    write_npy(&ds.join("attrs.npy"), "<i8", (n, 3), &attrs);
    let eligible: Vec<usize> = (0..n).filter(|i| i % 3 == 1 && i % 50 != 0).collect();
    let mut fgt = Vec::new();
    for qv in &queries {
        let mut order = eligible.clone();
        let dot = |i: usize| base[i].iter().zip(qv).map(|(a, b)| a * b).sum::<f32>();
        order.sort_by(|&a, &b| dot(b).total_cmp(&dot(a)));
        fgt.extend(order[..10].iter().flat_map(|&i| (i as i32).to_le_bytes()));
    }
    write_npy(&ds.join("gt_t1.npy"), "<i4", (q, 10), &fgt);
    std::fs::write(ds.join("filters.json"), r#"{"t1": {"tenants": [1]}}"#).unwrap();
    let o = engram(&[
        "bench",
        "ann",
        "--dataset",
        ds.to_str().unwrap(),
        "--ef",
        "64",
        "--only",
        "t1",
        "--json",
        "--quiet",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON report");
    let t1 = r["filters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f.to_string().contains("t1"))
        .unwrap_or_else(|| panic!("{r}"));
    assert_eq!(t1["eligible"], eligible.len(), "{t1}");
    let bad = engram(&[
        "bench",
        "ann",
        "--dataset",
        ds.to_str().unwrap(),
        "--hits",
        "text",
    ]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--hits"));
    // a run that can measure nothing is refused before it builds, and one
    // that measured nothing (a kept store whose deletions are applied has
    // no `none`) prints nothing on stdout, JSON or not
    let kept = dir.path().join("kept");
    let ann = |extra: &[&str]| {
        let mut args = vec![
            "bench",
            "ann",
            "--dataset",
            ds.to_str().unwrap(),
            "--store",
            kept.to_str().unwrap(),
            "--ef",
            "16",
            "-q",
        ];
        args.extend(extra);
        engram(&args)
    };
    let o = ann(&["--no-filters", "--only", "t1"]);
    assert!(!o.status.success() && o.stdout.is_empty());
    assert!(String::from_utf8_lossy(&o.stderr).contains("nothing to measure"));
    assert!(ann(&["--only", "t1"]).status.success());
    for json in [&[][..], &["--json"][..]] {
        let mut args = vec!["--only", "none"];
        args.extend(json);
        let o = ann(&args);
        assert!(!o.status.success(), "{json:?}");
        assert!(
            o.stdout.is_empty(),
            "{json:?}: {}",
            String::from_utf8_lossy(&o.stdout)
        );
        assert!(String::from_utf8_lossy(&o.stderr).contains("nothing measured"));
    }
}

/// `engram bench ingest` with vectors, with and without the background
/// indexer: every configuration acknowledges all its events, and the
/// graph is complete (built live, or after the last acknowledgement)
/// before the store closes.
#[test]
fn bench_ingest_with_vectors_runs_with_and_without_the_indexer() {
    for extra in [&[][..], &["--no-indexer"][..]] {
        let mut args = vec![
            "--embedder",
            "hash",
            "bench",
            "ingest",
            "--n",
            "300",
            "--writers",
            "4",
            "--batch",
            "100",
            "--batch-writers",
            "1",
            "--json",
            "-q",
        ];
        args.extend(extra);
        let o = engram(&args);
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let results = v["results"].as_array().unwrap();
        assert_eq!(results.len(), 2, "{v}");
        for r in results {
            assert_eq!(r["events"], 300, "{r}");
            assert!(r["events_per_s"].as_f64().unwrap() > 0.0, "{r}");
            assert!(r["index_catch_up_s"].as_f64().unwrap() >= 0.0, "{r}");
            // the disk's share of an acknowledgement, as a number
            let fsync = r["fsync_us_mean"].as_f64().expect("fsync_us_mean");
            assert!(fsync.is_finite() && fsync >= 0.0, "{r}");
            assert!(r["groups"].as_u64().unwrap() >= 1, "{r}");
        }
    }
}

#[test]
fn bench_open_refuses_more_tenants_than_records() {
    let dir = tempfile::tempdir().unwrap();
    let o = engram(&[
        "bench",
        "open",
        "--records",
        "10",
        "--tenants",
        "100",
        "--dir",
        dir.path().to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("--tenants 100 is more than --records 10"),
        "{err}"
    );
}

/// `--dir` of `bench open` and `bench recall` is written to only when it
/// is new, empty, or one the bench made: a user's store or files there are
/// never replaced.
#[test]
fn bench_dir_never_replaces_what_the_bench_did_not_make() {
    let tmp = tempfile::tempdir().unwrap();
    let victim = tmp.path().join("victim");
    let store = victim.join("store");
    let s = store.to_str().unwrap();
    assert!(engram(&["--data", s, "init"]).status.success());
    let mine = tmp.path().join("mine");
    std::fs::create_dir_all(mine.join("store")).unwrap();
    std::fs::write(mine.join("store").join("notes.txt"), "keep me").unwrap();
    for (bench, dir) in [("open", &victim), ("recall", &mine)] {
        let mut args = vec![
            "bench",
            bench,
            "--records",
            "200",
            "--tenants",
            "2",
            "--quiet",
            "--dir",
            dir.to_str().unwrap(),
        ];
        if bench == "recall" {
            args.push("--synthetic");
        }
        let o = engram(&args);
        assert!(!o.status.success(), "{bench}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("not empty") && err.contains("--dir"), "{err}");
    }
    assert!(store.join("ENGRAM").exists());
    assert_eq!(
        std::fs::read_to_string(mine.join("store").join("notes.txt")).unwrap(),
        "keep me"
    );
    assert!(!victim.join("bench-open.params").exists());
    // a file where the directory goes, and a link leading nowhere (here,
    // where a store's derived/ would hold it), are named as such, and
    // nothing is made where the link leads
    let file = tmp.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let dangling = tmp.path().join("dangling");
    let target = store.join("derived").join("gone");
    std::os::unix::fs::symlink(&target, &dangling).unwrap();
    for (dir, said) in [
        (&file, "a file, not a directory"),
        (&dangling, "a link that leads nowhere"),
    ] {
        for args in [
            &["bench", "open", "--records", "200", "--tenants", "2"][..],
            &["bench", "ingest", "--n", "10"][..],
        ] {
            let mut all = args.to_vec();
            all.extend(["--quiet", "--dir", dir.to_str().unwrap()]);
            let o = engram(&all);
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(
                !o.status.success() && err.contains("--dir") && err.contains(said),
                "{args:?}: {err}"
            );
        }
    }
    assert!(!target.exists());
    // a directory inside a store is refused before anything is written
    // there (a params file and a store were left in its derived/ and log/)
    let ds = tmp.path().join("ds");
    std::fs::create_dir(&ds).unwrap();
    write_dataset(&ds, 30, 2, 7);
    let before = walk(&store);
    for args in [
        vec![
            "bench",
            "open",
            "--records",
            "200",
            "--tenants",
            "2",
            "--dir",
        ],
        vec!["bench", "ingest", "--n", "10", "--dir"],
        vec!["bench", "ann", "--dataset", ds.to_str().unwrap(), "--store"],
    ] {
        let inner = store.join("derived").join("b");
        let mut all = args.clone();
        all.extend([inner.to_str().unwrap(), "--quiet"]);
        let o = engram(&all);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            !o.status.success() && err.contains("is inside the store at"),
            "{args:?}: {err}"
        );
        assert!(!inner.exists(), "{args:?}");
    }
    assert_eq!(before, walk(&store));
    // and a count past the benches' bound is refused before any work
    for args in [
        &["bench", "open", "--records", "100000000000"][..],
        &["bench", "ingest", "--n", "1000000000"][..],
        &["bench", "recall", "--synthetic", "--queries", "100000000"][..],
    ] {
        let o = engram(args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            !o.status.success() && err.contains("over the limit"),
            "{args:?}: {err}"
        );
    }
}

/// A `.npy` file of `shape` holding `data` (little-endian; `descr` is
/// numpy's dtype string, e.g. `<f4`).
fn npy(path: &std::path::Path, descr: &str, shape: &[usize], data: &[u8]) {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let shape = if dims.len() == 1 {
        format!("({},)", dims[0])
    } else {
        format!("({})", dims.join(", "))
    };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    std::fs::write(path, out).unwrap();
}

/// `engram bench ann` on an inconsistent dataset, or with too many
/// threads, says what is wrong before measuring anything, and never
/// panics.
#[test]
fn bench_ann_refuses_an_inconsistent_dataset() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (n, nq, dim) = (20usize, 3usize, 4usize);
    let f32s = |k: usize| -> Vec<u8> {
        (0..k)
            .flat_map(|i| ((i % 7) as f32 + 0.5).to_le_bytes())
            .collect()
    };
    let i32s = |v: &[i32]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
    npy(&d.join("base.npy"), "<f4", &[n, dim], &f32s(n * dim));
    npy(&d.join("queries.npy"), "<f4", &[nq, dim], &f32s(nq * dim));
    let run = |args: &[&str]| {
        let ds = d.to_str().unwrap();
        let mut all = vec!["bench", "ann", "--dataset", ds, "--quiet"];
        all.extend_from_slice(args);
        let o = engram(&all);
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        assert!(!o.status.success(), "{err}");
        assert!(!err.contains("panicked"), "{err}");
        err
    };
    // ground truth naming a row past the base rows
    let mut gt: Vec<i32> = (0..(nq * 10) as i32).map(|i| i % n as i32).collect();
    gt[5] = 500;
    npy(&d.join("gt.npy"), "<i4", &[nq, 10], &i32s(&gt));
    let err = run(&[]);
    assert!(err.contains("gt.npy names row 500"), "{err}");
    // fewer than 10 columns
    npy(&d.join("gt.npy"), "<i4", &[nq, 5], &i32s(&gt[..nq * 5]));
    let err = run(&[]);
    assert!(err.contains("at least 10 columns"), "{err}");
    // attributes for fewer rows than the base
    let good: Vec<i32> = (0..(nq * 10) as i32).map(|i| i % n as i32).collect();
    npy(&d.join("gt.npy"), "<i4", &[nq, 10], &i32s(&good));
    let attrs: Vec<u8> = (0..(n - 1) * 3).flat_map(|_| 0i64.to_le_bytes()).collect();
    npy(&d.join("attrs.npy"), "<i8", &[n - 1, 3], &attrs);
    let err = run(&[]);
    assert!(err.contains("attrs.npy must be [20, 3]"), "{err}");
    std::fs::remove_file(d.join("attrs.npy")).unwrap();
    let err = run(&["--threads", "100000"]);
    assert!(err.contains("--threads must be between 1 and 256"), "{err}");
    // fewer ground-truth rows than queries (it measured the first rows)
    npy(
        &d.join("gt.npy"),
        "<i4",
        &[nq - 1, 10],
        &i32s(&good[..(nq - 1) * 10]),
    );
    let err = run(&[]);
    assert!(err.contains("gt.npy has 2 row(s) for 3 quer"), "{err}");
    assert!(err.contains("--queries 2"), "{err}");
    // an `--only` naming no filter of filters.json, before any build
    npy(&d.join("gt.npy"), "<i4", &[nq, 10], &i32s(&good));
    std::fs::write(d.join("filters.json"), r#"{"t1": {"tenants": [1]}}"#).unwrap();
    let err = run(&["--only", "bogus"]);
    assert!(err.contains("no ground truth named 'bogus'"), "{err}");
    std::fs::remove_file(d.join("filters.json")).unwrap();
    // an ef no recall takes, before any build
    let err = run(&["--ef", "16,100000000"]);
    assert!(err.contains("--ef values must be at most"), "{err}");
    // a deleted flag other than 0 or 1
    let mut attrs: Vec<i64> = (0..n * 3).map(|_| 0).collect();
    attrs[4 * 3 + 2] = 7;
    let attrs: Vec<u8> = attrs.iter().flat_map(|x| x.to_le_bytes()).collect();
    npy(&d.join("attrs.npy"), "<i8", &[n, 3], &attrs);
    let err = run(&[]);
    assert!(err.contains("attrs.npy row 4: deleted is 7"), "{err}");
    // a timestamp no time holds (its milliseconds overflowed: a panic)
    let mut attrs: Vec<i64> = (0..n * 3).map(|_| 0).collect();
    attrs[5 * 3 + 1] = 10_000_000_000_000_000;
    let attrs: Vec<u8> = attrs.iter().flat_map(|x| x.to_le_bytes()).collect();
    npy(&d.join("attrs.npy"), "<i8", &[n, 3], &attrs);
    let err = run(&[]);
    assert!(
        err.contains("attrs.npy row 5: timestamp is 10000000000000000"),
        "{err}"
    );
    // a filter named as the unfiltered run
    let attrs: Vec<u8> = (0..n * 3).flat_map(|_| 0i64.to_le_bytes()).collect();
    npy(&d.join("attrs.npy"), "<i8", &[n, 3], &attrs);
    std::fs::write(d.join("filters.json"), r#"{"none": {"tenants": [1]}}"#).unwrap();
    let err = run(&[]);
    assert!(err.contains("a filter named 'none'"), "{err}");
    std::fs::remove_file(d.join("filters.json")).unwrap();
    std::fs::remove_file(d.join("attrs.npy")).unwrap();
    // a row the engine refuses is named by its file and row
    let mut q = f32s(nq * dim);
    q[dim * 4..dim * 8].fill(0);
    npy(&d.join("queries.npy"), "<f4", &[nq, dim], &q);
    let err = run(&[]);
    assert!(err.contains("queries.npy row 1: "), "{err}");
    assert!(err.contains("all components are zero"), "{err}");
    npy(&d.join("queries.npy"), "<f4", &[nq, dim], &f32s(nq * dim));
    let texts: String = (0..n)
        .map(|i| {
            format!(
                "{{\"id\": {i}, \"text\": \"{}\"}}\n",
                if i == 3 { "" } else { "t" }
            )
        })
        .collect();
    std::fs::write(d.join("base.jsonl"), texts).unwrap();
    let err = run(&[]);
    assert!(err.contains("dataset row 3 (base.npy, base.jsonl"), "{err}");
    std::fs::remove_file(d.join("base.jsonl")).unwrap();
    // graph parameters past any use, before any build
    let err = run(&["--m", "100000"]);
    assert!(err.contains("--m must be between 2 and 256"), "{err}");
    let err = run(&["--rounds", "1000000"]);
    assert!(err.contains("--rounds must be at most 1000"), "{err}");
    // a damaged text line, named by its number, and texts for fewer rows
    // (both were measured as rows without text)
    let lines: Vec<String> = (0..n)
        .map(|i| format!(r#"{{"id": {i}, "text": "row {i}"}}"#))
        .collect();
    let mut damaged = lines.clone();
    damaged[6] = r#"{"id": 6, "text": "row"#.into();
    std::fs::write(d.join("base.jsonl"), damaged.join("\n")).unwrap();
    let err = run(&[]);
    assert!(err.contains("base.jsonl line 7"), "{err}");
    std::fs::write(d.join("base.jsonl"), lines[..n - 1].join("\n")).unwrap();
    let err = run(&[]);
    assert!(
        err.contains("base.jsonl has 19 text line(s) for 20 base row(s)"),
        "{err}"
    );
    std::fs::remove_file(d.join("base.jsonl")).unwrap();
    // a NaN, named by file, row and component before anything is built
    let mut q = f32s(nq * dim);
    q[(dim + 2) * 4..(dim + 3) * 4].copy_from_slice(&f32::NAN.to_le_bytes());
    npy(&d.join("queries.npy"), "<f4", &[nq, dim], &q);
    let err = run(&[]);
    assert!(err.contains("queries.npy row 1, component 2"), "{err}");
}

/// A closed stdout (`engram bench open | true`) ends a command quietly:
/// the benches printed with `println!`, which panics on a broken pipe.
#[test]
fn a_closed_stdout_ends_a_bench_quietly() {
    use std::process::Stdio;
    for args in [
        &[
            "bench",
            "open",
            "--records",
            "100",
            "--tenants",
            "5",
            "--runs",
            "1",
            "-q",
        ][..],
        &[
            "bench",
            "recall",
            "--records",
            "240",
            "--tenants",
            "10",
            "--queries",
            "10",
            "--synthetic",
            "-q",
        ][..],
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_engram"))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let o = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(o.status.success(), "{args:?}: {:?} {err}", o.status);
    }
}

/// `bench ingest` writes exactly `--n` events per configuration (it
/// rounded up to a multiple of the writers), reports the appends it made
/// (a writer's share below the batch size), and `--batch-writers 0` runs
/// no batch configuration.
#[test]
fn bench_ingest_writes_n_events_and_reports_its_appends() {
    let run = |args: &[&str]| {
        let mut all = vec!["bench", "ingest", "--json", "-q"];
        all.extend_from_slice(args);
        let o = engram(&all);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v["results"].as_array().unwrap().clone()
    };
    let r = run(&["--n", "10", "--writers", "4", "--batch-writers", "0"]);
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(r[0]["events"], 10);
    assert_eq!(r[0]["batch"], 1);
    let r = run(&[
        "--n",
        "500",
        "--writers",
        "1",
        "--batch",
        "1000",
        "--batch-writers",
        "1,3",
    ]);
    assert_eq!(r.len(), 3, "{r:?}");
    assert_eq!(
        (r[1]["events"].clone(), r[1]["batch"].clone()),
        (500.into(), 500.into())
    );
    assert_eq!(
        (r[2]["events"].clone(), r[2]["batch"].clone()),
        (500.into(), 167.into())
    );
}

/// `bench ingest --dir D` makes each configuration's store in `D` and
/// removes it afterwards: a directory of that name already there (a store
/// of the user's) is refused before anything runs, and left as it was.
#[test]
fn bench_ingest_never_measures_or_removes_a_directory_it_did_not_make() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let theirs = dir.path().join("ingest-0-w1-b1");
    let store = theirs.to_str().unwrap();
    let made = engram(&["--data", store, "init"]);
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let before = std::fs::read_dir(&theirs).unwrap().count();
    let o = engram(&[
        "bench",
        "ingest",
        "--n",
        "5",
        "--writers",
        "1",
        "--batch-writers",
        "0",
        "--quiet",
        "--dir",
        d,
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("ingest-0-w1-b1 already exists"), "{err}");
    assert!(theirs.join("ENGRAM").exists(), "the store was removed");
    assert_eq!(std::fs::read_dir(&theirs).unwrap().count(), before);
    // a directory without it is measured, and left as it was found
    let empty = tempfile::tempdir().unwrap();
    let o = engram(&[
        "bench",
        "ingest",
        "--n",
        "5",
        "--writers",
        "1",
        "--batch-writers",
        "0",
        "--quiet",
        "--dir",
        empty.path().to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::read_dir(empty.path()).unwrap().count(), 0);
}

/// `bench ann --store` reuses a store only for the dataset it was built
/// from: one written again in place, same shape, is refused with why,
/// never measured against the old store's vectors.
#[test]
fn bench_ann_does_not_reuse_a_store_of_a_dataset_written_again() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    std::fs::create_dir(&data).unwrap();
    write_dataset(&data, 300, 5, 1);
    let store = tmp.path().join("kept");
    let run = || {
        engram(&[
            "bench",
            "ann",
            "--dataset",
            data.to_str().unwrap(),
            "--store",
            store.to_str().unwrap(),
            "--ef",
            "64",
            "--json",
            "--quiet",
        ])
    };
    let o = run();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = run();
    assert!(
        o.status.success(),
        "the store is reused: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    // past the file system's timestamp granularity
    std::thread::sleep(std::time::Duration::from_millis(20));
    write_dataset(&data, 300, 5, 2);
    let o = run();
    assert!(!o.status.success(), "a stale store was measured");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("written again"), "{err}");
}

/// Every path under `dir`, sorted.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p.clone());
            }
            out.push(p);
        }
    }
    out.sort();
    out
}
