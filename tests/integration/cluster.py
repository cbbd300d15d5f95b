"""A real coordinator and real worker daemons as separate processes on loopback (gloo on CPU)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Sequence

from ringleader_app.client import Client
from ringleader.security import ClientSecurity
from ringleader.states import TERMINAL
from ringleader.v1 import jobs_pb2 as pb

# Between two looks at the coordinator while waiting for a state: a look costs it well under a
# millisecond, and a test of 200 cancels waited out 0.1 s each time.
POLL_S = 0.02
# The workers' reconnect backoff cap (--reconnect-max; 5 s by default): on loopback a dial costs
# little, and the tests that restart a coordinator or admit a refused daemon wait for its workers
# to come back, up to the cap each time.
RECONNECT_MAX_S = "0.5"
# A coordinator's grace at SIGTERM (--drain-timeout; 5 s by default): the workers' streams are
# calls in flight until it ends, so every graceful stop with workers connected waits all of it.
DRAIN_S = "1"


def ringleader_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "ringleader", *args]


@contextlib.contextmanager
def running(tmp: Path, worker_ids, http: bool = False):
    """A started cluster (Cluster.start) for the length of a `with` block or a fixture."""
    c = Cluster(tmp)
    try:
        c.start(worker_ids, http=http)
        yield c
    finally:
        c.close()


class Cluster:
    """`security`: how the test's own client reaches the coordinator (the users' token, TLS);
    `worker_flags`: what every worker is started with (the workers' token, TLS)."""

    def __init__(self, tmp: Path, security: ClientSecurity | None = None, worker_flags: Sequence[str] = ()) -> None:
        self.tmp = tmp
        self.security = security
        self.worker_flags = list(worker_flags)
        self.db = str(tmp / "jobs.db")
        self.address = ""
        self.worker_address = ""  # the coordinator's worker relay (--worker-address), where it has one
        self.http_url = ""
        self.coordinator: subprocess.Popen | None = None
        self.workers: dict[str, subprocess.Popen] = {}
        self._client: Client | None = None

    # ---- processes -------------------------------------------------------------------------

    def start_coordinator(self, port: int = 0, http: bool = False, extra: Sequence[str] = (),
                          host: str = "127.0.0.1", prefix: Sequence[str] = (), relay: bool = False) -> str:
        """Start it; with `http`, also the dashboard on a free port (its URL in self.http_url).
        `extra`: more coordinator flags (tokens, TLS); `prefix`: what runs the command (another
        host of tests/multihost's bed), `host` the address it listens on there; `relay`: workers
        started later connect to its worker relay (self.worker_address)."""
        if relay:
            extra = [*extra, "--worker-address", f"{host}:0"]
        log = open(self.tmp / "coordinator.log", "ab")
        self.coordinator = subprocess.Popen(
            [*prefix, *ringleader_cmd("coordinator", "--grpc-address", f"{host}:{port}",
                                      "--http-address", f"{host}:0" if http else "", "--db", self.db,
                                      "--drain-timeout", DRAIN_S, *extra)],
            stdout=subprocess.PIPE, stderr=log, text=True)
        log.close()
        line = _readline_with_timeout(self.coordinator, 60)
        assert line.startswith("ringleader coordinator: gRPC "), line
        # "ringleader coordinator: gRPC HOST:PORT[, HTTP URL]"
        self.address = line.split()[3].rstrip(",")
        self.http_url = line.split()[-1] if http else ""
        self.worker_address = ""
        if relay:  # "ringleader coordinator: workers HOST:PORT (relay)"
            said = _readline_with_timeout(self.coordinator, 60)
            assert said.startswith("ringleader coordinator: workers "), said
            self.worker_address = said.split()[3]
        self._client = None
        return self.address

    def start(self, worker_ids, http: bool = False, port: int = 0) -> str:
        """A coordinator and CPU workers with these ids, all idle; returns the gRPC address."""
        address = self.start_coordinator(port=port, http=http)
        for wid in worker_ids:
            self.start_worker(wid)
        self.wait_idle(worker_ids)
        return address

    def kill_during(self, job_id: str, worker_id: str, settle_s: float = 1.5, timeout: float = 30):
        """Kill a worker once the job runs (and has settled into its loop); returns the finished
        job and the seconds from the kill to its end."""
        self.wait_job(job_id, states=(pb.RUNNING,))
        time.sleep(settle_s)
        killed_at = time.monotonic()
        self.kill_worker(worker_id)
        done = self.wait_job(job_id, timeout=timeout)
        return done, time.monotonic() - killed_at

    def stop_coordinator(self, sig: int = signal.SIGTERM) -> None:
        self.coordinator.send_signal(sig)
        self.coordinator.wait(30)
        self.coordinator.stdout.close()

    def start_worker(self, worker_id: str, device: str = "cpu", metrics_address: str = "",
                     extra: Sequence[str] = (), prefix: Sequence[str] = (), env: dict | None = None) -> subprocess.Popen:
        """`extra`: flags beyond self.worker_flags; `prefix`, as for the coordinator; `env`:
        variables over this process's environment."""
        log = open(self.tmp / f"{worker_id}.log", "ab")
        extra = [*(["--metrics-address", metrics_address] if metrics_address else []), "--reconnect-max", RECONNECT_MAX_S,
                 *self.worker_flags, *extra]
        p = subprocess.Popen([*prefix, *ringleader_cmd("--coordinator", self.worker_address or self.address, "worker", "--device", device,
                                                       "--worker-id", worker_id, *extra)],
                             stdout=log, stderr=log, start_new_session=True,
                             env={**os.environ, **env} if env else None)
        log.close()
        self.workers[worker_id] = p
        return p

    def kill_worker(self, worker_id: str) -> None:
        p = self.workers.pop(worker_id)
        p.kill()
        p.wait()

    def close(self) -> None:
        for p in self.workers.values():
            p.terminate()
        if self.coordinator and self.coordinator.poll() is None:
            self.coordinator.terminate()
        for p in [*self.workers.values(), self.coordinator]:
            if p is None:
                continue
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if self.coordinator and not self.coordinator.stdout.closed:
            self.coordinator.stdout.close()
        if self._client:
            self._client.close()

    # ---- client helpers --------------------------------------------------------------------

    @property
    def client(self) -> Client:
        if self._client is None:
            self._client = Client(self.address, security=self.security)
        return self._client

    def wait_idle(self, ids, timeout: float = 90) -> None:
        ids = set(ids)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            idle = {w.worker_id for w in self.client.workers() if w.state == pb.IDLE}
            if ids <= idle:
                return
            time.sleep(POLL_S)
        raise AssertionError(f"workers {sorted(ids - idle)} not idle after {timeout} s; see {self.tmp}")

    def submit(self, world_size: int = 2, workers=(), **collective) -> pb.Job:
        collective.setdefault("sizes", [1024, 65536])
        collective.setdefault("iters", 3)
        collective.setdefault("warmup", 1)
        spec = pb.JobSpec(world_size=world_size, placement=pb.Placement(worker_ids=list(workers)),
                          collective=pb.CollectiveSpec(**collective))
        return self.client.submit(spec)

    def wait_job(self, job_id: str, states=TERMINAL, timeout: float = 120) -> pb.Job:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            job = self.client.get(job_id)
            if job.state in states:
                return job
            time.sleep(POLL_S)
        raise AssertionError(f"job {job_id} still {pb.JobState.Name(job.state)} ({job.reason}) after {timeout} s")


def descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/task/{p}/children") as f:
                kids = [int(x) for x in f.read().split()]
        except OSError:
            continue
        out += kids
        todo += kids
    return out


def executor_pid(daemon_pid: int, timeout: float = 30) -> int:
    """The pid of a daemon's executor (forked by the daemon's forkserver, named rl-executor)."""
    deadline = time.monotonic() + timeout
    while True:
        found = []
        for p in descendants(daemon_pid):
            try:
                if Path(f"/proc/{p}/comm").read_text().strip() == "rl-executor":
                    found.append(p)
            except OSError:
                continue
        if len(found) == 1 or time.monotonic() > deadline:
            assert len(found) == 1, found
            return found[0]
        time.sleep(0.05)


def _readline_with_timeout(proc: subprocess.Popen, timeout: float) -> str:
    out: list[str] = []
    t = threading.Thread(target=lambda: out.append(proc.stdout.readline()), daemon=True)
    t.start()
    t.join(timeout)
    if not out:
        proc.kill()
        raise AssertionError("coordinator did not start")
    return out[0].strip()

