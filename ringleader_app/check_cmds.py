"""The fleet health commands: `ringleader check` and `ringleader workers cordon|uncordon ID`.

`check` runs the checks now over all connected workers, a host's, or a list, waits for them and
prints what each found: the hosts named (every one of their workers failed), then each checked
worker's verdict with its evidence. Exit code 1 when a check it ran failed a worker (an older
verdict of another check does not count), or when a check job itself did not succeed (it crashed,
was cancelled, or had not finished by --timeout: its workers were not judged healthy by it, and
the job and its cause are named), so a script can gate on it
(`ringleader check --host h3 || drain h3`). `workers uncordon ID` of a worker whose latest verdict
failed makes its recheck due now and keeps it out until that passes; `--force` puts it back over
the verdict (and says so).
"""

from __future__ import annotations

import argparse
import time

from ringleader import checks
from ringleader_app import argtypes
from ringleader_app.client import Client
from ringleader_app.kindargs import given
from ringleader_app.render import dump, job_body, times
from ringleader_app.security_flags import client_security
from ringleader.errors import EXIT_FAILED, InvalidSpec
from ringleader.jsonview import to_json
from ringleader.v1 import jobs_pb2 as pb

ACTIONS = ("cordon", "uncordon", "approve", "approve-return", "pending")
DOCS = ("table", "json", "yaml")  # what check and cordon print: no wide form


def add_commands(sub, talker, client_options) -> None:
    """Add `check`, and cordon/uncordon to the existing `workers` command."""
    c = talker(sub, "check", "check workers now: links, GPU compute and memory, silent data corruption")
    which = c.add_mutually_exclusive_group()
    which.add_argument("--all", action="store_true", help="every connected worker (the default)")
    which.add_argument("--host", default="", help="the workers of this host")
    which.add_argument("--workers", default="", metavar="A,B,...", help="exactly these workers")
    c.add_argument("--kind", default="", metavar="K1,K2", help=f"any of {', '.join(checks.KINDS)} (default: all)")
    c.add_argument("--size", type=argtypes.size, default=None, help="link_matrix: ping-pong size (default 512K)")
    c.add_argument("--iters", type=int, default=None, help="timed iterations of each check (link_matrix, gpu_check)")
    c.add_argument("--timeout", type=argtypes.seconds, default=300.0, help="give up waiting after this long")
    c.add_argument("--plan", action="store_true", help="run nothing: print the health sweeps' plan (each kind in "
                   "the order the next sweep takes it, how long since it last ran on its stalest worker, what the "
                   "last sweep skipped and why)")
    client_options(c, '{"jobs": [Job, ...], "named_hosts": [...], "workers": [WorkerInfo, ...]}', outputs=DOCS)
    w = sub.choices["workers"]
    # Checked in run(), not by argparse: an optional positional with choices trips argparse when
    # ringleader_app/config.py re-parses with every default suppressed.
    w.add_argument("action", nargs="?", metavar="{cordon,uncordon,approve,approve-return,pending}", help="cordon: keep "
                   "the worker out of user jobs; uncordon: put it back; pending: the daemons refused re-claiming an "
                   "id, with their fingerprints; approve: let one such daemon (a replaced pod, a lost --state-dir) "
                   "re-claim the id at its next registration; approve-return: let a worker quarantined 3 times "
                   "within 24 h back, after it passed `ringleader validate`")
    w.add_argument("worker_id", nargs="?", default="", help="the worker to cordon, uncordon or approve")
    w.add_argument("--fingerprint", default="", help="approve: the daemon to admit (`ringleader workers pending`); "
                   "needed when more than one waits for the id")
    # An optional value: argparse gives both optional positionals to `uncordon` before it sees the
    # flag, so the id after `--force` (the documented `workers uncordon --force ID`) lands here.
    w.add_argument("--force", nargs="?", const=True, default=False, metavar="ID",
                   help="uncordon: put back a worker whose latest verdict failed, without the recheck it otherwise "
                   "gets first")


