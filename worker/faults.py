"""The fault injector: faults a test turns on in one worker, so every health check is shown to catch
what it claims. Off unless a test enables it, and refused outside tests.

A test sets, in one worker daemon's environment (its executor inherits it):

    RINGLEADER_FAULTS="slow_compute=8,delay_op_ms=50"   the faults, name=value separated by commas
    RINGLEADER_FAULTS_ALLOWED=tests                     the harness's consent (tests/ sets it)

RINGLEADER_FAULTS without that consent is an error at start (`check_allowed`), so a fault can
never be switched on in production by a stray variable. A fault of the network (a slow link or
host) is not injected here: tests put a real `tc` rate limit on a namespace host's link.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, fields
from typing import Mapping

ENV = "RINGLEADER_FAULTS"
# A file of NVML faults for the fault injector's FAKE NVML (worker/fake_nvml.py), tests only.
FAKE_NVML_ENV = "RINGLEADER_FAKE_NVML"
CONSENT_ENV = "RINGLEADER_FAULTS_ALLOWED"
CONSENT = "tests"


class FaultsRefused(RuntimeError):
    pass


@dataclass(frozen=True)
class Faults:
    slow_compute: float = 1.0  # the GPU check's matrix products run this many times over
    slow_copy: float = 1.0  # the GPU check's memory copies run this many times over
    flip_bit: int = 0  # 1: the corruption check's computation gets one bit flipped
    wrong_result: int = 0  # 1: a collective's output gets one element changed after the op
    delay_op_ms: float = 0.0  # sleep before each timed op (a straggler rank)
    hang: int = 0  # 1: block forever before the first op (a rank that never arrives)
    crash: int = 0  # 1: the executor kills itself with SIGSEGV before its first timed op (a crashed rank)
    # 1, 2 or 3: SIGKILL the daemon at that step of a registration that issues it a secret: before
    # storing it, after storing it but before acknowledging, after acknowledging (worker/link.py)
    kill_registration: int = 0
    # Rank 0 of a new group waits this long before binding its store: a window in which the
    # coordinator has placed the job but cannot yet assign its other ranks (a restart then).
    delay_store_s: float = 0.0
    # Rogue modes: a worker running modified code (or a device that corrupts what it sends).
    corrupt_share: int = 0  # 1: the corruption check's exact collectives get this rank's share off by one
    write_peer_row: float = 0.0  # the link check: add this many us to every link of the others, in its report
    inflate_figures: float = 1.0  # the GPU and link checks: report figures this many times better
    stretch_turns_s: float = 0.0  # the GPU check: add this many seconds to every other turn, in its account

    @property
    def any(self) -> bool:
        return self != Faults()

    def at_registration(self, step: int) -> None:
        """Called by the daemon's link at each step of storing an issued secret."""
        if self.kill_registration == step:
            os.kill(os.getpid(), signal.SIGKILL)

    def before_op(self) -> None:
        """Called by the executor before each timed op."""
        if self.crash:
            os.kill(os.getpid(), signal.SIGSEGV)
        if self.hang:
            while True:
                time.sleep(3600)
        if self.delay_op_ms:
            time.sleep(self.delay_op_ms / 1000)


NONE = Faults()


def parse(text: str) -> Faults:
    known = {f.name: f.type for f in fields(Faults)}
    values: dict[str, float | int] = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        name, sep, raw = item.partition("=")
        if not sep or name not in known:
            raise FaultsRefused(f"{ENV}: unknown fault {item!r} (known: {', '.join(known)})")
        try:
            values[name] = (float if known[name] in (float, "float") else int)(raw)
        except ValueError:
            raise FaultsRefused(f"{ENV}: {name} needs a number, not {raw!r}") from None
    return Faults(**values)


def check_allowed(env: Mapping[str, str] = os.environ) -> None:
    """Refuse to start a worker whose environment asks for faults without the tests' consent."""
    for name in (ENV, FAKE_NVML_ENV):
        if env.get(name) and env.get(CONSENT_ENV) != CONSENT:
            raise FaultsRefused(f"{name} is set but fault injection is for tests only "
                                f"({CONSENT_ENV}={CONSENT} is missing): refusing to start")


def load(env: Mapping[str, str] = os.environ) -> Faults:
    """The faults this process runs with (NONE unless a test asked, with consent)."""
    if not env.get(ENV):
        return NONE
    check_allowed(env)
    return parse(env[ENV])


def fake_nvml_path(env: Mapping[str, str] = os.environ) -> str:
    """The FAKE NVML's fault file a test asked for, with consent ("" when none)."""
    if not env.get(FAKE_NVML_ENV):
        return ""
    check_allowed(env)
    return env[FAKE_NVML_ENV]
