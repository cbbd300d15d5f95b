"""Where the REST API's reads (GET /jobs, /jobs/{id}, /workers) are answered from.

`CoreReads` reads the coordinator facade, on the core loop, as the API always did (an app served
on its own loop: tests, a standby). A coordinator serving HTTP on its edge loop passes the edge's
read view instead (coordinator/edge/read_view.py has the same three methods), and
dashboard/edge_http.py runs those routes on the edge loop: they never wait on the core. Each
answer says how old it is (`read_view_age_ms`; 0 when read from the core itself)."""

from __future__ import annotations

from typing import Iterable, Protocol

from coordinator.shell.facade import Coordinator
from coordinator.core.jobs import Page
from ringleader.v1 import jobs_pb2 as pb


class Reads(Protocol):
    async def get_job(self, job_id: str) -> pb.Job: ...

    async def list_jobs(self, states_: Iterable[int] = (), op: str = "", limit: int = 0,
                        before_id: str = "") -> tuple[Page, int]: ...

    async def list_workers(self, states_: Iterable[int] = (), limit: int = 0,
                           page_token: str = "") -> tuple[list[pb.WorkerInfo], str, int]: ...


class CoreReads:
    def __init__(self, core: Coordinator) -> None:
        self.core = core

    async def get_job(self, job_id: str) -> pb.Job:
        await self.core.prefetch(job_id=job_id)
        return self.core.get(job_id)

    async def list_jobs(self, states_: Iterable[int] = (), op: str = "", limit: int = 0,
                        before_id: str = "") -> tuple[Page, int]:
        return await self.core.list_jobs_off_loop(states=states_, op=op, limit=limit, before_id=before_id), 0

    async def list_workers(self, states_: Iterable[int] = (), limit: int = 0,
                           page_token: str = "") -> tuple[list[pb.WorkerInfo], str, int]:
        page = self.core.list_workers(states=states_, limit=limit, page_token=page_token)
        return page.workers, page.next_page_token, 0
