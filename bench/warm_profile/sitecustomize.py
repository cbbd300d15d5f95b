"""bench/warm_start.py --profile DIR puts this directory on the workers' PYTHONPATH: every process
(daemon, forkserver, executors) then stamps the steps of each job into DIR/PID.ts and profiles
the executor's Run (cProfile, DIR/PID-TIME.prof). Measurement only: it wraps methods, changes
nothing they do."""

import importlib.abc
import importlib.util
import os
import sys
import time

DIR = os.environ.get("RL_WARM_PROFILE", "")


def _stamp(tag: str) -> None:
    with open(os.path.join(DIR, f"{os.getpid()}.ts"), "a") as f:
        f.write(f"{tag} {time.time():.6f}\n")


def _wrap(cls, name: str, before: str, after: str, profile: bool = False) -> None:
    orig = getattr(cls, name)

    def sync(self, *a, **k):
        _stamp(before)
        prof = None
        if profile:
            import cProfile
            prof = cProfile.Profile()
            prof.enable()
        try:
            return orig(self, *a, **k)
        finally:
            if prof:
                prof.disable()
                prof.dump_stats(os.path.join(DIR, f"{os.getpid()}-{time.time():.6f}.prof"))
            _stamp(after)
    setattr(cls, name, sync)


def _patch(module) -> None:
    if module.__name__ == "worker.executor":
        _wrap(module.Executor, "run", "e_run", "e_ran", profile=True)
    else:
        _wrap(module.WorkerDaemon, "on_executor", "d_exec_msg", "d_exec_msg_done")
        orig = module.WorkerDaemon._assign

        async def assign(self, a):
            _stamp("d_assign")
            await orig(self, a)
            _stamp("d_assigned")
        module.WorkerDaemon._assign = assign


class _Hook(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in ("worker.executor", "worker.daemon"):
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _patch(module)
        spec.loader.exec_module = exec_module
        return spec


if DIR:
    sys.meta_path.insert(0, _Hook())
