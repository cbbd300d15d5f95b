"""Hosts made of network namespaces (netbed.py, hostcluster.py): the partition timings the
tests measure are printed at the end of the run."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent / "integration"))
sys.path.insert(0, str(Path(__file__).parent))
from hostcluster import TIMINGS  # noqa: E402


def pytest_terminal_summary(terminalreporter):
    if TIMINGS:
        terminalreporter.section("multihost partition timings")
        for line in TIMINGS:
            terminalreporter.write_line(line)
