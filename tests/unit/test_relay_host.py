"""The coordinator's end of the relay link (coordinator/edge/relay_host.py), its frames fed by the
test: a refused registration answers the status and keeps nothing; a stream that ends while its
registration runs on the core is ended there too, and never accepted; a Done waiting on a store
read-ahead keeps its stream's later messages, and its end, behind it; a lost link ends every
stream. The WorkerServicer and the store are stand-ins recording what reaches them; the
registration is the test's coroutine, which the real one would run on the core."""

import asyncio
import json

import grpc

from coordinator.edge import relay_link as link
from coordinator.edge.relay_host import RelayHost, RelayRefused
from coordinator.edge.worker_stream import _GONE
from ringleader.v1 import workers_pb2 as wpb


class _Transport:
    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, b: bytes) -> None:
        self.data += b

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass


class _Conn:
    def __init__(self, name: str) -> None:
        self.name, self.route = name, None


class _Workers:
    """What RelayHost uses of a WorkerServicer and its coordinator."""

    def __init__(self, loop) -> None:
        self.core = loop
        self.inbox = self
        self.c = self
        self.store = self
        self.put_log: list = []
        self.attached: list = []
        self.refuse: str = ""
        self.release = asyncio.Event()
        self.fetched = asyncio.Event()
        self.late: dict[str, asyncio.Event] = {}  # registrations that finish only when told

    async def _register(self, reg, context):
        await self.release.wait()
        if reg.worker_id in self.late:
            await self.late[reg.worker_id].wait()
        if self.refuse:
            raise RelayRefused(grpc.StatusCode.PERMISSION_DENIED, self.refuse, ())
        return _Conn(f"conn-{reg.worker_id}"), ""

    def attach(self, conn, sink) -> None:
        self.attached.append(conn)

    def put(self, conn, msg, why: str = "", raw: bytes | None = None) -> None:
        assert raw is None or wpb.WorkerMessage.FromString(raw) == msg
        self.put_log.append((conn.name, "gone: " + why if msg is _GONE else msg.WhichOneof("msg")))

    def resident(self, job_id, request_id) -> bool:
        return job_id != "cold"

    async def prefetch(self, job_id="", request_id=""):
        await self.fetched.wait()


def _frames(transport: _Transport) -> list:
    got: list = []
    reader = link.LinkProtocol(lambda k, s, p: got.append((k, s, p)), lambda exc: None)
    reader.connection_made(_Transport())
    reader.data_received(bytes(transport.data))
    return got


async def _host():
    loop = asyncio.get_running_loop()
    workers = _Workers(loop)
    host = RelayHost(workers, "127.0.0.1:0", "")
    transport = _Transport()
    host._accept().connection_made(transport)  # as the link's server does when the relay connects
    return host, workers, transport


def _feed(host, kind: int, sid: int, payload: bytes = b"") -> None:
    host.proto.data_received(link.frame(kind, sid, payload))


def _register(sid: int, wid: str) -> tuple:
    reg = wpb.WorkerMessage(register=wpb.Register(worker_id=wid)).SerializeToString()
    return link.REGISTER, sid, link.register_payload({"peer": "ipv4:127.0.0.1:5000", "pem": []}, reg)


async def _turns(n: int = 20) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def test_a_refused_registration_answers_its_status_and_keeps_nothing():
    async def run():
        host, workers, transport = await _host()
        workers.refuse = "register: worker id w1 is bound to another daemon's credential"
        _feed(host, *_register(1, "w1"))
        workers.release.set()
        await _turns()
        _feed(host, link.GONE, 1, b"stream closed by the worker")  # the relay ends the refused stream
        await _turns()
        return host, workers, _frames(transport)
    host, workers, frames = asyncio.run(run())
    (kind, sid, payload), = frames
    assert (kind, sid) == (link.ABORT, 1)
    assert json.loads(payload)["code"] == grpc.StatusCode.PERMISSION_DENIED.value[0]
    assert "bound to another daemon" in json.loads(payload)["details"]
    assert workers.put_log == [] and workers.attached == []
    assert not host._conns and not host._registering and not host._early_gone


