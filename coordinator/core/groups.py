"""Warm groups: process groups the coordinator formed, and which executors still hold them.

A warm group lets a job on the same gang start without a rendezvous or NCCL init. It is safe only
while every member holds it and its TCP store (in rank 0's executor) lives, so the coordinator
owns its lifecycle (ringleader.states.GROUPS):

    FORMING   its first job runs; rank 0 has bound the store
    WARM      that job finished on every rank: a job on exactly these members in this order, and
              of the same flavor, reuses it
    BROKEN    a member left, failed, restarted or was taken into another gang, or a job on it did
              not succeed: every member still holding it is told to drop it (DropGroup), and a
              daemon runs nothing before its executor has dropped it
    DESTROYED no member holds it any more (the record is forgotten)

Which group an executor holds is what its daemon last reported (Register, JobDone,
GroupDropped); `held` applies such a report and says whether the worker must be told to drop.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from ringleader import states
from ringleader.states import BROKEN, DESTROYED, FORMING, WARM

log = logging.getLogger("ringleader.coordinator")


@dataclass
class WarmGroup:
    key: str
    members: tuple[str, ...]  # worker ids in rank order
    state: str = FORMING
    holders: set[str] = field(default_factory=set)  # members whose executor holds it now
    # The communicator settings it was created with ("" for NCCL's defaults, else e.g.
    # "NCCL_ALGO=Ring,NCCL_PROTO=LL"): a job needing other settings cannot reuse it.
    flavor: str = ""


def new_key(token: str, world_size: int) -> str:
    """A process group's key: unique per rendezvous, and it carries the group's size."""
    return f"{token}/{world_size}"


class Groups:
    def __init__(self) -> None:
        self._groups: dict[str, WarmGroup] = {}
        # WARM groups every member holds, by size: kept up to date as groups change, so the
        # scheduler reads them without a scan of every group.
        self._ready: dict[int, dict[str, tuple[str, ...]]] = {}

    def get(self, key: str) -> WarmGroup | None:
        return self._groups.get(key)

    def form(self, key: str, members: tuple[str, ...], flavor: str = "") -> WarmGroup:
        g = WarmGroup(key, members, flavor=flavor)
        self._groups[key] = g
        return g

    def adopt(self, key: str, members: tuple[str, ...], flavor: str = "") -> WarmGroup:
        """A group a job was running on when the coordinator restarted (its workers report it;
        the job's flavor is the group's)."""
        return self._groups.get(key) or self.form(key, members, flavor)

    def warm(self) -> dict[int, dict[str, tuple[str, ...]]]:
        """Groups a job may reuse (WARM and held by every member), by size: size -> key ->
        members in rank order. The caller must not change it."""
        return self._ready

    def _refresh(self, g: WarmGroup) -> None:
        same_size = self._ready.setdefault(len(g.members), {})
        if g.state == WARM and len(g.holders) == len(g.members):
            same_size[g.key] = g.members
        else:
            same_size.pop(g.key, None)

    def transition(self, g: WarmGroup, to: str, why: str = "") -> None:
        states.GROUPS.check(g.state, to)
        g.state = to
        self._refresh(g)
        log.debug("warm group %s %s%s", g.key, to, f": {why}" if why else "")
        if to == DESTROYED:
            self._groups.pop(g.key, None)

    def succeeded(self, key: str) -> None:
        """A job on the group finished on every rank."""
        g = self._groups.get(key)
        if g and g.state == FORMING:
            self.transition(g, WARM)

    def break_(self, key: str, why: str) -> list[str]:
        """Mark the group BROKEN; returns the members that still hold it, to be told to drop it
        (none when it was broken already: they were told then)."""
        g = self._groups.get(key)
        if g is None or g.state == BROKEN:
            return []
        self.transition(g, BROKEN, why)
        holders = sorted(g.holders)
        if not holders:
            self.transition(g, DESTROYED)
        return holders

    def held(self, worker_id: str, old: str, new: str) -> tuple[bool, list[str]]:
        """A worker reports that its executor now holds `new` (it held `old`).

        Returns (drop, to_tell): `drop` when the worker must be told to drop `new` (a group that
        is unknown, broken or not its own), and the other members to tell to drop `old` when
        losing this member broke it."""
        to_tell: list[str] = []
        if old and old != new and (g := self._groups.get(old)):
            g.holders.discard(worker_id)
            self._refresh(g)
            if g.state != BROKEN:
                # A member that lost the group leaves it incomplete: nobody may use it any more.
                to_tell = self.break_(old, f"{worker_id} no longer holds it")
            elif not g.holders:
                self.transition(g, DESTROYED)
        if not new:
            return False, to_tell
        g = self._groups.get(new)
        if g is None or g.state == BROKEN or worker_id not in g.members:
            return True, to_tell
        g.holders.add(worker_id)
        self._refresh(g)
        return False, to_tell
