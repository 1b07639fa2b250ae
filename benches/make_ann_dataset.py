#!/usr/bin/env python3
"""Grows the 20k real-embedding set into a larger one with the same layout.

Output: a dataset directory that `engram bench ann --dataset` and
`benches/ann_compare.py --dataset` read (base.npy, queries.npy, gt.npy,
attrs.npy, filters.json, gt_<filter>.npy, filter_<filter>_ids.npy,
base.jsonl, info.json).

How the vectors are made (documented in docs/benchmarks.md):
- rows 0..19999 are the real MiniLM vectors of ../shared/data/pypi-minilm-20k,
  with their real attributes;
- every further row is a point between a real row `a` and one of its 10
  nearest real neighbours `b`, plus isotropic noise, on the unit sphere:
  `normalise((1 - t) a + t b + sigma g)`, `t ~ U(0, 0.5)`, `g ~ N(0, I / d)`,
  `sigma = 0.35`. The new points lie where the real text lies (between
  related summaries), are not duplicates, and grow density the way more
  text of the same kind would; its text is row `a`'s text;
- the queries are the real 1,000 queries; ground truths are exact (inner
  product over every eligible row, numpy);
- attributes follow the 20k set's recipe (tenant Zipf-like over 1,000
  tenants with P(k) ~ (k+1)^-0.9; timestamps continue with exponential
  gaps of mean 315 s; 2% deleted), so the same filter definitions have the
  same selectivity: `tenant_10pct` (tenant 0), `tenants_1pct` (the same 24
  tenants), `sel_0p1pct` (tenant 10 from the timestamp that leaves 0.1% of
  the rows), `live`.

Usage (installs numpy into benches/.venv on first run):
    python3 benches/make_ann_dataset.py --n 200000 [--out benches/results/minilm-200k]
"""

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PACKAGES = ["numpy", "hnswlib", "faiss-cpu"]


def ensure_venv():
    sys.path.insert(0, HERE)
    from benchvenv import ensure_venv as ensure
    ensure(PACKAGES)


def top_k(queries, base, eligible, k):
    """Exact top-k by inner product among `eligible` row ids (-1 pads)."""
    import numpy as np
    q = len(queries)
    ids = np.full((q, k), -1, dtype=np.int32)
    scores = np.full((q, k), -np.inf, dtype=np.float32)
    sub = base[eligible]
    kk = min(k, len(eligible))
    for s in range(0, q, 100):
        sims = queries[s:s + 100] @ sub.T
        part = np.argpartition(-sims, kk - 1, axis=1)[:, :kk]
        ps = np.take_along_axis(sims, part, axis=1)
        order = np.argsort(-ps, axis=1, kind="stable")
        part = np.take_along_axis(part, order, axis=1)
        ids[s:s + 100, :kk] = eligible[part]
        scores[s:s + 100, :kk] = np.take_along_axis(ps, order, axis=1)
    return ids, scores


