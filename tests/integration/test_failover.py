"""Coordinator failover on a real PostgreSQL (tests/conftest.py `postgres`), with real coordinator
and worker processes: the scenario of bench/failover.py, one round (the bench repeats it)."""

import pytest

from bench.failover import failover_round

pytestmark = pytest.mark.integration


def test_kill_the_leader_mid_burst_a_standby_leads_and_nothing_acked_is_lost_or_doubled(postgres, tmp_path):
    figures = failover_round(postgres.new_schema("failover"), tmp_path)
    print("failover:", figures)
    assert figures["acked"] == figures["stored"] == 500  # every burst submit acked once, stored once
    assert figures["lead_s"] <= 10
