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
