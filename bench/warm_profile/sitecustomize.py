"""bench/warm_start.py --profile DIR puts this directory on every process's PYTHONPATH: the
coordinator, the daemons, their forkservers and executors then stamp each step of a job into
DIR/PID.ts ("tag unix-time" lines), which warm_start.py lines up against each job's started_at.
Measurement only: it wraps functions and changes nothing they do. A stamp costs a list append;
the buffer goes to disk when a job ends in that process (off the path it measures)."""

import importlib.abc
import importlib.util
import inspect
import os
import sys
import time

DIR = os.environ.get("RL_WARM_PROFILE", "")
_buf: list[str] = []
_FLUSH = {"e_run>", "d_done_sent", "c_end"}


def _stamp(tag: str) -> None:
    _buf.append(f"{tag} {time.time():.6f}\n")
    if tag in _FLUSH or len(_buf) > 500:
        with open(os.path.join(DIR, f"{os.getpid()}.ts"), "a") as f:
            f.writelines(_buf)
        _buf.clear()


def _around(owner, name: str, tag: str, label=None) -> None:
    """Stamp `tag<` and `tag>` around owner.name (a function or method; async too); `label(*args)`
    adds to the tag (a message's kind)."""
    orig = getattr(owner, name, None)
    if orig is None:  # renamed since: say so rather than stop the process being measured
        sys.stderr.write(f"warm_profile: {getattr(owner, '__name__', owner)}.{name} not found, not stamped\n")
        return
    if inspect.iscoroutinefunction(orig):
        async def wrapped(*a, **k):
            _stamp(tag + "<")
            try:
                return await orig(*a, **k)
            finally:
                _stamp(tag + ">")
    else:
        def wrapped(*a, **k):
            t = tag + (label(*a) if label else "")
            _stamp(t + "<")
            try:
                return orig(*a, **k)
            finally:
                _stamp(t + ">")
    setattr(owner, name, wrapped)


def _msg_kind(msg) -> str:
    return "_" + (msg.WhichOneof("msg") if hasattr(msg, "WhichOneof") else "gone")


def _patch(m) -> None:
    n = m.__name__
    if n == "worker.executor":
        _around(m.Executor, "run", "e_run")  # e_run< ... e_run>: the Run message's whole handling
        _around(m.Executor, "_run", "e_job")
    elif n == "worker.collectives":
        for f, t in (("measure", "measure"), ("summarize", "summarize"), ("sync", "sync"),
                     ("time_loop", "loop"), ("check_fits", "fits"), ("_plan", "plan")):
            _around(m, f, t)
        _around(m.datacheck, "count_wrong", "wrong")
        _around(m.OpSetup, "fill", "fill")
        _around(m.OpSetup, "__init__", "setup")
    elif n == "worker.kinds":
        _around(m.RunContext, "progress", "progress")
    elif n == "worker.daemon":
        _around(m.WorkerDaemon, "_assign", "d_assign")
        orig = m.WorkerDaemon.on_executor

        def on_executor(self, handle, msg):
            _stamp("d_" + type(msg).__name__)
            orig(self, handle, msg)
            if type(msg).__name__ == "Done":
                _stamp("d_done_sent")
        m.WorkerDaemon.on_executor = on_executor
    elif n == "coordinator.core.jobs":
        _around(m.JobBook, "start", "c_start")
        orig_t = m.JobBook.transition

        def transition(self, job, to, reason):
            orig_t(self, job, to, reason)
            _stamp("c_end" if to in (3, 4, 5) else f"c_state{to}")  # SUCCEEDED, FAILED, CANCELLED
        m.JobBook.transition = transition
    elif n == "coordinator.shell.facade":
        _around(m.Coordinator, "submit", "c_submit")
        _around(m.Coordinator, "_commit", "c_commit")
    elif n == "coordinator.edge.worker_stream":
        _around(m.Inbox, "put", "c_in", label=lambda self, conn, msg, *r: _msg_kind(msg))
        _around(m.Inbox, "_apply", "c_apply", label=lambda self, conn, msg, *r: _msg_kind(msg))
        _around(m, "_deliver", "c_edge_out")
        _around(m.Inbox, "_drain", "c_drain")
    elif n == "coordinator.edge.watch":  # a job's terminal event: handed over on the core, taken on the edge
        orig_soon = m._call_soon

        def call_soon(loop, fn, *args):
            batch = args[1] if len(args) == 2 and isinstance(args[1], list) else args[:1]
            event = batch[-1] if batch else None
            if getattr(event, "WhichOneof", None) and event.WhichOneof("event") == "state" \
                    and event.state.state in (3, 4, 5):
                _stamp("c_watch_deliver")

                def on_edge(*a):
                    _stamp("c_watch_edge")
                    fn(*a)
                return orig_soon(loop, on_edge, *args)
            return orig_soon(loop, fn, *args)
        m._call_soon = call_soon


MODULES = {"worker.executor", "worker.daemon", "worker.collectives", "worker.kinds", "coordinator.core.jobs",
           "coordinator.shell.facade", "coordinator.edge.worker_stream", "coordinator.edge.watch"}


class _Hook(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in MODULES:
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
