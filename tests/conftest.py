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
