"""The reactor's re-entry guard: nothing called from inside `Control.handle` may call
back into it. A re-entry would reset the outer input's Out and lose its placement pass and events,
so it is an error at run time: logged, and raised (tests fail on it)."""

from __future__ import annotations

import logging

log = logging.getLogger("ringleader.coordinator")


class ReentryError(RuntimeError):
    """`Control.handle` was called from inside `handle`: a bug (a listener calling back in)."""


class Guard:
    """`with guard.entered(what):` around applying an input. A plain class, not a generator
    context manager: it wraps every worker message, and generator context managers (this guard's
    and the SQLite store's `_tx`) were about a tenth of the GIL time a churned coordinator's inbox
    took, profiled under churn on the 2-core VM."""

    def __init__(self) -> None:
        self.applying: str | None = None  # the input being applied
        self._what: str | None = None

    def entered(self, what: str) -> "Guard":
        if self.applying is not None:
            log.error("Control re-entered with %s while applying %s", what, self.applying)
            raise ReentryError(f"Control.handle({what}) called while applying {self.applying}")
        self._what = what
        return self

    def __enter__(self) -> None:
        self.applying = self._what

    def __exit__(self, *exc) -> None:
        self.applying = None