def target(a: argparse.Namespace) -> tuple[str, bool]:
    """(worker id, --force) of `workers ACTION`: `uncordon ID --force` and `uncordon --force ID` alike."""
    force = getattr(a, "force", False)
    if isinstance(force, str):
        if a.worker_id:
            raise InvalidSpec("worker_id", f"one worker at a time, got {a.worker_id[:64]!r} and {force[:64]!r}")
        return force, True
    return a.worker_id, bool(force)


def handles(a: argparse.Namespace) -> bool:
    return a.command == "check" or (a.command == "workers" and bool(getattr(a, "action", None)))


def run(a: argparse.Namespace) -> int:
    with Client(a.coordinator, security=client_security(a)) as client:
        if a.command == "workers":
            a.worker_id, a.force = target(a)
            if a.action not in ACTIONS:
                raise InvalidSpec("action", f"expected {' or '.join(ACTIONS)}, got {a.action[:64]!r}")
            if a.action == "pending":
                got = client.pending_daemons()
                print(dump(times(to_json(got)), a.output) if a.output in DOCS[1:] else pending_text(got))
                return 0
            if not a.worker_id:
                raise InvalidSpec("worker_id", f"`ringleader workers {a.action}` needs a worker id")
            if a.action == "approve":
                ok = client.approve(a.worker_id, getattr(a, "fingerprint", ""))
                who = f"the daemon with fingerprint {ok.credential_fingerprint}" if ok.credential_fingerprint \
                    else "the next daemon"
                print(dump(times(to_json(ok)), a.output) if a.output in DOCS[1:] else
                      f"{ok.worker_id}: {who} re-claims the id with a new secret at its next registration "
                      f"within {ok.expires_in_s:.0f} s")
                return 0
            if a.action == "approve-return":
                info = client.approve_return(a.worker_id)
                print(dump(times(to_json(info)), a.output) if a.output in DOCS[1:] else
                      health_line(info) + "\nback in service: approved after a passed validation")
                return 0
            force = a.action == "uncordon" and getattr(a, "force", False)
            info = client.cordon(a.worker_id, on=a.action == "cordon", force=force)
            print(dump(times(to_json(info)), a.output) if a.output in DOCS[1:] else cordon_text(info, a.action, force))
            return 0
        if getattr(a, "plan", False):
            if a.workers or a.host or a.kind:
                raise InvalidSpec("plan", "--plan runs no check: drop --workers, --host and --kind")
            got = client.sweep_plan()
            print(dump(to_json(got), a.output) if a.output in DOCS[1:] else plan_text(got))
            return 0
        answer = client.run_check(request_from_args(a))
    print(dump(check_doc(answer), a.output) if a.output in DOCS[1:] else check_text(answer))
    return EXIT_FAILED if failed_here(answer) or unfinished(answer) else 0


def plan_text(r: pb.SweepPlanResponse) -> str:
    head = (f"sweeps every {r.check_every_s:g} s ({r.sweeps} done)" if r.check_every_s else
            "sweeps are off (--check-every 0): only rechecks of failed workers run") + f"; {r.workers} connected workers"
    rows = [head, "KIND\tSTALE\tSKIPS\tLAST SWEEP\tNEVER CHECKED"]
    for k in r.kinds:
        stale = "never" if k.stale_s < 0 else f"{k.stale_s:.0f} s"
        never = f"{k.never_checked}" + (f" ({', '.join(k.never_checked_ids[:5])}{', ...' if k.never_checked > 5 else ''})"
                                        if k.never_checked else "")
        rows.append(f"{k.kind}\t{stale}\t{k.skips}\t{('skipped: ' + k.skipped) if k.skipped else 'ran or not due'}\t{never}")
    return "\n".join(rows)


def unfinished(r: pb.RunCheckResponse) -> list[pb.Job]:
    """The check jobs of this request that did not succeed: they judged nobody healthy."""
    return [j for j in r.jobs if j.state != pb.SUCCEEDED]


