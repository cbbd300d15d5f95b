"""The processes of a test's own torch.distributed group (tests/unit run ranks by hand).

Forked from one forkserver that imported torch once for the session, as the worker daemon's
executors are (worker/supervisor.py): a spawned rank imported torch anew each time, 2 s of CPU
and more on a busy 2-core machine, and the unit tests start about fifteen. A rank still starts
from a clean process (no state of the pytest process), and its target is a module-level function."""

import multiprocessing

PRELOAD = ["torch", "torch.distributed"]


def rank_context():
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)  # takes effect when the session's forkserver starts
    return ctx


def run_ranks(target, n: int, tmp, timeout: float = 120, args=()) -> list[dict]:
    """Run `target(rank, port, path, *args)` in n processes of one group (a free loopback port
    for its store) and return each rank's JSON payload, in rank order. A rank that wrote nothing,
    or a payload with a "traceback", fails the test naming the rank."""
    import json

    import pytest
    from ports import free_port

    ctx = rank_context()
    port = free_port()
    paths = [str(tmp / f"rank{r}.json") for r in range(n)]
    procs = [ctx.Process(target=target, args=(r, port, paths[r], *args)) for r in range(n)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=timeout)
        if p.is_alive():
            p.kill()
            p.join()
    out = []
    for r, path in enumerate(paths):
        try:
            with open(path) as f:
                payload = json.load(f)
        except FileNotFoundError:
            pytest.fail(f"rank {r} wrote nothing (exit code {procs[r].exitcode})")
        assert "traceback" not in payload, f"rank {r} failed:\n{payload['traceback']}"
        out.append(payload)
    return out
