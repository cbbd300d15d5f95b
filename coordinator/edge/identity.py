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
  issues a secret (Registered.worker_secret); the daemon stores it, then acknowledges
  (WorkerMessage.credential_stored), and only then is its digest bound to the id
  (JobStore.set_worker_credential: a restart keeps it). An issued but unacknowledged secret binds
  nothing: a daemon killed before storing it re-claims the id like a new one, one killed after
  storing it presents it (which proves it stored it). Every later registration of a bound id must
  present its secret, whether the id is connected, disconnected or from before a restart (kubelet's
  TLS bootstrap and Flower's node keys work the same way: a shared credential is exchanged once
  for one that names a single node).
- Re-claim without the secret (a replaced pod, a lost state dir): a new secret is issued, bound
  on its acknowledgement, when something the operator already trusts vouches for the daemon: its
  worker certificate (mTLS: the certificate is the identity), a Kubernetes token naming its node
  (coordinator/edge/k8s_identity.py), or an operator's approval (`ringleader workers approve ID`,
  POST /api/v1/workers/{id}/approve), which lasts APPROVAL_S. An approval names one daemon: each
  refused daemon is kept as a PendingDaemon with a credential fingerprint (of its address, host
  name, certificate and presented secret; `ringleader workers pending`), and the approval admits
  only the daemon with that fingerprint, so an impostor registering under the id after it is
  still refused. `ringleader coordinator
  --forget-worker ID` still resets an id at start.
- Trusted single host: a coordinator with no tokens whose every port listens on loopback lets a
  daemon without its secret re-claim an id that is not connected (the README's recipe restarts
  workers without --state-dir); a connected id is still refused.
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
import time
from dataclasses import dataclass

from coordinator.store.api import JobStore
from ringleader import jobspec
from ringleader.errors import FailedPrecondition, InvalidSpec, PermissionDenied
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import workers_pb2 as wpb

log = logging.getLogger("ringleader.coordinator")

TRUST_DOMAIN = "ringleader"
WORKER, USER = "worker", "user"  # the roles a certificate can name
FORGET_HINT = ("an operator lets this daemon re-claim it with `ringleader workers approve {id}` (or resets it "
               "with `ringleader coordinator --forget-worker {id}`)")
APPROVAL_S = 600.0  # how long an operator's approval waits for the daemon's re-claim


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
    """The users' API (gRPC): a worker's certificate is refused, whatever token comes with it."""
    cert_may_use_jobs(peer_identity(context))


def cert_may_use_jobs(cert: CertIdentity | None) -> None:
    """The one rule for both transports (the REST side: dashboard/guard.py): a worker's
    certificate never acts as a user."""
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


def credential_fingerprint(reg: wpb.Register, cert: CertIdentity | None, peer: str) -> str:
    """What tells one refused daemon from another: where it connects from, the host it names,
    its certificate's identity and the secret it presented (its digest). 16 hex digits."""
    seen = peer_ip(peer) if peer else None
    parts = (str(seen or peer.rpartition(":")[0]), reg.host, f"{cert.role}/{cert.name}" if cert else "",
             digest(reg.worker_secret) if reg.worker_secret else "")
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


@dataclass
class PendingDaemon:
    worker_id: str
    address: str
    host: str
    credential_fingerprint: str
    first_seen: float  # wall clock, Unix seconds
    last_seen: float
    attempts: int = 1


def digest(secret: str) -> str:
    # A random 32-byte secret needs no slow hash: nothing can be guessed from its SHA-256.
    return hashlib.sha256(secret.encode()).hexdigest()


