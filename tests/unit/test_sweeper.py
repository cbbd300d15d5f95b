"""Which check jobs a request or a sweep plans (coordinator/health/sweeper.py's pure part)."""

from __future__ import annotations

import pytest

from coordinator.health import sweeper
from ringleader import checks
from ringleader.errors import InvalidSpec, NotFound
from ringleader.v1 import jobs_pb2 as pb


def _w(wid, host="h0", backend="gloo", state=pb.IDLE, index=0):
    return pb.WorkerInfo(worker_id=wid, host=host, backend=backend, state=state, device=pb.Device(index=index))


FLEET = [_w("g1", "h1", "nccl", index=1), _w("g0", "h1", "nccl"), _w("c0"), _w("c1", "h2"),
         _w("gone", state=pb.DISCONNECTED), _w("q", "h2", state=pb.QUARANTINED)]


def test_a_request_names_workers_a_host_or_all_connected():
    assert [w.worker_id for w in sweeper.chosen(FLEET)] == ["g1", "g0", "c0", "c1", "q"]
    assert [w.worker_id for w in sweeper.chosen(FLEET, host="h2")] == ["c1", "q"]
    assert [w.worker_id for w in sweeper.chosen(FLEET, ["q", "c0"], host="h2")] == ["q", "c0"]
    with pytest.raises(NotFound, match="gone"):
        sweeper.chosen(FLEET, ["c0", "gone"])


def test_one_job_per_kind_and_backend_at_the_lowest_priority():
    specs = sweeper.plan(sweeper.chosen(FLEET))
    got = [(s.WhichOneof("kind"), list(s.placement.worker_ids)) for s in specs]
    assert got == [("link_matrix", ["c0", "c1", "q"]), ("link_matrix", ["g0", "g1"]),
                   ("gpu_check", ["c0", "c1", "q"]), ("gpu_check", ["g0", "g1"]),
                   ("sdc_check", ["c0", "c1", "q"]), ("sdc_check", ["g0", "g1"])]
    assert all(s.priority == checks.CHECK_PRIORITY and s.world_size == len(s.placement.worker_ids) for s in specs)
    assert specs[0].link_matrix == sweeper.short("link_matrix")


def test_settings_given_win_and_a_lone_worker_has_no_link_to_check():
    request = pb.RunCheckRequest(link_matrix=pb.LinkMatrixSpec(size_bytes=4096))
    specs = sweeper.plan([_w("c0"), _w("g0", backend="nccl"), _w("g1", backend="nccl")], ["link_matrix", "gpu_check"],
                         request)
    assert [(s.WhichOneof("kind"), s.world_size) for s in specs] == [("link_matrix", 2), ("gpu_check", 1),
                                                                    ("gpu_check", 2)]
    assert specs[0].link_matrix.size_bytes == 4096 and specs[1].gpu_check == sweeper.short("gpu_check")
    with pytest.raises(InvalidSpec) as e:
        sweeper.plan(FLEET, ["link_matrix", "nope"])
    assert e.value.field == "kinds"


def _h(wid, verdict, check="gpu_check", host="h0", state=pb.IDLE, model="H100", backend="nccl"):
    return pb.WorkerInfo(worker_id=wid, host=host, backend=backend, state=state,
                         device=pb.Device(name=model, index=int(wid[-1])),
                         health=pb.WorkerHealth(verdict=verdict, check=check))


def test_a_recheck_runs_only_the_failed_check_on_the_worker_and_two_healthy_peers():
    from coordinator.health import recheck

    fleet = [_h("a0", pb.HEALTHY), _h("a1", pb.UNHEALTHY), _h("a2", pb.HEALTHY), _h("a3", pb.HEALTHY),
             _h("a4", pb.HEALTHY, state=pb.BUSY), _h("a5", pb.SUSPECT), _h("b6", pb.HEALTHY, model="A100"),
             _h("c7", pb.UNHEALTHY, check="sdc_check", state=pb.QUARANTINED), _h("c8", pb.UNHEALTHY, check="cordon"),
             _h("a9", pb.UNHEALTHY, state=pb.QUARANTINED)]
    specs = recheck.plan(fleet, ["a1", "c7", "c8", "a9"], sweeper.short)
    # a1: its gpu_check with two idle HEALTHY peers of its model, in a job of its own; c7's
    # sdc_check finds no two healthy peers left idle (a0, a2 are taken, a3 alone), so it waits for
    # the next round; a9 gets a job of its own with the peer left rather than share a1's; c8 was
    # cordoned: nothing to rerun.
    assert [(s.WhichOneof("kind"), list(s.placement.worker_ids)) for s in specs] == [
        ("gpu_check", ["a0", "a1", "a2"]), ("gpu_check", ["a3", "a9"])]
    assert specs[0].priority == checks.CHECK_PRIORITY and specs[0].gpu_check == sweeper.short("gpu_check")
    later = recheck.plan(fleet, ["c7", "a9"], sweeper.short)
    assert [list(s.placement.worker_ids) for s in later] == [["a0", "a2", "c7"], ["a3", "a9"]]
    assert later[0].HasField("sdc_check") and later[1].HasField("gpu_check")


