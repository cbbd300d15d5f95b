"""ringleader/app/gcpace.py: a young collection at least every pace_s, none added while CPython's
own passes come often enough, and a bad setting refused naming it."""

from __future__ import annotations

import gc
import time
import weakref

import pytest

from ringleader.app.gcpace import ENV, GcPacer
from ringleader.errors import InvalidSpec


class Node:
    pass


@pytest.fixture
def no_automatic_passes():
    old = gc.get_threshold()
    gc.set_threshold(10**9, *old[1:])  # CPython's own young passes never come
    yield
    gc.set_threshold(*old)


def cycle() -> weakref.ref:
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)


def test_garbage_in_a_cycle_is_collected_when_cpython_would_not_start_a_pass(no_automatic_passes):
    gc.collect()
    gone = cycle()
    time.sleep(0.3)
    assert gone() is not None  # no pass came by itself
    pacer = GcPacer(0.05)
    pacer.start()
    try:
        deadline = time.monotonic() + 5
        while gone() is not None and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        pacer.stop()
    assert gone() is None and pacer.paced >= 1


def test_no_pass_is_added_while_passes_come_often_enough(no_automatic_passes):
    pacer = GcPacer(0.2)
    pacer.start()
    try:
        end = time.monotonic() + 0.8
        while time.monotonic() < end:
            gc.collect(0)  # as CPython's own passes would
            time.sleep(0.02)
    finally:
        pacer.stop()
    assert pacer.paced == 0


def test_off_by_default_and_a_bad_setting_is_refused_naming_it(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    pacer = GcPacer.from_env()
    assert pacer.pace_s == 0
    pacer.start()
    assert not pacer._thread.is_alive()
    pacer.stop()
    for bad in ("soon", "-1"):
        monkeypatch.setenv(ENV, bad)
        with pytest.raises(InvalidSpec) as e:
            GcPacer.from_env()
        assert e.value.field == ENV
