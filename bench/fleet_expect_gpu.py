"""Fleet health against what the hardware should do, on a real 2-GPU machine.

(a) clean: a coordinator and `worker --device all`; `ringleader check` (every kind) N times:
    every verdict counted (goal: 0 that are not HEALTHY), and the coordinator learns the fleet's
    history from them;
(b) lost fast path: both daemons restarted with NCCL_P2P_DISABLE=1 (what an IOMMU/ACS setting or
    a lost NVLink does to a host); one default `check`: goal: not "every worker healthy" - the
    workers UNHEALTHY or a host-wide finding, with the expectation they fell below;
(c) drift: the daemon of GPU 1 alone restarted with NCCL_P2P_DISABLE=1: `workers -o json` must name
    it and the setting before any job runs; a 2-rank job must not start mismatched; `check` must
    exit non-zero if a check job fails.

Everything goes to OUT/fleet-expect.json (the answers as the CLI gave them); exit 1 when a goal
is missed, 2 when the run is invalid (fewer than 2 GPUs, workers that did not come up).

    python3 bench/fleet_expect_gpu.py --out $OUT --runs 10
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


def rl(*args: str) -> list[str]:
    return [sys.executable, "-m", "ringleader", *args]


def cli(address: str, *args: str, timeout: float = 180) -> dict:
    t0 = time.monotonic()
    out = subprocess.run(rl("--coordinator", address, *args), capture_output=True, text=True, timeout=timeout)
    try:
        doc = json.loads(out.stdout) if out.stdout.strip().startswith(("{", "[")) else {"stdout": out.stdout[-4000:]}
    except json.JSONDecodeError:
        doc = {"stdout": out.stdout[-4000:]}
    if isinstance(doc, list):
        doc = {"items": doc}
    doc.update(exit=out.returncode, seconds=round(time.monotonic() - t0, 2), stderr=out.stderr[-2000:])
    return doc


def verdicts(answer: dict) -> dict[str, str]:
    return {w["worker_id"]: w.get("health", {}).get("verdict", "UNCHECKED") for w in answer.get("workers", [])}


class Bed:
    def __init__(self, out: Path) -> None:
        self.out = out
        self.coord = subprocess.Popen(rl("coordinator", "--grpc-address", "127.0.0.1:0", "--http-address", "",
                                         "--db", str(out / "jobs.db")),
                                      stdout=subprocess.PIPE, stderr=open(out / "coordinator.log", "w"), text=True)
        self.address = self.coord.stdout.readline().split()[3].rstrip(",")
        self.workers: list[subprocess.Popen] = []

    def start_workers(self, devices: list[tuple[str, dict]]) -> None:
        for device, env in devices:
            self.workers.append(subprocess.Popen(
                rl("--coordinator", self.address, "worker", "--device", device, "--state-dir", str(self.out / "state")),
                stdout=open(self.out / "workers.log", "a"), stderr=subprocess.STDOUT, env={**os.environ, **env}))

    def stop_workers(self) -> None:
        for p in self.workers:
            p.terminate()
        for p in self.workers:
            p.wait(60)
        self.workers = []

    def wait_idle(self, n: int, timeout: float = 120) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            listed = cli(self.address, "workers", "-o", "json")
            items = listed.get("items") or listed.get("workers") or []
            if sum(w.get("state") in ("IDLE", "QUARANTINED") for w in items) >= n:
                return True
            time.sleep(1)
        return False

    def close(self) -> None:
        self.stop_workers()
        self.coord.terminate()
        self.coord.wait(30)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--runs", type=int, default=10)
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    import torch

    report: dict = {"gpus": torch.cuda.device_count(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    if report["gpus"] < 2:
        print("INVALID: fewer than 2 GPUs")
        return 2
    report["device"] = torch.cuda.get_device_name(0)
    bed = Bed(a.out)
    try:
        return _run(a, bed, report)
    finally:
        bed.close()
        (a.out / "fleet-expect.json").write_text(json.dumps(report, indent=2) + "\n")


def _run(a, bed: Bed, report: dict) -> int:
    default = [("cuda:0", {}), ("cuda:1", {})]
    bed.start_workers(default)
    if not bed.wait_idle(2):
        print("INVALID: the 2 GPU workers did not come up")
        return 2
    clean = [cli(bed.address, "check", "-o", "json") for _ in range(a.runs)]
    report["clean"] = [dict(exit=c["exit"], seconds=c["seconds"], verdicts=verdicts(c),
                            findings=c.get("findings", c.get("finding"))) for c in clean]
    false = sum(v != "HEALTHY" for c in report["clean"] for v in c["verdicts"].values())

    bed.stop_workers()
    off = {"NCCL_P2P_DISABLE": "1"}
    bed.start_workers([("cuda:0", off), ("cuda:1", off)])
    if not bed.wait_idle(2):
        print("INVALID: the workers did not come back with P2P off")
        return 2
    slow = cli(bed.address, "check", "-o", "json")
    report["p2p_off"] = slow
    slow_named = any(v in ("UNHEALTHY", "SUSPECT") for v in verdicts(slow).values()) or bool(
        slow.get("findings") or slow.get("finding"))

    bed.stop_workers()
    bed.start_workers([("cuda:0", {}), ("cuda:1", off)])
    bed.wait_idle(2)
    listed = cli(bed.address, "workers", "-o", "json")
    report["drift_workers"] = listed
    drift_named = "NCCL_P2P_DISABLE" in json.dumps(listed)
    job = cli(bed.address, "submit", "--op", "all_reduce", "--world-size", "2", "-b", "1M", "-e", "1M", "--queue",
              "-o", "json")
    report["drift_submit"] = job
    job_id = job.get("id") or job.get("job", {}).get("id", "")
    if not job_id:
        print("INVALID: the drifted gang's job was not accepted: " + json.dumps(job)[:500])
        return 2
    time.sleep(10)  # long enough for a placement pass to start it, were it allowed to
    job = cli(bed.address, "job", job_id, "-o", "json")
    report["drift_job"] = job
    state = job.get("state") or job.get("job", {}).get("state")
    started = state != "QUEUED"
    cli(bed.address, "cancel", job_id)
    check = cli(bed.address, "check", "-o", "json")
    report["drift_check"] = check

    report["summary"] = dict(clean_runs=a.runs, false_verdicts=false, p2p_off_named=slow_named,
                             p2p_off_exit=slow["exit"], drift_named_before_jobs=drift_named,
                             drift_job_state=state, drift_job_reason=job.get("reason") or job.get("job", {}).get("reason"),
                             drift_job_started=started, drift_check_exit=check["exit"])
    print(json.dumps(report["summary"], indent=2))
    return 0 if false == 0 and slow_named and drift_named and not started else 1


if __name__ == "__main__":
    sys.exit(main())
