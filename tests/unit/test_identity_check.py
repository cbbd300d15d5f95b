"""coordinator/edge/identity.py's decisions on their own: certificates by role, bound credentials."""

import logging

import pytest

from coordinator.edge.identity import APPROVAL_S, CertIdentity, WorkerIdentities, digest
from coordinator.edge.k8s_identity import TokenReviewer
from coordinator.store.memory import MemoryJobStore
from ringleader.errors import FailedPrecondition, InvalidSpec, PermissionDenied
from ringleader.v1 import workers_pb2 as wpb


def reg(worker_id: str = "w0", secret: str = "") -> wpb.Register:
    return wpb.Register(worker_id=worker_id, worker_secret=secret)


@pytest.mark.parametrize("cert,said", [
    (CertIdentity("user", "client"), "register: worker w0: user client's certificate cannot register a worker"),
    (CertIdentity("worker", "w1"), "register: worker w0: this is worker w1's certificate"),
])
def test_a_certificate_registers_only_its_own_worker(cert, said):
    store = MemoryJobStore()
    with pytest.raises(PermissionDenied) as err:
        WorkerIdentities(store).check(reg(), cert)
    assert str(err.value).startswith(said)
    assert store.worker_credential("w0") == ""


@pytest.mark.parametrize("cert", [None, CertIdentity(), CertIdentity("worker", "w0")])
def test_a_first_registration_gets_a_fresh_secret(cert):
    ids = WorkerIdentities(MemoryJobStore())
    first, second = ids.check(reg(), cert), ids.check(reg(), cert)
    assert len(first) >= 32 and first != second  # nothing is bound until the coordinator accepts it


def test_a_bound_id_needs_its_secret():
    store = MemoryJobStore()
    ids = WorkerIdentities(store)
    ids.bind("w0", "s3cret-s3cret-s3cret-s3cret-s3cret")
    assert store.worker_credential("w0") == digest("s3cret-s3cret-s3cret-s3cret-s3cret")
    assert ids.check(reg(secret="s3cret-s3cret-s3cret-s3cret-s3cret"), CertIdentity("worker", "w0")) == ""
    for wrong in ("", "s3cret"):
        with pytest.raises(PermissionDenied, match="worker id w0 is bound to another daemon's credential"):
            ids.check(reg(secret=wrong), None)
    ids.forget("w0")
    assert ids.check(reg(), None)  # an operator's reset: the next registration binds a new one


def test_a_refusal_repeated_by_a_retrying_daemon_is_logged_once(caplog):
    ids = WorkerIdentities(MemoryJobStore())
    with caplog.at_level(logging.DEBUG, logger="ringleader.coordinator"):
        for reason in ("bound to another", "bound to another", "address", "bound to another"):
            ids.log_refusal("w0", reason)
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warned == ["registration refused: bound to another", "registration refused: address"]


# ---- issued secrets bind only once stored; re-claims vouched for --------------------------

SECRET = "s3cret-s3cret-s3cret-s3cret-s3cret"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def first(ids: WorkerIdentities, wid: str = "w0") -> str:
    """A first registration accepted: its secret issued, not yet acknowledged (its daemon connected)."""
    secret = ids.check(reg(wid), None)
    ids.issued(wid, secret)
    return secret


def test_an_issued_secret_binds_only_once_acknowledged():
    store = MemoryJobStore()
    ids = WorkerIdentities(store)
    secret = first(ids)
    assert store.worker_credential("w0") == ""
    with pytest.raises(PermissionDenied):  # while it is connected, the id is that daemon's
        ids.check(reg(), None, connected=True)
    assert not ids.stored("w0", digest("another"))  # an acknowledgement of what was not issued
    assert store.worker_credential("w0") == ""
    assert ids.stored("w0", digest(secret))
    assert store.worker_credential("w0") == digest(secret)
    with pytest.raises(PermissionDenied):
        ids.check(reg(), None)


def test_a_daemon_killed_before_storing_reclaims_and_one_killed_after_presents_it():
    store = MemoryJobStore()
    ids = WorkerIdentities(store)
    lost = first(ids)  # then killed before it stored the secret: nothing was bound
    again = ids.check(reg(), None)
    assert again and again != lost
    ids.issued("w0", again)  # killed after storing it, before acknowledging
    assert ids.check(reg(secret=again), None) == ""  # presenting it proves it stored it
    assert store.worker_credential("w0") == digest(again)
    with pytest.raises(PermissionDenied):
        ids.check(reg(secret=lost), None)


@pytest.mark.parametrize("cert,vouched", [(CertIdentity("worker", "w0"), ""), (None, "a Kubernetes token of node n")])
def test_a_worker_certificate_or_a_kubernetes_token_vouches_for_a_reclaim(cert, vouched):
    store = MemoryJobStore()
    ids = WorkerIdentities(store)
    ids.bind("w0", SECRET)
    new = ids.check(reg(), cert, vouched)
    assert new and new != SECRET
    assert store.worker_credential("w0") == digest(SECRET)  # the old one holds until the new is stored
    ids.issued("w0", new)
    assert ids.stored("w0", digest(new))
    assert store.worker_credential("w0") == digest(new)
    with pytest.raises(PermissionDenied):  # no one else: not another worker's certificate, nor nothing
        ids.check(reg(), CertIdentity())


