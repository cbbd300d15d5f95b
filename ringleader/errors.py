"""One error hierarchy for the domain; servicers map it to gRPC status codes in one place."""

from __future__ import annotations


class RingleaderError(Exception):
    """Base of every domain error. `code` names the gRPC status it maps to."""

    code = "INTERNAL"


class InvalidSpec(RingleaderError):
    """A job spec (or request field) is invalid. Names the offending field."""

    code = "INVALID_ARGUMENT"

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class NotFound(RingleaderError):
    code = "NOT_FOUND"


class AlreadyExists(RingleaderError):
    code = "ALREADY_EXISTS"


class FailedPrecondition(RingleaderError):
    code = "FAILED_PRECONDITION"
