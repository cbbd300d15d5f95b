"""The documents the CLI prints with `-o json` / `-o yaml`: the lean documents of
ringleader/leanjson.py (RFC 3339 times, a job's own kind's outcome only), the REST API's too.
"""

from __future__ import annotations

import json

from ringleader.leanjson import OUTCOMES, TIME_FIELDS, job_body, rfc3339, times  # noqa: F401 - used by the CLI


def dump(doc, output: str) -> str:
    if output == "yaml":
        import yaml  # only when asked for: the CLI's start stays short

        return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True).rstrip("\n")
    return json.dumps(doc, indent=2)
