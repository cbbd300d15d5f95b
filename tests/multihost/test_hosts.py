"""gloo across hosts made of network namespaces (netbed.py): the coordinator on h0, workers w1-w3
on h1-h3, reached only over the bridge; run open (--insecure) and with both tokens and mTLS.

Jobs of 2 and 3 ranks across hosts; each worker advertises the address it reaches the coordinator
from, and its collectives leave on the interface holding it; a host whose cable is pulled mid-job
fails that job within 15 s, naming the rank and worker, the others are idle again, and no job is
lost; once the cable is back the worker reconnects by itself within 30 s and the next jobs run.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from hostcluster import FAIL_LIMIT_S, MODES, RECONNECT_LIMIT_S, TIMINGS, bed_cluster, cut_off_mid_job
from ringleader.v1 import jobs_pb2 as pb

pytestmark = pytest.mark.multihost

WORKERS = {"w1": "h1", "w2": "h2", "w3": "h3"}


@pytest.fixture(scope="module", params=MODES)
def hosts(request, tmp_path_factory):
    with bed_cluster(tmp_path_factory.mktemp(request.param.replace("+", "-")), request.param, WORKERS) as (bed, c):
        yield request.param, bed, c


def test_jobs_of_two_and_three_ranks_across_hosts(hosts):
    mode, bed, c = hosts
    infos = {w.worker_id: w for w in c.client.workers()}
    for wid, host in WORKERS.items():
        assert (infos[wid].host, infos[wid].address) == (host, bed.ip(host)), infos[wid]
    for ids, op in ((["w1", "w2"], "all_reduce"), (["w1", "w2", "w3"], "all_reduce"), (["w3", "w1", "w2"], "all_gather")):
        job = c.wait_job(c.submit(world_size=len(ids), workers=ids, op=op, sizes=[1024, 1 << 20]).id)
        assert job.state == pb.SUCCEEDED, job.reason
        assert job.backend == "gloo"
        assert [r.wrong for r in job.results] == [0, 0]
        assert sorted(w.host for w in job.workers) == sorted(WORKERS[i] for i in ids)


def test_collectives_leave_on_the_interface_holding_the_advertised_address(hosts):
    """What worker/netif.py picks inside a host that has two networks, and that an operator's
    own choice wins (the jobs above ran on it: a host name these hosts cannot resolve would
    have sent gloo to loopback)."""
    mode, bed, c = hosts
    probe = ("import sys; from worker.netif import interface_of, pin_interfaces; env = {'NCCL_SOCKET_IFNAME': 'ib0'}; "
             "pin_interfaces(sys.argv[1], env); print(interface_of(sys.argv[1]), interface_of('192.0.2.11'), "
             "env['GLOO_SOCKET_IFNAME'], env['NCCL_SOCKET_IFNAME'])")
    out = subprocess.run(bed.command("h1", [sys.executable, "-c", probe, bed.ip("h1")]), capture_output=True,
                         text=True, timeout=60)
    assert out.stdout.split() == ["eth0", "mgmt0", "eth0", "ib0"], out.stderr


def test_a_host_cut_off_mid_job_fails_it_then_comes_back(hosts):
    mode, bed, c = hosts
    fail_s, reconnect_s = cut_off_mid_job(c, bed, WORKERS, victim="w3", sizes=[4 << 20])
    TIMINGS.append(f"gloo, 3 ranks, {mode}: job failed {fail_s:.1f} s after the cable was pulled "
                   f"(limit {FAIL_LIMIT_S:.0f} s); worker back {reconnect_s:.1f} s after it was plugged in "
                   f"(limit {RECONNECT_LIMIT_S:.0f} s)")
