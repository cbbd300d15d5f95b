"""Each worker proves its own name: a per-worker secret bound to its
id, advertised addresses the coordinator can vouch for, malformed requests answered as such.

The real coordinator in this process (gRPC on loopback, SQLite in a temp folder, its metrics)
against a protocol-level fake daemon that presents whatever secret and address the test says.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import grpc
import httpx
import pytest

from coordinator.edge.k8s_identity import TokenReviewer
from ringleader_app.config import DEFAULT
from ringleader_app.process import CoordinatorConfig, RunningCoordinator
from ringleader.security import ServerSecurity, bearer
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import jobs_pb2_grpc
from ringleader.v1 import workers_pb2 as wpb
from ringleader.v1 import workers_pb2_grpc

pytestmark = pytest.mark.integration

USERS_TOKEN, WORKERS_TOKEN = "users-token-0123456789", "workers-token-0123456789"


async def register(target: str, worker_id: str, secret: str = "", address: str = "127.0.0.1",
                   token: str = WORKERS_TOKEN, host: str = "fakehost", k8s_token: str = "",
                   ack: bool = True) -> tuple[grpc.aio.Channel, wpb.Registered]:
    """Fake (protocol level): a daemon's registration, acknowledging an issued secret as the daemon
    does once it stored it (unless not `ack`); returns its open channel and the answer."""
    channel = grpc.aio.insecure_channel(target)
    call = workers_pb2_grpc.WorkerServiceStub(channel).Connect(metadata=bearer(token))
    await call.write(wpb.WorkerMessage(register=wpb.Register(
        worker_id=worker_id, host=host, address=address, backend="gloo", version="fake",
        device=pb.Device(type="cpu", index=0, name="fake"), worker_secret=secret, k8s_token=k8s_token)))
    try:
        first = await call.read()
        if first.registered.worker_secret and ack:
            sha = hashlib.sha256(first.registered.worker_secret.encode()).hexdigest()
            await call.write(wpb.WorkerMessage(credential_stored=wpb.CredentialStored(secret_sha256=sha)))
    except BaseException:
        await channel.close()
        raise
    return channel, first.registered


async def until_bound(coord: RunningCoordinator, worker_id: str, secret: str) -> None:
    """The coordinator bound the id to `secret` (it does once the daemon acknowledged storing it)."""
    for _ in range(500):
        if coord.store.worker_credential(worker_id) == hashlib.sha256(secret.encode()).hexdigest():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{worker_id} never bound to its secret")


async def refused(target: str, worker_id: str, **kw) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        channel, _ = await register(target, worker_id, **kw)
        await channel.close()
    return err.value


def coordinator(tmp_path, forget: tuple[str, ...] = (), heartbeat_timeout: float = 120) -> RunningCoordinator:
    return RunningCoordinator(CoordinatorConfig(
        grpc_address="127.0.0.1:0", http_address="", db=str(tmp_path / "jobs.db"),
        heartbeat_timeout=heartbeat_timeout,
        security=ServerSecurity(USERS_TOKEN, WORKERS_TOKEN, forget_workers=forget)))


def refusals(coord: RunningCoordinator) -> float:
    text = coord.metrics.render()[0].decode()
    for line in text.splitlines():
        if line.startswith("ringleader_grpc_server_handled_total{") and 'grpc_method="Connect"' in line \
                and 'grpc_code="PERMISSION_DENIED"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def counted(read, want: float) -> float:
    """`read()` once it reaches `want` (or what it reads after 5 s): the server's interceptor counts a
    refusal on the gRPC edge loop (coordinator/edge/hop.py), after the client has its answer."""
    for _ in range(250):
        if (got := read()) >= want:
            return got
        await asyncio.sleep(0.02)
    return read()


async def until_disconnected(coord: RunningCoordinator, worker_id: str) -> None:
    for _ in range(500):
        if {w.worker_id: w.state for w in coord.core.list_workers().workers}.get(worker_id) == pb.DISCONNECTED:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{worker_id} never disconnected")


def test_an_id_is_bound_to_the_secret_issued_at_its_first_registration(tmp_path):
    async def scenario():
        async with coordinator(tmp_path) as coord:
            target = coord.grpc_target
            channel, answer = await register(target, "w0")
            secret = answer.worker_secret
            assert len(secret) >= 32
            await until_bound(coord, "w0", secret)
            # Connected or not, the id is the secret holder's: the workers' token alone is refused.
            err = await refused(target, "w0")
            assert err.code() == grpc.StatusCode.PERMISSION_DENIED
            assert "worker id w0 is bound to another daemon's credential" in err.details()
            assert "--forget-worker w0" in err.details()
            await channel.close()
            await until_disconnected(coord, "w0")
            for wrong in ("", "x" * 43, secret[:-1]):
                err = await refused(target, "w0", secret=wrong)
                assert err.code() == grpc.StatusCode.PERMISSION_DENIED, wrong
            assert await counted(lambda: refusals(coord), 4) == 4
            channel, again = await register(target, "w0", secret=secret)
            assert again.worker_secret == ""  # nothing new to keep
            await channel.close()
        assert secret.encode() not in (tmp_path / "jobs.db").read_bytes()  # only its digest is stored

        async with coordinator(tmp_path) as coord:  # a restart: the binding is in the store
            err = await refused(coord.grpc_target, "w0")
            assert err.code() == grpc.StatusCode.PERMISSION_DENIED
            channel, _ = await register(coord.grpc_target, "w0", secret=secret)
            await channel.close()

        async with coordinator(tmp_path, forget=("w0",)) as coord:  # an operator's reset
            channel, fresh = await register(coord.grpc_target, "w0")
            assert fresh.worker_secret not in ("", secret)
            await channel.close()

    asyncio.run(scenario())


def test_an_advertised_address_must_be_where_the_connection_comes_from(tmp_path):
    async def scenario():
        async with coordinator(tmp_path) as coord:
            err = await refused(coord.grpc_target, "far", address="10.1.2.3")
            assert err.code() == grpc.StatusCode.PERMISSION_DENIED
            assert err.details() == (
                "register.address: worker far advertises '10.1.2.3', but its connection comes from this host "
                "(loopback): advertise a loopback address (--advertise-host), or connect from the address "
                "peers reach it on")
            assert coord.core.list_workers().workers == []
            for ok in ("127.0.0.1", "localhost", "127.0.1.1"):  # loopback is loopback
                channel, _ = await register(coord.grpc_target, f"near-{ok}", address=ok)
                await channel.close()

    asyncio.run(scenario())


def test_malformed_request_bytes_answer_invalid_argument_without_a_traceback(tmp_path, caplog):
    async def scenario():
        async with coordinator(tmp_path) as coord:
            async with grpc.aio.insecure_channel(coord.grpc_target) as channel:
                raw = channel.unary_unary("/ringleader.v1.JobService/SubmitJob")  # bytes in, bytes out
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await raw(b"\xff\xff\xff\xff", metadata=bearer(USERS_TOKEN), timeout=10)
                assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
                assert err.value.details() == "request: the bytes are not a SubmitJob's request (DecodeError)"
                good = pb.SubmitJobRequest(spec=pb.JobSpec(world_size=1, placement=pb.Placement(host="nowhere"),
                                                           collective=pb.CollectiveSpec(op="all_reduce")))
                job = pb.Job.FromString(await raw(good.SerializeToString(), metadata=bearer(USERS_TOKEN), timeout=10))
                assert job.state == pb.QUEUED  # the same path, well-formed, as before

    asyncio.run(scenario())
    assert not [r for r in caplog.records if r.exc_info], [r.getMessage() for r in caplog.records]


# ---- a crash during the first registration, and re-claims without the secret ---------------------

REGISTRANT = Path(__file__).with_name("registrant.py")


def start_registrant(target: str, worker_id: str, state: Path, kill_at: int = 0) -> subprocess.Popen:
    """The daemon's registration code in its own process (tests/integration/registrant.py); with
    `kill_at`, the daemon's test-only fault SIGKILLs it at that step of storing its secret."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    if kill_at:
        env.update(RINGLEADER_FAULTS=f"kill_registration={kill_at}", RINGLEADER_FAULTS_ALLOWED="tests")
    log = open(state / f"{worker_id}.log", "ab")
    try:
        return subprocess.Popen([sys.executable, str(REGISTRANT), target, worker_id, str(state), WORKERS_TOKEN],
                                stdout=log, stderr=log, env=env, start_new_session=True)
    finally:
        log.close()