def pending_text(r: pb.ListPendingDaemonsResponse) -> str:
    if not r.daemons:
        return "No daemon waits to re-claim a worker id."
    rows = ["WORKER\tADDRESS\tHOST\tFINGERPRINT\tFIRST SEEN\tATTEMPTS"]
    rows += [f"{d.worker_id}\t{d.address}\t{d.host}\t{d.credential_fingerprint}\t"
             f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(d.first_seen))}\t{d.attempts}" for d in r.daemons]
    rows.append("admit one: ringleader workers approve WORKER --fingerprint FINGERPRINT")
    return "\n".join(rows)


def failed_here(r: pb.RunCheckResponse) -> list[pb.WorkerInfo]:
    """The workers whose failed verdict came from a check of this request."""
    ran = {j.id for j in r.jobs}
    return [w for w in r.workers if w.health.verdict == pb.UNHEALTHY and w.health.job_id in ran]


def cordon_text(w: pb.WorkerInfo, action: str, force: bool) -> str:
    line = health_line(w)
    if action == "uncordon" and force:
        line += "\nput back by hand over its verdict (--force)"
    elif action == "uncordon" and w.health.verdict == pb.UNHEALTHY:
        line += "\nits latest verdict failed: a recheck is due now; it returns when that passes (--force overrides)"
    return line


def request_from_args(a: argparse.Namespace) -> pb.RunCheckRequest:
    r = pb.RunCheckRequest(worker_ids=[w for w in a.workers.split(",") if w], host=a.host, wait=True,
                           timeout_s=a.timeout, kinds=[k.strip() for k in a.kind.split(",") if k.strip()])
    if a.size is not None or a.iters is not None:
        r.link_matrix.CopyFrom(pb.LinkMatrixSpec(size_bytes=a.size or 0, iters=a.iters or 4, warmup=1))
    if a.iters is not None:
        r.gpu_check.iters = a.iters
    return r


def check_doc(r: pb.RunCheckResponse) -> dict:
    """-o json|yaml: the check jobs as `ringleader job -o json` shows a job (its own kind's
    outcome only, RFC 3339 times), the hosts named, the workers checked."""
    return {"jobs": [job_body(j, to_json(j)) for j in r.jobs], "named_hosts": list(r.named_hosts),
            "findings": list(r.findings), "workers": [times(to_json(w)) for w in r.workers]}


def health_line(w: pb.WorkerInfo) -> str:
    h = w.health
    verdict = pb.Verdict.Name(h.verdict) if h.verdict else "UNJUDGED" if h.check else "UNCHECKED"
    line = f"{w.worker_id:<28} {w.host:<16} {verdict:<9}{' CORDONED' if h.cordoned else ''}"
    if h.breaker_held and not h.cordoned:
        line += " BREAKER-HELD (left in service: automatic quarantine is at its GPU model's share)"
    if h.verdict not in (pb.VERDICT_UNSPECIFIED, pb.HEALTHY) or h.cordoned or h.check:
        line += f"  {h.check}: {h.figure}; expected {h.expected}"
    if h.also:
        line += f"; also {h.also}"
    return line


def check_text(r: pb.RunCheckResponse) -> str:
    lines = [f"{j.id}  {j.spec.WhichOneof('kind'):<12} n={j.spec.world_size:<4} {pb.JobState.Name(j.state):<9} "
             f"{j.reason}" for j in r.jobs]
    lines.append("named hosts: " + (", ".join(r.named_hosts) or "none"))
    lines += [f"finding: {f}" for f in r.findings]
    bad = [w for w in r.workers if w.health.verdict != pb.HEALTHY]
    lines += [health_line(w) for w in bad]
    broken = unfinished(r)
    # A worker in a check job that did not succeed is not judged healthy by this run, whatever an
    # earlier verdict said.
    unjudged = {m.worker_id for j in broken for m in j.workers} - {w.worker_id for w in bad}
    healthy = len(r.workers) - len(bad) - len(unjudged & {w.worker_id for w in r.workers})
    lines.append(f"{healthy} of {len(r.workers)} workers healthy; {len(failed_here(r))} failed by these checks"
                 + (f"; {len(unjudged)} not judged (their check job did not succeed)" if unjudged else ""))
    for j in broken:
        ids = ", ".join(m.worker_id for m in sorted(j.workers, key=lambda m: m.rank))
        lines.append(f"check job {j.id} ({j.spec.WhichOneof('kind')}) {pb.JobState.Name(j.state)} on {ids or '-'}: "
                     f"{j.reason or 'no reason given'}")
    return "\n".join(lines)


