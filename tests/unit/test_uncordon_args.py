"""`ringleader workers uncordon --force ID` (as the docs write it) and `uncordon ID --force` parse to
the same request; a worker shown held by the circuit breaker is marked so (ringleader_app)."""

from __future__ import annotations

import pytest

from ringleader_app import check_cmds, config, listing
from ringleader_app.cli import build_parser
from ringleader.errors import InvalidSpec
from ringleader.v1 import jobs_pb2 as pb


def _target(*argv: str):
    a, _ = config.load(build_parser, ["workers", *argv])
    return a.action, check_cmds.target(a)


def test_force_before_or_after_the_id():
    assert _target("uncordon", "--force", "w1") == ("uncordon", ("w1", True))
    assert _target("uncordon", "w1", "--force") == ("uncordon", ("w1", True))
    assert _target("uncordon", "w1") == ("uncordon", ("w1", False))
    assert _target("cordon", "w1") == ("cordon", ("w1", False))
    with pytest.raises(InvalidSpec, match="worker_id"):
        _target("uncordon", "w1", "--force", "w2")


def test_a_breaker_held_worker_is_marked_in_workers_and_check():
    held = pb.WorkerHealth(verdict=pb.UNHEALTHY, check="link_matrix", figure="0.2", breaker_held=True)
    assert listing.health(held) == "UNHEALTHY,breaker-held"
    assert "BREAKER-HELD" in check_cmds.health_line(pb.WorkerInfo(worker_id="w1", host="h1", health=held))
    out = pb.WorkerHealth(verdict=pb.UNHEALTHY, check="link_matrix", figure="0.2")
    assert listing.health(out) == "UNHEALTHY"
    assert "BREAKER" not in check_cmds.health_line(pb.WorkerInfo(worker_id="w1", host="h1", health=out))