async def until_states(coord: RunningCoordinator, ids: list[str], ok, timeout: float = 90) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        states = {w.worker_id: w.state for w in coord.core.list_workers().workers}
        missing = [i for i in ids if not ok(states.get(i))]
        if not missing:
            return
        assert asyncio.get_running_loop().time() < deadline, f"not there after {timeout} s: {missing}"
        await asyncio.sleep(0.1)


async def until_logged(path: Path, said: str, timeout: float = 60) -> None:
    for _ in range(int(timeout / 0.1)):
        if said in path.read_text():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{said!r} not in {path}: {path.read_text()[-2000:]}")


@pytest.mark.parametrize("step", [1, 2, 3], ids=["before-stored", "stored-not-acked", "acked"])
def test_a_daemon_killed_at_any_step_of_its_first_registration_keeps_its_id(tmp_path, step):
    ids = [f"crash{step}-{i:02d}" for i in range(20)]
    state = tmp_path / "state"
    state.mkdir()

    async def scenario():
        # The default heartbeat timeout, as in production: a daemon's stream the coordinator did
        # not see close is dropped after it, and the id's restarted daemon retries until then.
        async with coordinator(tmp_path, heartbeat_timeout=DEFAULT.heartbeat_timeout) as coord:
            killed = [start_registrant(coord.grpc_target, wid, state, kill_at=step) for wid in ids]
            for p in killed:
                while p.poll() is None:
                    await asyncio.sleep(0.05)
                assert p.returncode == -signal.SIGKILL, (p.args, (state / f"{p.args[3]}.log").read_text()[-2000:])
            stored = {p.stem.removeprefix("worker-") for p in state.glob("worker-*.secret")}
            assert stored == (set() if step == 1 else set(ids))  # the fault struck where it says
            await until_states(coord, ids, lambda s: s == pb.DISCONNECTED)
            again = [start_registrant(coord.grpc_target, wid, state) for wid in ids]
            try:
                await until_states(coord, ids, lambda s: s is not None and s != pb.DISCONNECTED)
                for wid in ids:  # each daemon told it is registered, bound to the secret it keeps
                    await until_logged(state / f"{wid}.log", f"worker {wid} registered with")
                    await until_bound(coord, wid, (state / f"worker-{wid}.secret").read_text().strip())
            finally:
                for p in again:
                    p.kill()
                    p.wait()
            for wid in ids[:3]:  # and the ids are theirs: the workers' token alone is refused
                err = await refused(coord.grpc_target, wid)
                assert "is bound to another daemon's credential" in err.details()

    asyncio.run(scenario())


