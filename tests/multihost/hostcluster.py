"""A ringleader cluster across a bed's hosts: the coordinator on h0, workers on the others.

Three ways to run it: "open" (no tokens, no TLS: the coordinator must be told --insecure, since
it listens off loopback), "tokens" (both tokens, no TLS) and "tokens+mtls" (both tokens, TLS,
client certificates from `ringleader certs` in tmp/pki: h0's address in the server's, one per
worker naming its id, worker-ID.pem, and the test's client's, a user's). The coordinator also
serves HTTP on h0 (its /metrics).
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Callable, Iterator, Sequence

import pytest

from cluster import Cluster
from netbed import NetBed, unavailable
from ringleader_app.certs import worker_files, write_cluster_files
from ringleader.security import ClientSecurity, TlsFiles
from ringleader.v1 import jobs_pb2 as pb

MODES = ("open", "tokens+mtls")
FAIL_LIMIT_S, RECONNECT_LIMIT_S = 15.0, 30.0
TIMINGS: list[str] = []  # what the partition tests measured, printed at the end of the run (conftest.py)


def need_bed() -> None:
    """Skip a test that needs a bed where none can be built; fail it instead when the run
    requires the bed (RINGLEADER_REQUIRE_MULTIHOST=1, set by .ci/run as root)."""
    why = unavailable()
    if why and os.environ.get("RINGLEADER_REQUIRE_MULTIHOST") == "1":
        pytest.fail(f"RINGLEADER_REQUIRE_MULTIHOST=1 but the multihost bed cannot run: {why}")
    if why:
        pytest.skip(f"multihost bed: {why}")


@contextlib.contextmanager
def bed_cluster(tmp: Path, mode: str, workers: dict[str, str], device_of: Callable[[str], str] = lambda wid: "cpu",
                env_of: Callable[[str], dict | None] = lambda wid: None,
                coordinator_extra: Sequence[str] = ()) -> Iterator[tuple[NetBed, Cluster]]:
    """A bed of h0 and the workers' hosts (h1, h2, ...), the coordinator on h0 and `workers`
    (worker id -> host), all idle; each worker on its device, with more environment variables
    (NCCL_HOSTID, ...) where `env_of` gives some. Everything is gone after the block."""
    need_bed()
    bed = NetBed.create(hosts=1 + len(set(workers.values())))
    try:
        c = start_cluster(bed, tmp, mode, workers, device_of, env_of, coordinator_extra)
        try:
            yield bed, c
        finally:
            c.close()
    finally:
        bed.remove()


def cert_flags(pki: Path, worker_id: str) -> list[str]:
    """A worker's own certificate (tokens+mtls): `ringleader certs --worker ID` wrote it."""
    pem, key = worker_files(worker_id)
    if not (pki / pem).exists():
        write_cluster_files(pki, workers=[worker_id])
    return ["--tls-cert", str(pki / pem), "--tls-key", str(pki / key)]


def start_cluster(bed: NetBed, tmp: Path, mode: str, workers: dict[str, str], device_of: Callable[[str], str],
                  env_of: Callable[[str], dict | None], coordinator_extra: Sequence[str] = ()) -> Cluster:
    coordinator_flags, worker_flags, security, pki = ["--insecure"], [], None, tmp / "pki"
    if mode in ("tokens", "tokens+mtls"):
        write_cluster_files(pki, [bed.ip("h0")])
        users = (pki / "users.token").read_text().strip()
        coordinator_flags = ["--token-file", str(pki / "users.token"), "--worker-token-file", str(pki / "workers.token")]
        worker_flags = ["--token-file", str(pki / "workers.token")]
        security = ClientSecurity(users)
    if mode == "tokens+mtls":
        security = ClientSecurity(users, TlsFiles(str(pki / "ca.pem"), str(pki / "client.pem"), str(pki / "client.key")))
        coordinator_flags += ["--tls-cert", str(pki / "server.pem"), "--tls-key", str(pki / "server.key"),
                              "--tls-client-ca", str(pki / "ca.pem")]
        worker_flags += ["--tls-ca", str(pki / "ca.pem")]
    c = Cluster(tmp, security, worker_flags)
    try:
        c.start_coordinator(host=bed.ip("h0"), extra=[*coordinator_flags, *coordinator_extra], prefix=bed.command("h0", []),
                            http=True)
        for wid, host in workers.items():
            env = env_of(wid)
            c.start_worker(wid, device=device_of(wid), prefix=bed.command(host, []),
                           env=None if env is None else {**os.environ, **env},
                           extra=cert_flags(pki, wid) if mode == "tokens+mtls" else ())
        c.wait_idle(workers, timeout=240)
    except BaseException:
        c.close()
        raise
    return c


