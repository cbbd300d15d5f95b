"""Failover of the coordinator on PostgreSQL, measured: two coordinators on one database, 4 CPU
workers following them (--coordinator A,B), one job running and a 500-submit burst in flight;
the leader is killed with SIGKILL. Checked every round (a failed check makes the run invalid):

- the standby leads (prints its gRPC line) within 10 s of the kill;
- every acknowledged submit is in the database exactly once, under the job id it was acked with
  (a submit that failed in the gap is retried with its request_id until acknowledged);
- the running job is re-attached (it ends SUCCEEDED, on the same workers) or FAILED with a reason;
- all 4 workers are IDLE or BUSY under the new leader.

    python bench/failover.py --rounds 10 --out bench/out/2026-11-25-postgres/failover.json

It starts its own PostgreSQL (tests/pgserver.py); tests/integration/test_failover.py runs one
round of the same scenario (`failover_round`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import grpc  # noqa: E402
import psycopg  # noqa: E402

from ringleader_app.client import Client  # noqa: E402
from ringleader.leader import pick_leader  # noqa: E402
from ringleader.security import ClientSecurity  # noqa: E402
from ringleader.v1 import jobs_pb2 as pb  # noqa: E402
from ringleader.v1 import jobs_pb2_grpc  # noqa: E402

LEAD_WITHIN_S = 10.0
BURST = 500


@dataclass
class Coordinator:
    """One `ringleader coordinator` process on the shared database; `lines` its stdout so far."""

    name: str
    grpc: str
    http: str
    proc: subprocess.Popen
    lines: list[str] = field(default_factory=list)
    times: list[float] = field(default_factory=list)  # time.monotonic() of each line

    def wait_line(self, prefix: str, timeout: float) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line, t in zip(list(self.lines), list(self.times)):
                if line.startswith(prefix):
                    return t
            if self.proc.poll() is not None and not any(x.startswith(prefix) for x in self.lines):
                raise AssertionError(f"coordinator {self.name} exited {self.proc.returncode}: {self.lines}")
            time.sleep(0.02)
        raise AssertionError(f"coordinator {self.name}: no {prefix!r} within {timeout} s: {self.lines}")


def free_port() -> int:
    from ports import free_port as fp

    return fp()


def start_coordinator(name: str, dsn: str, tmp: Path, ttl: float, grpc_port: int = 0,
                      http_port: int = 0) -> Coordinator:
    grpc_port, http_port = grpc_port or free_port(), http_port or free_port()
    log = open(tmp / f"coordinator-{name}.log", "ab")
    proc = subprocess.Popen(
        [sys.executable, "-m", "ringleader", "coordinator", "--grpc-address", f"127.0.0.1:{grpc_port}",
         "--http-address", f"127.0.0.1:{http_port}", "--db", dsn, "--lease-ttl", str(ttl)],
        stdout=subprocess.PIPE, stderr=log, text=True)
    log.close()
    c = Coordinator(name, f"127.0.0.1:{grpc_port}", f"http://127.0.0.1:{http_port}", proc)

    def read() -> None:
        for line in proc.stdout:
            c.lines.append(line.strip())
            c.times.append(time.monotonic())

    threading.Thread(target=read, daemon=True).start()
    return c


def start_workers(target: str, tmp: Path, n: int = 4) -> list[subprocess.Popen]:
    procs = []
    for i in range(n):
        log = open(tmp / f"w{i}.log", "ab")
        procs.append(subprocess.Popen([sys.executable, "-m", "ringleader", "--coordinator", target, "worker",
                                       "--device", "cpu", "--worker-id", f"w{i}"],
                                      stdout=log, stderr=log, start_new_session=True))
        log.close()
    return procs


def workers_ready(target: str, ids: set[str], timeout: float) -> float:
    """Seconds until every worker of `ids` is IDLE or BUSY at the leader."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        try:
            with Client(target, timeout_s=2) as client:
                ok = {w.worker_id for w in client.workers() if w.state in (pb.IDLE, pb.BUSY)}
            if ids <= ok:
                return time.monotonic() - start
        except grpc.RpcError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"workers {sorted(ids)} not IDLE/BUSY at the leader within {timeout} s")


class Burst:
    """`n` submits from 8 threads, each retried with its request_id until acknowledged."""

    def __init__(self, target: str, n: int = BURST, threads: int = 8, deadline_s: float = 120) -> None:
        self.target, self.n, self.deadline = target, n, time.monotonic() + deadline_s
        self.acked: dict[str, str] = {}  # request_id -> job id
        self.retries = 0
        self._next = 0
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]

    def start(self) -> "Burst":
        for t in self._threads:
            t.start()
        return self

    def join(self) -> None:
        for t in self._threads:
            t.join(max(0.0, self.deadline - time.monotonic()) + 1)

    def _take(self) -> int:
        with self._lock:
            self._next += 1
            return self._next - 1

    def _run(self) -> None:
        security = ClientSecurity()
        spec = pb.JobSpec(world_size=4, collective=pb.CollectiveSpec(op="all_reduce", sizes=[1024], iters=1))
        address = pick_leader(self.target, security.channel)
        channel = security.channel(address)
        while (i := self._take()) < self.n:
            rid = f"burst-{i}"
            while time.monotonic() < self.deadline:
                try:
                    job = jobs_pb2_grpc.JobServiceStub(channel).SubmitJob(
                        pb.SubmitJobRequest(spec=spec, request_id=rid), timeout=5)
                    self.acked[rid] = job.id
                    break
                except grpc.RpcError:
                    with self._lock:
                        self.retries += 1
                    channel.close()
                    time.sleep(0.2)
                    channel = security.channel(pick_leader(self.target, security.channel, timeout_s=1))
        channel.close()


