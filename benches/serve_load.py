#!/usr/bin/env python3
"""engram serve vs Chroma's server under concurrent load, on the same data.

Both servers get the 20,000 MiniLM vectors of pypi-minilm-20k with their
texts and a tenant-like scope attribute (Engram: scope ``user = "t<tenant>"``
in one tenant, loaded through the bulk endpoint; Chroma: metadata
``tenant``, collection with ``hnsw:space = ip``, ``hnsw:M = 16``,
``hnsw:construction_ef = 200``). The dataset's 2% deleted rows are deleted
on both sides after loading (Engram: lifecycle deletions over HTTP; Chroma:
``delete``), so the dataset's filtered ground truths apply; the script also
computes the exact filtered top-10 with numpy and checks them.

Then, over loopback, for 1, 16, 64 and 256 concurrent keep-alive
connections, ``--duration`` seconds each:

- ``queries``: filtered vector recall only (k=10; the filter alternates
  between tenant 0, ~10% of rows, and a 24-tenant list, ~1%), the same
  request on both sides: the queries/s comparison;
- ``mix``: 20% durable single-record appends, 40% filtered vector recalls,
  40% hybrid recalls (Engram: text + vector, fused with BM25; Chroma has no
  lexical retriever to fuse in its local server, so its share goes to
  filtered vector queries);
- ``appends``: durable single-record appends only, at 64 connections,
  each record with its 384-d vector (both systems);
- ``appends_text``: the same without a vector (Engram only: Chroma needs an
  embedding), like the events of ``engram bench ingest``.

Reported per phase: requests/s, p50/p95/p99 latency per operation, errors
(any non-2xx or transport failure), the server's CPU and RSS (from /proc),
and the load generator's own CPU: above ~0.9 of a core the single-threaded
client is the bottleneck, and the phase says so.

Filtered recall@10 is measured for both on the 1,000 queries at both
filters (before any append). ``engram bench ingest --writers 16`` runs in
the same session for the embedded durable-append figure.

The load generator is one asyncio process. ``--client raw`` (default)
speaks HTTP/1.1 over asyncio streams with pre-encoded requests (tens of µs
of client CPU per request); ``--client httpx`` uses ``httpx.AsyncClient``
with keep-alive (several hundred µs per request, so on 2 shared cores it
measures mostly itself).

Usage (benches/serve_load.sh creates benches/.venv with httpx, numpy and
chromadb first):
    benches/serve_load.sh [--duration 15] [--conns 1,16,64,256] [--client raw|httpx]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import itertools
import json
import os
import random
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
VENV = os.path.join(HERE, ".venv")

TENANT_10PCT = [0]
TENANTS_1PCT = [109, 135, 180, 200, 282, 348, 354, 422, 481, 494, 497, 526, 592, 663, 685,
                738, 756, 759, 830, 869, 904, 929, 968, 987]
FILTERS = {"tenant_10pct": TENANT_10PCT, "tenants_1pct": TENANTS_1PCT}
APPEND_TENANT = 100_000  # appended records' scope: outside every query filter
SEQ = itertools.count(1)  # external ids of appended records, unique over the run
MODEL = "minilm"
K = 10


def log(*a: Any) -> None:
    print(*a, file=sys.stderr, flush=True)


# --- processes -------------------------------------------------------------------


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def proc_stats(pid: int) -> Tuple[float, int, int]:
    """(CPU seconds, RSS bytes, peak RSS bytes) of a process from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    cpu = (int(parts[11]) + int(parts[12])) / tick
    rss = hwm = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
            elif line.startswith("VmHWM:"):
                hwm = int(line.split()[1]) * 1024
    return cpu, rss, hwm


