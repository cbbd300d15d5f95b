"""Remediation hooks: each verdict change of a worker, POSTed as a CloudEvents 1.0 JSON event
(structured mode) to every configured webhook (`ringleader coordinator --webhook URL`, repeatable;
RINGLEADER_WEBHOOK). docs/hooks.md describes the event; deploy/hooks/ holds a sample receiver.

A FleetHealth observer (coordinator/health/fleet.py), told after the input that changed the
verdict: `observe` only builds the event and queues it, so nothing here runs on the event loop's
critical path. Each URL has its own thread that sends its events in order, one at a time (a
"drain" is never overtaken by the "return" that follows it), trying each again on an error or a
non-2xx answer after a backoff that doubles (backoff_s, 2 backoff_s, ... up to backoff_max_s)
until it is delivered or `attempts` are spent (GAVE_UP). Every attempt is recorded in the delivery
log (`persist`: the job store's put_hook_delivery, called back on the loop by the process that
wires it; `ringleader hooks log`, GET /api/v1/hooks/log).

The event id is a digest of what changed (the worker, its verdict, the check and its time, and
what the hook is told to do), so the same verdict change keeps its id across retries and across
coordinator restarts: a receiver drops a repeat by id. At start the sender is given the log: what
was delivered (or given up) is not sent again, what was pending is sent again with its id.

What a hook is told to do (`data.action`) follows the circuit breaker: "drain" for a quarantined
worker, "hold" for a failed worker the breaker left in service (do not drain: an operator
decides), "return" for one back in service.
"""

from __future__ import annotations

import hashlib
import json
import logging
import queue
import threading
import time
import urllib.error
import urllib.request
from typing import Callable, Iterable

from coordinator.health.book import quarantined
from ringleader.errors import InvalidSpec
from ringleader.v1 import jobs_pb2 as pb

log = logging.getLogger("ringleader.coordinator")

VERDICT_CHANGED = "io.ringleader.worker.verdict.changed"
CONTENT_TYPE = "application/cloudevents+json"
PENDING, DELIVERED, GAVE_UP = "PENDING", "DELIVERED", "GAVE_UP"
ATTEMPTS = 8
BACKOFF_S = 1.0
BACKOFF_MAX_S = 300.0
TIMEOUT_S = 10.0

Persist = Callable[[pb.HooksDelivery], None]


def action(h: pb.WorkerHealth) -> str:
    """What a remediation system should do about the worker now."""
    if quarantined(h) or h.validate_needs_approval:
        return "drain"
    if h.verdict == pb.UNHEALTHY and h.breaker_held:
        return "hold"  # the circuit breaker left it in service: do not drain
    return "return"


def verdict_event(info: pb.WorkerInfo, source: str, now: float) -> dict:
    """The CloudEvents 1.0 event of a worker's verdict as `info` shows it."""
    h = info.health
    data = {"worker_id": info.worker_id, "host": info.host, "device_index": info.device.index,
            "gpu_model": info.device.name, "verdict": pb.Verdict.Name(h.verdict), "check": h.check,
            "figure": h.figure, "expected": h.expected, "job_id": h.job_id, "quarantined": quarantined(h),
            "cordoned": h.cordoned, "held": h.breaker_held and h.verdict == pb.UNHEALTHY,
            "needs_approval": h.validate_needs_approval, "action": action(h),
            # One cause for many verdicts (a host or the whole run below its expectation alike):
            # the same text on each worker's event, so a receiver can act once per host or fleet.
            "finding": h.finding}
    what = (info.worker_id, data["verdict"], h.check, repr(h.at), data["quarantined"], h.cordoned,
            data["held"], h.validate_needs_approval)
    event_id = hashlib.sha256(json.dumps(what).encode()).hexdigest()[:32]
    at = h.at or now
    return {"specversion": "1.0", "id": event_id, "source": source, "type": VERDICT_CHANGED,
            "subject": info.worker_id, "time": rfc3339(at), "datacontenttype": "application/json", "data": data}


def rfc3339(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d}Z"


