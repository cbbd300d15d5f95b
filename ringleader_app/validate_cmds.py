"""`ringleader validate` (the validation gate) and `ringleader hooks log`.

`validate --host H` or `--workers a,b` runs every check kind on those workers now (RunCheck, all
kinds, waited for) and prints a certificate: what was run and how long each check took, each
worker's figure of each check against its yardstick (the verdict's `expected`: the peers, the
fleet's history or a shipped floor, whichever judged it), and how long the whole took. Exit code 0
only on a pass: every check ended, and every worker was judged HEALTHY by every check that covered
it (a worker no check covered does not pass). A passed validation is what lifts a quarantine (the
book takes its verdicts as a recheck's); a repeat offender then still needs
`ringleader workers approve-return ID`, which the certificate says.

`hooks log` prints the remediation hooks' delivery log (coordinator/health/hooks.py).
"""

from __future__ import annotations

import argparse
import time

from ringleader import checks
from ringleader_app.client import Client
from ringleader_app.render import dump
from ringleader_app.security_flags import client_security
from ringleader.errors import EXIT_FAILED, InvalidSpec
from ringleader.jsonview import to_json
from ringleader.v1 import jobs_pb2 as pb

COMMANDS = ("validate", "hooks")
DOCS = ("table", "json", "yaml")


def add_commands(sub, talker, client_options) -> None:
    v = talker(sub, "validate", "certify workers: run every check kind on them now; exit 0 only on a pass")
    which = v.add_mutually_exclusive_group(required=True)
    which.add_argument("--host", default="", help="the workers of this host")
    which.add_argument("--workers", default="", metavar="A,B,...", help="exactly these workers")
    v.add_argument("--timeout", type=float, default=300.0, help="give up waiting after this many seconds")
    client_options(v, '{"passed": bool, "seconds": S, "checks": [...], "workers": [...], "failed": [ID, ...]}',
                   outputs=DOCS)
    h = talker(sub, "hooks", "the remediation hooks' delivery log (newest first)")
    h.add_argument("what", nargs="?", default="log", help="log (the only one)")
    h.add_argument("--limit", type=int, default=0, help="at most this many deliveries (default: a page)")
    client_options(h, '{"deliveries": [HooksDelivery, ...]}', outputs=DOCS)


def run(a: argparse.Namespace) -> int:
    with Client(a.coordinator, security=client_security(a)) as client:
        if a.command == "hooks":
            if a.what != "log":
                raise InvalidSpec("what", f"expected log, got {a.what[:64]!r}")
            answer = client.hooks_log(max(0, a.limit))
            print(dump(to_json(answer), a.output) if a.output in DOCS[1:] else hooks_text(answer))
            return 0
        ids = [w.strip() for w in a.workers.split(",") if w.strip()]
        if a.workers and not ids:
            raise InvalidSpec("workers", "name at least one worker")
        started = time.monotonic()
        answer = client.run_check(pb.RunCheckRequest(worker_ids=ids, host=a.host, wait=True, timeout_s=a.timeout,
                                                     kinds=list(checks.KINDS)))
        cert = certificate(answer, time.monotonic() - started, host=a.host)
    print(dump(cert, a.output) if a.output in DOCS[1:] else certificate_text(cert))
    return 0 if cert["passed"] else EXIT_FAILED


def certificate(r: pb.RunCheckResponse, seconds: float, host: str = "") -> dict:
    """What was run, each figure against its yardstick, how long; `passed` only when every check
    ended and judged every worker it covered HEALTHY, and every worker was covered. The verdicts
    are the coordinator's as it recorded them (RunCheckResponse.verdicts: peers, history and
    shipped floors, the recheck rules), never recomputed here."""
    found: dict[str, list[dict]] = {w.worker_id: [] for w in r.workers}
    ran = []
    for job in r.jobs:
        kind = job.spec.WhichOneof("kind")
        took = job.finished_at - job.started_at if job.finished_at and job.started_at else 0.0
        ran.append({"job_id": job.id, "check": kind, "state": pb.JobState.Name(job.state), "reason": job.reason,
                    "workers": sorted(w.worker_id for w in job.workers), "seconds": round(took, 3)})
    for v in r.verdicts:
        h = v.health
        found.setdefault(v.worker_id, []).append(
            {"check": v.check, "job_id": v.job_id, "verdict": pb.Verdict.Name(h.verdict), "figure": h.figure,
             "expected": h.expected})
    workers = []
    for w in r.workers:
        figures = found.get(w.worker_id, [])
        ok = bool(figures) and all(f["verdict"] == "HEALTHY" for f in figures)
        workers.append({"worker_id": w.worker_id, "host": w.host, "passed": ok, "figures": figures,
                        "quarantined": w.state == pb.QUARANTINED,
                        "needs_approval": w.health.validate_needs_approval})
    failed = [w["worker_id"] for w in workers if not w["passed"]]
    ended = all(j["state"] == "SUCCEEDED" for j in ran)
    return {"passed": bool(ran) and ended and not failed, "host": host, "seconds": round(seconds, 3),
            "checks": ran, "workers": workers, "failed": failed, "named_hosts": list(r.named_hosts)}


def certificate_text(c: dict) -> str:
    scope = f"host {c['host']}" if c["host"] else "named workers"
    lines = [f"validation of {len(c['workers'])} workers ({scope}): {'PASSED' if c['passed'] else 'FAILED'} "
             f"in {c['seconds']:.1f} s", "checks run:"]
    lines += [f"  {j['job_id']}  {j['check']:<12} n={len(j['workers']):<3} {j['state']:<9} {j['seconds']:6.1f} s"
              + (f"  {j['reason']}" if j["reason"] and j["state"] != "SUCCEEDED" else "") for j in c["checks"]]
    lines.append(f"  {'worker':<28} {'check':<12} {'verdict':<9} {'figure':<34} yardstick")
    for w in c["workers"]:
        for f in w["figures"] or [{"check": "-", "verdict": "UNCHECKED", "figure": "no check covered it",
                                   "expected": ""}]:
            lines.append(f"  {w['worker_id']:<28} {f['check']:<12} {f['verdict']:<9} {f['figure'][:34]:<34} "
                         f"{f['expected']}")
    if c["named_hosts"]:
        lines.append("hosts named (every worker of them failed): " + ", ".join(c["named_hosts"]))
    if c["failed"]:
        lines.append("FAILED: " + ", ".join(c["failed"]))
    waiting = [w["worker_id"] for w in c["workers"] if w["passed"] and w["needs_approval"]]
    if waiting:
        lines.append("passed, but quarantined 3 times within 24 h: each returns once a person runs "
                     + "; ".join(f"`ringleader workers approve-return {w}`" for w in waiting))
    return "\n".join(lines)


def hooks_text(r: pb.HooksLogResponse) -> str:
    if not r.deliveries:
        return "no hook deliveries"
    lines = [f"{'first attempt (UTC)':<20} {'state':<9} {'tries':>5}  {'worker':<24} {'event id':<32} url"]
    for d in r.deliveries:
        at = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(d.first_at))
        line = f"{at:<20} {d.state:<9} {d.attempts:>5}  {d.worker_id:<24} {d.event_id:<32} {d.url}"
        if d.last_error and d.state != "DELIVERED":
            line += f"  ({d.last_error[:80]})"
        lines.append(line)
    return "\n".join(lines)
