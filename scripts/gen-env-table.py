#!/usr/bin/env python3
"""Print the table of RINGLEADER_* variables (one per coordinator and worker flag), or with
--write rewrite it in README.md. A test fails while the README's copy is stale."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ringleader_app import config  # noqa: E402
from ringleader_app.cli import build_parser  # noqa: E402

if "--write" in sys.argv[1:]:
    readme = Path(__file__).resolve().parent.parent / "README.md"
    print("README.md", "updated" if config.write_readme(build_parser(), readme) else "already up to date")
else:
    print(config.env_table(build_parser()))
