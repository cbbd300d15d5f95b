"""What a result row adds to the bandwidth trends (coordinator/store/trends.py): its busbw under its
baseline key, with the key's fields the trends filter on and the hosts of its gang. Pure."""

from __future__ import annotations

from coordinator.health.baselines import KeyFields, link_kind
from coordinator.store.trends import TrendPoint
from ringleader.v1 import jobs_pb2 as pb


def trend_point(job: pb.Job, row: pb.SizeResult, kf: KeyFields, at: float) -> TrendPoint | None:
    """The row's point (None: a row without a baseline key or without a bandwidth, e.g. barrier)."""
    if not row.baseline_key or not row.busbw_gbps > 0:
        return None
    return TrendPoint(key=row.baseline_key, gpu_model=kf.gpu_model, op=row.op, link=link_kind(kf.hosts), at=at,
                      busbw_gbps=row.busbw_gbps, job_id=job.id, hosts=tuple(sorted({w.host for w in job.workers})))
