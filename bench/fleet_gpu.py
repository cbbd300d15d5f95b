"""The fleet checks on a real GPU machine (2 GPUs or more): what scripts/gpu-fleet-check.sh runs.

(a) a coordinator and `worker --device all`, `ringleader check` (every kind) N times on the clean
    machine: every verdict counted (the goal: 0 that are not HEALTHY);
(b) a second process running bf16 matrix products on GPU 1 (`--hog`), then `check`: GPU 1's worker
    must be SUSPECT or UNHEALTHY (with the foreign process in its evidence where telemetry runs),
    and no other;
(c) the link check over NVLink: the size it chose and its GB/s, beside a `sendrecv` sweep of
    ringleader at that size (nccl-tests' method) and the nccl-tests figure of BASELINES.md.

Everything it measured goes to OUT/fleet-gpu.json; the run is INVALID (exit 2) when the machine
has fewer than 2 GPUs or the hog did not run. Exit 1 when a goal is missed.

    python3 bench/fleet_gpu.py --out $OUT --runs 10
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

HOG = """
import sys, time, torch
d = torch.device('cuda', int(sys.argv[1]))
a = torch.randn(8192, 8192, device=d, dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device=d, dtype=torch.bfloat16)
print('hog running', flush=True)
end = time.time() + float(sys.argv[2])
while time.time() < end:
    for _ in range(50):
        a @ b
    torch.cuda.synchronize(d)
"""


def rl(*args: str) -> list[str]:
    return [sys.executable, "-m", "ringleader", *args]


def check(address: str, kinds: str = "link_matrix,gpu_check,sdc_check") -> dict:
    t0 = time.monotonic()
    out = subprocess.run(rl("--coordinator", address, "check", "--kind", kinds, "-o", "json"),
                         capture_output=True, text=True, timeout=120)
    answer = json.loads(out.stdout) if out.stdout.strip() else {"error": out.stderr[-2000:]}
    answer["seconds"] = round(time.monotonic() - t0, 2)
    return answer


def nvml_processes(index: int) -> list[dict] | str:
    """What NVML lists on GPU `index` (host pids, memory): what the worker's telemetry reads."""
    try:
        import pynvml

        pynvml.nvmlInit()
        procs = pynvml.nvmlDeviceGetComputeRunningProcesses(pynvml.nvmlDeviceGetHandleByIndex(index))
        return [dict(pid=int(p.pid), mib=int((getattr(p, "usedGpuMemory", 0) or 0) >> 20)) for p in procs]
    except Exception as e:  # no NVML here: say so in the report
        return f"{type(e).__name__}: {e}"


def nccl_sendrecv(binary: Path, size: int) -> dict:
    """nccl-tests' sendrecv_perf at the link check's size on GPUs 0 and 1 (-g 2, one process)."""
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="0,1")
    out = subprocess.run([str(binary), "-b", str(size), "-e", str(size), "-g", "2", "-n", "20", "-w", "5"],
                         capture_output=True, text=True, timeout=120, env=env)
    rows = [line.split() for line in out.stdout.splitlines() if line.strip().startswith(str(size))]
    busbw = float(rows[0][7]) if rows and len(rows[0]) > 7 else None  # out of place: time, algbw, busbw
    return dict(size_bytes=size, busbw_gbps=busbw, log=out.stdout[-3000:] + out.stderr[-1000:])


def verdicts(answer: dict) -> dict[str, str]:
    return {w["worker_id"]: w.get("health", {}).get("verdict", "UNCHECKED") for w in answer.get("workers", [])}


