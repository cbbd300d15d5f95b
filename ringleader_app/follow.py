"""Following a job (`submit --wait`, `watch`): progress, results and state changes as they come,
and while the job waits in the queue, its live waiting reason ("needs 20 workers, 2 connected").

The event stream carries state changes only, and a queued job's reason changes without one (a
worker comes or goes), so while the stream is quiet the job itself is read every POLL_S and a
new reason is printed. The stream is read on a thread so that the wait can time out.
"""

from __future__ import annotations

import queue
import sys
import threading
import time

import grpc

from ringleader_app import table
from ringleader_app.client import Client
from ringleader.v1 import jobs_pb2 as pb

POLL_S = 2.0
# A job is stored QUEUED ("waiting for workers") before the scheduler looks at it, so the stream
# always opens with that state; said only if the job is still queued this much later, so that a
# job placed at once on idle workers does not begin with a wait it never had.
QUEUED_GRACE_S = 1.0
_END = object()


def _pump(stream, events: queue.Queue) -> None:
    try:
        for ev in stream:
            events.put(ev)
    except grpc.RpcError as exc:
        events.put(exc)
    events.put(_END)


class _Printer:
    def __init__(self, job_id: str, out) -> None:
        self.job_id, self.out = job_id, out
        self.shown = -1.0  # progress fraction last printed
        self.reason = ""  # the queued job's reason last printed
        self.pending: tuple[float, str] | None = None  # a QUEUED line held back (QUEUED_GRACE_S)

    def say(self, text: str) -> None:
        print(f"[{self.job_id}] {text}", file=self.out, flush=True)

    def event(self, ev: pb.JobEvent) -> None:
        kind = ev.WhichOneof("event")
        if kind == "progress" and ev.progress.total:
            p = ev.progress
            fraction = p.done / p.total
            if p.size_bytes and p.done < p.total:  # a sweep: every size as it starts
                width = len(str(p.total))
                self.say(f"{p.done + 1:>{width}}/{p.total}  {table.size_label(p.size_bytes):>8}  running")
            elif fraction >= self.shown + 0.1 or fraction == 1:  # about ten lines per job, not one per step
                self.shown = fraction
                self.say(f"{p.done}/{p.total}")
        elif kind == "state":
            self.reason = ev.state.reason
            self.pending = None
            line = f"{table.state_name(ev.state.state)}: {ev.state.reason}"
            if ev.state.state == pb.QUEUED:
                self.pending = (time.monotonic() + QUEUED_GRACE_S, line)
            else:
                self.say(line)
        elif kind == "result":
            r = ev.result
            self.say(f"{table.size_label(r.size_bytes):>8}  {r.time_us:12.2f} us  busbw {r.busbw_gbps:8.2f} GB/s  "
                     f"wrong {r.wrong}")

    def held(self) -> float:
        """Print a held-back QUEUED line once its grace is over; the seconds until then (or POLL_S)."""
        if self.pending is None:
            return POLL_S
        due, line = self.pending
        if time.monotonic() < due:
            return max(0.01, due - time.monotonic())
        self.pending = None
        self.say(line)
        return POLL_S

    def queued(self, job: pb.Job) -> None:
        if job.state == pb.QUEUED and job.reason and job.reason != self.reason:
            self.reason = job.reason
            self.say(f"QUEUED: {job.reason}")


def follow(client: Client, job_id: str, out=sys.stderr) -> pb.Job:
    """Print progress lines while the job runs; return the finished job."""
    stream = client.watch(job_id)
    events: queue.Queue = queue.Queue()
    threading.Thread(target=_pump, args=(stream, events), daemon=True, name="watch").start()
    printer = _Printer(job_id, out)
    try:
        while True:
            try:
                ev = events.get(timeout=printer.held())
            except queue.Empty:
                if printer.held() == POLL_S:  # nothing held back any more: ask for the live reason
                    printer.queued(client.get(job_id))
                continue
            if ev is _END:
                return client.get(job_id)
            if isinstance(ev, grpc.RpcError):
                raise ev
            printer.event(ev)
    finally:
        stream.cancel()


LOGS_DEADLINE_S = 30.0  # ranks send their log as they report their end, just after the job's


def follow_logs(client: Client, job_id: str, out=sys.stderr) -> pb.JobLogs:
    """`logs -f`: follow the job to its end, then its logs once every rank has sent its own (or
    LOGS_DEADLINE_S passed: a rank whose worker died never will)."""
    follow(client, job_id, out=out)
    deadline = time.monotonic() + LOGS_DEADLINE_S
    logs = client.logs(job_id)
    while not all(r.received for r in logs.ranks) and time.monotonic() < deadline:
        time.sleep(0.2)
        logs = client.logs(job_id)
    return logs
