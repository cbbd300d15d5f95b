"""Run the gpu_check (and optionally all kinds) N times on 4 CPU workers (f2 slowed 8x + flip) under
a chosen load; dump every rank's figures as JSON lines."""
import json, os, sys, time, tempfile, subprocess, random
from pathlib import Path
sys.path.insert(0, "tests"); sys.path.insert(0, "tests/integration")
from cluster import Cluster
from ringleader.v1 import jobs_pb2 as pb

IDS = ["f0", "f1", "f2", "f3"]; BAD = "f2"
FAULTY = {"RINGLEADER_FAULTS": os.environ.get("FAULT", "slow_compute=8,flip_bit=1"), "RINGLEADER_FAULTS_ALLOWED": "tests"}
COPIES = [int(x) for x in os.environ.get("COPIES", "0").split(",")]
runs = int(sys.argv[1]); out = open(sys.argv[2], "a"); kinds = sys.argv[3].split(",") if len(sys.argv) > 3 else []
c = Cluster(Path(tempfile.mkdtemp()))
try:
    c.start_coordinator(http=False, extra=["--quarantine-max-share", "1"])
    for wid in IDS:
        c.start_worker(wid, env={**FAULTY, "RINGLEADER_FAULTS_ALLOWED": "tests"} if wid == BAD else {"RINGLEADER_FAULTS_ALLOWED": "tests"})
    c.wait_idle(IDS)
    bad_runs = 0
    for i in range(runs):
        t0 = time.time()
        cb = COPIES[i % len(COPIES)]
        ans = c.client.run_check(pb.RunCheckRequest(wait=True, timeout_s=300, kinds=kinds, worker_ids=IDS, gpu_check=pb.GpuCheckSpec(copy_bytes=cb, iters=20)))
        for j in ans.jobs:
            k = j.spec.WhichOneof("kind")
            if k != "gpu_check": continue
            wid = {w.rank: w.worker_id for w in j.workers}
            rows = [dict(w=wid[f.rank], t=round(f.tflops, 4), c=round(f.copy_gbps, 3), tr=round(f.tflops_ratio, 3),
                         cr=round(f.copy_ratio, 3), fl=f.flagged, ws=round(f.witnessed_s, 3), cs=round(f.claimed_s, 3),
                         ref=f.refused, wr=f.wrong, ft=round(f.flag_tflops, 4), fc=round(f.flag_copy_gbps, 3))
                    for f in j.gpu_check.workers]
            false = [r["w"] for r in rows if r["fl"] and r["w"] != BAD]
            bad_runs += bool(false)
            rec = dict(cb=cb, i=i, state=j.state, series=j.gpu_check.series, dur=round(time.time() - t0, 1),
                       load=os.getloadavg()[0], false=false, rows=rows)
            out.write(json.dumps(rec) + "\n"); out.flush()
            print(i, cb, j.state, "series", j.gpu_check.series, "false", false, "load %.1f" % os.getloadavg()[0], flush=True)
        # clear verdicts so workers remain placeable
        for w in IDS:
            try: c.client.cordon(w, on=False, force=True)
            except Exception as e: pass
    print("false-verdict runs", bad_runs, "of", runs)
finally:
    c.close()
