"""CLI commands of baselines and localization (docs/baselines.md):

    ringleader localize JOB [--known-good ID,...] [--max-rounds N] [--size BYTES]
    ringleader baselines export FILE      (FILE "-": stdout) the table as JSON
    ringleader baselines import FILE      (FILE "-": stdin) replace those keys' baselines
"""

from __future__ import annotations

import argparse
import json
import sys

from google.protobuf import json_format

from ringleader_app import argtypes
from ringleader_app.client import Client
from ringleader_app.render import dump, times
from ringleader_app.table import size_label
from ringleader_app.security_flags import client_security
from ringleader.errors import InvalidSpec
from ringleader.jsonview import to_json
from ringleader.v1 import jobs_pb2 as pb

COMMANDS = ("localize", "baselines")


def add_parsers(sub, talker, client_options) -> None:
    """Called by cli.py with its helpers for commands that talk to a coordinator."""
    x = talker(sub, "localize", "find the worker, link or host that makes a job's gang slow (group testing); "
                                "exits 0 whether it names one or nobody (a failed call exits 1)")
    x.add_argument("job_id", help="a finished collective job whose gang was slow")
    x.add_argument("--known-good", default="", metavar="ID,...",
                   help="workers to pad test groups with (default: idle workers outside the gang)")
    x.add_argument("--max-rounds", type=int, default=0, help="give up after this many rounds (default log2(n) + 4)")
    x.add_argument("--size", type=argtypes.size, default=0, help="test size (default: the job's largest)")
    x.add_argument("--tolerance", type=float, default=0.0,
                   help="a group below this fraction of a clean group's busbw is slow (default 0.8)")
    client_options(x, "LocalizeResult: culprits, culprit_hosts, rounds, history, verdict",
                   outputs=("table", "json", "yaml"))
    b = talker(sub, "baselines", "export or import the baseline table (JSON)")
    b.add_argument("action", choices=["export", "import"], help="export the table to FILE, or import it from FILE")
    b.add_argument("file", help='a JSON file ("-": stdout for export, stdin for import)')
    # No default: `export -` prints JSON (what `import -` reads) unless -o table; import says a line
    # unless -o json.
    client_options(b, 'export to "-": JSON unless table; import: a line, or {"imported": N}',
                   outputs=("table", "json"), default=None)


def run(a: argparse.Namespace) -> int:
    with Client(a.coordinator, security=client_security(a)) as client:
        if a.command == "localize":
            return _localize(a, client)
        if a.action == "export":
            exported = client.export_baselines()
            text = json_format.MessageToJson(exported, preserving_proto_field_name=True)
            # A file always gets JSON (what import reads); stdout what -o asks for.
            _write(a.file, baselines_table(exported) if a.file == "-" and a.output == "table" else text + "\n")
            if a.file != "-":
                print(f"exported to {a.file}", file=sys.stderr)
            return 0
        answer = client.import_baselines(read_table(sys.stdin.read() if a.file == "-" else _read(a.file)))
        print(json.dumps(to_json(answer)) if a.output == "json" else f"imported {answer.imported} baseline(s)")
        return 0


def baselines_table(t: pb.BaselineTable) -> str:
    """`baselines export - -o table`: one line per comparable key, its median busbw and noise."""
    lines = [f"{'GPU':<16} {'OP':<14} {'DTYPE':<9} {'SIZE':>7} {'RANKS':>5} {'HOSTS':>5} {'LINK':<5} {'MODE':<5} "
             f"{'MEDIAN GB/S':>11} {'MAD':>8} {'RUNS':>4}"]
    for e in sorted(t.entries, key=_table_order):
        lines.append(f"{e.gpu_model[:16]:<16} {e.op:<14} {e.dtype:<9} {size_label(e.size_bucket):>7} {e.ranks:>5} "
                     f"{e.hosts:>5} {e.link:<5} {e.mode:<5} {e.median_busbw_gbps:>11.2f} {e.mad_busbw_gbps:>8.2f} "
                     f"{len(e.samples):>4}")
    return "\n".join(lines) + "\n" if t.entries else "No baselines found.\n"


def _table_order(e: pb.BaselineEntry) -> tuple:
    """Sizes in numeric order (8 B ... 512 B, 1KiB ... 64MiB), within each key's other fields."""
    return (e.gpu_model, e.op, e.dtype, e.ranks, e.hosts, e.link, e.mode, e.size_bucket)


def read_table(text: str) -> pb.BaselineTable:
    try:
        return json_format.Parse(text, pb.BaselineTable())
    except json_format.ParseError as exc:
        raise InvalidSpec("file", f"not a baseline table: {exc}") from exc


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError as exc:
        raise InvalidSpec("file", f"cannot read {path}: {exc.strerror}") from exc


def _write(path: str, text: str) -> None:
    if path == "-":
        sys.stdout.write(text)
        return
    with open(path, "w") as f:
        f.write(text)


def _localize(a: argparse.Namespace, client: Client) -> int:
    known = [w for w in a.known_good.split(",") if w]
    result = client.localize(pb.LocalizeRequest(job_id=a.job_id, known_good=known, max_rounds=a.max_rounds,
                                                size_bytes=a.size, tolerance=a.tolerance))
    if a.output in ("json", "yaml"):
        print(dump(times(to_json(result)), a.output))
        return 0
    print(localize_text(result), end="")
    return 0


def localize_text(result: pb.LocalizeResult) -> str:
    """`ringleader localize`'s table: each round's groups, the verdict, and a last line when
    nobody was named."""
    lines = []
    for r in result.history:
        lines.append(f"round {r.round} (clean groups reach {r.reference_gbps:.3g} GB/s)")
        for g in r.groups:
            tested = ",".join(g.suspects) or "control"
            lines.append(f"  {'SLOW' if g.slow else 'ok  '} {g.busbw_gbps:10.3f} GB/s  {tested}  (job {g.job_id})")
    lines.append(result.verdict)
    if not result.culprits:  # a finding, not an error: the search ran and every group kept up
        lines.append("Nobody named: no worker or host of the gang was slow on its own at this size "
                     "(exit 0; --size or a lower --tolerance look closer)")
    return "\n".join(lines) + "\n"