def test_an_operator_approves_a_reclaim_without_a_coordinator_restart(tmp_path):
    async def scenario():
        config = CoordinatorConfig(grpc_address="127.0.0.1:0", http_address="127.0.0.1:0",
                                   db=str(tmp_path / "jobs.db"), heartbeat_timeout=120,
                                   security=ServerSecurity(USERS_TOKEN, WORKERS_TOKEN))
        async with RunningCoordinator(config) as coord:
            target = coord.grpc_target
            channel, first = await register(target, "w0")
            await until_bound(coord, "w0", first.worker_secret)
            async with grpc.aio.insecure_channel(target) as users:
                approve = jobs_pb2_grpc.JobServiceStub(users).ApproveWorker
                with pytest.raises(grpc.aio.AioRpcError) as err:  # a live worker's id is never handed over
                    await approve(pb.ApproveWorkerRequest(worker_id="w0"), metadata=bearer(USERS_TOKEN))
                assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
                assert "worker w0 is connected" in err.value.details()
                await channel.close()
                await until_disconnected(coord, "w0")
                err = await refused(target, "w0")  # its state dir lost: refused, as before
                assert "`ringleader workers approve w0`" in err.details()
                answer = await approve(pb.ApproveWorkerRequest(worker_id="w0"), metadata=bearer(USERS_TOKEN))
                assert answer.worker_id == "w0" and answer.expires_in_s > 0
            channel, back = await register(target, "w0")  # re-claimed, with a new secret
            assert back.worker_secret not in ("", first.worker_secret)
            await until_bound(coord, "w0", back.worker_secret)
            await channel.close()
            await until_disconnected(coord, "w0")
            for stale in ("", first.worker_secret):  # the approval let one daemon in, once
                await refused(target, "w0", secret=stale)
            # The same over REST, for a worker gone again: two daemons wait, so the approval names one.
            url = f"{coord.http_url}/api/v1/workers/w0/approve"
            auth = {"Authorization": f"Bearer {USERS_TOKEN}"}
            async with httpx.AsyncClient() as http:
                r = await http.post(url, headers=auth)
                assert r.status_code == 422 and "2 daemons wait for worker w0" in r.json()["detail"][0]["msg"], r.text
                waiting = (await http.get(f"{coord.http_url}/api/v1/daemons/pending", headers=auth)).json()["daemons"]
                assert [d["host"] for d in waiting] == ["fakehost", "fakehost"]
                assert all(d["address"] == "127.0.0.1" and d["attempts"] >= 1 for d in waiting)
                async with grpc.aio.insecure_channel(target) as users:
                    listed = await jobs_pb2_grpc.JobServiceStub(users).ListPendingDaemons(
                        pb.ListPendingDaemonsRequest(), metadata=bearer(USERS_TOKEN))
                assert {d.credential_fingerprint for d in listed.daemons} == {d["credential_fingerprint"] for d in waiting}
                await refused(target, "w0", secret="")  # the secretless one (a lost state dir) again: one entry
                after = (await http.get(f"{coord.http_url}/api/v1/daemons/pending", headers=auth)).json()["daemons"]
                assert sorted(d["attempts"] for d in after) == [1, 2], after
                [secretless] = [d for d in after if d["attempts"] == 2]
                r = await http.post(url, headers=auth, params={"credential_fingerprint": secretless["credential_fingerprint"]})
                assert r.status_code == 200, r.text
                assert r.json()["worker_id"] == "w0"
                assert r.json()["credential_fingerprint"] == secretless["credential_fingerprint"]
                err = await refused(target, "w0", secret=first.worker_secret)  # the other one: still refused
                assert err.code() == grpc.StatusCode.PERMISSION_DENIED
                channel, third = await register(target, "w0")
                assert third.worker_secret not in ("", back.worker_secret)
                r = await http.post(url, headers={"Authorization": f"Bearer {USERS_TOKEN}"})
                assert r.status_code == 409 and "is connected" in r.json()["detail"], r.text
                await channel.close()

    asyncio.run(scenario())