def main():
    ensure_venv()
    import numpy as np

    ap = argparse.ArgumentParser()
    ap.add_argument("--source", default=os.path.join(ROOT, "..", "shared", "data", "pypi-minilm-20k"))
    ap.add_argument("--n", type=int, default=200000)
    ap.add_argument("--out", default=None)
    ap.add_argument("--sigma", type=float, default=0.35)
    ap.add_argument("--seed", type=int, default=20261201)
    args = ap.parse_args()
    out = args.out or os.path.join(HERE, "results", f"minilm-{args.n // 1000}k")
    os.makedirs(out, exist_ok=True)
    src = args.source
    base = np.load(os.path.join(src, "base.npy")).astype(np.float32)
    queries = np.load(os.path.join(src, "queries.npy")).astype(np.float32)
    attrs = np.load(os.path.join(src, "attrs.npy"))
    texts = [json.loads(l)["text"] for l in open(os.path.join(src, "base.jsonl"))]
    n0, dim = base.shape
    n = max(args.n, n0)
    rng = np.random.default_rng(args.seed)

    print(f"nearest neighbours of the {n0} real rows ...", file=sys.stderr)
    nn = np.zeros((n0, 10), dtype=np.int64)
    for s in range(0, n0, 1000):
        sims = base[s:s + 1000] @ base.T
        sims[np.arange(len(sims)), np.arange(s, s + len(sims))] = -np.inf
        nn[s:s + 1000] = np.argpartition(-sims, 9, axis=1)[:, :10]

    extra = n - n0
    print(f"{extra} synthetic rows ...", file=sys.stderr)
    a = rng.integers(0, n0, extra)
    b = nn[a, rng.integers(0, 10, extra)]
    t = rng.uniform(0.0, 0.5, extra).astype(np.float32)[:, None]
    g = rng.standard_normal((extra, dim)).astype(np.float32) / np.sqrt(dim)
    v = (1 - t) * base[a] + t * base[b] + args.sigma * g
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    full = np.concatenate([base, v.astype(np.float32)])

    tenants = np.arange(1000)
    p = (tenants + 1.0) ** -0.9
    p /= p.sum()
    new_attrs = np.zeros((extra, 3), dtype=np.int64)
    new_attrs[:, 0] = rng.choice(tenants, extra, p=p)
    new_attrs[:, 1] = attrs[-1, 1] + np.cumsum(rng.exponential(315.0, extra)).astype(np.int64) + 1
    new_attrs[:, 2] = (rng.uniform(0, 1, extra) < 0.02).astype(np.int64)
    all_attrs = np.concatenate([attrs, new_attrs])

    np.save(os.path.join(out, "base.npy"), full)
    np.save(os.path.join(out, "queries.npy"), queries)
    np.save(os.path.join(out, "attrs.npy"), all_attrs)
    with open(os.path.join(out, "base.jsonl"), "w") as f:
        for i in range(n):
            text = texts[i] if i < n0 else texts[a[i - n0]]
            f.write(json.dumps({"id": i, "text": text}) + "\n")

    print("ground truths ...", file=sys.stderr)
    ids, sc = top_k(queries, full, np.arange(n), 100)
    np.save(os.path.join(out, "gt.npy"), ids)
    np.save(os.path.join(out, "gt_scores.npy"), sc)

    tenant, ts, deleted = all_attrs[:, 0], all_attrs[:, 1], all_attrs[:, 2]
    live = deleted == 0
    src_filters = json.load(open(os.path.join(src, "filters.json")))
    one_pct = src_filters["tenants_1pct"]["tenants"]
    t10 = np.sort(ts[(tenant == 10) & live])
    want = max(1, round(n * 0.001))
    ts_min = int(t10[max(0, len(t10) - want)])
    defs = {
        "tenant_10pct": ("tenant == 0 AND deleted == 0", [0], None, (tenant == 0) & live),
        "tenants_1pct": (f"tenant IN {one_pct} AND deleted == 0", one_pct, None,
                         np.isin(tenant, one_pct) & live),
        "sel_0p1pct": (f"tenant == 10 AND ts >= {ts_min} AND deleted == 0", [10], ts_min,
                       (tenant == 10) & (ts >= ts_min) & live),
        "live": ("deleted == 0", None, None, live),
    }
    filters = {}
    for name, (pred, tl, tmin, mask) in defs.items():
        elig = np.flatnonzero(mask).astype(np.int32)
        d = {"predicate": pred}
        if tl is not None:
            d["tenants"] = tl
        if tmin is not None:
            d["ts_min"] = tmin
        d["n_eligible"] = int(len(elig))
        d["selectivity"] = round(len(elig) / n, 5)
        filters[name] = d
        np.save(os.path.join(out, f"filter_{name}_ids.npy"), elig)
        fi, fs = top_k(queries, full, elig, 100)
        np.save(os.path.join(out, f"gt_{name}.npy"), fi)
        np.save(os.path.join(out, f"gt_{name}_scores.npy"), fs)
        print(f"  {name}: {len(elig)} eligible ({len(elig) / n:.4%})", file=sys.stderr)
    json.dump(filters, open(os.path.join(out, "filters.json"), "w"), indent=1)

    # How close the neighbourhoods are, real against grown (the top-1 and
    # top-10 inner products of the queries): growth should raise them a
    # little, as more text of the same kind would.
    real_gt = np.load(os.path.join(src, "gt_scores.npy"))
    stats = {
        "real_20k_top1_mean": float(real_gt[:, 0].mean()),
        "real_20k_top10_mean": float(real_gt[:, 9].mean()),
        f"grown_{n}_top1_mean": float(sc[:, 0].mean()),
        f"grown_{n}_top10_mean": float(sc[:, 9].mean()),
        "synthetic_share_of_top10": float((ids[:, :10] >= n0).mean()),
    }
    info = {
        "name": os.path.basename(out),
        "n_base": n,
        "n_queries": len(queries),
        "dim": dim,
        "metric": "ip",
        "generator": "benches/make_ann_dataset.py",
        "args": vars(args),
        "recipe": "rows < 20000 real; others normalise((1-t) a + t b + sigma g), b among a's 10 nearest real rows",
        "neighbourhoods": stats,
        "filters": filters,
    }
    json.dump(info, open(os.path.join(out, "info.json"), "w"), indent=1)
    print(json.dumps(stats, indent=1))
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