def start(out: Path) -> tuple[subprocess.Popen, subprocess.Popen, str]:
    coord = subprocess.Popen(rl("coordinator", "--grpc-address", "127.0.0.1:0", "--db", str(out / "jobs.db")),
                             stdout=subprocess.PIPE, stderr=open(out / "coordinator.log", "w"), text=True)
    address = coord.stdout.readline().split()[3].rstrip(",")
    workers = subprocess.Popen(rl("--coordinator", address, "worker", "--device", "all"),
                               stdout=open(out / "workers.log", "w"), stderr=subprocess.STDOUT)
    from ringleader_app.client import Client
    from ringleader.v1 import jobs_pb2 as pb

    client, deadline = Client(address), time.monotonic() + 90
    import torch

    gpus = torch.cuda.device_count()
    while len([w for w in client.workers() if w.state == pb.IDLE]) < gpus:
        assert time.monotonic() < deadline, f"fewer than {gpus} GPU workers came up in 90 s"
        time.sleep(0.5)
    return coord, workers, address


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--nccl-tests", type=Path, default=None,
                   help="a built nccl-tests: its sendrecv_perf runs at the link check's size after the service stops")
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    import torch

    report: dict = {"gpus": torch.cuda.device_count(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                    "load_average_before": os.getloadavg()}
    if report["gpus"] < 2:
        print("INVALID: fewer than 2 GPUs")
        return 2
    report["device"] = torch.cuda.get_device_name(0)
    coord, workers, address = start(a.out)
    try:
        return _run(a, address, report)
    finally:
        for proc in (workers, coord):
            proc.terminate()
            proc.wait(30)
        if a.nccl_tests and (a.nccl_tests / "build" / "sendrecv_perf").exists():
            sizes = sorted({x["size_bytes"] for x in report.get("link", [])}) or [256 << 20]
            report["nccl_tests_sendrecv"] = nccl_sendrecv(a.nccl_tests / "build" / "sendrecv_perf", sizes[0])
            link = report.get("summary", {}).get("link_gbps_median")
            ref = report["nccl_tests_sendrecv"]["busbw_gbps"]
            if link and ref:
                report["summary"]["link_over_nccl_tests"] = round(link / ref, 3)
                print(f"link check {link} GB/s at {sizes[0]} B against nccl-tests sendrecv {ref}: {link / ref:.3f}")
        (a.out / "fleet-gpu.json").write_text(json.dumps(report, indent=2) + "\n")


def _run(a, address: str, report: dict) -> int:
    clean = [check(address) for _ in range(a.runs)]
    report["clean"] = [dict(seconds=c["seconds"], verdicts=verdicts(c), named=c.get("named_hosts", [])) for c in clean]
    false = sum(v != "HEALTHY" for c in report["clean"] for v in c["verdicts"].values())
    links = [j["link_matrix"] for c in clean for j in c.get("jobs", []) if "link_matrix" in j]
    report["link"] = [dict(size_bytes=int(x["size_bytes"]), reason=x.get("size_reason", ""),
                           gbps=[round(r["gbps"], 1) for r in x["links"]]) for x in links]
    size = int(links[0]["size_bytes"]) if links else 256 << 20
    sweep = subprocess.run(rl("--coordinator", address, "submit", "--op", "sendrecv", "--world-size", "2",
                              "-b", str(size), "-e", str(size), "--wait", "-o", "json"),
                           capture_output=True, text=True, timeout=120)
    report["sendrecv"] = sweep.stdout[-4000:] or sweep.stderr[-2000:]
    hog = subprocess.Popen([sys.executable, "-c", HOG, "1", "90"], stdout=subprocess.PIPE, text=True)
    started = hog.stdout.readline().strip() == "hog running"
    time.sleep(3)  # the hog's products are queued back to back; telemetry samples every second
    seen_by_nvml = nvml_processes(1)
    hogged = check(address, "gpu_check")
    hog.kill()
    report["hog"] = dict(ran=started, pid=hog.pid, nvml_processes=seen_by_nvml,
                         foreign_in_evidence=["foreign process" in (w.get("health", {}).get("figure", "") +
                                                                    w.get("health", {}).get("also", ""))
                                              for w in hogged.get("workers", [])],
                         seconds=hogged["seconds"], verdicts=verdicts(hogged),
                         workers=[{k: w.get(k) for k in ("worker_id", "device", "health")} for w in hogged.get("workers", [])],
                         figures=[j.get("gpu_check") for j in hogged.get("jobs", [])])
    if not started:
        print("INVALID: the hog did not run")
        return 2
    caught = [w for w, v in report["hog"]["verdicts"].items() if v in ("SUSPECT", "UNHEALTHY")]
    gbps = sorted(g for x in report["link"] for g in x["gbps"])
    report["summary"] = dict(clean_runs=a.runs, false_verdicts=false, hog_named=caught,
                             link_sizes=sorted({x["size_bytes"] for x in report["link"]}),
                             link_gbps_median=gbps[len(gbps) // 2] if gbps else None,
                             load_average_after=os.getloadavg())
    report["summary"]["foreign_in_evidence"] = any(report["hog"]["foreign_in_evidence"])
    print(json.dumps(report["summary"], indent=2))
    # GPU 1's worker (the default id ends in cuda1) and no other.
    return 0 if false == 0 and len(caught) == 1 and caught[0].endswith("cuda1") else 1


if __name__ == "__main__":
    sys.exit(main())