def test_an_operators_approval_lets_one_daemon_reclaim_within_its_window():
    clock = Clock()
    store = MemoryJobStore()
    ids = WorkerIdentities(store, clock=clock)
    ids.bind("w0", SECRET)
    with pytest.raises(FailedPrecondition, match="worker w0 is connected"):
        ids.approve("w0", connected=True)
    assert ids.approve("w0", connected=False) == (APPROVAL_S, "")  # none waiting: the next daemon
    new = ids.check(reg(), None)
    ids.issued("w0", new)  # killed before storing it: the approval still stands
    newer = ids.check(reg(), None)
    ids.issued("w0", newer)
    assert ids.stored("w0", digest(newer))
    with pytest.raises(PermissionDenied):  # used once
        ids.check(reg(), None)
    ids.approve("w0", connected=False)
    clock.now += APPROVAL_S + 1
    with pytest.raises(PermissionDenied, match="`ringleader workers approve w0`"):  # lapsed
        ids.check(reg(), None)


def registering(host: str, secret: str = "") -> wpb.Register:
    return wpb.Register(worker_id="w0", host=host, worker_secret=secret)


def test_an_approval_admits_the_daemon_it_names_and_no_impostor():
    ids = WorkerIdentities(MemoryJobStore())
    ids.bind("w0", SECRET)
    real, real_peer = registering("gpu1"), "ipv4:10.0.0.1:40000"
    with pytest.raises(PermissionDenied):
        ids.check(real, None, peer=real_peer)
    with pytest.raises(PermissionDenied):
        ids.check(real, None, peer="ipv4:10.0.0.1:40001")  # the same daemon retrying: one entry
    [waiting] = ids.pending()
    assert (waiting.worker_id, waiting.address, waiting.host, waiting.attempts) == ("w0", "10.0.0.1", "gpu1", 2)
    assert len(waiting.credential_fingerprint) == 16
    with pytest.raises(InvalidSpec, match="credential_fingerprint"):  # not one that waits
        ids.approve("w0", connected=False, fingerprint="0" * 16)
    assert ids.approve("w0", connected=False) == (APPROVAL_S, waiting.credential_fingerprint)  # the only one
    # An impostor registering under the id after the approval: another host, or another name.
    for impostor, peer in ((registering("gpu1"), "ipv4:10.0.0.9:40000"), (registering("evil"), real_peer),
                           (registering("gpu1", "x" * 43), real_peer)):
        with pytest.raises(PermissionDenied):
            ids.check(impostor, None, peer=peer)
    assert len(ids.pending()) == 4
    with pytest.raises(InvalidSpec, match="4 daemons wait for worker w0"):  # which one, then
        ids.approve("w0", connected=False)
    assert ids.check(real, None, peer=real_peer)  # the approved daemon: a new secret
    assert len(ids.pending()) == 3


def test_approve_reclaim_names_a_bad_worker_id():
    ids = WorkerIdentities(MemoryJobStore())
    with pytest.raises(InvalidSpec, match="worker_id"):
        ids.approve_reclaim({}, "")
    with pytest.raises(InvalidSpec, match="worker_id"):
        ids.approve_reclaim({}, "x" * 10_000)
    assert ids.approve_reclaim({}, "gone").worker_id == "gone"


NODE = "authentication.kubernetes.io/node-name"


def status(node: str = "node-a", **over) -> dict:
    return {"authenticated": True, "audiences": ["ringleader"],
            "user": {"username": "system:serviceaccount:ringleader:ringleader-worker", "extra": {NODE: [node]}},
            **over}


@pytest.mark.parametrize("answer,said", [
    (status(), ""),
    (status(authenticated=False, error="token expired"), "not authenticated (token expired)"),
    (status(audiences=["kubernetes"]), "do not include 'ringleader'"),
    ({**status(), "user": {"username": "system:serviceaccount:default:x", "extra": {NODE: ["node-a"]}}},
     "not the workers'"),
    ({**status(), "user": {"username": "system:serviceaccount:ringleader:ringleader-worker"}}, "names no node"),
    (status("node-b"), "it is node node-b's"),
])
def test_a_kubernetes_token_vouches_only_for_its_own_nodes_ids(answer, said):
    reviewer = TokenReviewer("http://127.0.0.1:1", token_path="", ca_path=None)
    why = reviewer.refuse(wpb.Register(worker_id="node-a-cuda0", host="node-a"), answer)
    assert (said in why) if said else why == "", why
    if not said:  # a pod of node-a cannot speak for another node's id, even naming that host
        assert reviewer.refuse(wpb.Register(worker_id="node-b-cuda0", host="node-a"), answer)


def test_a_secret_issued_to_a_worker_certificate_binds_at_once(caplog):
    """Killed before it acknowledged: the id is not anyone's, as it is for a daemon that has only
    the workers' token; the certificate that names it still brings it back."""
    store = MemoryJobStore()
    ids = WorkerIdentities(store)
    own = CertIdentity("worker", "w0")
    secret = ids.check(reg(), own)
    ids.issued("w0", secret, own)
    assert store.worker_credential("w0") == digest(secret)
    for impostor in (CertIdentity(), None):  # the DaemonSet's shared certificate, or none
        with pytest.raises(PermissionDenied, match="worker id w0 is bound to another daemon's credential"):
            ids.check(reg(), impostor)
    with caplog.at_level(logging.WARNING, logger="ringleader.coordinator"):
        assert not ids.stored("w0", digest(secret))  # its late acknowledgement: already bound, no warning
    assert not caplog.records
    assert ids.check(reg(), own)  # back with its certificate, without the secret: a new one