class FakeTokenReview:
    """Fake (no cluster here): the Kubernetes API server's TokenReview, a real http.server on
    127.0.0.1 answering for the tokens in `tokens` (token -> node); anything else unauthenticated."""

    def __init__(self) -> None:
        self.tokens: dict[str, str] = {}
        self.reviews = 0
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a) -> None:
                pass

            def do_POST(self) -> None:
                assert self.path == "/apis/authentication.k8s.io/v1/tokenreviews", self.path
                spec = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["spec"]
                fake.reviews += 1
                node = fake.tokens.get(spec["token"])
                status = {"authenticated": False, "error": "invalid bearer token"} if node is None else {
                    "authenticated": True, "audiences": spec["audiences"],
                    "user": {"username": "system:serviceaccount:ringleader:ringleader-worker",
                             "extra": {"authentication.kubernetes.io/node-name": [node]}}}
                data = json.dumps({"kind": "TokenReview", "status": status}).encode()
                self.send_response(201)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def test_a_replaced_pod_reclaims_its_nodes_ids_with_its_kubernetes_token(tmp_path):
    fake = FakeTokenReview()
    fake.tokens = {"pod-b-token": "node-a", "pod-c-token": "node-c"}
    sa_token = tmp_path / "coordinator-token"
    sa_token.write_text("coordinator-sa-token\n")

    async def scenario():
        async with coordinator(tmp_path) as coord:
            coord.identities.token_review = TokenReviewer(fake.url, token_path=str(sa_token), ca_path=None)
            target = coord.grpc_target
            channel, first = await register(target, "node-a-cuda0", host="node-a", k8s_token="pod-a-token")
            await until_bound(coord, "node-a-cuda0", first.worker_secret)
            assert fake.reviews == 0  # a first registration needs no review
            await channel.close()
            await until_disconnected(coord, "node-a-cuda0")
            # Impostors: no token, an invalid one, another node's, a token for this node with a wrong host.
            for token, host in (("", "node-a"), ("forged", "node-a"), ("pod-c-token", "node-a"),
                                ("pod-b-token", "node-c")):
                err = await refused(target, "node-a-cuda0", host=host, k8s_token=token)
                assert "is bound to another daemon's credential" in err.details(), token
            # The replaced pod on node-a: a new token, no secret, its id back, no restart.
            channel, back = await register(target, "node-a-cuda0", host="node-a", k8s_token="pod-b-token")
            assert back.worker_secret not in ("", first.worker_secret)
            await until_bound(coord, "node-a-cuda0", back.worker_secret)
            await channel.close()

    try:
        asyncio.run(scenario())
    finally:
        fake.server.shutdown()
        fake.server.server_close()