def test_a_stream_that_ends_while_it_registers_is_ended_on_the_core_and_never_accepted():
    async def run():
        host, workers, transport = await _host()
        _feed(host, *_register(1, "w1"))
        await _turns()
        _feed(host, link.GONE, 1, b"stream cancelled")  # while the core still registers it
        workers.release.set()
        await _turns()
        return host, workers, _frames(transport)
    host, workers, frames = asyncio.run(run())
    assert frames == []  # no ACCEPTED for a stream that is gone
    assert workers.put_log == [("conn-w1", "gone: stream closed by the worker")]
    assert not host._conns and not host._registering and not host._early_gone


def test_a_done_read_ahead_keeps_its_streams_later_messages_and_end_behind_it():
    async def run():
        host, workers, transport = await _host()
        _feed(host, *_register(1, "w1"))
        _feed(host, *_register(2, "w2"))
        workers.release.set()
        await _turns()
        msg = lambda **kw: wpb.WorkerMessage(**kw).SerializeToString()  # noqa: E731
        _feed(host, link.MESSAGE, 1, msg(done=wpb.JobDone(job_id="cold")))
        _feed(host, link.MESSAGE, 1, msg(heartbeat=wpb.Heartbeat()))
        _feed(host, link.MESSAGE, 2, msg(heartbeat=wpb.Heartbeat()))  # another stream: not held
        await _turns()
        before = list(workers.put_log)
        workers.fetched.set()
        await _turns()
        _feed(host, link.GONE, 1, b"stream closed by the worker")
        return before, workers.put_log, _frames(transport)
    before, after, frames = asyncio.run(run())
    assert [(k, s) for k, s, _ in frames] == [(link.ACCEPTED, 1), (link.ACCEPTED, 2)]
    assert before == [("conn-w2", "heartbeat")]
    assert after == [("conn-w2", "heartbeat"), ("conn-w1", "done"), ("conn-w1", "heartbeat"),
                     ("conn-w1", "gone: stream closed by the worker")]


def test_a_lost_link_ends_every_stream_it_carried():
    async def run():
        host, workers, _ = await _host()
        host._stopping = True  # no restart here: the test has no relay process to start
        for sid, wid in ((1, "w1"), (2, "w2")):
            _feed(host, *_register(sid, wid))
        workers.release.set()
        await _turns()
        host.proto.connection_lost(None)
        return host, workers
    host, workers = asyncio.run(run())
    assert sorted(workers.put_log) == [("conn-w1", "gone: stream broken (the worker relay exited)"),
                                       ("conn-w2", "gone: stream broken (the worker relay exited)")]
    assert host.proto is None and not host._conns


def test_a_restarted_relays_stream_ids_are_not_its_predecessors():
    """Its predecessor's registration still on the core when a new relay reuses the id, and done
    only after the new stream's: the late one ends on the core and is not accepted on the new
    link; the new stream keeps its id."""
    async def run():
        host, workers, first = await _host()
        workers.late["old"] = asyncio.Event()
        _feed(host, *_register(1, "old"))
        await _turns()
        host._stopping = True  # no relay process to start again here
        host.proto.connection_lost(None)
        second = _Transport()
        host._accept().connection_made(second)
        _feed(host, *_register(1, "new"))
        workers.release.set()
        await _turns()
        workers.late["old"].set()
        await _turns()
        _feed(host, link.MESSAGE, 1, wpb.WorkerMessage(heartbeat=wpb.Heartbeat()).SerializeToString())
        return host, workers, _frames(first), _frames(second)
    host, workers, first, second = asyncio.run(run())
    assert first == []
    assert [(k, s) for k, s, _ in second] == [(link.ACCEPTED, 1)]
    assert workers.put_log == [("conn-old", "gone: stream closed by the worker"), ("conn-new", "heartbeat")]
    assert [c.name for c in host._conns.values()] == ["conn-new"]


def test_a_second_link_replaces_the_first_and_ends_its_streams():
    async def run():
        host, workers, first = await _host()
        _feed(host, *_register(1, "w1"))
        workers.release.set()
        await _turns()
        host._accept().connection_made(_Transport())  # a relay that should not be there: the newest wins
        await _turns()
        return host, workers, _frames(first)
    host, workers, first = asyncio.run(run())
    assert [k for k, _, _ in first] == [link.ACCEPTED, link.STOP]
    assert workers.put_log == [("conn-w1", "gone: stream broken (another worker relay took the link)")]
    assert not host._conns
