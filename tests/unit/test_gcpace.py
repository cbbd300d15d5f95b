"""The collector on a clock (coordinator/shell/gcpace.py): a pass comes when none has run for the
pacer's interval, whatever CPython's count says, and it is the pass CPython's count would pick."""

from __future__ import annotations

import gc
import time
import weakref

import pytest

from coordinator.shell.gcpace import GC_YOUNG, CollectorPacer, tune_collector


class Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the cyclic collector frees it


def wait_for(cond, timeout_s: float) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.01)
    return cond()


@pytest.fixture
def no_automatic_passes():
    """With CPython's own passes off, a cycle is freed only by an explicit collection."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def test_a_pass_comes_on_the_clock_when_the_count_never_asks(no_automatic_passes):
    garbage = Node()
    ref = weakref.ref(garbage)
    del garbage
    time.sleep(0.3)
    assert ref() is not None, "nothing else may collect here (the fixture turned CPython's passes off)"

    pacer = CollectorPacer(every_s=0.05)
    pacer.start()
    try:
        assert wait_for(lambda: ref() is None, 5.0), "the pacer never ran a pass"
        assert sum(pacer.passes) >= 1
    finally:
        pacer.stop()
    assert pacer._seen not in gc.callbacks and not pacer._thread.is_alive()


def test_no_pass_of_its_own_while_passes_come_anyway(no_automatic_passes):
    pacer = CollectorPacer(every_s=2.0)
    pacer.start()
    try:
        end = time.monotonic() + 3.0
        while time.monotonic() < end:  # someone else collects every 50 ms: the pacer has nothing to do
            gc.collect(0)
            time.sleep(0.05)
        assert pacer.passes == [0, 0]
    finally:
        pacer.stop()


def test_the_middle_generation_when_its_turn_has_come(no_automatic_passes):
    old = gc.get_threshold()
    gc.set_threshold(old[0], 2, old[2])
    try:
        gc.collect(1)  # the middle generation's count back to 0
        pacer = CollectorPacer(every_s=60)  # not started: its choice alone
        assert pacer.collect_due() == 0 and gc.get_count()[1] == 1
        assert pacer.collect_due() == 0 and gc.get_count()[1] == 2
        assert pacer.collect_due() == 0 and gc.get_count()[1] == 3
        assert pacer.collect_due() == 1, "3 young passes since the middle one: over its threshold of 2"
        assert gc.get_count()[1] == 0
        assert pacer.passes == [3, 1]
    finally:
        gc.set_threshold(*old)


def test_tune_collector_sets_the_young_threshold_and_starts_a_pacer():
    old = gc.get_threshold()
    try:
        assert tune_collector(pace_s=0) is None
        assert gc.get_threshold()[0] == GC_YOUNG
        pacer = tune_collector(pace_s=0.1)
        try:
            assert isinstance(pacer, CollectorPacer) and pacer._thread.is_alive() and pacer.every_s == 0.1
        finally:
            pacer.stop()
    finally:
        gc.unfreeze()
        gc.set_threshold(*old)


def test_an_interval_of_zero_is_refused():
    with pytest.raises(ValueError, match="every_s"):
        CollectorPacer(every_s=0)


def full_passes_while_the_heap_grows(objects: int) -> int:
    """Full passes CPython starts by itself while `objects` tracked objects are made and kept."""
    full = []

    def seen(phase: str, info: dict) -> None:
        if phase == "start" and info["generation"] == 2:
            full.append(1)

    kept = []
    gc.callbacks.append(seen)
    try:
        for i in range(objects):
            kept.append([i])
    finally:
        gc.callbacks.remove(seen)
    return len(full)


def test_cpython_starts_no_full_pass_in_a_tuned_process(monkeypatch):
    """A full pass walks everything the process holds (the fleet, the queue, the workers' streams)
    and holds every thread meanwhile: a tuned process leaves CPython none to start, with or without
    the pacer. (The young threshold is lowered here so that a heap of 600,000 objects is far past
    the point where CPython's own heuristic starts full passes, as the control shows.)"""
    old = gc.get_threshold()
    try:
        gc.collect()
        gc.set_threshold(500, 10, 10)  # CPython's own rule, at this test's young threshold
        assert full_passes_while_the_heap_grows(600_000) >= 1, "the control: CPython starts full passes here"

        gc.collect()
        monkeypatch.setattr("coordinator.shell.gcpace.GC_YOUNG", 500)
        assert tune_collector(pace_s=0) is None
        assert full_passes_while_the_heap_grows(600_000) == 0
    finally:
        gc.unfreeze()
        gc.set_threshold(*old)


def test_the_relay_keeps_cpythons_full_passes(monkeypatch):
    """The worker relay's passes hold no user's call, and only a full pass frees the cycles of the
    streams that ended there: CPython keeps starting them in a process tuned for it."""
    old = gc.get_threshold()
    try:
        gc.collect()
        gc.set_threshold(500, 10, 10)
        monkeypatch.setattr("coordinator.shell.gcpace.GC_YOUNG", 500)
        assert tune_collector(pace_s=0, full_passes=True) is None
        assert full_passes_while_the_heap_grows(600_000) >= 1
    finally:
        gc.unfreeze()
        gc.set_threshold(*old)
