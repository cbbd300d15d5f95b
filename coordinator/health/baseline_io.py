"""Importing and exporting the baseline table without stalling the coordinator (both APIs).

A table may hold 100,000 entries (17 MB of JSON): validating it on the event loop stalled every
call for seconds, and answering it in one gRPC message passed the 4 MiB limit. So an import is
validated in a worker thread (pure work on its own copies: nothing of the reactor's is touched)
and written in chunks, the loop serving other calls between them; an export answers pages, by
key, each at most PAGE_BYTES.

All or nothing still holds for validation: one bad entry refuses the import before anything is
written. The chunks are written one turn of the loop after another; a coordinator killed between
two of them keeps the chunks written (each entry replaces its key's whole).
"""

from __future__ import annotations

import asyncio

from coordinator.health import baselines
from ringleader.v1 import jobs_pb2 as pb

CHUNK = 250  # entries written per turn of the loop (a few ms of SQLite on a quiet machine)
PAGE_BYTES = 2 << 20  # an export page stops here, well under the 4 MiB message limit
PAGE_DEFAULT, PAGE_LIMIT = 2000, 10_000  # entries per page: a REST page is rendered in Python


async def import_table(store, table: pb.BaselineTable, durable=None) -> int:
    """Validate every entry (off the loop), then replace their keys chunk by chunk; `durable`
    (the facade's) is awaited after each chunk so that the answer means stored."""
    entries = await asyncio.to_thread(baselines.validated_table, table)
    for start in range(0, len(entries), CHUNK):
        baselines.put_imported(store, entries[start:start + CHUNK])
        if durable is not None:
            await durable()
        await asyncio.sleep(0)  # the calls that waited meanwhile go first
    return len(entries)


def export_page(store, page_token: str = "", limit: int = 0) -> pb.BaselineTable:
    """The entries after `page_token` (a key), by key: at most `limit` (0: PAGE_DEFAULT; at most
    PAGE_LIMIT) and PAGE_BYTES; next_page_token continues it ("" on the last page)."""
    limit = min(limit or PAGE_DEFAULT, PAGE_LIMIT)
    entries = store.baselines(after=page_token, limit=limit + 1)
    page, size = pb.BaselineTable(), 0
    for e in entries[:limit]:
        size += e.ByteSize() + 8
        if size > PAGE_BYTES and page.entries:
            break
        page.entries.append(e)
    if len(page.entries) < len(entries):
        page.next_page_token = page.entries[-1].key
    return page