def check_store(dsn: str, acked: dict[str, str]) -> int:
    """Every acknowledged request_id is one job in the database, the one it was acked with."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT request_id, id FROM jobs WHERE request_id LIKE 'burst-%%'").fetchall()
    stored: dict[str, list[str]] = {}
    for rid, job_id in rows:
        stored.setdefault(rid, []).append(job_id)
    for rid, job_id in acked.items():
        assert stored.get(rid) == [job_id], f"{rid}: acked as {job_id}, stored as {stored.get(rid)}"
    return len(rows)


def running_transitions(dsn: str, job_id: str) -> int:
    """How many times the job's stored events say it started RUNNING (a job run twice: 2)."""
    with psycopg.connect(dsn) as conn:
        blobs = [r[0] for r in conn.execute("SELECT blob FROM events WHERE job_id = %s ORDER BY n", (job_id,))]
    events = [pb.JobEvent.FromString(b) for b in blobs]
    return sum(e.WhichOneof("event") == "state" and e.state.state == pb.RUNNING for e in events)


def long_job_spec() -> pb.JobSpec:
    """The job that runs through the failover: 2 ranks on w0 and w1, many all_reduce iterations."""
    return pb.JobSpec(world_size=2, placement=pb.Placement(worker_ids=["w0", "w1"]),
                      collective=pb.CollectiveSpec(op="all_reduce", sizes=[1 << 12, 1 << 20], iters=3000, warmup=1))


def wait_job(target: str, job_id: str, states, timeout: float) -> pb.Job:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with Client(target, timeout_s=3) as client:
                job = client.get(job_id)
            if job.state in states:
                return job
        except grpc.RpcError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} not in {states} within {timeout} s")


def stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
    for p in procs:
        p.wait()
        if p.stdout:
            p.stdout.close()


def failover_round(dsn: str, tmp: Path, ttl: float = 3.0) -> dict:
    """One round (see the module's docstring); its figures, or AssertionError if a check fails."""
    a = start_coordinator("a", dsn, tmp, ttl)
    a.wait_line("ringleader coordinator: gRPC", 60)
    b = start_coordinator("b", dsn, tmp, ttl)
    b.wait_line("ringleader coordinator: standby", 60)
    target, ids = f"{a.grpc},{b.grpc}", {f"w{i}" for i in range(4)}
    workers = start_workers(target, tmp)
    try:
        workers_ready(target, ids, 120)
        with Client(target) as client:
            running = client.submit(long_job_spec())
        deadline = time.monotonic() + 120
        while wait_job(target, running.id, (pb.RUNNING,), 60).progress.done < 1:  # formed: both ranks run it
            assert time.monotonic() < deadline, "the running job never got going"
            time.sleep(0.05)
        burst = Burst(target).start()
        while len(burst.acked) < 100:  # the burst is in flight
            assert time.monotonic() < burst.deadline, "burst stalled before the kill"
            time.sleep(0.01)
        acked_before = len(burst.acked)
        with Client(a.grpc) as client:  # the scenario: the job still runs when the leader dies
            assert client.get(running.id).state == pb.RUNNING, "the running job ended before the kill"
        killed = time.monotonic()
        a.proc.kill()
        lead_s = b.wait_line("ringleader coordinator: gRPC", 30) - killed
        assert lead_s <= LEAD_WITHIN_S, f"standby led {lead_s:.1f} s after the kill"
        workers_ready(target, ids, 60)
        workers_back_s = time.monotonic() - killed  # from the kill to all 4 back at the new leader
        burst.join()
        assert len(burst.acked) == BURST, f"only {len(burst.acked)} of {BURST} submits acknowledged"
        stored = check_store(dsn, burst.acked)
        done = wait_job(target, running.id, (pb.SUCCEEDED, pb.FAILED, pb.CANCELLED), 300)
        ended_s = time.monotonic() - killed
        if done.state == pb.SUCCEEDED:  # re-attached: it ran on, once, on the workers it started on
            assert sorted(w.worker_id for w in done.workers) == ["w0", "w1"], done.workers
            assert running_transitions(dsn, running.id) == 1, "the running job was started twice"
        else:
            assert done.reason, f"running job ended {pb.JobState.Name(done.state)} without a reason"
        return {"lead_s": round(lead_s, 3), "workers_back_s": round(workers_back_s, 3),
                "acked_before_kill": acked_before, "acked": len(burst.acked), "stored": stored,
                "submit_retries": burst.retries, "running_job": pb.JobState.Name(done.state),
                "running_job_ended_after_kill_s": round(ended_s, 1),
                "running_job_reason": done.reason}
    finally:
        stop([*workers, a.proc, b.proc])


def main() -> None:
    from pgserver import PostgresServer

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--ttl", type=float, default=3.0, help="--lease-ttl of both coordinators")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    server = PostgresServer().start()
    rounds, failures = [], []
    load_before = os.getloadavg()
    try:
        for i in range(args.rounds):
            tmp = server.root / f"round{i}"
            tmp.mkdir()
            try:
                rounds.append(failover_round(server.new_schema(f"round{i}"), tmp, args.ttl))
                print(json.dumps(rounds[-1]), flush=True)
            except AssertionError as exc:
                failures.append(f"round {i}: {exc}")
                print(f"round {i} INVALID: {exc}", flush=True)
    finally:
        server.stop()
    report = {"rounds": rounds, "failures": failures, "lease_ttl_s": args.ttl,
              "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
              "cpus": os.cpu_count(), "machine": platform.node(), "python": platform.python_version()}
    if rounds:
        leads = sorted(r["lead_s"] for r in rounds)
        report["lead_s_max"], report["lead_s_median"] = leads[-1], leads[len(leads) // 2]
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "rounds"}))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
