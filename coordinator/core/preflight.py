"""Preflight as a placement constraint: a job whose spec asks for it (JobSpec.preflight) starts
only on workers certified within PREFLIGHT_WINDOW_S by every preflight check kind.

When the placement pass picks a gang with an uncertified member, `Control` does not start the job:
it runs the preflight checks over that gang first, one kind after the other, each started at once
on the gang the pass reserved (so nothing else takes those workers in between, and no check waits
in the queue). Each check's verdicts are applied as it ends (coordinator/core/health_inputs.py);
then the job starts on the certified gang, or goes back to the queue when a member failed (a
quarantined worker is not picked again: another replaces it), or fails when the failed worker is
one the spec names (it cannot be replaced) or when MAX_UNFINISHED of its checks did not finish.
A member that fails is quarantined and never picked again, so replacing members ends.
Certification is decided where the gang is picked, whatever was idle when the job was submitted.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ringleader import checks
from ringleader.v1 import jobs_pb2 as pb

PREFLIGHT_WINDOW_S = 600.0  # a worker certified this recently is not checked again for a preflight
MAX_UNFINISHED = 3  # preflight checks that did not finish (failed, lost a worker) before the job fails


@dataclass
class Certifying:
    """A preflight job whose gang is being checked."""

    job_id: str
    members: tuple[str, ...]  # the gang the pass picked, in rank order
    backend: str
    kinds: list[str] = field(default_factory=list)  # kinds still to run, in order
    check_id: str = ""  # the check job running now
    unfinished: int = 0  # its checks that did not finish

    def reason(self) -> str:
        kind = ", ".join(self.kinds) or "the last check"
        return f"preflight: checking its gang {', '.join(self.members)} ({kind} left)"


def wants(spec: pb.JobSpec) -> bool:
    return spec.preflight and not checks.is_check(spec)


def uncertified(health, members: tuple[str, ...], now: float | None = None) -> list[str]:
    """The members not certified by every preflight kind within the window."""
    since = (time.time() if now is None else now) - PREFLIGHT_WINDOW_S
    return [w for w in members if not health.certified(w, checks.PREFLIGHT_KINDS, since)]


def check_spec(kind: str, members: tuple[str, ...], job_id: str, short: pb.JobSpec) -> pb.JobSpec:
    """One preflight check over the gang, at the checks' priority, naming its workers."""
    spec = pb.JobSpec(world_size=len(members), priority=checks.CHECK_PRIORITY, name=f"preflight {kind} of {job_id}",
                      placement=pb.Placement(worker_ids=list(members)))
    getattr(spec, kind).CopyFrom(short)
    return spec


def failure(health, members: tuple[str, ...], named: set[str]) -> tuple[list[str], str]:
    """The members a check failed, and the reason to fail the job with when one of them cannot be
    replaced: the spec names it, or the circuit breaker left it in service ("" when every failed
    member is quarantined, so the next pass picks another)."""
    if health.observe:  # --health-observe: the checks ran and left their verdicts; the job goes on
        return [], ""
    failed = [w for w in members if health.verdict(w) == pb.UNHEALTHY]
    for w in failed:
        h = health.get(w)
        why = f"preflight: worker {w} failed {h.check}: {h.figure}; expected {h.expected}"
        if w in named:
            return failed, why
        if not health.quarantined(w):  # the next pass would pick it again
            return failed, why + ("; the circuit breaker keeps it in service (automatic quarantine is at its "
                                  "share of this GPU model), so it cannot be replaced: an operator decides")
    return failed, ""