# ---- the check kinds' part of `ringleader submit` and `ringleader job` (ringleader/kinds.py) ----


def link_matrix_spec(a: argparse.Namespace) -> pb.LinkMatrixSpec:
    """--sizes (its first: the ping-pong size), --iters, --warmup."""
    sizes = getattr(a, "sizes", None) or []
    return pb.LinkMatrixSpec(size_bytes=sizes[0] if sizes else 0, **given(a, "iters", "warmup"))


def gpu_check_spec(a: argparse.Namespace) -> pb.GpuCheckSpec:
    """--iters, and --dtype when it is one the check runs (else the device's default)."""
    dtype = getattr(a, "dtype", "") or ""
    return pb.GpuCheckSpec(dtype=dtype if dtype in checks.GPU_DTYPES else "", **given(a, "iters"))


def sdc_check_spec(a: argparse.Namespace) -> pb.SdcCheckSpec:
    return pb.SdcCheckSpec()


def link_matrix_table(r: pb.LinkMatrixResult) -> str:
    lines = [f"link matrix at {r.size_bytes} bytes ({r.size_reason or 'given'}), {r.rounds} rounds; median same host "
             f"{r.median_same_host_gbps:.3f} GB/s, across hosts {r.median_cross_host_gbps:.3f} GB/s",
             f"{'A':>4} {'B':>4} {'ROUND':>5} {'LAT_US':>10} {'GB/S':>9} {'RATIO':>6}  FLAG"]
    for x in sorted(r.links, key=lambda x: x.ratio):
        lines.append(f"{x.a:>4} {x.b:>4} {x.round:>5} {x.latency_us:>10.1f} {x.gbps:>9.3f} {x.ratio:>6.2f}  "
                     f"{'FLAGGED' if x.flagged else ''}{f' {x.wrong} bytes wrong' if x.wrong else ''}")
    return "\n".join(lines)


def gpu_check_table(r: pb.GpuCheckResult) -> str:
    lines = [f"gpu check: {r.dtype} n={r.matmul_n}, copy {r.copy_bytes} bytes (GB/s counts read + write)",
             f"{'RANK':>4} {'DEVICE':<24} {'TFLOP/S':>10} {'RATIO':>6} {'COPY GB/S':>10} {'RATIO':>6}  FLAG"]
    lines += [f"{w.rank:>4} {w.device[:24]:<24} {w.tflops:>10.3f} {w.tflops_ratio:>6.2f} {w.copy_gbps:>10.1f} "
              f"{w.copy_ratio:>6.2f}  {'FLAGGED' if w.flagged else ''}" for w in r.workers]
    return "\n".join(lines)


def sdc_check_table(r: pb.SdcCheckResult) -> str:
    lines = [f"corruption check: majority checksum {r.majority_checksum[:16] or '(none)'}",
             f"{'RANK':>4} {'DEVICE':<24} {'CHECKSUM':<16} {'WRONG':>6}  FLAG"]
    lines += [f"{w.rank:>4} {w.device[:24]:<24} {w.checksum[:16]:<16} {w.collective_wrong:>6}  "
              f"{'FLAGGED' if w.flagged else ''}" for w in r.workers]
    return "\n".join(lines)
