"""The security flags of the CLI, one helper per role, and what they build.

    add_server_security(parser)  coordinator: tokens, TLS (mTLS), --insecure, --metrics-auth,
                                 --forget-worker (reset worker credentials: coordinator/edge/identity.py)
    add_worker_security(parser)  worker: the workers' token, TLS to the coordinator, --state-dir
    add_client_security(parser)  submit, jobs, job, watch, cancel, workers: the users' token, TLS
    add_certs_command(sub)       `ringleader certs DIR` (ringleader_app/certs.py)

The tokens themselves come from a file (--token-file, --worker-token-file) or from
RINGLEADER_TOKEN / RINGLEADER_WORKER_TOKEN, never from a flag's value (a command line is visible
to every user of the host in `ps`).
"""

from __future__ import annotations

import argparse

from ringleader.security import (
    USERS_TOKEN_ENV, WORKERS_TOKEN_ENV, ClientSecurity, ServerSecurity, TlsFiles, read_token,
)


def _add_tls(parser: argparse.ArgumentParser, ca_help: str) -> None:
    parser.add_argument("--tls-ca", default="", metavar="PEM", help=ca_help)
    parser.add_argument("--tls-cert", default="", metavar="PEM", help="this side's certificate (mTLS)")
    parser.add_argument("--tls-key", default="", metavar="PEM", help="its private key")


def add_server_security(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("security")
    g.add_argument("--token-file", default="", metavar="PATH",
                   help=f"the users' token: submit, cancel, read (or env {USERS_TOKEN_ENV})")
    g.add_argument("--worker-token-file", default="", metavar="PATH",
                   help=f"the workers' join token: register, take assignments (or env {WORKERS_TOKEN_ENV})")
    g.add_argument("--tls-cert", default="", metavar="PEM", help="serve gRPC and HTTP over TLS with this certificate")
    g.add_argument("--tls-key", default="", metavar="PEM", help="its private key")
    g.add_argument("--tls-client-ca", default="", metavar="PEM",
                   help="require gRPC clients and workers to present a certificate signed by this CA (mTLS)")
    g.add_argument("--insecure", action="store_true",
                   help="serve off loopback without both tokens (warned about at start and hourly)")
    g.add_argument("--metrics-auth", action="store_true", help="put /metrics behind the users' token")
    g.add_argument("--forget-worker", default="", metavar="ID[,ID...]",
                   help="reset these worker ids' credentials at start, for daemons that lost theirs")


def add_worker_security(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("security")
    token_file = g.add_argument("--worker-token-file", "--token-file", dest="token_file", default="", metavar="PATH",
                                help=f"the workers' join token (or env {WORKERS_TOKEN_ENV})")
    # The workers' token file is the coordinator's --worker-token-file, so it shares that flag's
    # variable; RINGLEADER_TOKEN_FILE stays the users' (the coordinator's and clients' --token-file).
    token_file.env_var = "RINGLEADER_WORKER_TOKEN_FILE"
    _add_tls(g, "speak TLS, trusting this CA for the coordinator's certificate")
    g.add_argument("--state-dir", default="", metavar="DIR",
                   help="keep this worker's credential here, so a restarted daemon keeps its id")


def add_client_security(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("security")
    g.add_argument("--token-file", default="", metavar="PATH", help=f"the users' token (or env {USERS_TOKEN_ENV})")
    _add_tls(g, "speak TLS, trusting this CA for the coordinator's certificate")


def add_certs_command(sub) -> None:
    p = sub.add_parser("certs", help="write a CA, certificates and both tokens for a test cluster")
    p.add_argument("dir", help="folder to write them to (created if missing)")
    p.add_argument("--host", action="append", default=[], metavar="NAME",
                   help="a name or address clients use to reach the coordinator (repeat)")
    p.add_argument("--worker", action="append", default=[], metavar="ID",
                   help="issue worker ID's certificate (worker-ID.pem); alone, adds it from the CA in DIR (repeat)")
    p.add_argument("--days", type=int, default=365, help="validity of the certificates (default 365)")
    p.add_argument("--force", action="store_true", help="overwrite existing files")


def server_security(a: argparse.Namespace) -> ServerSecurity:
    return ServerSecurity(
        users_token=read_token(a.token_file, USERS_TOKEN_ENV, "--token-file"),
        workers_token=read_token(a.worker_token_file, WORKERS_TOKEN_ENV, "--worker-token-file"),
        tls=TlsFiles(ca=a.tls_client_ca, cert=a.tls_cert, key=a.tls_key, ca_flag="--tls-client-ca"),
        insecure=a.insecure, metrics_auth=a.metrics_auth, forget_workers=tuple(filter(None, a.forget_worker.split(","))))


def worker_security(a: argparse.Namespace) -> ClientSecurity:
    security = ClientSecurity(read_token(a.token_file, WORKERS_TOKEN_ENV, "--token-file"),
                              TlsFiles(a.tls_ca, a.tls_cert, a.tls_key))
    security.credentials()  # unreadable files fail now, not at every reconnect
    return security


def client_security(a: argparse.Namespace) -> ClientSecurity:
    return ClientSecurity(read_token(a.token_file, USERS_TOKEN_ENV, "--token-file"),
                          TlsFiles(a.tls_ca, a.tls_cert, a.tls_key))
