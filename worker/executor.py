"""The executor: a child process of the daemon that owns the device and the process group.

It talks to its daemon over a multiprocessing Pipe (pickled dicts) and to its peers over
NCCL or gloo. It keeps its process group between jobs while the coordinator sends the same
group key (a warm group), so such jobs start without a new rendezvous. Any failure inside a
job destroys the group: its state is unknown after an error.

Messages up:   ready{device}, progress{job_id, done, total, size_bytes}, result{job_id, result},
               done{job_id, ok, error, failure ("rank" or "peer"), warm_group, warm_start, results,
                    outcome: (kind, serialized outcome message) of a non-collective job, rank 0 only}
Messages down: run{assignment: serialized Assignment}, exit
"""

from __future__ import annotations

import datetime
import os
import platform
import traceback

STORE_TIMEOUT_S = 60  # how long ranks wait for each other at rendezvous
# Errors that a rank sees when a peer dies or hangs: reported as "peer" so the coordinator
# looks for the rank that caused them before blaming this one.
PEER_ERROR_MARKERS = ("Connection reset by peer", "Connection closed by peer", "Broken pipe",
                      "Socket Timeout", "Timed out", "remote process exited", "communicator was aborted")


def failure_kind(exc: BaseException) -> str:
    import torch.distributed as dist

    peer_types = tuple(t for t in (getattr(dist, "DistNetworkError", None),) if t)
    if isinstance(exc, peer_types) or any(m in str(exc) for m in PEER_ERROR_MARKERS):
        return "peer"
    return "rank"


def describe_device(device_arg: str) -> dict:
    import torch

    if device_arg.startswith("cuda"):
        index = int(device_arg.split(":")[1])
        props = torch.cuda.get_device_properties(index)
        return dict(type="cuda", index=index, name=props.name, uuid=str(getattr(props, "uuid", "")),
                    memory_bytes=int(props.total_memory), backend="nccl")
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return dict(type="cpu", index=0, name=platform.processor() or platform.machine() or "cpu",
                uuid="", memory_bytes=int(memory), backend="gloo")


class Executor:
    def __init__(self, conn, device_arg: str, counter) -> None:
        import torch

        self.conn = conn
        self.counter = counter
        self.device = torch.device(device_arg)
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        self.group_key = ""

    def serve(self) -> None:
        self.conn.send({"t": "ready", "device": describe_device(str(self.device))})
        while True:
            msg = self.conn.recv()
            if msg["t"] == "exit":
                break
            if msg["t"] == "run":
                self.run(msg["assignment"])
        self._destroy_group()

    def run(self, raw: bytes) -> None:
        from ringleader.v1 import workers_pb2 as wpb

        a = wpb.Assignment.FromString(raw)
        warm = bool(self.group_key) and self.group_key == a.group_key
        results: list[dict] = []
        outcome: tuple[str, bytes] | None = None
        try:
            if not warm:
                self._init_group(a)
            kind = a.spec.WhichOneof("kind")
            if kind == "collective":
                results = self._sweep(a)
            else:
                outcome = (kind, self._run_kind(kind, a).SerializeToString())
        except Exception as exc:  # reported to the coordinator, which fails the job
            self._destroy_group()
            detail = f"{type(exc).__name__}: {exc}"
            if not isinstance(exc, (MemoryError, ValueError)):
                detail += " | " + traceback.format_exc(limit=3).strip().splitlines()[-1]
            self.conn.send({"t": "done", "job_id": a.job_id, "ok": False, "error": detail,
                            "failure": failure_kind(exc), "warm_group": "", "warm_start": warm, "results": []})
            return
        self.conn.send({"t": "done", "job_id": a.job_id, "ok": True, "error": "", "failure": "",
                        "warm_group": self.group_key, "warm_start": warm, "results": results,
                        "outcome": outcome if a.rank == 0 else None})

    def _init_group(self, a) -> None:
        import torch.distributed as dist

        self._destroy_group()
        if a.store_host.startswith("127.") and "GLOO_SOCKET_IFNAME" not in os.environ:
            # All ranks on this host: keep gloo (the CPU backend, and host staging on GPUs) on loopback.
            os.environ["GLOO_SOCKET_IFNAME"] = "lo"
        timeout = datetime.timedelta(seconds=STORE_TIMEOUT_S)
        store = dist.TCPStore(a.store_host, a.store_port, a.world_size, is_master=a.rank == 0,
                              timeout=timeout, wait_for_workers=False)
        kwargs = {"device_id": self.device} if a.backend == "nccl" else {}
        dist.init_process_group(a.backend, store=store, rank=a.rank, world_size=a.world_size,
                                timeout=timeout, **kwargs)
        self.group_key = a.group_key

    def _destroy_group(self) -> None:
        import torch.distributed as dist

        self.group_key = ""
        if dist.is_initialized():
            dist.destroy_process_group()

    def _run_kind(self, kind: str, a):
        from worker.kinds import RUNNERS

        def progress(done: int, total: int, size_bytes: int) -> None:
            self.conn.send({"t": "progress", "job_id": a.job_id, "done": done, "total": total,
                            "size_bytes": size_bytes})

        from ringleader import jobspec

        outcome = RUNNERS[kind](a.spec, self.device, self.counter, progress)
        total = jobspec.progress_total(a.spec)
        progress(total, total, 0)
        return outcome

    def _sweep(self, a) -> list[dict]:
        from ringleader import jobspec
        from worker import collectives

        c = jobspec.collective(a.spec)
        sizes = c.sizes_for(a.world_size)
        results = []
        for i, size in enumerate(sizes):
            self.conn.send({"t": "progress", "job_id": a.job_id, "done": i, "total": len(sizes), "size_bytes": size})
            local = collectives.measure(c.op, c.dtype, c.reduce_op, size, iters=c.iters, warmup=c.warmup,
                                        in_place=c.in_place, root=c.root, device=self.device, counter=self.counter)
            row = collectives.summarize(local, op=c.op, dtype=c.dtype, reduce_op=c.reduce_op, size_bytes=size,
                                        root=c.root, in_place=c.in_place, iters=c.iters, device=self.device)
            if a.rank == 0:
                results.append(row)
                self.conn.send({"t": "result", "job_id": a.job_id, "result": row})
        self.conn.send({"t": "progress", "job_id": a.job_id, "done": len(sizes), "total": len(sizes), "size_bytes": 0})
        return results


def _die_with_parent() -> None:
    """Linux: have the kernel kill this process when its daemon dies, even by SIGKILL."""
    try:
        import ctypes
        import signal

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass  # not Linux: the executor notices the closed pipe at its next receive instead


def main(conn, device_arg: str, counter) -> None:
    """Entry point of the executor process (multiprocessing 'spawn' target)."""
    _die_with_parent()
    try:
        Executor(conn, device_arg, counter).serve()
    except (EOFError, KeyboardInterrupt):  # the daemon went away: nothing left to report to
        pass
