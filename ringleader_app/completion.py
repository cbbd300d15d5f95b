"""Completion of job ids (`ringleader job <TAB>`), as kubectl completes resource names: the
newest jobs, asked of the coordinator the command line names, within a short deadline so that
an unreachable coordinator only means no suggestions."""

from __future__ import annotations

import argparse

import grpc

from ringleader_app.client import Client
from ringleader_app.security_flags import client_security
from ringleader.errors import RingleaderError

DEADLINE_S = 2.0
NEWEST = 100


def job_ids(prefix: str, parsed_args: argparse.Namespace, **_) -> list[str]:
    try:
        security = client_security(parsed_args)
        with Client(parsed_args.coordinator, timeout_s=DEADLINE_S, security=security) as client:
            page = client.list(limit=NEWEST)
    except (grpc.RpcError, RingleaderError, OSError, AttributeError):
        return []
    return [j.id for j in page.jobs if j.id.startswith(prefix)]
