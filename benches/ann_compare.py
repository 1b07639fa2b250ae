#!/usr/bin/env python3
"""Engram vs hnswlib vs FAISS on the same embeddings, in one run.

Engram is measured by `engram bench ann --json` (every query goes through the
same `recall` path users call: eligibility bitmap, planner, vector retriever,
fusion, hits with text). hnswlib and FAISS are measured here, from Python,
one query per call on one thread, with the same M and ef_construction.

Filtered ground truths (tenant_10pct, tenants_1pct, sel_0p1pct, live) are
compared against every peer method a user would pick, each given its
filter built once, outside the timed loop:
- FAISS HNSW with an IDSelectorBatch of the eligible ids (ef sweep);
- FAISS flat (exact) with the same selector;
- hnswlib with a filter callable (ef sweep; on the first 200 queries,
  since it calls Python for every node it visits);
- exact gather-scan in numpy: gather the eligible rows, one matrix-vector
  product, argpartition (per query, as a filter that changes would need);
- the same scan over rows gathered once ("pregathered": a materialised
  partition, shown for reference).
The filtered summary gives, per filter, Engram's best QPS at recall@10 >=
0.95 against the best peer's at the same recall.

Several datasets can be given (`--dataset` repeated); each is measured in
turn and the filtered summary covers all of them. A dataset directory that
does not exist but is named `.../minilm-<N>k` is made first with
benches/make_ann_dataset.py.

Usage (installs its own dependencies into benches/.venv on first run):
    python3 benches/ann_compare.py [--dataset ../shared/data/pypi-minilm-20k]
                                   [--dataset benches/results/minilm-200k]
                                   [--rounds 3] [--ef 16,32,64,128,256]
                                   [--repeat 1] [--engram-store DIR]

With `--repeat N`, Engram and every peer are measured N times in turn on
each dataset (the peers' indexes built once) and each configuration keeps
its best pass: on a shared machine a slow stretch then costs every method
alike instead of whichever ran during it.
"""

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PACKAGES = ["numpy", "hnswlib", "faiss-cpu"]


def ensure_venv():
    sys.path.insert(0, HERE)
    from benchvenv import ensure_venv as ensure
    ensure(PACKAGES)


def recall_at_10(found, gt):
    hit = total = 0
    for row, truth in zip(found, gt):
        t = {int(x) for x in truth[:10] if x >= 0}
        hit += len({int(x) for x in list(row)[:10] if x >= 0} & t)
        total += len(t)
    return hit / max(total, 1)


def timed(search, queries, rounds):
    """Best-of-rounds QPS, one query per call; returns (qps, found)."""
    best, found = None, None
    for _ in range(rounds):
        found = []
        t = time.perf_counter()
        for i in range(len(queries)):
            found.append(search(queries[i:i + 1]))
        s = time.perf_counter() - t
        best = s if best is None else min(best, s)
    return len(queries) / best, found


def run_dataset(d, args, efs):
    """Measures every library on one dataset; returns (n, rows)."""
    import numpy as np
    import faiss
    import hnswlib

    if not os.path.exists(d):
        base = os.path.basename(os.path.normpath(d))
        if base.startswith("minilm-") and base.endswith("k"):
            n = int(base[len("minilm-"):-1]) * 1000
            subprocess.check_call([sys.executable, os.path.join(HERE, "make_ann_dataset.py"),
                                   "--n", str(n), "--out", d])
        else:
            sys.exit(f"{d}: no such dataset")
    base = np.load(os.path.join(d, "base.npy")).astype("float32")
    queries = np.load(os.path.join(d, "queries.npy")).astype("float32")
    gt = np.load(os.path.join(d, "gt.npy"))
    n, dim = base.shape
    rows = []  # (filter, library, method, ef, recall, qps)
    dists = {}  # (library, ef) -> mean distance computations per query, unfiltered
    eng = None
    peers = None
    for rep in range(args.repeat):
        if args.repeat > 1:
            print(f"pass {rep + 1} of {args.repeat}", file=sys.stderr)
        e = measure_engram(d, args, rows, dists)
        eng = eng or e
        if peers is None:
            peers = build_peers(base, args)
        measure_peers(d, args, efs, base, queries, gt, peers, rows, dists)
    # every configuration's best pass, Engram's and the peers' alike
    best = {}
    for r in rows:
        key = r[:4]
        if key not in best or r[5] > best[key][5]:
            best[key] = r
    rows = list(best.values())
    h_build, f_build = peers[3], peers[4]
    report(d, args, efs, n, dim, queries, eng, rows, dists, h_build, f_build)
    return n, rows