def client_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class Engram:
    """``engram serve`` on a fresh store."""

    name = "engram"

    def __init__(self, binary: str, work: str) -> None:
        self.binary = binary
        self.data = os.path.join(work, "engram-store")
        self.run("init")
        self.key = self.run("keys", "create", "--tenant", "bench", "--principal", "loader",
                            "--role", "admin").strip()
        cfg = os.path.join(work, "engram.toml")
        with open(cfg, "w") as f:
            # Let requests wait for a writer or reader slot instead of the
            # default immediate 429 beyond 64 appends in flight, so that 256
            # connections are served rather than refused.
            f.write("[limits]\nappend_queue_wait_ms = 5000\nquery_queue_wait_ms = 5000\n")
        self.log = open(os.path.join(work, "engram-serve.log"), "wb")
        self.proc = subprocess.Popen(
            [binary, "--data", self.data, "serve", "--listen", "127.0.0.1:0", "--config", cfg],
            stdout=subprocess.PIPE, stderr=self.log, stdin=subprocess.DEVNULL)
        line = self.proc.stdout.readline().decode().strip()
        if not line.startswith("listening on http://"):
            raise RuntimeError(f"engram serve did not start: {line!r}")
        host, port = line[len("listening on http://"):].rsplit(":", 1)
        self.host, self.port = host, int(port)
        self.pid = self.proc.pid

    def run(self, *args: str) -> str:
        out = subprocess.run([self.binary, "--data", self.data, *args], capture_output=True,
                             text=True)
        if out.returncode:
            raise RuntimeError(f"engram {args}: {out.stderr}")
        return out.stdout

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


class Chroma:
    """``chroma run`` on a fresh directory."""

    name = "chroma"

    def __init__(self, work: str) -> None:
        self.host, self.port = "127.0.0.1", free_port()
        path = os.path.join(work, "chroma-data")
        self.log = open(os.path.join(work, "chroma.log"), "wb")
        exe = os.path.join(os.path.dirname(sys.executable), "chroma")
        self.proc = subprocess.Popen([exe, "run", "--path", path, "--host", self.host,
                                      "--port", str(self.port)],
                                     stdout=self.log, stderr=self.log, stdin=subprocess.DEVNULL)
        self.pid = self.proc.pid
        import httpx

        deadline = time.time() + 60
        while True:
            try:
                if httpx.get(f"http://{self.host}:{self.port}/api/v2/heartbeat").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.time() > deadline or self.proc.poll() is not None:
                raise RuntimeError("chroma run did not start; see chroma.log")
            time.sleep(0.2)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


# --- HTTP load clients -------------------------------------------------------------


