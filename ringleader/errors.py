"""One error hierarchy for the domain and one catalog of what each error becomes on the wire.

Domain code raises these; the gRPC servicers, the REST layer and the CLI translate them through
`CATALOG` only, so a status code, an HTTP status and an exit code are chosen in one place.
"""

from __future__ import annotations

from dataclasses import dataclass


class RingleaderError(Exception):
    """Base of every domain error; its entry in CATALOG says how it is answered."""


class InvalidSpec(RingleaderError):
    """A job spec (or request field) is invalid. Names the offending field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class NotFound(RingleaderError):
    pass


class AlreadyExists(RingleaderError):
    pass


class FailedPrecondition(RingleaderError):
    pass


class Unauthenticated(RingleaderError):
    """No credentials, or wrong ones."""


class PermissionDenied(RingleaderError):
    """Valid credentials of a role that may not do this (a worker token submitting a job)."""


class Overloaded(RingleaderError):
    """The coordinator is saturated: the call was not done; try again after `retry_after_s`."""

    def __init__(self, message: str, retry_after_s: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


@dataclass(frozen=True)
class Answer:
    grpc_code: str  # a grpc.StatusCode name (the vocabulary does not import grpc)
    http_status: int
    exit_code: int  # what the CLI exits with


EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_AUTH = 0, 1, 2, 3
EXIT_BUSY = 75  # sysexits' EX_TEMPFAIL: nothing was done, the same command may work later

CATALOG: dict[type[RingleaderError], Answer] = {
    InvalidSpec: Answer("INVALID_ARGUMENT", 422, EXIT_USAGE),
    NotFound: Answer("NOT_FOUND", 404, EXIT_FAILED),
    AlreadyExists: Answer("ALREADY_EXISTS", 409, EXIT_FAILED),
    FailedPrecondition: Answer("FAILED_PRECONDITION", 409, EXIT_FAILED),
    Unauthenticated: Answer("UNAUTHENTICATED", 401, EXIT_AUTH),
    PermissionDenied: Answer("PERMISSION_DENIED", 403, EXIT_AUTH),
    Overloaded: Answer("RESOURCE_EXHAUSTED", 429, EXIT_BUSY),
    RingleaderError: Answer("INTERNAL", 500, EXIT_FAILED),
}


def answer(exc: RingleaderError) -> Answer:
    """The catalog entry of `exc` (its nearest catalogued class)."""
    for cls in type(exc).__mro__:
        if cls in CATALOG:
            return CATALOG[cls]
    return CATALOG[RingleaderError]


def exit_code_for_status(grpc_code: str) -> int:
    """The CLI's exit code for a gRPC status a server answered (by its name)."""
    for a in CATALOG.values():
        if a.grpc_code == grpc_code:
            return a.exit_code
    return EXIT_FAILED
