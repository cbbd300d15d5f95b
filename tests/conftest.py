import os
import sys
from pathlib import Path

import pytest

# Shared test helpers (tests/ports.py, ...) import by name from every test folder.
sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="session")
def postgres():
    """One PostgreSQL server for the session (tests/pgserver.py); each test makes its own schema
    with `postgres.new_schema(name)`. Skipped where none can be started, unless
    RINGLEADER_REQUIRE_POSTGRES=1 (.ci/run): there it fails."""
    from pgserver import PostgresServer, Unavailable

    server = PostgresServer()
    try:
        server.start()
    except Unavailable as exc:
        server.stop()
        if os.environ.get("RINGLEADER_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"PostgreSQL required (RINGLEADER_REQUIRE_POSTGRES=1) but cannot start: {exc}")
        pytest.skip(f"no PostgreSQL: {exc}")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def trends_month(tmp_path_factory):
    """`trends_month(dest, max_age_s)`: a SQLite store at `dest` holding bench/trends_history.py's
    month (5,000 simulated GPUs, 30 days, the link checks), and its History. Written once for the
    session (20 s and more on two cores) and copied; written again when the copy would be older
    than `max_age_s`, for a test that reads the month relative to now (the web UI's default range)."""
    import shutil
    import time

    from bench.trends_history import write_link_checks, write_month
    from coordinator.store.sqlite import SqliteJobStore

    made: dict = {}

    def copy(dest: Path, max_age_s: float = float("inf")):
        if not made or time.time() - made["history"].until > max_age_s:
            path = tmp_path_factory.mktemp("trends-month") / "jobs.db"
            store = SqliteJobStore(path)
            store.defer_commits(lambda: None)  # one transaction for the month, as the coordinator groups writes
            history = write_month(store, workers=5000, days=30)
            history.flagged_checks = write_link_checks(store, history.host, days=30, until=history.until)
            store.commit()
            store.close()
            made.update(path=path, history=history)
        shutil.copyfile(made["path"], dest)
        return made["history"]

    return copy
