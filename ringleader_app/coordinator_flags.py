"""The coordinator's flags for its fleet and its load: how long workers are kept, when a silent
one is lost, health sweeps, the quarantine breaker, and how much worker traffic a turn of the loop
applies (ringleader_app/cli.py's `coordinator`; each also a RINGLEADER_* variable). Each flag's
default is the Config's (ringleader_app/config.py's CoordinatorConfig): it is written once."""

from __future__ import annotations

import argparse

from ringleader_app import argtypes
from ringleader_app.config import DEFAULT


def add_fleet_flags(c: argparse.ArgumentParser) -> None:
    c.add_argument("--worker-ttl", type=argtypes.seconds, default=DEFAULT.worker_ttl, metavar="SECONDS",
                   help="how long a disconnected worker stays listed (default 600)")
    c.add_argument("--heartbeat-timeout", type=argtypes.heartbeat_timeout, default=DEFAULT.heartbeat_timeout, metavar="SECONDS",
                   help="a connected worker silent this long is declared lost and its job failed, naming it "
                        "(workers beat every second; at least 2; default 5: raise it where hosts are overloaded)")
    c.add_argument("--drain-timeout", type=argtypes.seconds, default=DEFAULT.drain_timeout, metavar="SECONDS",
                   help="at SIGTERM, wait at most this long for calls in flight before closing the gRPC server "
                        "(workers' streams stay open until then, and reconnect to the next coordinator; default 5)")
    c.add_argument("--check-every", type=argtypes.seconds, default=DEFAULT.check_every, metavar="SECONDS",
                   help="sweep the fleet's health checks over idle workers this often (e.g. 300; default 0: off)")
    c.add_argument("--check-hold-after", type=argtypes.seconds_or_off, default=DEFAULT.check_hold_after, metavar="SECONDS",
                   help="a check job queued this long holds its workers: they take no new user job until it starts "
                        "(running jobs are not stopped; default 60; 0: never)")
    c.add_argument("--check-hold-share", type=argtypes.share, default=DEFAULT.check_hold_share, metavar="SHARE",
                   help="checks hold at most this share of the connected workers at once (at least one check; "
                        "default 0.05)")
    c.add_argument("--quarantine-max-share", type=argtypes.share, default=DEFAULT.quarantine_max_share, metavar="SHARE",
                   help="circuit breaker: automatic quarantine takes at most this share of a GPU model's workers "
                        "(at least 1; default 0.1); beyond it failed workers stay in service for an operator")
    c.add_argument("--health-observe", action="store_true",
                   help="fleet health observes only: verdicts, alerts and metrics as ever, but no worker is "
                        "quarantined for a failed check and no node tainted (a cordon by hand still holds); to "
                        "adopt it on a live fleet and compare")
    c.add_argument("--worker-msgs-per-turn", type=argtypes.non_negative, default=DEFAULT.worker_msgs_per_turn, metavar="N",
                   help="apply at most N worker messages, and at most 4 ms of them, per turn of the event loop: "
                        "users' calls wait behind at most that share of a busy fleet's traffic; smaller, less wait "
                        "(default 256; 0: no bound)")
    c.add_argument("--pass-ranks", type=argtypes.non_negative, default=DEFAULT.pass_ranks, metavar="N",
                   help="a placement pass starts jobs of at most N ranks in all, the rest in the next pass: a fleet "
                        "freed at once is started in short passes between users' calls (default 128; 0: no bound)")
    c.add_argument("--shed-lag", type=argtypes.seconds_or_off, default=DEFAULT.shed_lag, metavar="SECONDS",
                   help="while the event loop runs this far behind, refuse calls that add work (submit, checks, "
                        "localize, imports) at once: RESOURCE_EXHAUSTED / 429 with a retry-after (default 2; 0: never)")
    c.add_argument("--gc-pace", type=argtypes.seconds_or_off, default=DEFAULT.gc_pace, metavar="SECONDS",
                   help="with --worker-address: a garbage-collection pass whenever none has run for this long, so "
                        "a young pass walks at most that long's allocations (default 0.25; 0: CPython's count "
                        "alone)")
    c.add_argument("--stall-warn", type=argtypes.seconds_or_off, default=DEFAULT.stall_warn, metavar="SECONDS",
                   help="log a warning for each stall of the event loop this long: its garbage collection and the "
                        "loop's stack (default 0.2; 0: never)")