def measure_engram(d, args, rows, dists):
    """One `engram bench ann` run: its rows and distance counts appended."""
    print(f"engram bench ann on {d} (rounds {args.rounds}) ...", file=sys.stderr)
    cmd = [args.engram, "bench", "ann", "--dataset", d, "--ef", args.ef, "--m", str(args.m),
           "--ef-construction", str(args.ef_construction), "--rounds", str(args.rounds), "--json",
           "--hits", "full,ids"]
    if args.engram_store:
        cmd += ["--store", os.path.join(args.engram_store, os.path.basename(os.path.normpath(d)))]
    out = subprocess.check_output(cmd)
    eng = json.loads(out)
    for f in eng["filters"]:
        for r in f["results"]:
            # "engram": hits with text read from the log (a recall's default);
            # "engram-ids": with_text false, ids, scores and the manifest,
            # as the peers return ids
            lib = "engram" if r.get("hits", "full") == "full" else "engram-ids"
            rows.append((f["filter"], lib, r["plan"], r["ef"], r["recall_at_10"], r["qps"]))
            if f["filter"] == "none" and lib == "engram":
                dists[("engram", r["ef"])] = r["distances_per_query"]
    return eng


def build_peers(base, args):
    """hnswlib and FAISS indexes over `base`: (hnswlib, faiss HNSW, faiss
    flat, hnswlib build seconds, faiss build seconds)."""
    import numpy as np
    import faiss
    import hnswlib

    n, dim = base.shape
    print("building hnswlib ...", file=sys.stderr)
    h = hnswlib.Index(space="ip", dim=dim)
    h.set_num_threads(1)
    t = time.perf_counter()
    h.init_index(max_elements=n, M=args.m, ef_construction=args.ef_construction, random_seed=100)
    h.add_items(base, np.arange(n))
    h_build = time.perf_counter() - t
    print("building faiss HNSW ...", file=sys.stderr)
    fh = faiss.IndexHNSWFlat(dim, args.m, faiss.METRIC_INNER_PRODUCT)
    fh.hnsw.efConstruction = args.ef_construction
    t = time.perf_counter()
    fh.add(base)
    f_build = time.perf_counter() - t
    flat = faiss.IndexFlatIP(dim)
    flat.add(base)
    return h, fh, flat, h_build, f_build


def measure_peers(d, args, efs, base, queries, gt, peers, rows, dists):
    """Every peer method on every filter: rows and distance counts appended."""
    import numpy as np
    import faiss

    n = base.shape[0]
    h, fh, flat = peers[0], peers[1], peers[2]
    for ef in efs:
        h.set_ef(ef)
        qps, found = timed(lambda q: h.knn_query(q, k=10)[0][0], queries, args.rounds)
        rows.append(("none", "hnswlib", "hnsw", ef, recall_at_10(found, gt), qps))
        fh.hnsw.efSearch = ef
        faiss.cvar.hnsw_stats.reset()
        qps, found = timed(lambda q: fh.search(q, 10)[1][0], queries, args.rounds)
        dists[("faiss", ef)] = faiss.cvar.hnsw_stats.ndis / (len(queries) * args.rounds)
        rows.append(("none", "faiss", "hnsw", ef, recall_at_10(found, gt), qps))

    filters = json.load(open(os.path.join(d, "filters.json")))
    for name in sorted(filters):
        gpath = os.path.join(d, f"gt_{name}.npy")
        ipath = os.path.join(d, f"filter_{name}_ids.npy")
        if not (os.path.exists(gpath) and os.path.exists(ipath)):
            continue
        print(f"peers on filter {name} ...", file=sys.stderr)
        fgt = np.load(gpath)
        ids = np.load(ipath).astype("int64")
        sel = faiss.IDSelectorBatch(ids)
        for ef in efs:
            params = faiss.SearchParametersHNSW(sel=sel, efSearch=ef)
            qps, found = timed(lambda q: fh.search(q, 10, params=params)[1][0], queries, args.rounds)
            rows.append((name, "faiss", "hnsw+selector", ef, recall_at_10(found, fgt), qps))
        params = faiss.SearchParameters(sel=sel)
        qps, found = timed(lambda q: flat.search(q, 10, params=params)[1][0], queries, args.rounds)
        rows.append((name, "faiss", "flat+selector", 0, recall_at_10(found, fgt), qps))
        if name != "live":
            allowed = np.zeros(n, dtype=bool)
            allowed[ids] = True
            allowed_list = allowed.tolist()
            hfilter = allowed_list.__getitem__
            # hnswlib calls the Python filter for every node it visits,
            # which at low selectivity is most of the graph: measured on
            # the first --hnswlib-filter-queries queries to bound the run
            hq = args.hnswlib_filter_queries
            for ef in efs:
                h.set_ef(max(ef, 10))
                qps, found = timed(lambda q: h.knn_query(q, k=10, filter=hfilter)[0][0], queries[:hq], args.rounds)
                rows.append((name, "hnswlib", "hnsw+filter", ef, recall_at_10(found, fgt[:hq]), qps))
        k = min(10, len(ids))

        def gather_scan(q, ids=ids, k=k):
            sims = base[ids] @ q[0]
            top = np.argpartition(-sims, k - 1)[:k]
            return ids[top[np.argsort(-sims[top])]]
        qps, found = timed(gather_scan, queries, args.rounds)
        rows.append((name, "numpy", "gather-scan", 0, recall_at_10(found, fgt), qps))
        sub = base[ids]

        def pregathered_scan(q, ids=ids, sub=sub, k=k):
            sims = sub @ q[0]
            top = np.argpartition(-sims, k - 1)[:k]
            return ids[top[np.argsort(-sims[top])]]
        qps, found = timed(pregathered_scan, queries, args.rounds)
        rows.append((name, "numpy", "pregathered", 0, recall_at_10(found, fgt), qps))


