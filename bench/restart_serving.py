"""Restart to serving: how long a coordinator killed with -9 takes to answer users again.

The scenario: a coordinator with N jobs queued (world size 3 on a fleet of 2 CPU workers, so they
stay queued) and its 2 workers attached; it is killed with SIGKILL and started again on the same
port and database, R times. Each restart is timed from the new process's start to:

- `listening`: its "ringleader coordinator: gRPC ..." line (the servers are up);
- `serving`: the first GetJob of a queued job answered (what a user sees);
- `workers`: both workers listed IDLE again (they reconnected and registered).

It asserts its scenario after every restart (every queued job still QUEUED, both workers back),
else the run is INVALID (exit 2). `--tree DIR` runs another checkout's code (e.g. an older commit
in a git worktree) with the same script, so two trees are measured side by side in one run.

    python3 bench/restart_serving.py --queued 1000 --restarts 10 [--tree /tmp/old] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--queued", type=int, default=1000)
    p.add_argument("--restarts", type=int, default=10)
    p.add_argument("--tree", type=Path, default=ROOT, help="the checkout whose code runs (default: this one)")
    p.add_argument("--json", type=Path, default=None, help="write every figure here")
    a = p.parse_args()
    tree = a.tree.resolve()
    sys.path.insert(0, str(tree))
    env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    from ringleader_app.client import Client
    from ringleader.v1 import jobs_pb2 as pb

    with tempfile.TemporaryDirectory(prefix="restart-serving-") as tmp:
        bed = Bed(Path(tmp), env, tree)
        try:
            rows = bed.run(a.queued, a.restarts, Client, pb)
        except Invalid as exc:
            print(f"INVALID: {exc}")
            return 2
        finally:
            bed.close()
    summary = {k: round(statistics.median(r[k] for r in rows), 3) for k in ("listening", "serving", "workers")}
    summary.update(tree=str(tree), queued=a.queued, restarts=a.restarts, load=os.getloadavg())
    print(json.dumps(summary))
    if a.json:
        a.json.write_text(json.dumps({"summary": summary, "restarts": rows}, indent=2) + "\n")
    return 0


class Invalid(Exception):
    pass


class Bed:
    def __init__(self, tmp: Path, env: dict, tree: Path) -> None:
        self.tmp, self.env, self.tree = tmp, env, tree
        self.coordinator: subprocess.Popen | None = None
        self.workers: list[subprocess.Popen] = []
        self.port = 0

    def _cmd(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "ringleader", *args]

    def start_coordinator(self) -> tuple[float, str]:
        t0 = time.monotonic()
        self.coordinator = subprocess.Popen(
            self._cmd("coordinator", "--grpc-address", f"127.0.0.1:{self.port}", "--http-address", "",
                      "--db", str(self.tmp / "jobs.db")),
            stdout=subprocess.PIPE, stderr=open(self.tmp / "coordinator.log", "ab"), text=True,
            env=self.env, cwd=self.tree)
        line = self.coordinator.stdout.readline()
        if not line.startswith("ringleader coordinator: gRPC "):
            raise Invalid(f"coordinator did not start: {line!r}; see {self.tmp}/coordinator.log")
        address = line.split()[3].rstrip(",")
        self.port = int(address.rsplit(":", 1)[1])
        return t0, address

    def run(self, queued: int, restarts: int, Client, pb) -> list[dict]:
        _, address = self.start_coordinator()
        for i in range(2):
            self.workers.append(subprocess.Popen(
                self._cmd("--coordinator", address, "worker", "--device", "cpu", "--worker-id", f"rs{i}"),
                stdout=open(self.tmp / f"rs{i}.log", "ab"), stderr=subprocess.STDOUT, env=self.env,
                cwd=self.tree, start_new_session=True))
        client = Client(address)
        self._wait_idle(client, pb, time.monotonic() + 90)
        spec = pb.JobSpec(world_size=3, collective=pb.CollectiveSpec(op="all_reduce", sizes=[1024], iters=1))
        ids = [client.submit(spec).id for _ in range(queued)]
        client.close()
        rows = []
        for _ in range(restarts):
            self.coordinator.send_signal(signal.SIGKILL)
            self.coordinator.wait(30)
            t0, address = self.start_coordinator()
            listening = time.monotonic() - t0
            client = Client(address, timeout_s=30)
            probe = ids[len(ids) // 2]
            while True:
                try:
                    job = client.get(probe)
                    break
                except Exception:  # not serving yet
                    time.sleep(0.005)
            serving = time.monotonic() - t0
            if job.state != pb.QUEUED:
                raise Invalid(f"job {probe} is {pb.JobState.Name(job.state)} after a restart, not QUEUED")
            self._wait_idle(client, pb, t0 + 120)
            back = time.monotonic() - t0
            still = client.list(states=[pb.QUEUED], limit=queued + 10)
            if len(still.jobs) != queued:
                raise Invalid(f"{len(still.jobs)} of {queued} jobs queued after a restart")
            client.close()
            rows.append(dict(listening=round(listening, 3), serving=round(serving, 3), workers=round(back, 3)))
            print(json.dumps(rows[-1]), flush=True)
        return rows

    def _wait_idle(self, client, pb, deadline: float) -> None:
        while time.monotonic() < deadline:
            try:
                if sum(w.state == pb.IDLE for w in client.workers()) >= 2:
                    return
            except Exception:
                pass
            time.sleep(0.01)
        raise Invalid(f"the 2 workers were not idle in time; see {self.tmp}")

    def close(self) -> None:
        for proc in [*self.workers, self.coordinator]:
            if proc and proc.poll() is None:
                proc.terminate()
        for proc in [*self.workers, self.coordinator]:
            if proc:
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    proc.kill()


if __name__ == "__main__":
    sys.exit(main())
