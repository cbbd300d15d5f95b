"""What the deploy tests (test_deploy.py, test_k8s.py) share: paths, the Dockerfiles' exec forms,
and parsing a container's command line with the real CLI parser."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from ringleader.app.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
COORDINATOR_HTTP_PORT, COORDINATOR_GRPC_PORT = 8080, 50051

# Flags of the security/CLI work that runs in parallel (issue 12's contract: coordinator
# --token-file, --worker-token-file, --tls-cert, --tls-key, --tls-client-ca, --insecure,
# --metrics-auth, --worker-ttl; worker --token-file, --tls-ca, --tls-cert, --tls-key). The
# manifests use them already; until the parser has them, parse_cli drops exactly these (with
# their value) and nothing else. Delete this allow-list when that work is merged: a flag the
# parser knows is always parsed for real.
FUTURE_CLI_FLAGS: dict[str, dict[str, bool]] = {  # subcommand -> flag -> takes a value
    "coordinator": {"--token-file": True, "--worker-token-file": True, "--tls-cert": True, "--tls-key": True,
                    "--tls-client-ca": True, "--insecure": False, "--metrics-auth": False, "--worker-ttl": True},
    "worker": {"--token-file": True, "--tls-ca": True, "--tls-cert": True, "--tls-key": True},
}


def dockerfile(name: str) -> str:
    return (DEPLOY / "docker" / name).read_text()


def exec_form(text: str, instruction: str) -> list[str]:
    m = re.search(rf"^{instruction}\s+(\[.*\])\s*$", text, re.M)
    assert m, instruction
    return json.loads(m.group(1))


def _known_flags(command: str) -> set[str]:
    sub = next(a for a in build_parser()._actions if a.dest == "command")  # the subcommands
    return set(sub.choices[command]._option_string_actions)


def parse_cli(argv: list[str]):
    """Parse `ringleader ...` as the CLI would; pytest.fail if it rejects the command."""
    assert argv[0] == "ringleader", argv
    args = list(argv[1:])
    command = next((a for a in args if not a.startswith("-")), "")
    future = {f: v for f, v in FUTURE_CLI_FLAGS.get(command, {}).items() if f not in _known_flags(command)}
    kept, i = [], 0
    while i < len(args):
        if args[i] in future:
            i += 2 if future[args[i]] else 1
            continue
        kept.append(args[i])
        i += 1
    try:
        return build_parser().parse_args(kept)
    except SystemExit:
        pytest.fail(f"the CLI rejects {shlex.join(argv)}")
