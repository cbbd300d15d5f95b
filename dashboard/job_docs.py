"""What the REST API's job routes answer, and the one refusal they share with the CLI.

- Job documents are lean by default, the shape `ringleader job -o json` prints
  (ringleader/leanjson.py: RFC 3339 times, absent until reached; only the job's own kind's
  outcome; `iters: "auto"`). `?view=full` gives the whole message as JSON (epoch seconds, every
  outcome member), which the web UI reads.
- A job the connected fleet cannot hold is refused (422 naming world_size) unless the body says
  `"queue": true`, as `ringleader submit` refuses it unless `--queue` (ringleader/fleet_fit.py:
  the same function, the same words).
"""

from __future__ import annotations

import csv
import io
from typing import Annotated, Any, Literal

from fastapi import Query

from coordinator.shell.facade import Coordinator
from dashboard.schemas import RESULT_FIELDS
from ringleader import jobspec
from ringleader.defaults import PAGE_MAX
from ringleader import fleet_fit
from ringleader.fleet_fit import CONNECTED
from ringleader.jsonview import to_json
from ringleader.leanjson import lean_job
from ringleader import spec as specs
from ringleader.v1 import jobs_pb2 as pb

View = Annotated[Literal["lean", "full"], Query(
    description="lean (default): RFC 3339 times, only the job's own kind's outcome, as the CLI's -o json; "
                "full: every field of the Job message, times in unix seconds (the web UI's view)")]


def job_doc(job: pb.Job, view: str = "lean", results: bool = True) -> dict:
    if view == "full":
        body = to_json(job)
        if not results:
            body.pop("results", None)
        return body
    return lean_job(job, results=results)


def summary(job: pb.Job) -> dict:
    """A job without its results, in full (the live event stream's, which the web UI reads)."""
    return job_doc(job, "full", results=False)


def check_fits(core: Coordinator, spec: pb.JobSpec) -> None:
    """Raise InvalidSpec when the connected workers cannot run the job (ringleader/fleet_fit.py)."""
    workers: list[pb.WorkerInfo] = []
    token = ""
    while True:
        page = core.list_workers(states=CONNECTED, limit=PAGE_MAX, page_token=token)
        workers += page.workers
        token = page.next_page_token
        if not token:
            break
    fleet_fit.check(jobspec.normalize(spec), workers, 'set "queue": true to queue it until they can '
                                                      "(queue_timeout_s to bound the wait)")


def results_csv(results) -> str:
    """One row per size; reduce_op only where the op reduces (a broadcast has none)."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(RESULT_FIELDS)
    for res in results:
        writer.writerow(["" if f == "reduce_op" and res.op not in specs.REDUCING_OPS else csv_value(getattr(res, f))
                         for f in RESULT_FIELDS])
    return out.getvalue()


def csv_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return repr(v) if isinstance(v, float) else str(v)
