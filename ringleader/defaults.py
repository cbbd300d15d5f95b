"""Defaults and limits shared by every side (one home each): addresses, paging, field bounds.

The defaults of a job spec's fields live with their vocabulary in ringleader/spec.py
(`DEFAULTS`) and ringleader/jobspec.py; this module holds the rest.
"""

from __future__ import annotations

GRPC_PORT, HTTP_PORT = 50051, 8080
COORDINATOR_ADDRESS = f"127.0.0.1:{GRPC_PORT}"  # where clients and workers look by default
HTTP_ADDRESS = f"127.0.0.1:{HTTP_PORT}"
COORDINATOR_ENV = "RINGLEADER_COORDINATOR"

# Listing pages: an unset or 0 limit means PAGE_DEFAULT; larger ones are capped at PAGE_MAX.
PAGE_DEFAULT, PAGE_MAX = 50, 1000


def page_limit(limit: int) -> int:
    """The page size to use for a requested `limit` (0, the proto default, means the default)."""
    if limit <= 0:
        return PAGE_DEFAULT
    return min(limit, PAGE_MAX)