def report(d, args, efs, n, dim, queries, eng, rows, dists, h_build, f_build):
    """Prints one dataset's tables."""
    print()
    print(f"dataset {d}: n={n} dim={dim} queries={len(queries)} M={args.m} ef_construction={args.ef_construction}; "
          f"one query per call, one thread, best of {args.rounds} rounds"
          + (f" in each of {args.repeat} passes" if args.repeat > 1 else ""))
    print(f"build seconds: engram {eng['build_seconds']:.1f} (ingest {eng['ingest_seconds']:.1f}, durable, then graph), "
          f"hnswlib {h_build:.1f}, faiss {f_build:.1f}; engram graph bytes/vector {eng['index_bytes_per_vector']:.0f}")
    print()
    print(f"{'filter':<14} {'library':<8} {'method':<14} {'ef':>4} {'recall@10':>10} {'QPS':>9}")
    for r in rows:
        print(f"{r[0]:<14} {r[1]:<8} {r[2]:<14} {r[3]:>4} {r[4]:>10.4f} {r[5]:>9.0f}")

    print()
    print("unfiltered search work: mean distance computations per query, and microseconds per query")
    print(f"{'ef':>4} {'engram dist/q':>14} {'us/q':>7} {'faiss dist/q':>13} {'us/q':>7}")
    for ef in efs:
        e = next((r for r in rows if r[0] == "none" and r[1] == "engram" and r[3] == ef), None)
        f = next(r for r in rows if r[0] == "none" and r[1] == "faiss" and r[3] == ef)
        if e is None:
            continue
        print(f"{ef:>4} {dists.get(('engram', ef), 0):>14.0f} {1e6 / e[5]:>7.0f} "
              f"{dists.get(('faiss', ef), 0):>13.0f} {1e6 / f[5]:>7.0f}")

    print()
    print("at equal recall: for each Engram configuration, the fastest competitor configuration reaching at least its recall")
    print(f"{'filter':<14} {'hits':<10} {'ef':>4} {'recall':>7} {'engram QPS':>10} {'competitor':<22} {'QPS':>9} {'ratio':>6}")
    for (flt, lib, meth, ef, rc, q) in rows:
        if not lib.startswith("engram"):
            continue
        hits = "ids" if lib == "engram-ids" else "full"
        best = best_peer(rows, flt, rc)
        if best is None:
            print(f"{flt:<14} {hits:<10} {ef:>4} {rc:>7.4f} {q:>10.0f} {'(none reaches it)':<22}")
        else:
            print(f"{flt:<14} {hits:<10} {ef:>4} {rc:>7.4f} {q:>10.0f} {best[0]:<22} {best[1]:>9.0f} {q / best[1]:>5.2f}x")