class WorkerIdentities:
    """The per-worker credentials, kept in the job store; issued secrets and operators' approvals
    wait in memory (a coordinator restart forgets them: the daemon registers as before)."""

    SAID_MAX = 1024  # refusals remembered, so a daemon retrying every few seconds is logged once

    def __init__(self, store: JobStore, clock=time.monotonic, token_review=None, trusted_host: bool = False) -> None:
        self.store = store
        # No tokens and every port on loopback (ringleader_app/process.py decides): whoever can
        # register can already run anything as this host's users, so a restarted daemon without
        # its secret takes its id back once the id is not connected.
        self.trusted_host = trusted_host
        self.clock = clock
        self.token_review = token_review  # coordinator/edge/k8s_identity.TokenReviewer, or None
        self._said: collections.OrderedDict[tuple[str, str], None] = collections.OrderedDict()
        self._issued: dict[str, str] = {}  # worker id -> the digest of its unacknowledged secret
        self._approved: dict[str, tuple[float, str]] = {}  # worker id -> (when it lapses, fingerprint or "")
        self._pending: collections.OrderedDict[tuple[str, str], PendingDaemon] = collections.OrderedDict()

    def log_refusal(self, worker_id: str, reason: str) -> None:
        """Log a refused registration at WARNING the first time, then at DEBUG."""
        key = (worker_id, reason)
        log.log(logging.DEBUG if key in self._said else logging.WARNING, "registration refused: %s", reason)
        self._said[key] = None
        self._said.move_to_end(key)
        if len(self._said) > self.SAID_MAX:
            self._said.popitem(last=False)

    async def kubernetes(self, reg: wpb.Register) -> str:
        """What the pod's Kubernetes token vouches for (check's `vouched`): asked of the API
        server only where it matters, a bound id registering without its secret."""
        bound = self.store.worker_credential(reg.worker_id)
        if self.token_review is None or not reg.k8s_token or not bound:
            return ""
        if reg.worker_secret and hmac.compare_digest(digest(reg.worker_secret), bound):
            return ""
        return await self.token_review.vouch(reg)

    def check(self, reg: wpb.Register, cert: CertIdentity | None, vouched: str = "", connected: bool = False,
              peer: str = "") -> str:
        """Return if `reg` may register its id, with the secret to issue ("" when it presented
        the bound one); raise PermissionDenied naming the id otherwise. `vouched`: what else
        proved this daemon is the worker (a Kubernetes token naming its node), "" if nothing;
        `connected`: the id is connected now (the registry's word, not the stream's: a stream
        whose daemon died unseen holds nothing once liveness has dropped it); `peer`: the
        connection's gRPC peer string (the daemon's fingerprint)."""
        wid = reg.worker_id
        if cert is not None and cert.role == USER:
            raise PermissionDenied(f"register: worker {wid}: user {cert.name}'s certificate cannot register a worker "
                                   f"(a worker's names it: {spiffe_id(WORKER, wid)}, `ringleader certs DIR --worker {wid}`)")
        if cert is not None and cert.role == WORKER and cert.name != wid:
            raise PermissionDenied(f"register: worker {wid}: this is worker {cert.name}'s certificate; "
                                   "a worker's certificate registers only its own id")
        presented = digest(reg.worker_secret) if reg.worker_secret else ""
        bound, issued = self.store.worker_credential(wid), self._issued.get(wid)
        if presented and bound and hmac.compare_digest(presented, bound):
            return ""
        if presented and issued and hmac.compare_digest(presented, issued):
            self._bind(wid, issued)  # it stored the secret; only its acknowledgement was lost
            return ""
        if issued and connected:  # the daemon it was issued to holds the id and is storing it now
            raise self._refusal(wid, reg.worker_secret)
        if not bound:
            return secrets.token_urlsafe(32)
        fingerprint = credential_fingerprint(reg, cert, peer)
        why = self._voucher(wid, cert, vouched, fingerprint)
        if not why and self.trusted_host and not connected:
            why = "a trusted single host (no tokens, loopback only)"
        if not why:
            self._wait(reg, peer, fingerprint)
            raise self._refusal(wid, reg.worker_secret, fingerprint)
        self._pending.pop((wid, fingerprint), None)
        log.warning("worker %s re-claims its id without its secret, vouched for by %s: a new secret is issued",
                    wid, why)
        return secrets.token_urlsafe(32)

    def _voucher(self, wid: str, cert: CertIdentity | None, vouched: str, fingerprint: str) -> str:
        if cert is not None and cert.role == WORKER and cert.name == wid:
            return "its worker certificate"
        if vouched:
            return vouched
        lapses, named = self._approved.get(wid, (0.0, ""))
        if lapses > self.clock() and (not named or hmac.compare_digest(named, fingerprint)):
            return "an operator's approval"
        return ""

    PENDING_MAX = 1024  # refused daemons remembered (the oldest forgotten first)

    def _wait(self, reg: wpb.Register, peer: str, fingerprint: str) -> None:
        key, now = (reg.worker_id, fingerprint), time.time()
        if (seen := self._pending.get(key)) is not None:
            seen.last_seen, seen.attempts = now, seen.attempts + 1
            self._pending.move_to_end(key)
            return
        address = str(peer_ip(peer) or "this host") if peer else ""
        self._pending[key] = PendingDaemon(reg.worker_id, address, reg.host, fingerprint, now, now)
        if len(self._pending) > self.PENDING_MAX:
            self._pending.popitem(last=False)

    def pending(self, worker_id: str = "") -> list[PendingDaemon]:
        """The daemons refused re-claiming a bound id (of `worker_id` only, if given), oldest first."""
        return sorted((p for p in self._pending.values() if not worker_id or p.worker_id == worker_id),
                      key=lambda p: (p.worker_id, p.first_seen))

    def pending_daemons(self) -> pb.ListPendingDaemonsResponse:
        """ListPendingDaemons (gRPC) and GET /api/v1/workers/pending."""
        return pb.ListPendingDaemonsResponse(daemons=[pb.PendingDaemon(
            worker_id=p.worker_id, address=p.address, host=p.host, credential_fingerprint=p.credential_fingerprint,
            first_seen=p.first_seen, last_seen=p.last_seen, attempts=p.attempts) for p in self.pending()])

    @staticmethod
    def _refusal(wid: str, secret: str, fingerprint: str = "") -> PermissionDenied:
        said = "a different secret" if secret else "none"
        this = f" (this daemon: --fingerprint {fingerprint}, as `ringleader workers pending` lists it)" if fingerprint else ""
        return PermissionDenied(f"register: worker id {wid} is bound to another daemon's credential (this one "
                                f"presented {said}); a daemon keeps its secret under --state-dir; "
                                + FORGET_HINT.format(id=wid) + this)

    def issued(self, worker_id: str, secret: str, cert: CertIdentity | None = None) -> None:
        """The coordinator accepted the registration and sends `secret` (check's answer). To a
        daemon whose certificate names its id, the secret is bound at once: that daemon never
        needs it to come back (its certificate vouches), and until its acknowledgement an
        unbound id was anyone's, so a daemon holding only the shared certificate took the id of
        one killed between its registration and its acknowledgement (tests/integration/
        test_worker_restart.py's mTLS test, in CI and in 1 of 2 loaded runs here: killed 10 ms
        after registering)."""
        if cert is not None and cert.role == WORKER and cert.name == worker_id:
            self._bind(worker_id, digest(secret))
        else:
            self._issued[worker_id] = digest(secret)

    def stored(self, worker_id: str, secret_sha256: str) -> bool:
        """The daemon acknowledged storing its secret: bind it if it is the one issued (True)."""
        issued = self._issued.get(worker_id)
        if issued is None:
            bound = self.store.worker_credential(worker_id)
            if bound and hmac.compare_digest(secret_sha256, bound):
                return False  # bound when issued (its certificate names it): nothing more to do
        if issued is None or not hmac.compare_digest(secret_sha256, issued):
            log.warning("worker %s acknowledged a secret it was not issued: nothing bound", worker_id)
            return False
        self._bind(worker_id, issued)
        log.info("worker %s stored its credential: the id is bound to it", worker_id)
        return True

    def _bind(self, worker_id: str, secret_digest: str) -> None:
        self.store.set_worker_credential(worker_id, secret_digest)
        self._issued.pop(worker_id, None)
        self._approved.pop(worker_id, None)  # an approval lets one daemon in, once

    def bind(self, worker_id: str, secret: str) -> None:
        self._bind(worker_id, digest(secret))

    def approve(self, worker_id: str, connected: bool, fingerprint: str = "") -> tuple[float, str]:
        """Let the daemon with `fingerprint` (a pending one; empty: the only one waiting for the
        id, or any daemon when none is) re-claim `worker_id` without its secret at its next
        registration within APPROVAL_S; returns (the seconds the approval lasts, the fingerprint
        it names). Refused while the id is connected: that would hand a live worker's id to
        whoever registers next."""
        if connected:
            raise FailedPrecondition(f"worker {worker_id} is connected: its id needs no approval (approve a "
                                     "re-claim once the old daemon is gone)")
        waiting = [p.credential_fingerprint for p in self.pending(worker_id)]
        if fingerprint and fingerprint not in waiting:
            raise InvalidSpec("credential_fingerprint", f"no daemon waiting for worker {worker_id} has fingerprint "
                                                        f"{fingerprint[:64]!r} (`ringleader workers pending` lists them)")
        if not fingerprint and len(waiting) > 1:
            raise InvalidSpec("credential_fingerprint", f"{len(waiting)} daemons wait for worker {worker_id}: name "
                                                        "the one to admit (`ringleader workers pending`)")
        named = fingerprint or (waiting[0] if waiting else "")
        self._approved[worker_id] = (self.clock() + APPROVAL_S, named)
        log.warning("worker %s: an operator approved a re-claim of its id by %s for %.0f s", worker_id,
                    f"the daemon with fingerprint {named}" if named else "the next daemon", APPROVAL_S)
        return APPROVAL_S, named

    def approve_reclaim(self, workers, worker_id: str, fingerprint: str = "") -> pb.ApproveWorkerResponse:
        """ApproveWorker (gRPC) and POST /api/v1/workers/{id}/approve: `workers` is the control
        core's registry (WorkerRegistry.get), which says whether the id is connected."""
        if not worker_id:
            raise InvalidSpec("worker_id", "the worker whose re-claim to approve")
        jobspec.check_text("worker_id", worker_id)
        conn = workers.get(worker_id)
        lasts, named = self.approve(worker_id, connected=bool(conn and conn.connected), fingerprint=fingerprint)
        return pb.ApproveWorkerResponse(worker_id=worker_id, expires_in_s=lasts, credential_fingerprint=named)

    def forget(self, worker_id: str) -> None:
        if self.store.forget_worker_credential(worker_id):
            log.warning("worker %s's credential forgotten: its next registration binds a new one", worker_id)
        else:
            log.warning("--forget-worker %s: no credential was bound to that id", worker_id)
