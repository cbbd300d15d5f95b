"""Limits on every input that can be large, on a real coordinator (gRPC and REST on loopback, in
this process) with simulated daemons: request bodies refused with 413 before they are read, the
same baseline checks on both APIs, a 100,000-entry table imported and exported on both without
stalling the loop, and checks bounded per request and per device."""

from __future__ import annotations

import asyncio
import json
import math
import re
import time

import grpc
import httpx
import pytest

from test_scale import coordinator, fleet, scenario  # noqa: I001 - tests/integration is on the path

from bench.simfleet import SimSpec
from ringleader.v1 import jobs_pb2 as pb

pytestmark = pytest.mark.integration

ENTRY = dict(gpu_model="NVIDIA H200", op="all_reduce", dtype="bfloat16", size_bucket=1 << 20, ranks=8, hosts=1,
             link="local", samples=[460.0, 455.0, 462.0])


async def raw_post(url: str, path: str, length: int = 0, chunked: int = 0) -> tuple[int, bytes]:
    """POST announcing `length` bytes but sending none of them, or sending `chunked` bytes in
    chunks of 64 KiB with no length; the answer's status and body."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    framing = f"Content-Length: {length}" if not chunked else "Transfer-Encoding: chunked"
    writer.write(f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
                 f"{framing}\r\n\r\n".encode())
    try:
        for _ in range(chunked // (64 << 10)):
            writer.write(b"10000\r\n" + b" " * (64 << 10) + b"\r\n")
            await writer.drain()
    except ConnectionError:  # answered and closed before all was sent: what is tested
        pass
    answer = await asyncio.wait_for(_until_closed(reader), 10)
    writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


async def _until_closed(reader: asyncio.StreamReader) -> bytes:
    """What the server sent until it closed (each refusal says `Connection: close`): its head and
    body may come in separate writes, which one read may split."""
    got = b""
    try:
        while chunk := await reader.read(65536):
            got += chunk
    except ConnectionError:  # reset while the client still sent: what came before it stands
        pass
    return got


@scenario
async def test_a_body_over_the_limit_is_refused_with_413_before_it_is_read(tmp_path):
    async with coordinator(tmp_path) as rc:
        status, body = await raw_post(rc.http_url, "/api/v1/baselines/import", 100 << 20)  # 100 MB: never sent
        assert status == 413 and b"at most 33554432 bytes" in body, body
        status, _ = await raw_post(rc.http_url, "/api/v1/jobs", 2 << 20)  # a job spec route: 1 MiB
        assert status == 413
        status, body = await raw_post(rc.http_url, "/api/v1/jobs", chunked=4 << 20)  # no length: cut off
        assert status == 413 and b"request body" in body, body
        async with httpx.AsyncClient(base_url=rc.http_url) as http:
            ok = await http.post("/api/v1/baselines/import", json={"entries": [ENTRY]})  # under it: served
            assert ok.status_code == 200 and ok.json() == {"imported": 1}


@pytest.mark.parametrize("bad, field", [({"samples": []}, "samples"), ({"size_bucket": 1 << 63}, "size_bucket"),
                                        ({"dtype": "x"}, "dtype"), ({"updated_at": math.nan}, "updated_at"),
                                        ({"link": "cross"}, "link")])
def test_grpc_import_refuses_what_rest_refuses_naming_the_field(tmp_path, bad, field):
    @scenario
    async def run():
        async with coordinator(tmp_path) as rc:
            entry = pb.BaselineEntry(**{**ENTRY, **bad})
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await rc.stub.ImportBaselines(pb.BaselineTable(entries=[pb.BaselineEntry(**ENTRY), entry]))
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert err.value.details().startswith(f"entries.1.{field}:"), err.value.details()
            if field != "updated_at":  # REST takes no updated_at at all
                async with httpx.AsyncClient(base_url=rc.http_url) as http:
                    r = await http.post("/api/v1/baselines/import", json={"entries": [ENTRY, {**ENTRY, **bad}]})
                assert r.status_code == 422 and field in str(r.json()["detail"][0]["loc"]), r.text
            assert not (await rc.stub.ExportBaselines(pb.ExportBaselinesRequest())).entries  # all or nothing

    run()


def table(n: int) -> list[dict]:
    return [{**ENTRY, "gpu_model": f"GPU {i // 64}", "size_bucket": 1 << (i % 64 // 2), "ranks": 1 + i % 2}
            for i in range(n)]


async def stalls(stop: asyncio.Event, every_s: float = 0.01) -> float:
    """The longest the loop was held beyond `every_s` while it ran (the coordinator shares it)."""
    worst, loop = 0.0, asyncio.get_running_loop()
    while not stop.is_set():
        t = loop.time()
        await asyncio.sleep(every_s)
        worst = max(worst, loop.time() - t - every_s)
    return worst


@scenario
async def test_a_100k_entry_table_imports_and_exports_on_both_apis_without_stalling_the_loop(tmp_path):
    entries = table(100_000)
    # The client's own work (17 MB of JSON, 100,000 messages) is done before the loop is watched:
    # what is measured is the coordinator's, which shares this loop.
    proto = pb.BaselineTable(entries=[pb.BaselineEntry(**e) for e in entries]).SerializeToString()
    body = json.dumps({"entries": entries}).encode()
    async with coordinator(tmp_path) as rc, grpc.aio.insecure_channel(rc.grpc_target) as channel:
        import_raw = channel.unary_unary("/ringleader.v1.JobService/ImportBaselines",
                                         response_deserializer=pb.ImportBaselinesResponse.FromString)
        stop = asyncio.Event()
        probe = asyncio.create_task(stalls(stop))
        t = time.perf_counter()
        assert (await import_raw(proto)).imported == 100_000
        grpc_s = time.perf_counter() - t
        keys = {e.key for page in await export_pages(rc) for e in page.entries}
        assert len(keys) == 100_000
        async with httpx.AsyncClient(base_url=rc.http_url, timeout=300) as http:
            t = time.perf_counter()
            r = await http.post("/api/v1/baselines/import", content=body, headers={"content-type": "application/json"})
            rest_s = time.perf_counter() - t
            assert r.status_code == 200 and r.json() == {"imported": 100_000}, r.text[:300]
            n, token = 0, None
            while True:
                got = await http.get("/api/v1/baselines", params={"page_token": token} if token else {})
                n += got.text.count('"key"')  # counted, not parsed: the client's parse is no coordinator stall
                if not (token := next_token(got.text)):
                    break
            assert n == 100_000
        stop.set()
        worst = await probe
        # The figure is printed for the record; the bound is loose because CI machines are shared.
        print(f"100k import: gRPC {grpc_s:.1f} s, REST {rest_s:.1f} s; longest loop stall {worst * 1e3:.0f} ms")
        assert worst < 5.0, worst  # a whole-table stall was 11-16 s before


def next_token(text: str) -> str:
    m = re.search(r'"next_page_token":\s*"([^"]*)"', text)
    return m.group(1) if m else ""


async def export_pages(rc) -> list[pb.BaselineTable]:
    out, token = [], ""
    while True:
        page = await rc.stub.ExportBaselines(pb.ExportBaselinesRequest(page_token=token))
        assert page.ByteSize() < 4 << 20  # every answer under the 4 MiB message limit
        out.append(page)
        if not (token := page.next_page_token):
            return out


@scenario
async def test_checks_are_bounded_per_request_and_per_device(tmp_path):
    small_gpu = ("cuda", "nccl", "small GPU", 8 << 30)
    specs = [SimSpec(f"g{i}", "hg", i, small_gpu) for i in range(2)] + [SimSpec(f"c{i}", "hc", i) for i in range(2)]
    async with coordinator(tmp_path) as rc, fleet(rc, specs):
        for request, field in [
            (pb.RunCheckRequest(kinds=["gpu_check"] * 10_000), "kinds"),
            (pb.RunCheckRequest(worker_ids=["c0", "c0"], kinds=["gpu_check"]), "worker_ids"),
            (pb.RunCheckRequest(worker_ids=["c0", "c1"], kinds=["gpu_check"], gpu_check=pb.GpuCheckSpec(
                matmul_n=32768)), "gpu_check.matmul_n"),
            (pb.RunCheckRequest(worker_ids=["g0", "g1"], kinds=["gpu_check"], gpu_check=pb.GpuCheckSpec(
                copy_bytes=8 << 30)), "gpu_check.copy_bytes"),
        ]:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await rc.stub.RunCheck(request)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value
            assert err.value.details().startswith(f"{field}:"), err.value.details()
        # The same copy as a submitted job: refused naming the field, never UNKNOWN (AttributeError).
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await rc.stub.SubmitJob(pb.SubmitJobRequest(spec=pb.JobSpec(
                world_size=2, placement=pb.Placement(device_type="cuda"), gpu_check=pb.GpuCheckSpec(copy_bytes=8 << 30))))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert err.value.details().startswith("gpu_check.copy_bytes:"), err.value.details()
        assert not (await rc.stub.ListJobs(pb.ListJobsRequest())).jobs  # nothing was submitted