PEERS = [("hnswlib", "hnsw"), ("hnswlib", "hnsw+filter"), ("faiss", "hnsw"), ("faiss", "hnsw+selector"),
         ("faiss", "flat+selector"), ("numpy", "gather-scan")]


def best_peer(rows, flt, target, peers=PEERS):
    """The fastest peer configuration on `flt` reaching `target` recall: (name, qps)."""
    best = None
    for lib, meth in peers:
        ok = [r[5] for r in rows if r[0] == flt and r[1] == lib and r[2] == meth and r[4] >= target - 1e-9]
        if ok and (best is None or max(ok) > best[1]):
            best = (f"{lib} {meth}", max(ok))
    return best


def main():
    ensure_venv()
    import faiss

    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", action="append")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=1,
                    help="measure Engram and every peer this many times in turn and keep each "
                    "configuration's best pass (a slow stretch of a shared machine then costs "
                    "every method alike)")
    ap.add_argument("--ef", default="16,32,64,128,256")
    ap.add_argument("--m", type=int, default=16)
    ap.add_argument("--ef-construction", type=int, default=200)
    ap.add_argument("--engram", default=os.path.join(ROOT, "target", "release", "engram"))
    ap.add_argument("--hnswlib-filter-queries", type=int, default=200,
                    help="queries measured with hnswlib's Python filter callable (slow at low selectivity)")
    ap.add_argument("--engram-store", help="keep Engram's stores under this directory and reuse them "
                    "(`engram bench ann --store`; skips Engram's ingest and graph build, and `none` once "
                    "the dataset's deletions were applied)")
    args = ap.parse_args()
    datasets = args.dataset or [os.path.join(ROOT, "..", "shared", "data", "pypi-minilm-20k")]
    efs = [int(x) for x in args.ef.split(",")]
    faiss.omp_set_num_threads(1)
    if not os.path.exists(args.engram):
        subprocess.check_call(["cargo", "build", "--release", "--quiet"], cwd=ROOT)

    summary = []
    for d in datasets:
        n, rows = run_dataset(d, args, efs)
        summary.append((n, rows))

    print()
    print("filtered search at recall@10 >= 0.95: Engram's best QPS against the best peer method's "
          "(peers: " + ", ".join(f"{l} {m}" for l, m in PEERS) + ")")
    print("(hits: `full` = records with text read from the log, a recall's default; `ids` = with_text "
          "false: ids, scores and the manifest, as the peers return ids)")
    print(f"{'n':>8} {'filter':<14} {'hits':<5} {'engram QPS':>10} {'recall':>7} {'best peer':<22} {'QPS':>9} {'recall':>7} {'ratio':>6}"
          f"  {'pregathered QPS':>15}")
    for n, rows in summary:
        for flt in sorted({r[0] for r in rows if r[0] != "none"}):
            for lib, hits in (("engram", "full"), ("engram-ids", "ids")):
                mine = [r for r in rows if r[0] == flt and r[1] == lib and r[4] >= 0.95]
                if not mine:
                    if any(r[1] == lib for r in rows):
                        print(f"{n:>8} {flt:<14} {hits:<5} {'(none at 0.95)':>10}")
                    continue
                e = max(mine, key=lambda r: r[5])
                b = best_peer(rows, flt, 0.95)
                pre = next((r[5] for r in rows if r[0] == flt and r[2] == "pregathered"), None)
                pre_s = f"{pre:>15.0f}" if pre else f"{'':>15}"
                if b is None:
                    print(f"{n:>8} {flt:<14} {hits:<5} {e[5]:>10.0f} {e[4]:>7.4f} {'(none reaches 0.95)':<22} {'':>9} {'':>7} {'':>6}  {pre_s}")
                    continue
                peer_rc = max(r[4] for r in rows if r[0] == flt and f"{r[1]} {r[2]}" == b[0] and r[5] == b[1])
                print(f"{n:>8} {flt:<14} {hits:<5} {e[5]:>10.0f} {e[4]:>7.4f} {b[0]:<22} {b[1]:>9.0f} {peer_rc:>7.4f} "
                      f"{e[5] / b[1]:>5.2f}x  {pre_s}")


if __name__ == "__main__":
    main()
