"""The SQL stores' schema, as the migrations that build it (coordinator/store/sqlite.py; the
PostgreSQL store runs the same statements, its dialect's spelling: coordinator/store/postgres.py).

Messages are stored as serialized protobuf blobs; only the columns that queries filter or order
on are broken out, so a proto change needs no schema change.
"""

# Migration i (0-based) brings the schema from version i to i + 1; PRAGMA user_version records
# the version reached. Append new migrations, never edit applied ones.
MIGRATIONS: list[list[str]] = [
    [
        # seq gives submission order; AUTOINCREMENT so a seq is never reused.
        """CREATE TABLE jobs (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            id TEXT NOT NULL UNIQUE,
            state INTEGER NOT NULL,
            op TEXT NOT NULL,
            created_at REAL NOT NULL,
            job BLOB NOT NULL  -- serialized pb.Job without results
        )""",
        "CREATE INDEX jobs_by_state ON jobs (state, seq)",
        "CREATE INDEX jobs_by_op ON jobs (op, seq)",
        # n orders events as added; seq is the event's own JobEvent.seq.
        """CREATE TABLE events (
            n INTEGER PRIMARY KEY,
            job_id TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
            seq INTEGER NOT NULL,
            blob BLOB NOT NULL
        )""",
        "CREATE INDEX events_by_job ON events (job_id, n)",
        """CREATE TABLE results (
            job_id TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
            idx INTEGER NOT NULL,
            blob BLOB NOT NULL,
            PRIMARY KEY (job_id, idx)
        ) WITHOUT ROWID""",
    ],
    [
        # Each rank's captured stderr, kept apart from the job's blob (up to 64 KiB a rank).
        """CREATE TABLE rank_logs (
            job_id TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
            rank INTEGER NOT NULL,
            text TEXT NOT NULL,
            PRIMARY KEY (job_id, rank)
        ) WITHOUT ROWID""",
    ],
    [
        # The client's idempotency key; NULL when none (a UNIQUE index admits many NULLs).
        "ALTER TABLE jobs ADD COLUMN request_id TEXT",
        "CREATE UNIQUE INDEX jobs_by_request ON jobs (request_id)",
    ],
    [
        # v6: worker credentials. The digest of the secret each worker id was issued at its
        # first registration (coordinator/edge/identity.py); the secret itself is never stored.
        """CREATE TABLE worker_credentials (
            worker_id TEXT PRIMARY KEY,
            digest TEXT NOT NULL
        ) WITHOUT ROWID""",
    ],
    [
        # v5: worker verdicts (coordinator/health/fleet.py), one row per worker id, kept across restarts.
        # IF NOT EXISTS: this round's migrations (v4 baselines, v5, v6 identity) were written in
        # parallel; each stands alone whatever the order they were merged in.
        """CREATE TABLE IF NOT EXISTS worker_health (
            worker_id TEXT PRIMARY KEY,
            blob BLOB NOT NULL  -- serialized pb.WorkerHealth
        ) WITHOUT ROWID""",
    ],
    [
        # baselines (coordinator/health/baselines.py; "v4" in the plan, appended after the worker
        # credentials that reached main first): one serialized pb.BaselineEntry per key.
        """CREATE TABLE baselines (
            key TEXT PRIMARY KEY,
            blob BLOB NOT NULL
        ) WITHOUT ROWID""",
    ],
    [
        # bandwidth trends (coordinator/store/trends.py): busbw rolled up by the hour per baseline
        # key (host "") and per host and key; appended by the "dashboard" branch, standing alone
        # whatever other migrations are merged next to it.
        """CREATE TABLE IF NOT EXISTS trend_hours (
            host TEXT NOT NULL,
            key TEXT NOT NULL,
            hour INTEGER NOT NULL,  -- unix seconds // 3600
            gpu_model TEXT NOT NULL,
            op TEXT NOT NULL,
            link TEXT NOT NULL,
            n INTEGER NOT NULL,
            total_gbps REAL NOT NULL,
            min_gbps REAL NOT NULL,
            max_gbps REAL NOT NULL,
            worst_job TEXT NOT NULL,
            jobs TEXT NOT NULL,  -- up to 8 job ids, space-separated
            PRIMARY KEY (host, key, hour)
        ) WITHOUT ROWID""",
        "CREATE INDEX IF NOT EXISTS trend_hours_by_time ON trend_hours (host, hour)",
    ],
    [
        # The remediation hooks' delivery log (coordinator/store/hook_log.py): one serialized
        # pb.HooksDelivery per event and webhook URL. IF NOT EXISTS: stands alone whatever other
        # migrations are merged beside it.
        """CREATE TABLE IF NOT EXISTS hook_deliveries (
            event_id TEXT NOT NULL,
            url TEXT NOT NULL,
            first_at REAL NOT NULL,
            blob BLOB NOT NULL,
            PRIMARY KEY (event_id, url)
        ) WITHOUT ROWID""",
    ],
]
