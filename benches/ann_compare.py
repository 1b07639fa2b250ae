#!/usr/bin/env python3
"""Engram vs hnswlib vs FAISS on the same embeddings, in one run.

Engram is measured by `engram bench ann --json` (every query goes through the
same `recall` path users call: eligibility bitmap, planner, vector retriever,
fusion, hits with text). hnswlib and FAISS are measured here, from Python,
one query per call on one thread, with the same M and ef_construction.

Filtered ground truths (tenant_10pct, tenants_1pct, sel_0p1pct, live) are
compared against FAISS with an IDSelectorBatch of the eligible ids, both on
its HNSW index and on an exact (flat) index; the table shows, for each
filter, the best FAISS method that reaches Engram's recall.

Usage (installs its own dependencies into benches/.venv on first run):
    python3 benches/ann_compare.py [--dataset ../shared/data/pypi-minilm-20k]
                                   [--rounds 3] [--ef 16,32,64,128,256]
"""

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
VENV = os.path.join(HERE, ".venv")
PACKAGES = ["numpy", "hnswlib", "faiss-cpu"]


def ensure_venv():
    py = os.path.join(VENV, "bin", "python")
    if os.path.abspath(sys.executable) == os.path.abspath(py):
        return
    if not os.path.exists(py):
        print(f"creating {VENV} with {', '.join(PACKAGES)} ...", file=sys.stderr)
        subprocess.check_call([sys.executable, "-m", "venv", VENV])
        subprocess.check_call([py, "-m", "pip", "install", "--quiet", "--upgrade", "pip"])
        subprocess.check_call([py, "-m", "pip", "install", "--quiet"] + PACKAGES)
    os.execv(py, [py] + sys.argv)


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


def main():
    ensure_venv()
    import numpy as np
    import faiss
    import hnswlib

    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", default=os.path.join(ROOT, "..", "shared", "data", "pypi-minilm-20k"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ef", default="16,32,64,128,256")
    ap.add_argument("--m", type=int, default=16)
    ap.add_argument("--ef-construction", type=int, default=200)
    ap.add_argument("--engram", default=os.path.join(ROOT, "target", "release", "engram"))
    args = ap.parse_args()
    efs = [int(x) for x in args.ef.split(",")]
    d = args.dataset
    faiss.omp_set_num_threads(1)

    if not os.path.exists(args.engram):
        subprocess.check_call(["cargo", "build", "--release", "--quiet"], cwd=ROOT)
    print(f"engram bench ann (rounds {args.rounds}) ...", file=sys.stderr)
    out = subprocess.check_output(
        [args.engram, "bench", "ann", "--dataset", d, "--ef", args.ef, "--m", str(args.m),
         "--ef-construction", str(args.ef_construction), "--rounds", str(args.rounds), "--json"])
    eng = json.loads(out)

    base = np.load(os.path.join(d, "base.npy")).astype("float32")
    queries = np.load(os.path.join(d, "queries.npy")).astype("float32")
    gt = np.load(os.path.join(d, "gt.npy"))
    n, dim = base.shape
    rows = []  # (filter, library, method, ef, recall, qps)
    dists = {}  # (library, ef) -> mean distance computations per query, unfiltered
    for f in eng["filters"]:
        for r in f["results"]:
            rows.append((f["filter"], "engram", r["plan"], r["ef"], r["recall_at_10"], r["qps"]))
            if f["filter"] == "none":
                dists[("engram", r["ef"])] = r["distances_per_query"]

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

    print()
    print(f"dataset {d}: n={n} dim={dim} queries={len(queries)} M={args.m} ef_construction={args.ef_construction}; "
          f"one query per call, one thread, best of {args.rounds} rounds")
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
        e = next(r for r in rows if r[0] == "none" and r[1] == "engram" and r[3] == ef)
        f = next(r for r in rows if r[0] == "none" and r[1] == "faiss" and r[3] == ef)
        print(f"{ef:>4} {dists.get(('engram', ef), 0):>14.0f} {1e6 / e[5]:>7.0f} "
              f"{dists.get(('faiss', ef), 0):>13.0f} {1e6 / f[5]:>7.0f}")

    def qps_at(lib_rows, target):
        """Best QPS among configurations reaching `target` recall."""
        ok = [q for (_, _, _, _, rc, q) in lib_rows if rc >= target - 1e-9]
        return max(ok) if ok else None

    print()
    print("at equal recall: for each Engram configuration, the fastest competitor configuration reaching at least its recall")
    print(f"{'filter':<14} {'ef':>4} {'recall':>7} {'engram QPS':>10} {'competitor':<22} {'QPS':>9} {'ratio':>6}")
    for (flt, lib, meth, ef, rc, q) in rows:
        if lib != "engram":
            continue
        best = None
        for lib2 in ("hnswlib", "faiss"):
            for meth2 in ("hnsw", "hnsw+selector", "flat+selector"):
                cand = [r for r in rows if r[0] == flt and r[1] == lib2 and r[2] == meth2]
                v = qps_at(cand, rc)
                if v is not None and (best is None or v > best[1]):
                    best = (f"{lib2} {meth2}", v)
        if best is None:
            print(f"{flt:<14} {ef:>4} {rc:>7.4f} {q:>10.0f} {'(none reaches it)':<22}")
        else:
            print(f"{flt:<14} {ef:>4} {rc:>7.4f} {q:>10.0f} {best[0]:<22} {best[1]:>9.0f} {q / best[1]:>5.2f}x")


if __name__ == "__main__":
    main()
