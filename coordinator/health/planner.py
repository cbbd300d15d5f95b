"""Localization by group testing: which worker, link or host makes a gang slow? Pure: no I/O, no
clock; coordinator/health/localizer.py runs it on a live fleet, bench/localize_sim.py on simulated ones.

The planner keeps suspect sets, each believed to hold at least one culprit (at first: the slow
gang). A round splits every set in two halves (by host first, so a host's workers stay together
until its set is one host) and tests each half as one group, all groups of a round at once (they
are disjoint), each padded with known-good workers (exonerated ones included, as they are
cleared) to the round's width so that the groups of a round are comparable. A group is slow when
its figure (busbw) is below `tolerance` times the round's reference: a control group of
known-good workers measured in the same round where spare ones exist, else the given `reference`
(a baseline), and only when neither exists the best of the round's figures. A fast half is
exonerated; a slow half is the next round's set. Neither half slow: the set is retested once
(noise), then given up as not reproducible; both slow: two culprits, both followed, except on one
host: both halves of one host slow point at the host (all its workers: its link).

Nobody is named on one figure: a worker (or a host) found slow is tested again, on its own,
in the next `confirmations` rounds (2), each time with other padding beside a control group
where spares allow, and named only if it is slow every time; otherwise its set is reported
unresolved. (One confirmation was not enough on a shared 2-core machine: a clean worker of a
clean gang read slow three times in a row there and was named.) Every set the search gives up
on is reported (`unresolved`, with why).

One culprit among n is named in ceil(log2 n) + 2 rounds, two in about as many (their sets are
tested in the same rounds).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

Members = tuple[str, ...]


@dataclass(frozen=True)
class Group:
    """One test: `members` run one collective; `suspects` are the ones under test (the others are
    known good). A control group has no suspects."""

    members: Members
    suspects: Members


@dataclass
class Verdict:
    culprits: list[str]
    hosts: list[str]  # hosts of the culprits
    rounds: int
    unresolved: list[Members] = field(default_factory=list)  # sets the search gave up on
    why: list[str] = field(default_factory=list)  # for each unresolved set

    def describe(self, host_of: Mapping[str, str]) -> str:
        dropped = ""
        if self.unresolved:
            dropped = f"; {len(self.unresolved)} set(s) could not be resolved: " + "; ".join(
                f"{{{', '.join(s)}}} ({why})" for s, why in zip(self.unresolved, self.why))
        if not self.culprits:
            return f"no culprit found in {self.rounds} rounds{dropped}"
        named = ", ".join(f"{w} (host {host_of.get(w, '?')})" for w in self.culprits)
        return f"culprit(s) {named} named in {self.rounds} rounds{dropped}"


@dataclass
class _Test:
    suspects: Members  # the set under test
    halves: list[Members]
    groups: list[Group]
    confirming: bool = False  # a set found slow once, tested again before it is named


class Planner:
    """`next_round()` gives the groups to measure (None when done), `record(figures)` takes their
    figures (busbw per Group, higher is better), `verdict()` says what was found."""

    def __init__(self, members: Sequence[str], host_of: Mapping[str, str], known_good: Sequence[str] = (), *,
                 tolerance: float = 0.8, min_width: int = 2, reference: float = 0.0, max_rounds: int = 0,
                 confirmations: int = 2) -> None:
        if len(set(members)) != len(members) or not members:
            raise ValueError("members: must be distinct worker ids, at least one")
        if not 0 < tolerance < 1:
            raise ValueError(f"tolerance: must be in (0, 1), got {tolerance}")
        if confirmations < 1:
            raise ValueError(f"confirmations: a slow set is tested again at least once, got {confirmations}")
        if min_width < 2:
            raise ValueError(f"min_width: a test group needs at least 2 workers, got {min_width}")
        missing = [w for w in [*members, *known_good] if w not in host_of]
        if missing:
            raise ValueError(f"host_of: no host for {missing[:3]}")
        self.host_of, self.tolerance, self.min_width, self.reference = host_of, tolerance, min_width, reference
        self.confirmations = confirmations
        self.max_rounds = max_rounds or math.ceil(math.log2(max(2, len(members)))) + 3 + confirmations
        self._sets: list[Members] = [tuple(members)]
        self._good: list[str] = [w for w in dict.fromkeys(known_good) if w not in set(members)]
        self._good_set = set(self._good)
        self._retried: set[Members] = set()
        self._confirm: list[Members] = []  # found slow: tested again before they are named
        self._confirmed: dict[Members, int] = {}  # times each was slow again when tested on its own
        self._tests: list[_Test] = []
        self._control: Group | None = None
        self.rounds = 0
        self.culprits: list[str] = []
        self.unresolved: list[Members] = []
        self.why: list[str] = []

    def _give_up(self, s: Members, why: str) -> None:
        self.unresolved.append(s)
        self.why.append(why)

    def next_round(self) -> list[Group] | None:
        if (not self._sets and not self._confirm) or self.rounds >= self.max_rounds:
            for s in (self._sets + self._confirm) if self.rounds >= self.max_rounds else []:
                self._give_up(s, f"still under test after {self.max_rounds} rounds")
            self._sets, self._confirm = [], []
            return None
        # A set to confirm is tested whole (one "half"); a set to split, in two halves.
        splits = [(s, [s], True) for s in self._confirm] + [(s, self._halves(s), False) for s in self._sets]
        width = max(self.min_width, max(len(h) for _, halves, _ in splits for h in halves))
        spare = list(self._good)
        self._tests, waiting = [], []
        for s, halves, confirming in splits:
            groups = []
            for h in halves:
                # Each confirmation of a set takes other padding than the last: a slow pad
                # must not get the same suspect named twice.
                turn = self._confirmed.get(s, 0) * (width - len(h)) if confirming and spare else 0
                spare = spare[turn % len(spare):] + spare[:turn % len(spare)] if spare else spare
                pad, spare = self._pad(h, width, spare)
                groups.append(Group(members=h + pad, suspects=h))
            if min(len(g.members) for g in groups) < 2:  # one worker alone measures no link
                waiting.append((s, confirming))  # next round: this round's cleared workers pad it
                spare = [w for g in groups for w in g.members if w not in s] + spare
                continue
            self._tests.append(_Test(s, halves, groups, confirming))
        self._sets = [s for s, confirming in waiting if not confirming]
        self._confirm = [s for s, confirming in waiting if confirming]
        if not self._tests:
            for s, _ in waiting:
                self._give_up(s, "no known-good worker left to pad its test with")
            self._sets, self._confirm = [], []
            return None
        self._control = None
        if len(spare) >= width:  # measured beside the tests, under the same load: the reference
            self._control = Group(members=tuple(spare[:width]), suspects=())
        self.rounds += 1
        return [g for t in self._tests for g in t.groups] + ([self._control] if self._control else [])

    def _pad(self, half: Members, width: int, spare: list[str]) -> tuple[Members, list[str]]:
        """Known-good workers to fill `half` up to `width`, and the spare ones left. A half on one
        host gets a worker of another host where one is spare, so its test crosses the network: a
        slow host link shows only then."""
        own = {self.host_of[w] for w in half}
        pick = spare[:max(0, width - len(half))]
        if len(own) == 1 and all(self.host_of[w] in own for w in pick):
            other = next((w for w in spare if self.host_of[w] not in own), None)
            if other is not None:
                pick = [other] + [w for w in pick if w != other][:max(0, width - len(half) - 1)]
        chosen = set(pick)
        return tuple(pick), [w for w in spare if w not in chosen]

    def reference_for(self, figures: Mapping[Group, float]) -> float:
        """What a clean group of this round reaches: its control group's figure (known-good
        workers, measured side by side under the same load), else the given reference (a
        baseline), else the best of the round's figures. Not the round's own best where a control
        or a baseline exists: on a noisy machine one lucky group would make clean ones look slow.
        Earlier rounds' figures are not used: a shared machine's clean figures drift several-fold
        between rounds (seen on CPU loopback)."""
        if self._control is not None and figures.get(self._control, 0.0) > 0:
            return figures[self._control]
        return self.reference or max(figures.values())

    def record(self, figures: Mapping[Group, float]) -> float:
        """Take the last round's figures; returns the reference they were judged against."""
        missing = [g for t in self._tests for g in t.groups if g not in figures]
        if missing:
            raise ValueError(f"figures: no figure for {len(missing)} group(s) of round {self.rounds}")
        ref = self.reference_for(figures)
        slow = {g: figures[g] < self.tolerance * ref for g in figures}
        for t in self._tests:
            self._judge(t, [slow[g] for g in t.groups])
        self._tests = []
        return ref

    def _judge(self, t: _Test, slow: list[bool]) -> None:
        if t.confirming:
            seen = self._confirmed.get(t.suspects, 0)
            if not slow[0]:
                times = f"slow {seen + 1} times, then not" if seen else "slow once, not"
                self._give_up(t.suspects, f"{times} again when tested on its own")
            elif seen + 1 >= self.confirmations:
                self.culprits += t.suspects
            else:
                self._confirmed[t.suspects] = seen + 1
                self._confirm.append(t.suspects)
            return
        if not any(slow):
            if t.suspects in self._retried:
                self._give_up(t.suspects, "no half slow, twice: did not reproduce")
            else:
                self._retried.add(t.suspects)
                self._sets.append(t.suspects)
            return
        if len(slow) == 2 and all(slow) and len({self.host_of[w] for w in t.suspects}) == 1:
            self._confirm.append(t.suspects)  # every part of one host is slow: the host (its link)
            return
        for half, is_slow in zip(t.halves, slow):
            if not is_slow:
                self._good += [w for w in half if w not in self._good_set]
                self._good_set.update(half)
            elif len(half) == 1:
                self._confirm.append(half)
            else:
                self._sets.append(half)

    def _halves(self, s: Members) -> list[Members]:
        """Two halves of a set (one, for a single worker), a host's workers kept together while the
        set spans several hosts; balanced by worker count."""
        if len(s) == 1:
            return [s]
        by_host: dict[str, list[str]] = {}
        for w in s:
            by_host.setdefault(self.host_of[w], []).append(w)
        if len(by_host) == 1:
            return [s[:len(s) // 2], s[len(s) // 2:]]
        a: list[str] = []
        b: list[str] = []
        for ws in by_host.values():  # hosts in order of first appearance: ranks stay adjacent
            (a if len(a) < len(s) / 2 else b).extend(ws)
        return [tuple(a), tuple(b)] if b else [tuple(a[:len(a) // 2]), tuple(a[len(a) // 2:])]

    def verdict(self) -> Verdict:
        culprits = list(dict.fromkeys(self.culprits))
        return Verdict(culprits=culprits, hosts=sorted({self.host_of[w] for w in culprits}),
                       rounds=self.rounds, unresolved=list(self.unresolved), why=list(self.why))


def run(planner: Planner, measure) -> Verdict:
    """Drive a planner to its verdict with `measure(groups) -> {group: figure}` (one round)."""
    while (groups := planner.next_round()) is not None:
        planner.record(measure(groups))
    return planner.verdict()
