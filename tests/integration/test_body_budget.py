"""Request bodies bounded in bulk, and bodies that do not parse answered as such, on a real
coordinator process (REST on loopback, SQLite): 12 concurrent 30 MB baseline imports leave it
under 600 MB of resident memory, the ones over the in-flight budget answered 429 with
Retry-After; JSON nested 1,000 levels deep is a 400 or 422 on every route that takes a body."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from cluster import Cluster

pytestmark = pytest.mark.integration

RSS_BOUND_MB = 600
ENTRY = dict(op="all_reduce", dtype="bfloat16", size_bucket=1 << 20, ranks=8, hosts=1, link="local",
             samples=[460.0, 455.0, 462.0])


def fat_table(n: int = 100_000) -> bytes:
    """About 30 MB of valid table: 100,000 entries (the most one import takes), long model names."""
    entries = [{**ENTRY, "gpu_model": f"GPU {i:06d} " + "x" * 90, "algo": "a" * 40, "ranks": 1 + i % 4} for i in range(n)]
    return json.dumps({"entries": entries}).encode()


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


@pytest.fixture
def served(tmp_path):
    c = Cluster(tmp_path)
    try:
        c.start_coordinator(http=True)
        yield c
    finally:
        c.close()


def test_twelve_concurrent_30mb_imports_stay_under_600mb(served):
    body = fat_table()
    assert 28e6 < len(body) < 32 << 20, len(body)
    before = peak_rss_mb(served.coordinator.pid)

    async def post_all():
        limits = httpx.Limits(max_connections=12)
        async with httpx.AsyncClient(base_url=served.http_url, timeout=300, limits=limits) as http:
            return await asyncio.gather(*(http.post("/api/v1/baselines/import", content=body,
                                                    headers={"content-type": "application/json"})
                                          for _ in range(12)))

    answers = asyncio.run(post_all())
    peak = peak_rss_mb(served.coordinator.pid)
    codes = sorted(r.status_code for r in answers)
    print(f"12 x {len(body) / 1e6:.1f} MB imports: answers {codes}; coordinator peak RSS "
          f"{before:.0f} MB before, {peak:.0f} MB after")
    assert set(codes) <= {200, 429}, [r.text[:200] for r in answers if r.status_code not in (200, 429)]
    assert 200 in codes
    assert all(r.headers["retry-after"].isdigit() for r in answers if r.status_code == 429)
    assert peak < RSS_BOUND_MB, peak


def nested(depth: int) -> bytes:
    return ("[" * depth + "]" * depth).encode()


def body_routes(url: str) -> list[tuple[str, str]]:
    doc = httpx.get(f"{url}/openapi.json", timeout=30).json()
    out = []
    for path, item in doc["paths"].items():
        for method, op in item.items():
            if method in ("post", "put", "patch") and "requestBody" in op:
                out.append((method.upper(), path.replace("{", "").replace("}", "")))
    return out


@pytest.mark.parametrize("shape", ["bare", "in-field"])
def test_json_nested_1000_deep_is_a_client_error_on_every_route_that_takes_a_body(served, shape):
    routes = body_routes(served.http_url)
    assert ("POST", "/api/v1/baselines/import") in routes and len(routes) >= 3, routes
    deep = nested(1000)
    body = deep if shape == "bare" else b'{"entries": ' + deep + b', "spec": ' + deep + b"}"
    with httpx.Client(base_url=served.http_url, timeout=60) as http:
        got = {f"{m} {p}": http.request(m, p, content=body, headers={"content-type": "application/json"})
               for m, p in routes}
    wrong = {k: (r.status_code, r.text[:200]) for k, r in got.items() if r.status_code not in (400, 422)}
    assert not wrong, wrong
    assert all(r.json()["detail"] for r in got.values())
