"""The expectation floors a coordinator judges by (`--floors FILE`, `ringleader floors export`)."""

from __future__ import annotations

import json
from pathlib import Path

from ringleader.errors import InvalidSpec


def load_floors(path: str):
    """The shipped table, with the file's rows over it (coordinator/health/expectations.py
    `floors_from`: a bad row raises InvalidSpec naming its field)."""
    from coordinator.health import expectations  # the coordinator's table, loaded only where used
    if not path:
        return expectations.SHIPPED
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise InvalidSpec("floors", f"{path}: {exc}") from None
    return expectations.floors_from(doc)
