"""Credentials every side shares: the two bearer tokens and TLS for gRPC channels and servers.

Two secrets, two roles: the users' token (submit, cancel, read) and the workers' join token
(register, take assignments). Both travel as `authorization: Bearer <token>` (gRPC metadata, an
HTTP header), never in a URL, a log line or the database. TLS files are PEM paths; a client that
names a CA speaks TLS, and one that also names a certificate and key can answer a server that
requires client certificates (mTLS).

Bad settings raise InvalidSpec naming the flag, which the CLI prints as one line (exit code 2).
"""

from __future__ import annotations

import ipaddress
import os
import socket
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import grpc

from ringleader.errors import InvalidSpec

USERS_TOKEN_ENV = "RINGLEADER_TOKEN"
WORKERS_TOKEN_ENV = "RINGLEADER_WORKER_TOKEN"
AUTHORIZATION = "authorization"  # gRPC metadata keys are lower case
MIN_TOKEN_CHARS = 16  # what a coordinator accepts: a guessable token protects nothing


def check_token(token: str, flag: str) -> str:
    """`token` if it can travel in a header: visible ASCII, no spaces."""
    if not token.isascii() or not token.isprintable() or " " in token:
        raise InvalidSpec(flag, "a token must be visible ASCII characters without spaces")
    return token


def read_token(path: str, env_var: str, flag: str, environ: Mapping[str, str] = os.environ) -> str:
    """The token in the file at `path` (surrounding whitespace stripped), else in `env_var`, else ""."""
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                token = f.read().strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidSpec(flag, f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
        if not token:
            raise InvalidSpec(flag, f"{path} is empty")
        return check_token(token, flag)
    return check_token(environ.get(env_var, "").strip(), env_var)


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    """gRPC call metadata carrying `token` (none for an empty token)."""
    return ((AUTHORIZATION, f"Bearer {token}"),) if token else ()


def bearer_token(header: str | None) -> str:
    """The token of an `authorization: Bearer <token>` value, or "" if there is none."""
    scheme, _, token = (header or "").strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def _read_pem(path: str, flag: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise InvalidSpec(flag, f"cannot read {path}: {exc.strerror or exc}") from None


@dataclass(frozen=True)
class TlsFiles:
    """PEM files: the CA that signs the peer's certificate, and our own certificate and key."""

    ca: str = ""
    cert: str = ""
    key: str = ""
    ca_flag: str = "--tls-ca"  # the flag that named `ca`, for errors

    def __post_init__(self) -> None:
        if bool(self.cert) != bool(self.key):
            raise InvalidSpec("--tls-key" if self.cert else "--tls-cert", "give --tls-cert and --tls-key together")

    def key_and_cert(self) -> tuple[bytes, bytes] | tuple[None, None]:
        if not self.cert:
            return None, None
        return _read_pem(self.key, "--tls-key"), _read_pem(self.cert, "--tls-cert")


@dataclass(frozen=True)
class ClientSecurity:
    """How a client or a worker reaches the coordinator: its token and, with a CA, TLS."""

    token: str = ""
    tls: TlsFiles = field(default_factory=TlsFiles)

    def __post_init__(self) -> None:
        if self.tls.cert and not self.tls.ca:
            raise InvalidSpec("--tls-ca", "a client certificate needs --tls-ca (the coordinator's CA)")

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        return bearer(self.token)

    def credentials(self) -> grpc.ChannelCredentials | None:
        if not self.tls.ca:
            return None
        key, cert = self.tls.key_and_cert()
        return grpc.ssl_channel_credentials(_read_pem(self.tls.ca, self.tls.ca_flag), key, cert)

    def channel(self, target: str, options: Sequence[tuple[str, object]] = ()) -> grpc.Channel:
        creds = self.credentials()
        return grpc.secure_channel(target, creds, options) if creds else grpc.insecure_channel(target, options)

    def aio_channel(self, target: str, options: Sequence[tuple[str, object]] = ()) -> grpc.aio.Channel:
        creds = self.credentials()
        return grpc.aio.secure_channel(target, creds, options) if creds else grpc.aio.insecure_channel(target, options)


@dataclass(frozen=True)
class ServerSecurity:
    """The coordinator's side: both tokens, TLS for its ports, and what it may leave open."""

    users_token: str = ""
    workers_token: str = ""
    tls: TlsFiles = field(default_factory=lambda: TlsFiles(ca_flag="--tls-client-ca"))  # ca: require client certs
    insecure: bool = False  # serve off-loopback without both tokens (warned about, hourly)
    metrics_auth: bool = False  # /metrics behind the users' token
    forget_workers: tuple[str, ...] = ()  # worker ids whose credentials are reset at start

    def __post_init__(self) -> None:
        for flag, token in (("--token-file", self.users_token), ("--worker-token-file", self.workers_token)):
            if token and len(token) < MIN_TOKEN_CHARS:
                raise InvalidSpec(flag, f"a token needs at least {MIN_TOKEN_CHARS} characters "
                                        "(`ringleader certs DIR` writes random ones)")
        if self.users_token and self.users_token == self.workers_token:
            raise InvalidSpec("--worker-token-file", "the workers' token must differ from the users' token")
        if self.tls.ca and not self.tls.cert:
            raise InvalidSpec("--tls-client-ca", "client certificates need a server one: give --tls-cert and --tls-key")

    def grpc_credentials(self) -> grpc.ServerCredentials | None:
        """TLS for the gRPC port (client certificates required when a client CA is set), or None."""
        key, cert = self.tls.key_and_cert()
        if cert is None:
            return None
        client_ca = _read_pem(self.tls.ca, "--tls-client-ca") if self.tls.ca else None
        return grpc.ssl_server_credentials([(key, cert)], root_certificates=client_ca,
                                           require_client_auth=client_ca is not None)

    def missing_tokens(self) -> list[str]:
        """What an off-loopback coordinator lacks, in words naming the settings."""
        missing = []
        if not self.users_token:
            missing.append(f"the users' token (--token-file or {USERS_TOKEN_ENV})")
        if not self.workers_token:
            missing.append(f"the workers' token (--worker-token-file or {WORKERS_TOKEN_ENV})")
        return missing


def with_port(address: str, port: int) -> str:
    """HOST:PORT with the port bound in place of the one asked for (port 0: a free one)."""
    return f"{address.rsplit(':', 1)[0]}:{port}"


def is_loopback(address: str) -> bool:
    """Whether HOST:PORT (or a bare host) listens on loopback only: every address the host
    name resolves to is a loopback one. "" and wildcards (0.0.0.0, [::]) are not; a Unix socket
    (unix:PATH, gRPC) is."""
    if address.startswith("unix:"):
        return True
    host = address.rsplit(":", 1)[0] if address.count(":") == 1 or address.startswith("[") else address
    host = host.strip("[]")
    if not host:
        return False
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(i[4][0].split("%")[0]).is_loopback for i in infos)
