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
    run (20 s and more on two cores) and copied; under pytest-xdist the processes share it (a file
    lock: the first to need it writes it); written again when the copy would be older than
    `max_age_s`, for a test that reads the month relative to now (the web UI's default range)."""
    import fcntl
    import pickle
    import shutil
    import time

    from bench.trends_history import write_link_checks, write_month
    from coordinator.store.sqlite import SqliteJobStore

    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # the directory of this run's xdist processes, one a run
    made = shared / "trends-month.pickle"  # {"path": the month's store, "history": its History}

    def copy(dest: Path, max_age_s: float = float("inf")):
        with open(shared / "trends-month.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released as the file closes
            month = pickle.loads(made.read_bytes()) if made.exists() else None
            if month is None or time.time() - month["history"].until > max_age_s:
                path = tmp_path_factory.mktemp("trends-month") / "jobs.db"
                store = SqliteJobStore(path)
                store.defer_commits(lambda: None)  # one transaction for the month, as the coordinator groups writes
                history = write_month(store, workers=5000, days=30)
                history.flagged_checks = write_link_checks(store, history.host, days=30, until=history.until)
                store.commit()
                store.close()
                month = {"path": path, "history": history}
                made.write_bytes(pickle.dumps(month))
            shutil.copyfile(month["path"], dest)
        return month["history"]

    return copy
