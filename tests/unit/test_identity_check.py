"""coordinator/edge/identity.py's decisions on their own: certificates by role, bound credentials."""

import logging

import pytest

from coordinator.edge.identity import CertIdentity, WorkerIdentities, digest
from coordinator.store.memory import MemoryJobStore
from ringleader.errors import PermissionDenied
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
