"""The relay link's framing (coordinator/edge/relay_link.py): frames cut anywhere by the socket
are read whole and in order; a turn's frames leave in one write; a header announcing an absurd
frame closes the link instead of buffering it."""

import asyncio

from coordinator.edge import relay_link as link


class _Transport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True


def _proto(got: list, lost: list | None = None) -> tuple[link.LinkProtocol, _Transport]:
    proto = link.LinkProtocol(lambda kind, sid, payload: got.append((kind, sid, payload)),
                              lambda exc: (lost if lost is not None else []).append(exc))
    transport = _Transport()
    proto.connection_made(transport)
    return proto, transport


def test_frames_cut_at_every_byte_are_read_whole_and_in_order():
    frames = [(link.MESSAGE, 7, b"heartbeat"), (link.GONE, 7, b""), (link.REGISTER, 8, b"x" * 300),
              (link.HELLO, 0, b"50052")]
    wire = b"".join(link.frame(*f) for f in frames)
    for cut in range(1, len(wire)):
        got: list = []
        async def feed():
            proto, _ = _proto(got)
            proto.data_received(wire[:cut])
            proto.data_received(wire[cut:])
        asyncio.run(feed())
        assert got == frames, cut
    got = []

    async def one_byte_at_a_time():
        proto, _ = _proto(got)
        for i in range(len(wire)):
            proto.data_received(wire[i:i + 1])
    asyncio.run(one_byte_at_a_time())
    assert got == frames


def test_a_turns_frames_leave_in_one_write():
    async def run():
        proto, transport = _proto([])
        for sid in range(100):
            proto.send(link.OUT, sid, b"m")
        assert transport.writes == []  # not yet: at the end of the turn
        await asyncio.sleep(0)
        return transport.writes
    writes = asyncio.run(run())
    assert len(writes) == 1
    got: list = []

    async def parse():
        proto, _ = _proto(got)
        proto.data_received(writes[0])
    asyncio.run(parse())
    assert got == [(link.OUT, sid, b"m") for sid in range(100)]


def test_an_absurd_frame_length_closes_the_link():
    async def run():
        got: list = []
        proto, transport = _proto(got)
        proto.data_received(link.HEADER.pack(link.MAX_FRAME + 1, link.MESSAGE, 1) + b"abc")
        return got, transport.closed
    got, closed = asyncio.run(run())
    assert got == [] and closed


def test_register_and_abort_payloads_round_trip():
    meta = {"peer": "ipv4:10.0.0.7:5123", "pem": ["-----BEGIN CERTIFICATE-----"]}
    assert link.split_register(link.register_payload(meta, b"\x0a\x02w1")) == (meta, b"\x0a\x02w1")
    assert link.abort_payload(7, "no", (("retry-after", "2"),)) == \
        b'{"code": 7, "details": "no", "trailing": [["retry-after", "2"]]}'
