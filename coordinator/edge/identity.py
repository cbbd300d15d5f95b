"""Who a registering worker is, and whether it may register: checked by coordinator/edge/servicers.py
before a registration reaches the control core. Each check refuses with PERMISSION_DENIED and a
reason naming the worker id (DESIGN.md point 8).

- Certificate (mTLS): a client certificate names one identity in a URI SAN,
  spiffe://ringleader/worker/ID or spiffe://ringleader/user/NAME (`ringleader certs`). A worker's
  certificate registers only its own id and cannot use the users' API (`caller_may_use_jobs`); a
  user's certificate cannot register. A certificate naming no one (one Secret shared by a
  Kubernetes DaemonSet's pods) proves only its CA: the token then gives the role, the credential
  below the name.
- Credential: the workers' token only bootstraps. On an id's first registration the coordinator
  issues a secret (Registered.worker_secret) and stores its digest bound to the id
  (JobStore.set_worker_credential: a restart keeps it); every later registration of that id must
  present it (Register.worker_secret), whether the id is connected, disconnected or from before a
  restart. An operator resets it with `ringleader coordinator --forget-worker ID` (kubelet's TLS
  bootstrap and Flower's node keys work the same way: a shared credential is exchanged once for
  one that names a single node).
- Address: the advertised address must be one the connection comes from (a host name counts if
  it resolves to it); a loopback peer may advertise only loopback. So a rank 0 cannot send its
  peers' executors to a host and port it does not own.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import hashlib
import hmac
import ipaddress
import logging
import secrets
import socket
from dataclasses import dataclass

from coordinator.store.api import JobStore
from ringleader.errors import PermissionDenied
from ringleader.v1 import workers_pb2 as wpb

log = logging.getLogger("ringleader.coordinator")

TRUST_DOMAIN = "ringleader"
WORKER, USER = "worker", "user"  # the roles a certificate can name
FORGET_HINT = "an operator resets it with `ringleader coordinator --forget-worker {id}`"


def spiffe_id(role: str, name: str) -> str:
    return f"spiffe://{TRUST_DOMAIN}/{role}/{name}"


@dataclass(frozen=True)
class CertIdentity:
    """What a verified client certificate says its holder is (role "" when it names no one)."""

    role: str = ""
    name: str = ""


@functools.lru_cache(maxsize=256)  # parsed once per certificate, not on every call
def cert_identity(pem: bytes) -> CertIdentity:
    from cryptography import x509  # only where client certificates are in use

    cert = x509.load_pem_x509_certificate(pem)
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return CertIdentity()
    prefix = f"spiffe://{TRUST_DOMAIN}/"
    for uri in sans.get_values_for_type(x509.UniformResourceIdentifier):
        role, _, name = uri.removeprefix(prefix).partition("/") if uri.startswith(prefix) else ("", "", "")
        if role in (WORKER, USER) and name:
            return CertIdentity(role, name)
    return CertIdentity()


def peer_identity(context) -> CertIdentity | None:
    """The identity in the caller's client certificate (verified by the TLS layer against the
    client CA), or None when the caller presented none."""
    pems = (context.auth_context() or {}).get("x509_pem_cert")
    return cert_identity(pems[0]) if pems else None


def caller_may_use_jobs(context) -> None:
    """The users' API: a worker's certificate is refused, whatever token comes with it."""
    cert = peer_identity(context)
    if cert is not None and cert.role == WORKER:
        raise PermissionDenied(f"this is worker {cert.name}'s certificate: a worker cannot submit, "
                               "cancel or read jobs (use a user's certificate)")


def peer_ip(peer: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address of a gRPC peer string ("ipv4:10.0.0.7:5123", "ipv6:[::1]:5123"); None for a
    Unix socket (a caller on this host)."""
    kind, _, rest = peer.partition(":")
    if kind not in ("ipv4", "ipv6"):
        return None
    ip = ipaddress.ip_address(rest.rsplit(":", 1)[0].strip("[]").split("%")[0])
    return getattr(ip, "ipv4_mapped", None) or ip


async def _addresses(host: str) -> set:
    try:
        return {ipaddress.ip_address(host)}
    except ValueError:
        pass
    try:
        infos = await asyncio.to_thread(socket.getaddrinfo, host, None)
    except OSError:
        return set()
    return {ipaddress.ip_address(i[4][0].split("%")[0]) for i in infos}


async def check_address(reg: wpb.Register, peer: str) -> None:
    """Refuse an advertised address that the connection does not come from."""
    seen = peer_ip(peer)
    advertised = await _addresses(reg.address)
    loopback = seen is None or seen.is_loopback
    if advertised and (all(a.is_loopback for a in advertised) if loopback else seen in advertised):
        return
    where = "this host (loopback)" if loopback else str(seen)
    want = "a loopback address" if loopback else f"{seen}, or a name resolving to it"
    raise PermissionDenied(f"register.address: worker {reg.worker_id} advertises {reg.address!r}, but its "
                           f"connection comes from {where}: advertise {want} (--advertise-host), or "
                           "connect from the address peers reach it on")


def digest(secret: str) -> str:
    # A random 32-byte secret needs no slow hash: nothing can be guessed from its SHA-256.
    return hashlib.sha256(secret.encode()).hexdigest()


class WorkerIdentities:
    """The per-worker credentials, kept in the job store."""

    SAID_MAX = 1024  # refusals remembered, so a daemon retrying every few seconds is logged once

    def __init__(self, store: JobStore) -> None:
        self.store = store
        self._said: collections.OrderedDict[tuple[str, str], None] = collections.OrderedDict()

    def log_refusal(self, worker_id: str, reason: str) -> None:
        """Log a refused registration at WARNING the first time, then at DEBUG."""
        key = (worker_id, reason)
        log.log(logging.DEBUG if key in self._said else logging.WARNING, "registration refused: %s", reason)
        self._said[key] = None
        self._said.move_to_end(key)
        if len(self._said) > self.SAID_MAX:
            self._said.popitem(last=False)

    def check(self, reg: wpb.Register, cert: CertIdentity | None) -> str:
        """Return if `reg` may register its id, with the secret to issue ("" for a known id);
        raise PermissionDenied naming the id otherwise."""
        wid = reg.worker_id
        if cert is not None and cert.role == USER:
            raise PermissionDenied(f"register: worker {wid}: user {cert.name}'s certificate cannot register a worker "
                                   f"(a worker's names it: {spiffe_id(WORKER, wid)}, `ringleader certs DIR --worker {wid}`)")
        if cert is not None and cert.role == WORKER and cert.name != wid:
            raise PermissionDenied(f"register: worker {wid}: this is worker {cert.name}'s certificate; "
                                   "a worker's certificate registers only its own id")
        bound = self.store.worker_credential(wid)
        if not bound:
            return secrets.token_urlsafe(32)
        if not hmac.compare_digest(digest(reg.worker_secret), bound):
            said = "a different secret" if reg.worker_secret else "none"
            raise PermissionDenied(f"register: worker id {wid} is bound to another daemon's credential (this one "
                                   f"presented {said}); a daemon keeps its secret under --state-dir; "
                                   + FORGET_HINT.format(id=wid))
        return ""

    def bind(self, worker_id: str, secret: str) -> None:
        self.store.set_worker_credential(worker_id, digest(secret))

    def forget(self, worker_id: str) -> None:
        if self.store.forget_worker_credential(worker_id):
            log.warning("worker %s's credential forgotten: its next registration binds a new one", worker_id)
        else:
            log.warning("--forget-worker %s: no credential was bound to that id", worker_id)