def wait_until(check, timeout: float, what: str, step: float = 0.05):
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout} s")
        time.sleep(step)
    return value


def worker_state(c: Cluster, worker_id: str) -> int:
    return next((w.state for w in c.client.workers() if w.worker_id == worker_id), pb.WORKER_STATE_UNSPECIFIED)


def cut_off_mid_job(c: Cluster, bed: NetBed, workers: dict[str, str], victim: str,
                    sizes: list[int]) -> tuple[float, float]:
    """Pull `victim`'s cable while a job on all `workers` runs; check the job fails within
    FAIL_LIMIT_S naming the victim and its rank, that the others are idle again, that a job
    needing the victim waits, and, once the cable is back, that the victim reconnects within
    RECONNECT_LIMIT_S by itself and the waiting and the next job run with no job lost. Returns
    (seconds from the cut to the failure, from the plug to the reconnection)."""
    members, rank = list(workers), list(workers).index(victim)
    others = [w for w in members if w != victim]
    c.wait_idle(members, timeout=120)
    long = c.submit(world_size=len(members), workers=members, op="all_reduce", sizes=sizes, iters=100_000,
                    warmup=1)
    c.wait_job(long.id, states={pb.RUNNING}, timeout=120)
    time.sleep(3)  # the group forms and the timed loop is under way

    cut = time.monotonic()
    bed.set_link(workers[victim], up=False)
    try:
        failed = c.wait_job(long.id, timeout=60)
        fail_s = time.monotonic() - cut
        assert failed.state == pb.FAILED
        assert failed.reason.startswith(f"rank {rank} (worker {victim}) lost"), failed.reason
        assert fail_s < FAIL_LIMIT_S, fail_s
        c.wait_idle(others, timeout=60)
        assert worker_state(c, victim) == pb.DISCONNECTED
        # A job that needs the lost host waits for it rather than being dropped.
        waiting = c.submit(world_size=len(members), workers=members, op="all_gather", sizes=[4096, 1 << 20])
        time.sleep(1)
        assert c.client.get(waiting.id).state == pb.QUEUED
        # The cut lasts until the victim itself has given its stream up (keepalive), so that it
        # comes back through its own reconnection, not by a TCP connection that merely resumes.
        log = c.tmp / f"{victim}.log"
        wait_until(lambda: "unreachable" in log.read_text(), 60, f"{victim} notices the cut", step=0.2)
    finally:
        plugged = time.monotonic()
        bed.set_link(workers[victim], up=True)

    wait_until(lambda: worker_state(c, victim) in (pb.IDLE, pb.BUSY), RECONNECT_LIMIT_S, f"{victim} reconnects")
    reconnect_s = time.monotonic() - plugged
    done = c.wait_job(waiting.id, timeout=180)
    assert done.state == pb.SUCCEEDED, done.reason
    assert [r.wrong for r in done.results] == [0, 0]
    after = c.wait_job(c.submit(world_size=len(members), workers=members, op="all_reduce", sizes=[1 << 20]).id,
                       timeout=180)
    assert after.state == pb.SUCCEEDED, after.reason
    listed = {j.id: j.state for j in c.client.list(limit=1000).jobs}
    assert (listed[long.id], listed[waiting.id], listed[after.id]) == (pb.FAILED, pb.SUCCEEDED, pb.SUCCEEDED)
    c.wait_idle(members, timeout=60)
    return fail_s, reconnect_s