def _fleet(hosts: dict[str, tuple[int, str]], backend="nccl") -> list[pb.WorkerInfo]:
    """{host: (workers, model)} as connected workers h-i."""
    return [pb.WorkerInfo(worker_id=f"{h}-{i}", host=h, backend=backend, state=pb.IDLE,
                          device=pb.Device(name=model, index=i)) for h, (n, model) in hosts.items() for i in range(n)]


def test_a_large_backend_is_checked_in_gangs_of_whole_hosts_of_one_model():
    # 9 hosts of 8 H100 (72 workers), 2 hosts of 8 A100 and one host of 2 more A100.
    hosts = {f"h{k}": (8, "H100") for k in range(9)} | {"a0": (8, "A100"), "a1": (8, "A100"), "a2": (2, "A100")}
    workers = _fleet(hosts)
    found = sweeper.gangs(sorted(workers, key=lambda w: (w.host, w.device.index)))
    model = {w.worker_id: w.device.name for w in workers}
    assert sorted(w for g in found for w in g) == sorted(w.worker_id for w in workers)  # each once
    assert all(len({model[w] for w in g}) == 1 for g in found)  # one model a gang
    host_gangs = {}
    for n, g in enumerate(found):
        for w in g:
            host_gangs.setdefault(w.split("-")[0], set()).add(n)
    assert all(len(v) == 1 for v in host_gangs.values())  # a host is never split
    # A100: 18 workers, one gang; H100's 72: three of 3 hosts each, not 32 + 32 + a lone host.
    assert sorted(len(g) for g in found) == [18, 24, 24, 24]
    assert all(len({w.split("-")[0] for w in g}) >= 2 for g in found)  # every gang's links cross hosts


def test_a_host_larger_than_a_gang_is_split_and_a_remnant_joins_the_last_gang():
    workers = _fleet({"big": (sweeper.GANG_MAX * 2 + 2, "cpu")}, backend="gloo")
    found = sweeper.gangs(workers)
    assert [len(g) for g in found] == [sweeper.GANG_MAX, sweeper.GANG_MAX + 2]  # 2 alone could form no majority


def test_a_small_backend_stays_one_job_and_a_large_one_becomes_named_gangs():
    small = _fleet({"h0": (8, "H100"), "h1": (8, "H100")})
    assert [s.world_size for s in sweeper.plan(small, ["gpu_check"])] == [16]
    large = _fleet({f"h{k}": (8, "H100") for k in range(5)}) + _fleet({"c0": (4, "cpu")}, backend="gloo")
    specs = sweeper.plan(large, ["gpu_check", "link_matrix"])
    assert [(s.WhichOneof("kind"), s.world_size, s.name) for s in specs] == [
        ("gpu_check", 4, "check gpu_check"),
        ("gpu_check", 24, "check gpu_check nccl 1/2"), ("gpu_check", 16, "check gpu_check nccl 2/2"),
        ("link_matrix", 4, "check link_matrix"),
        ("link_matrix", 24, "check link_matrix nccl 1/2"), ("link_matrix", 16, "check link_matrix nccl 2/2")]
    assert all(s.priority == checks.CHECK_PRIORITY and list(s.placement.worker_ids) for s in specs)


def test_a_fleet_wide_check_lets_the_loop_turn_every_few_gangs_while_it_validates_and_submits(monkeypatch):
    """RunCheck over 2,000 workers (63 gangs of 3 kinds): a ticker on the same loop gets a turn at
    least every SUBMIT_TURN specs checked and every SUBMIT_TURN jobs submitted; each spec is
    checked against its own gang's workers only. The core is a stand-in recording submits."""
    import asyncio

    fleet = [_w(f"w{i}", f"h{i // 8}", "gloo", index=i % 8) for i in range(2000)]
    checked, submitted, seen = [], [], []
    real_fits = sweeper.fits_devices

    def fits(spec, workers):
        checked.append(len(workers))
        return real_fits(spec, workers)

    monkeypatch.setattr(sweeper, "fits_devices", fits)

    class Core:
        def submit(self, spec):
            submitted.append(spec)
            return pb.Job(id=str(len(submitted)))

        async def durable(self):
            pass

    class Fleet:
        async def all_workers_paced(self):
            return fleet

    async def run():
        done = False

        async def ticker():
            while not done:
                seen.append((len(checked), len(submitted)))
                await asyncio.sleep(0)

        tick = asyncio.ensure_future(ticker())
        await asyncio.sleep(0)
        answer = await sweeper.run_check(Core(), Fleet(), pb.RunCheckRequest())
        done = True
        await tick
        return answer

    answer = asyncio.run(run())
    n = len(answer.jobs)
    assert n == len(checked) == len(submitted) > 3 * sweeper.SUBMIT_TURN
    assert max(checked) <= sweeper.GANG_MAX + sweeper.MIN_GANG  # a gang's workers, not the fleet
    steps = [(b[0] - a[0], b[1] - a[1]) for a, b in zip(seen, seen[1:])]
    assert max(c for c, _ in steps) <= sweeper.SUBMIT_TURN and max(s for _, s in steps) <= sweeper.SUBMIT_TURN
