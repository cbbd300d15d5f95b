"""What the deploy tests (test_deploy.py, test_k8s.py) share: paths, the Dockerfiles' exec forms,
and parsing a container's command line with the real CLI parser."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from ringleader_app.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
COORDINATOR_HTTP_PORT, COORDINATOR_GRPC_PORT = 8080, 50051

def dockerfile(name: str) -> str:
    return (DEPLOY / "docker" / name).read_text()


def exec_form(text: str, instruction: str) -> list[str]:
    m = re.search(rf"^{instruction}\s+(\[.*\])\s*$", text, re.M)
    assert m, instruction
    return json.loads(m.group(1))


def parse_cli(argv: list[str]):
    """Parse `ringleader ...` as the CLI would; pytest.fail if it rejects the command."""
    assert argv[0] == "ringleader", argv
    try:
        return build_parser().parse_args(argv[1:])
    except SystemExit:
        pytest.fail(f"the CLI rejects {shlex.join(argv)}")
