"""Readers during an online compaction (docs/benchmarks.md, "Online compaction").

Two threads send filtered-free vector recalls (k 10, model `m`, 384 random
dims) to a server on 127.0.0.1:7979 with the tenant key in /tmp/tk for
SECONDS seconds, then print the request count, non-200 statuses, p50, p99
and the slowest request with its start time. Standard library only.

    python3 benches/compact_readers.py SECONDS
"""
import http.client, json, time, random, sys, threading
tk=open('/tmp/tk').read().strip()
stop=time.time()+float(sys.argv[1])
random.seed(1)
lat=[]; errs={}; t_events=[]
def run():
    c=http.client.HTTPConnection('127.0.0.1',7979)
    while time.time()<stop:
        v=[random.gauss(0,1) for _ in range(384)]
        body=json.dumps({"vector": v, "mode": "vector", "k": 10, "model": "m"})
        t0=time.time()
        c.request('POST','/v1/recall',body,{"Authorization":"Bearer "+tk,"Content-Type":"application/json"})
        r=c.getresponse(); r.read()
        dt=time.time()-t0
        lat.append((t0,dt))
        if r.status!=200: errs[r.status]=errs.get(r.status,0)+1
ths=[threading.Thread(target=run) for _ in range(2)]
[t.start() for t in ths]; [t.join() for t in ths]
lat.sort(key=lambda x:x[1])
n=len(lat)
print(json.dumps({"requests":n,"errors":errs,"p50_ms":round(lat[n//2][1]*1000,2),"p99_ms":round(lat[int(n*0.99)][1]*1000,2),"max_ms":round(lat[-1][1]*1000,1),"max_at":lat[-1][0]}))
