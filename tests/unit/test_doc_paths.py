"""Every file or folder the docs name exists: docs/*.md, docs/decisions/*.md and README.md name
paths in backticks (`coordinator/core/control.py`), as relative links, or in the text
(tests/unit/test_states.py). A path is a name under one of the repository's top-level folders
(in the text: a file, with its extension); commands, flags, globs and placeholders (DATE, N, ...)
are not paths, nor is one in a git revision (e8f8d6c:bench/results/...), nor one git ignores
(bench/out/: raw runs)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "docs" / "decisions").glob("*.md")])
TOP = {p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".")} - {"build"}
BACKTICKED = re.compile(r"`([^`\s]+)`")
LINK = re.compile(r"\]\(([^)\s]+)\)")
IN_TEXT = re.compile(r"(?<![\w/:.-])((?:bench|coordinator|worker|dashboard|deploy|tests|scripts|ringleader|proto|docs)"
                     r"/[\w./-]*\.(?:py|md|sh|json|yaml|yml|proto|html|js|css|toml|txt))\b")
PLACEHOLDER = re.compile(r"[*?{}<>$]|\b(DATE|N|NAME|PATH|DIR|SRC|OUT|HOST|PORT|X|ID)\b|\.\.\.")


def named_paths(doc: Path) -> list[str]:
    text = doc.read_text()
    names = [(m.group(1), False) for m in BACKTICKED.finditer(text)]
    names += [(m.group(1), True) for m in LINK.finditer(text)]
    names += [(m.group(1), True) for m in IN_TEXT.finditer(text)]
    out = []
    for name, linked in names:
        name = name.split("#")[0].rstrip(".,:;")
        if not name or "://" in name or name.startswith(("-", "/", "~")) or PLACEHOLDER.search(name):
            continue
        first = name.split("/")[0]
        if linked or (first in TOP and "/" in name):
            out.append(name)
    return out


def resolves(doc: Path, name: str) -> bool:
    if (doc.parent / name).exists() or (ROOT / name).exists():
        return True
    return subprocess.run(["git", "check-ignore", "-q", name], cwd=ROOT).returncode == 0


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: str(d.relative_to(ROOT)))
def test_every_named_path_exists(doc):
    missing = sorted({n for n in named_paths(doc) if not resolves(doc, n)})
    assert not missing, f"{doc.relative_to(ROOT)} names paths that do not exist: {missing}"


def test_the_check_sees_paths():
    # A broken pattern would find nothing and pass: the README names the CLI's module at least.
    assert any(n.startswith("coordinator/") for n in named_paths(ROOT / "README.md"))