class HookSender:
    """Delivers verdict events to `urls`. `log_so_far`: the delivery log kept by the store (what
    a restart must not send again, and what it must send again)."""

    def __init__(self, urls: Iterable[str], persist: Persist, log_so_far: Iterable[pb.HooksDelivery] = (),
                 source: str = "ringleader", attempts: int = ATTEMPTS, backoff_s: float = BACKOFF_S,
                 backoff_max_s: float = BACKOFF_MAX_S, timeout_s: float = TIMEOUT_S,
                 clock: Callable[[], float] = time.time, start: bool = True) -> None:
        """`start`: send at once (else on `start()`, once `persist` can write)."""
        self.urls = [check_url(u) for u in dict.fromkeys(urls)]
        if attempts < 1:
            raise ValueError(f"hook attempts must be at least 1, got {attempts}")
        self.persist, self.source, self.clock = persist, source, clock
        self.attempts, self.backoff_s, self.backoff_max_s, self.timeout_s = attempts, backoff_s, backoff_max_s, timeout_s
        self._last: dict[str, str] = {}  # worker id -> id of the last event queued for it (the loop's side)
        self._settled: set[tuple[str, str]] = set()  # (event id, url) delivered or given up
        self._closing = threading.Event()
        self._queues: dict[str, queue.Queue] = {u: queue.Queue() for u in self.urls}
        resend = []
        for d in sorted(log_so_far, key=lambda d: d.first_at):
            if d.state == PENDING and d.url in self._queues:
                resend.append(d)
            elif d.state in (DELIVERED, GAVE_UP):
                self._settled.add((d.event_id, d.url))
        for d in resend:
            self._queues[d.url].put(_copy(d))
        self._threads = [threading.Thread(target=self._run, args=(u,), name=f"hook-{i}", daemon=True)
                         for i, u in enumerate(self.urls)]
        if start:
            self.start()

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def observe(self, info: pb.WorkerInfo) -> None:
        """A FleetHealth observer: queue the worker's event if its verdict changed since the last
        one queued. Never blocks."""
        event = verdict_event(info, self.source, self.clock())
        if self._last.get(info.worker_id) == event["id"]:
            return  # told again of what it was already told (another observer's change)
        self._last[info.worker_id] = event["id"]
        body = json.dumps(event, sort_keys=True)
        for url in self.urls:
            if (event["id"], url) in self._settled:
                continue  # delivered before a restart
            d = pb.HooksDelivery(event_id=event["id"], type=event["type"], worker_id=info.worker_id, url=url,
                                 state=PENDING, first_at=self.clock(), event_json=body)
            self._record(d)
            self._queues[url].put(d)

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop after the attempt in flight (pending deliveries stay PENDING in the log: the next
        start sends them)."""
        self._closing.set()
        for q in self._queues.values():
            q.put(None)
        for t in self._threads:
            if t.is_alive():
                t.join(timeout_s)

    def _record(self, d: pb.HooksDelivery) -> None:
        try:
            self.persist(_copy(d))
        except Exception:  # noqa: BLE001 - the log must never stop a delivery
            log.exception("hook delivery log: could not record %s", d.event_id)

    def _run(self, url: str) -> None:
        q = self._queues[url]
        while (d := q.get()) is not None and not self._closing.is_set():
            self._deliver(d)

    def _deliver(self, d: pb.HooksDelivery) -> None:
        wait = self.backoff_s
        while d.attempts < self.attempts:
            d.attempts += 1
            error = self._post(d.url, d.event_json.encode())
            if error is None:
                d.state, d.done_at, d.last_error = DELIVERED, self.clock(), ""
                self._record(d)
                return
            d.last_error = error
            if d.attempts >= self.attempts:
                break
            self._record(d)
            if self._closing.wait(wait):
                return  # closing: it stays PENDING, the next start sends it
            wait = min(self.backoff_max_s, 2 * wait)
        d.state, d.done_at = GAVE_UP, self.clock()
        self._record(d)
        log.error("webhook %s: gave up on event %s (%s) after %d attempts: %s", d.url, d.event_id, d.worker_id,
                  d.attempts, d.last_error)

    def _post(self, url: str, body: bytes) -> str | None:
        """None when delivered (a 2xx answer), else what went wrong."""
        req = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": CONTENT_TYPE})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                resp.read(1024)
                return None
        except urllib.error.HTTPError as e:
            with e:
                return f"HTTP {e.code}: {e.read(200).decode(errors='replace')}"
        except Exception as e:  # noqa: BLE001 - refused, reset, timed out, DNS: tried again
            return f"{type(e).__name__}: {e}"


def check_url(url: str) -> str:
    if not url.startswith(("http://", "https://")) or len(url) > 2048:
        raise InvalidSpec("--webhook", f"expected an http:// or https:// URL, got {url[:80]!r}")
    return url


def _copy(d: pb.HooksDelivery) -> pb.HooksDelivery:
    out = pb.HooksDelivery()
    out.CopyFrom(d)
    return out
