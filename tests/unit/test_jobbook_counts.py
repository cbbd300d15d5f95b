"""JobBook.counts: queued, running and the oldest queued job's submission time, kept without a
walk of the queue (a scrape reads it), against a walk."""

import random

from coordinator.core.jobs import JobBook, Queued
from ringleader.v1 import jobs_pb2 as pb


def test_the_oldest_queued_job_is_found_as_jobs_come_leave_and_come_back():
    rng = random.Random(5)
    book = JobBook(store=None, events=None)  # counts() reads memory only
    created = {f"j{i}": float(rng.randrange(1, 500)) for i in range(300)}
    for _ in range(5000):
        job_id = rng.choice(list(created))
        if job_id in book.queued:
            book._dequeue(job_id)
        else:  # new, or back in the queue (a requeue keeps its created_at)
            book._enqueue(Queued(pb.Job(id=job_id, created_at=created[job_id]), valid=None))
        queued, running, oldest = book.counts()
        assert queued == len(book.queued) and running == 0
        assert oldest == min((created[j] for j in book.queued), default=0.0)
    assert len(book._by_age) <= 2 * len(created) + 65  # what left does not pile up past the peak queue