# ---- a trusted single host (no tokens, loopback only) against one that enforces identity --------


async def cli(*args: str, env: dict | None = None) -> tuple[int, str]:
    """The real CLI, in a subprocess (awaited: the coordinator shares this loop)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RINGLEADER_")}
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "ringleader", *args, env={**clean, **(env or {})},
                                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out, _ = await proc.communicate()
    return proc.returncode, out.decode()


def test_on_a_trusted_single_host_a_restarted_worker_takes_its_id_back(tmp_path):
    async def scenario():
        config = CoordinatorConfig(grpc_address="127.0.0.1:0", http_address="127.0.0.1:0",
                                   db=str(tmp_path / "jobs.db"), heartbeat_timeout=120)
        async with RunningCoordinator(config) as coord:  # no tokens, every port on loopback
            target = coord.grpc_target
            channel, first = await register(target, "w0")
            await until_bound(coord, "w0", first.worker_secret)
            err = await refused(target, "w0")  # a second daemon while the first is connected: refused
            assert "bound to another daemon's credential" in err.details()
            await channel.close()
            await until_disconnected(coord, "w0")
            channel, back = await register(target, "w0")  # restarted without --state-dir: its id again
            assert back.worker_secret not in ("", first.worker_secret)
            await until_bound(coord, "w0", back.worker_secret)
            await channel.close()

    asyncio.run(scenario())


def test_where_identity_is_enforced_workers_shows_the_refused_daemons_and_the_command(tmp_path):
    async def scenario():
        async with coordinator(tmp_path) as coord:  # both tokens: identity enforced
            target = coord.grpc_target
            channel, first = await register(target, "w0")
            await until_bound(coord, "w0", first.worker_secret)
            await channel.close()
            await until_disconnected(coord, "w0")
            err = await refused(target, "w0")
            said = err.details().split("--fingerprint ")[1].split(",")[0]
            code, out = await cli("--coordinator", target, "workers", env={"RINGLEADER_TOKEN": USERS_TOKEN})
            assert code == 0, out
            assert "w0" in out and "127.0.0.1" in out and said in out, out
            assert "ringleader workers approve WORKER --fingerprint FINGERPRINT" in out, out
            code, out = await cli("--coordinator", target, "workers", "approve", "w0", "--fingerprint", said,
                                  env={"RINGLEADER_TOKEN": USERS_TOKEN})
            assert code == 0 and out.startswith(f"w0: the daemon with fingerprint {said}"), out
            channel, back = await register(target, "w0")
            assert back.worker_secret
            await channel.close()

    asyncio.run(scenario())
