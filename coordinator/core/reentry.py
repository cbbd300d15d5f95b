"""The reactor's re-entry guard (issue 25): nothing called from inside `Control.handle` may call
back into it. A re-entry would reset the outer input's Out and lose its placement pass and events,
so it is an error at run time: logged, and raised (tests fail on it)."""

from __future__ import annotations

import contextlib
import logging

log = logging.getLogger("ringleader.coordinator")


class ReentryError(RuntimeError):
    """`Control.handle` was called from inside `handle`: a bug (a listener calling back in)."""


class Guard:
    def __init__(self) -> None:
        self.applying: str | None = None  # the input being applied

    @contextlib.contextmanager
    def entered(self, what: str):
        if self.applying is not None:
            log.error("Control re-entered with %s while applying %s", what, self.applying)
            raise ReentryError(f"Control.handle({what}) called while applying {self.applying}")
        self.applying = what
        try:
            yield
        finally:
            self.applying = None
