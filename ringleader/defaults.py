"""Defaults and limits shared by every side (one home each): addresses, paging, field bounds,
the size of the log kept per rank.

The defaults of a job spec's fields live with their vocabulary in ringleader/spec.py
(`DEFAULTS`) and ringleader/jobspec.py; this module holds the rest.
"""

from __future__ import annotations

GRPC_PORT, HTTP_PORT = 50051, 8080
COORDINATOR_ADDRESS = f"127.0.0.1:{GRPC_PORT}"  # where clients and workers look by default
HTTP_ADDRESS = f"127.0.0.1:{HTTP_PORT}"

# Listing pages: an unset or 0 limit means PAGE_DEFAULT; larger ones are capped at PAGE_MAX.
PAGE_DEFAULT, PAGE_MAX = 50, 1000


def page_limit(limit: int) -> int:
    """The page size to use for a requested `limit` (0, the proto default, means the default)."""
    if limit <= 0:
        return PAGE_DEFAULT
    return min(limit, PAGE_MAX)


# A rank's captured stderr kept with a job: its last 64 KiB (worker/executor.py captures it, the
# coordinator keeps no more than this of what a worker sends).
LOG_TAIL_BYTES = 64 * 1024


def log_tail(data: bytes, dropped: int = 0, limit: int = LOG_TAIL_BYTES) -> str:
    """The text kept of a log: the last `limit` bytes of `data`, as UTF-8, with a first line saying
    how many bytes before them were dropped (`dropped` already upstream, plus what is cut here)."""
    cut = max(0, len(data) - limit)
    text = data[cut:].decode("utf-8", errors="replace")
    if dropped + cut:
        text = f"[ringleader: {dropped + cut} earlier bytes dropped; the last {limit} are kept]\n" + text
    return text