class RawConn:
    """One keep-alive HTTP/1.1 connection over asyncio streams; requests
    are pre-encoded bytes. Minimal: Content-Length or chunked answers."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.r: Optional[asyncio.StreamReader] = None
        self.w: Optional[asyncio.StreamWriter] = None

    async def connect(self) -> None:
        self.r, self.w = await asyncio.open_connection(self.host, self.port, limit=1 << 22)
        sock = self.w.get_extra_info("socket")
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    async def request(self, raw: bytes) -> Tuple[int, bytes]:
        if self.w is None:
            await self.connect()
        assert self.r is not None and self.w is not None
        self.w.write(raw)
        head = await self.r.readuntil(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        status = int(lines[0].split(b" ", 2)[1])
        length, chunked, close = None, False, False
        for h in lines[1:]:
            k, _, v = h.partition(b":")
            k = k.strip().lower()
            if k == b"content-length":
                length = int(v)
            elif k == b"transfer-encoding" and b"chunked" in v.lower():
                chunked = True
            elif k == b"connection" and b"close" in v.lower():
                close = True
        if chunked:
            parts = []
            while True:
                size = int((await self.r.readuntil(b"\r\n")).split(b";")[0], 16)
                if size == 0:
                    await self.r.readuntil(b"\r\n")
                    break
                parts.append(await self.r.readexactly(size))
                await self.r.readexactly(2)
            body = b"".join(parts)
        else:
            body = await self.r.readexactly(length or 0)
        if close:
            self.close()
        return status, body

    def close(self) -> None:
        if self.w is not None:
            self.w.close()
        self.r = self.w = None


def encode_request(host: str, port: int, method: str, path: str, body: bytes,
                   key: Optional[str]) -> bytes:
    auth = f"Authorization: Bearer {key}\r\n" if key else ""
    return (f"{method} {path} HTTP/1.1\r\nHost: {host}:{port}\r\n{auth}"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            ).encode() + body


@dataclass
class Op:
    """An operation kind of the load: how to build its next request."""

    name: str
    weight: float
    make: Callable[[random.Random, int], Tuple[str, bytes]]
    """(path, body) for the next request, given an RNG and a sequence number."""


@dataclass
class PhaseResult:
    system: str
    phase: str
    conns: int
    seconds: float
    lat: Dict[str, List[float]] = field(default_factory=dict)
    errors: Dict[str, int] = field(default_factory=dict)
    client_cpu: float = 0.0
    server_cpu: float = 0.0
    rss: int = 0
    hwm: int = 0

    def summary(self) -> Dict[str, Any]:
        import numpy as np

        ops = {}
        total = 0
        for name, xs in self.lat.items():
            a = np.array(xs) * 1000.0
            total += len(xs)
            ops[name] = {
                "count": len(xs),
                "per_s": len(xs) / self.seconds,
                "p50_ms": float(np.percentile(a, 50)) if len(a) else None,
                "p95_ms": float(np.percentile(a, 95)) if len(a) else None,
                "p99_ms": float(np.percentile(a, 99)) if len(a) else None,
            }
        return {
            "system": self.system, "phase": self.phase, "conns": self.conns,
            "seconds": self.seconds, "requests_per_s": total / self.seconds, "ops": ops,
            "errors": dict(self.errors), "client_cpu_cores": self.client_cpu / self.seconds,
            "server_cpu_cores": self.server_cpu / self.seconds,
            "server_rss_mb": self.rss / 2**20, "server_peak_rss_mb": self.hwm / 2**20,
        }


async def run_phase(system: Any, key: Optional[str], phase: str, ops: List[Op], conns: int,
                    seconds: float, client_kind: str, record: bool = True) -> PhaseResult:
    """``conns`` workers, each on its own keep-alive connection, issue the
    weighted mix of ``ops`` back to back for ``seconds``."""
    res = PhaseResult(system.name, phase, conns, seconds, {o.name: [] for o in ops})
    weights = [o.weight for o in ops]
    httpx_client = None
    if client_kind == "httpx":
        import httpx

        httpx_client = httpx.AsyncClient(
            base_url=f"http://{system.host}:{system.port}", timeout=60,
            limits=httpx.Limits(max_connections=conns, max_keepalive_connections=conns),
            headers={"Authorization": f"Bearer {key}"} if key else {})

    async def worker(w: int, start_at: float, end_at: float) -> None:
        rng = random.Random(w * 7919 + conns)
        conn = RawConn(system.host, system.port)
        while time.perf_counter() < start_at:
            await asyncio.sleep(0.001)
        while True:
            now = time.perf_counter()
            if now >= end_at:
                break
            op = rng.choices(ops, weights)[0]
            path, body = op.make(rng, next(SEQ))
            t0 = time.perf_counter()
            try:
                if httpx_client is not None:
                    r = await httpx_client.post(path, content=body,
                                                headers={"Content-Type": "application/json"})
                    status = r.status_code
                else:
                    status, _ = await conn.request(
                        encode_request(system.host, system.port, "POST", path, body, key))
            except Exception as e:  # a transport failure is an error of the phase
                res.errors[f"{op.name}:{type(e).__name__}"] = (
                    res.errors.get(f"{op.name}:{type(e).__name__}", 0) + 1)
                conn.close()
                continue
            t1 = time.perf_counter()
            if 200 <= status < 300:
                res.lat[op.name].append(t1 - t0)
            else:
                k = f"{op.name}:{status}"
                res.errors[k] = res.errors.get(k, 0) + 1
        conn.close()

    start = time.perf_counter() + 0.2
    cpu0, srv0 = client_cpu(), proc_stats(system.pid)[0]
    await asyncio.gather(*(worker(w, start, start + seconds) for w in range(conns)))
    cpu1, (srv1, rss, hwm) = client_cpu(), proc_stats(system.pid)
    if httpx_client is not None:
        await httpx_client.aclose()
    res.client_cpu, res.server_cpu, res.rss, res.hwm = cpu1 - cpu0, srv1 - srv0, rss, hwm
    return res


# --- the workload -----------------------------------------------------------------


class Workload:
    """Pre-encoded request bodies for both systems."""

    def __init__(self, ds: "Dataset", chroma_collection: Optional[str]) -> None:
        self.ds = ds
        self.chroma_base = (f"/api/v2/tenants/default_tenant/databases/default_database/"
                            f"collections/{chroma_collection}") if chroma_collection else ""
        q = ds.queries
        self.qvec = [json.dumps([float(x) for x in q[i]]) for i in range(len(q))]
        rows = range(0, ds.n, max(1, ds.n // 2000))
        self.avec = {i: json.dumps([float(x) for x in ds.base[i]]) for i in rows}
        self.arows = list(self.avec)
        self.filters = list(FILTERS.values())

    def _pick(self, rng: random.Random) -> Tuple[int, List[int]]:
        return rng.randrange(len(self.qvec)), self.filters[rng.randrange(2)]

    # Engram
    def engram_vector(self, rng: random.Random, seq: int) -> Tuple[str, bytes]:
        i, f = self._pick(rng)
        users = json.dumps([f"t{t}" for t in f])
        return "/v1/recall", (f'{{"vector":{self.qvec[i]},"mode":"vector","k":{K},'
                              f'"user":{users}}}').encode()

    def engram_append_text(self, rng: random.Random, seq: int) -> Tuple[str, bytes]:
        r = self.arows[rng.randrange(len(self.arows))]
        text = json.dumps(self.ds.texts[r])
        return "/v1/records", (
            f'[{{"kind":"document","external_id":"load/{os.getpid()}/{seq}","text":{text},'
            f'"scope":{{"user":"t{APPEND_TENANT}"}}}}]').encode()

    def engram_hybrid(self, rng: random.Random, seq: int) -> Tuple[str, bytes]:
        i, f = self._pick(rng)
        users = json.dumps([f"t{t}" for t in f])
        text = json.dumps(self.ds.query_texts[i])
        return "/v1/recall", (f'{{"text":{text},"vector":{self.qvec[i]},"k":{K},'
                              f'"user":{users}}}').encode()

    def engram_append(self, rng: random.Random, seq: int) -> Tuple[str, bytes]:
        r = self.arows[rng.randrange(len(self.arows))]
        text = json.dumps(self.ds.texts[r])
        return "/v1/records", (
            f'[{{"kind":"document","external_id":"load/{os.getpid()}/{seq}","text":{text},'
            f'"scope":{{"user":"t{APPEND_TENANT}"}},'
            f'"embedding":{{"model":"{MODEL}","vector":{self.avec[r]}}}}}]').encode()

    # Chroma
    def chroma_vector(self, rng: random.Random, seq: int) -> Tuple[str, bytes]:
        i, f = self._pick(rng)
        where = {"tenant": f[0]} if len(f) == 1 else {"tenant": {"$in": f}}
        return f"{self.chroma_base}/query", (
            f'{{"query_embeddings":[{self.qvec[i]}],"n_results":{K},'
            f'"where":{json.dumps(where)},"include":["documents","metadatas","distances"]}}'
        ).encode()

    def chroma_append(self, rng: random.Random, seq: int) -> Tuple[str, bytes]:
        r = self.arows[rng.randrange(len(self.arows))]
        text = json.dumps(self.ds.texts[r])
        return f"{self.chroma_base}/add", (
            f'{{"ids":["load/{os.getpid()}/{seq}"],"embeddings":[{self.avec[r]}],'
            f'"documents":[{text}],"metadatas":[{{"tenant":{APPEND_TENANT},"deleted":0}}]}}'
        ).encode()


class Dataset:
    def __init__(self, path: str) -> None:
        import numpy as np

        self.base = np.load(os.path.join(path, "base.npy"))
        self.queries = np.load(os.path.join(path, "queries.npy"))
        self.attrs = np.load(os.path.join(path, "attrs.npy"))
        self.n = len(self.base)
        with open(os.path.join(path, "base.jsonl")) as f:
            self.texts = [json.loads(line)["text"] for line in f]
        with open(os.path.join(path, "queries.jsonl")) as f:
            self.query_texts = [json.loads(line)["text"] for line in f]
        self.tenant = self.attrs[:, 0]
        self.deleted = self.attrs[:, 2].astype(bool)
        self.path = path

    def exact_gt(self, tenants: List[int]):
        """Exact filtered top-K ids (tenant in ``tenants``, not deleted)."""
        import numpy as np

        elig = np.where(np.isin(self.tenant, tenants) & ~self.deleted)[0]
        scores = self.queries @ self.base[elig].T
        top = np.argsort(-scores, axis=1)[:, :K]
        return elig[top]


# --- loading ------------------------------------------------------------------------


def load_engram(eng: Engram, ds: Dataset) -> Dict[str, float]:
    from engram_client import Client

    t0 = time.time()
    c = Client(f"http://{eng.host}:{eng.port}", eng.key, timeout=600)

    def lines():
        for i in range(ds.n):
            yield ('{"kind":"document","external_id":"doc/%d","text":%s,"scope":{"user":"t%d"},'
                   '"embedding":{"model":"%s","vector":%s}}'
                   % (i, json.dumps(ds.texts[i]), int(ds.tenant[i]), MODEL,
                      json.dumps([float(x) for x in ds.base[i]])))

    s = c.bulk(lines(), batch=1000).run()
    if s["created"] + s["duplicates"] != ds.n or not s["complete"]:
        raise RuntimeError(f"engram bulk load incomplete: {s}")
    t_bulk = time.time() - t0
    import numpy as np

    for i in np.where(ds.deleted)[0]:
        c.delete(f"doc/{int(i)}", reason="dataset row marked deleted")
    t_del = time.time() - t0 - t_bulk
    # wait for the HNSW graph to take every vector it can (pending_vectors = 0;
    # a space's last batch of under 64 waits outside it, searched exactly)
    while True:
        m = c.metrics()
        pending = [ln for ln in m.splitlines() if ln.startswith("engram_pending_vectors")]
        if pending and float(pending[0].split()[-1]) == 0:
            break
        time.sleep(0.5)
    c.close()
    return {"bulk_s": t_bulk, "deletes_s": t_del, "graph_ready_s": time.time() - t0}


def load_chroma(ch: Chroma, ds: Dataset) -> Tuple[str, Dict[str, float]]:
    import chromadb
    import numpy as np

    t0 = time.time()
    client = chromadb.HttpClient(host=ch.host, port=ch.port)
    col = client.create_collection(
        "bench", metadata={"hnsw:space": "ip", "hnsw:M": 16, "hnsw:construction_ef": 200})
    for s in range(0, ds.n, 1000):
        e = min(ds.n, s + 1000)
        col.add(ids=[f"doc/{i}" for i in range(s, e)], embeddings=ds.base[s:e],
                documents=ds.texts[s:e],
                metadatas=[{"tenant": int(ds.tenant[i]), "deleted": int(ds.deleted[i])}
                           for i in range(s, e)])
    t_add = time.time() - t0
    col.delete(ids=[f"doc/{i}" for i in np.where(ds.deleted)[0]])
    n = col.count()
    if n != int((~ds.deleted).sum()):
        raise RuntimeError(f"chroma holds {n} records")
    return str(col.id), {"add_s": t_add, "ready_s": time.time() - t0}


# --- recall@10 -------------------------------------------------------------------------


async def filtered_top10(system: Any, key: Optional[str], wl: Workload,
                         tenants: List[int]) -> Dict[int, List[int]]:
    """Row ids of the top 10 of every query under a tenant filter, 16
    requests at a time."""
    found: Dict[int, List[int]] = {}
    sem = asyncio.Semaphore(16)
    free = [RawConn(system.host, system.port) for _ in range(16)]
    users = json.dumps([f"t{t}" for t in tenants])
    where = {"tenant": tenants[0]} if len(tenants) == 1 else {"tenant": {"$in": tenants}}

    async def one(i: int) -> None:
        async with sem:
            conn = free.pop()
            try:
                if system.name == "engram":
                    path = "/v1/recall"
                    body = (f'{{"vector":{wl.qvec[i]},"mode":"vector","k":{K},'
                            f'"user":{users}}}').encode()
                else:
                    path = f"{wl.chroma_base}/query"
                    body = (f'{{"query_embeddings":[{wl.qvec[i]}],"n_results":{K},'
                            f'"where":{json.dumps(where)},"include":["distances"]}}').encode()
                st, b = await conn.request(
                    encode_request(system.host, system.port, "POST", path, body, key))
                if st != 200:
                    raise RuntimeError(f"{system.name} recall {st}: {b[:300]!r}")
                doc = json.loads(b)
                if system.name == "engram":
                    ids = [h["external_id"] for h in doc["hits"]]
                else:
                    ids = doc["ids"][0]
                found[i] = [int(x.split("/")[1]) for x in ids]
            finally:
                free.append(conn)

    await asyncio.gather(*(one(i) for i in range(len(wl.qvec))))
    for c in free:
        c.close()
    return found


async def measure_recall(system: Any, key: Optional[str], wl: Workload,
                         gts: Dict[str, Any]) -> Dict[str, float]:
    """Filtered recall@10 over the 1,000 queries, at each filter."""
    out = {}
    for fname, tenants in FILTERS.items():
        found = await filtered_top10(system, key, wl, tenants)
        gt = gts[fname]
        hit = sum(len(set(found[i][:K]) & {int(x) for x in gt[i]}) for i in range(len(gt)))
        out[fname] = hit / (K * len(gt))
    return out


# --- main -------------------------------------------------------------------------------


def fmt_row(s: Dict[str, Any]) -> str:
    ops = "  ".join(
        f"{n} {o['per_s']:,.0f}/s p50 {o['p50_ms']:.2f} p95 {o['p95_ms']:.2f} "
        f"p99 {o['p99_ms']:.2f} ms" for n, o in s["ops"].items() if o["count"])
    bottleneck = "  CLIENT-BOUND" if s["client_cpu_cores"] > 0.9 else ""
    return (f"{s['system']:7} {s['phase']:8} {s['conns']:4} conns: "
            f"{s['requests_per_s']:8,.0f} req/s"
            f"  errors {sum(s['errors'].values())}  server cpu {s['server_cpu_cores']:.2f} rss "
            f"{s['server_rss_mb']:.0f} MB  client cpu {s['client_cpu_cores']:.2f}{bottleneck}\n"
            f"        {ops}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", default=os.path.join(ROOT, "..", "shared", "data",
                                                      "pypi-minilm-20k"))
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    ap.add_argument("--engram", default=os.path.join(target, "release", "engram"))
    ap.add_argument("--duration", type=float, default=15.0)
    ap.add_argument("--conns", default="1,16,64,256")
    ap.add_argument("--append-conns", default="64")
    ap.add_argument("--client", choices=["raw", "httpx"], default="raw")
    ap.add_argument("--skip-chroma", action="store_true")
    ap.add_argument("--skip-ingest-bench", action="store_true")
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    ap.add_argument("--render", metavar="RESULTS.json",
                    help="print the tables and targets of a saved run, and exit")
    args = ap.parse_args()
    if args.render:
        with open(args.render) as f:
            saved = json.load(f)
        print(markdown(saved))
        print(json.dumps(targets(saved), indent=1))
        return 0
    conns = [int(x) for x in args.conns.split(",")]
    append_conns = [int(x) for x in args.append_conns.split(",") if x]
    if not os.path.isfile(args.engram):
        log(f"no engram binary at {args.engram}: cargo build --release")
        return 2

    ds = Dataset(args.dataset)
    log(f"dataset: {ds.n} vectors, {len(ds.queries)} queries, {int(ds.deleted.sum())} deleted")
    gts = {f: ds.exact_gt(t) for f, t in FILTERS.items()}
    import numpy as np

    for f in FILTERS:  # the numpy ground truth agrees with the dataset's
        ref = np.load(os.path.join(ds.path, f"gt_{f}.npy"))[:, :K]
        agree = np.mean([len(set(a) & set(b)) / K for a, b in zip(gts[f], ref, strict=True)])
        log(f"exact filtered top-10 ({f}) vs dataset ground truth: {agree:.4f} overlap")

    work = tempfile.mkdtemp(prefix="serve-load-")
    results: Dict[str, Any] = {"date": dt.datetime.now().isoformat(timespec="seconds"),
                               "args": vars(args), "phases": [], "recall_at_10": {},
                               "load": {}}
    systems: List[Tuple[Any, Optional[str]]] = []
    eng = ch = None
    try:
        log("starting engram serve and loading (bulk)...")
        eng = Engram(args.engram, work)
        results["load"]["engram"] = load_engram(eng, ds)
        log(f"  engram loaded: {results['load']['engram']}")
        systems.append((eng, eng.key))
        chroma_col = None
        if not args.skip_chroma:
            log("starting chroma run and loading...")
            ch = Chroma(work)
            chroma_col, results["load"]["chroma"] = load_chroma(ch, ds)
            log(f"  chroma loaded: {results['load']['chroma']}")
            systems.append((ch, None))
        log("encoding requests...")
        wl = Workload(ds, chroma_col)

        for system, key in systems:
            r = asyncio.run(measure_recall(system, key, wl, gts))
            results["recall_at_10"][system.name] = r
            log(f"recall@10 {system.name}: {r}")

        def ops_for(system: Any, phase: str) -> List[Op]:
            if system.name == "engram":
                return {
                    "queries": [Op("vector", 1, wl.engram_vector)],
                    "mix": [Op("append", 0.2, wl.engram_append),
                            Op("vector", 0.4, wl.engram_vector),
                            Op("hybrid", 0.4, wl.engram_hybrid)],
                    "appends": [Op("append", 1, wl.engram_append)],
                    "appends_text": [Op("append", 1, wl.engram_append_text)],
                }[phase]
            return {
                "queries": [Op("vector", 1, wl.chroma_vector)],
                "mix": [Op("append", 0.2, wl.chroma_append), Op("vector", 0.8, wl.chroma_vector)],
                "appends": [Op("append", 1, wl.chroma_append)],
            }[phase]

        for phase, cs in (("queries", conns), ("mix", conns), ("appends", append_conns),
                          ("appends_text", append_conns)):
            for c in cs:
                for system, key in systems:
                    if phase == "appends_text" and system.name != "engram":
                        continue  # Chroma stores nothing without an embedding
                    # warm: 2 s unrecorded at the same concurrency (queries only)
                    if phase == "queries":
                        asyncio.run(run_phase(system, key, phase, ops_for(system, phase), c, 2.0,
                                              args.client))
                    r = asyncio.run(run_phase(system, key, phase, ops_for(system, phase), c,
                                              args.duration, args.client))
                    s = r.summary()
                    results["phases"].append(s)
                    log(fmt_row(s))
                    time.sleep(1.0)
    finally:
        for s in (eng, ch):
            if s is not None:
                s.stop()
        shutil.rmtree(work, ignore_errors=True)

    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"serve_load-{results['date'].replace(':', '')}.json")

    def save() -> None:
        with open(path, "w") as f:
            json.dump(results, f, indent=1)

    save()
    if not args.skip_ingest_bench:
        log("engram bench ingest --writers 16 (embedded, same session)...")
        out = subprocess.run([args.engram, "bench", "ingest", "--writers", "16", "--batch", "1000",
                              "--batch-writers", "1", "--json"], capture_output=True, text=True)
        if out.returncode:
            raise RuntimeError(f"engram bench ingest failed: {out.stderr}")
        rows = json.loads(out.stdout)["results"]
        results["embedded_ingest"] = rows
        for row in rows:
            log(f"  embedded: {row['writers']} writers x {row['batch']}: "
                f"{row['events_per_s']:,.0f} events/s")
        save()
    log(f"results: {path}")
    print(markdown(results))
    print(json.dumps(targets(results), indent=1))
    return 0


def markdown(results: Dict[str, Any]) -> str:
    """The results as the markdown tables of docs/benchmarks.md."""
    out = ["| system | phase | conns | req/s | operation | ops/s | p50 ms | p95 ms | p99 ms "
           "| errors | server CPU | server RSS MB | client CPU |",
           "|---|---|--:|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for p in results["phases"]:
        first = True
        for name, o in p["ops"].items():
            if not o["count"]:
                continue
            lead = (f"| {p['system']} | {p['phase']} | {p['conns']} | {p['requests_per_s']:,.0f} "
                    if first else "| | | | ")
            tail = (f"| {sum(p['errors'].values())} | {p['server_cpu_cores']:.2f} "
                    f"| {p['server_rss_mb']:.0f} | {p['client_cpu_cores']:.2f} |"
                    if first else "| | | | |")
            out.append(f"{lead}| {name} | {o['per_s']:,.0f} | {o['p50_ms']:.2f} | "
                       f"{o['p95_ms']:.2f} | {o['p99_ms']:.2f} {tail}")
            first = False
    return "\n".join(out)


def targets(results: Dict[str, Any]) -> Dict[str, Any]:
    """The issue's targets, met or not."""
    def phase(system: str, name: str, c: int) -> Optional[Dict[str, Any]]:
        for p in results["phases"]:
            if (p["system"], p["phase"], p["conns"]) == (system, name, c):
                return p
        return None

    t: Dict[str, Any] = {}
    for sysname, r in results["recall_at_10"].items():
        t[f"filtered recall@10 >= 0.95 ({sysname})"] = {"value": r, "met": min(r.values()) >= 0.95}
    e16, c16 = phase("engram", "queries", 16), phase("chroma", "queries", 16)
    if e16 and c16:
        ratio = e16["requests_per_s"] / c16["requests_per_s"]
        t["engram >= 3x chroma queries/s at 16 connections"] = {"value": ratio, "met": ratio >= 3}
    if e16:
        p99 = e16["ops"]["vector"]["p99_ms"]
        t["recall p99 <= 5 ms at 16 connections"] = {"value": p99, "met": p99 <= 5}
    emb = [r for r in results.get("embedded_ingest", []) if r["writers"] == 16 and r["batch"] == 1]
    for name, label in (("appends_text", "text events"), ("appends", "with a 384-d vector")):
        a64 = phase("engram", name, 64)
        if a64 and emb:
            ratio = a64["requests_per_s"] / emb[0]["events_per_s"]
            t[f"HTTP appends ({label}) at 64 connections >= 50% of embedded 16 writers"] = {
                "value": ratio, "met": ratio >= 0.5}
    t["errors"] = sum(sum(p["errors"].values()) for p in results["phases"])
    return t


if __name__ == "__main__":
    sys.exit(main())
