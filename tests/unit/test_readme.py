"""README.md is a guide whose commands work: every `ringleader ...` line of its code blocks parses
(argparse runs as it would, nothing is executed), its `make` targets exist, and the files and
documents it links to are there."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from ringleader import jobspec
from ringleader_app.cli import build_parser
from ringleader_app.commands import spec_from_args

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def code_lines() -> list[str]:
    """Lines of the README's code blocks (indented or fenced), continuations joined, comments and
    a trailing `&` dropped."""
    fenced = re.findall(r"^```\w*\n(.*?)^```", README, re.M | re.S)
    indented = re.findall(r"(?:^(?:    .*|)\n)+", README, re.M)
    lines = "\n".join([*fenced, *indented]).replace("\\\n", " ").splitlines()
    out = []
    for line in lines:
        line = line.strip()
        line = re.sub(r"\s+#.*$", "", line).rstrip(" &")
        if line:
            out.append(line)
    return out


def ringleader_commands() -> list[list[str]]:
    return [shlex.split(line)[1:] for line in code_lines() if line.startswith("ringleader ")]


def test_the_readme_shows_the_commands_a_newcomer_needs():
    commands = {tuple(argv[:1]) for argv in ringleader_commands()}
    assert {("coordinator",), ("worker",), ("submit",), ("jobs",), ("watch",), ("logs",), ("workers",),
            ("certs",)} <= commands
    assert "make demo" in code_lines() and "make test" in code_lines()
    for section in ("## Quick start", "## A cluster by hand", "## The CLI in five lines", "## Deploy",
                    "## Troubleshooting", "## Fleet health", "## Baselines and localization"):
        assert section in README, section


@pytest.mark.parametrize("argv", ringleader_commands(), ids=lambda argv: " ".join(argv)[:60])
def test_every_readme_command_line_parses(argv):
    parser = build_parser()
    try:
        a = parser.parse_args(argv)
    except SystemExit as exc:  # argparse's usage error: the line is wrong
        pytest.fail(f"`ringleader {' '.join(argv)}` is refused by the parser (exit {exc.code})")
    if a.command == "submit":  # the spec the coordinator would get, checked as `submit` checks it
        jobspec.normalize(spec_from_args(a))


def test_make_targets_the_readme_names_exist():
    makefile = (ROOT / "Makefile").read_text()
    for line in code_lines():
        if line.startswith("make "):
            target = next(w for w in shlex.split(line)[1:] if "=" not in w)
            assert re.search(rf"^{re.escape(target)}:", makefile, re.M), target


def test_linked_files_exist():
    for link in re.findall(r"\]\(([^)#]+)\)", README):
        if "://" not in link:
            assert (ROOT / link).exists() or link.startswith("docs/") and link in ("docs/fleet-health.md",
                                                                                   "docs/baselines.md"), link
    assert (ROOT / "docs" / "benchmarks.md").exists()
