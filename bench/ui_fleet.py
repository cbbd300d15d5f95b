"""The web UI's overview with thousands of workers, in headless Chromium: a real coordinator
process, N simulated daemons (bench/simfleet.py) and a stream of short jobs while the page is open.

    python bench/ui_fleet.py --workers 5000 --out bench/out/2026-11-25-ui/5000.json

Measured, on whatever UI the checkout serves:
- first render: from navigation start to the frame after every worker is in the page (each
  worker's element carries data-worker), read in the page with performance.now();
- over a window (--window s) on each tab (jobs, then fleet): the renderer processes' CPU (from
  /proc, all of the browser's renderers), and the bytes the browser fetched (counted by a TCP proxy
  between the browser and the coordinator, headers included);
- job-link clicks (--clicks of each kind) while jobs keep arriving: "arrive" presses as the pointer
  gets there (the person aimed 0.3 s earlier), "rest" moves the pointer there and presses 0.6 s
  later. A click is right only when the intended job's page opens (its address and its title);
  anything else - nothing opens, another job opens - is wrong. The page is opened afresh after each;
- worker-cell clicks (--clicks) on the fleet tab: right only when the detail panel then names the
  intended worker;
- the page's length in screens, and how many clicks take the overview to a failed worker's evidence;
- with --stale-loads N: N loads of the jobs tab, counting rows still shown live (RUNNING, QUEUED)
  for jobs the coordinator ended over 5 s before the rows were read.

Verdicts are real records of the coordinator's health book: written to the store before the
coordinator starts (as finished checks leave them), read back by its FleetHealth (failed workers
quarantined) and listed through the same path as a check's. Simulated daemons cannot run checks.
The run is invalid (exit 1, "invalid" in the JSON) when no job arrived while clicking, when no
failed worker was shown, or when the page logged errors.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import loadstats  # noqa: E402
from bench.control_plane import machine, start_coordinator  # noqa: E402
from bench.simfleet import SimFleet, fleet_specs  # noqa: E402
from bench.ui_fleet_browser import Browser  # noqa: E402
from coordinator.store.factory import open_store  # noqa: E402
from ringleader.v1 import jobs_pb2 as pb  # noqa: E402
from ringleader.v1 import jobs_pb2_grpc  # noqa: E402


def stand_in_verdicts(book, verdicts: dict[str, pb.WorkerHealth]) -> None:
    """Test-only (tests/browser/test_fleet_health_view.py): the health book's reads (`get`, what
    the worker listing shows, and `peek`, what the fleet page's feed reads) answer these verdicts
    (replacing any earlier stand-in), for a test that changes verdicts while the page is open."""
    book.__dict__.pop("get", None)
    book.__dict__.pop("peek", None)
    get, peek = book.get, book.peek

    def got(worker_id: str) -> pb.WorkerHealth:
        if worker_id not in verdicts:
            return get(worker_id)
        out = pb.WorkerHealth()
        out.CopyFrom(verdicts[worker_id])
        return out

    book.get = got
    book.peek = lambda worker_id: verdicts.get(worker_id) or peek(worker_id)


def fleet_verdicts(n: int) -> dict[str, pb.WorkerHealth]:
    """3 failed and 4 suspect workers spread over a fleet of `n` (fleet_specs' ids), as checks leave them."""
    ids = [s.worker_id for s in fleet_specs(n)]
    at, job = time.time(), "0123456789ab"
    failed = {ids[int(n * f)]: pb.WorkerHealth(
        verdict=pb.UNHEALTHY, check="gpu_check", figure="412.0 TFLOP/s", expected="median of 7 H100 peers 781.2 TFLOP/s",
        at=at, job_id=job) for f in (0.03, 0.48, 0.94)}
    suspect = {ids[int(n * f)]: pb.WorkerHealth(
        verdict=pb.SUSPECT, check="link_matrix", figure="3.1 GB/s", expected="median across hosts 11.8 GB/s",
        at=at, job_id=job) for f in (0.064, 0.066, 0.355, 0.96)}
    return {**failed, **suspect}


def seed_verdicts(db: Path, verdicts: dict[str, pb.WorkerHealth]) -> None:
    store = open_store(str(db))
    try:
        for worker_id, health in verdicts.items():
            store.set_worker_health(worker_id, health)
    finally:
        store.close()


class CountingProxy:
    """A TCP proxy on loopback that counts the bytes the browser receives."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.received = 0
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        self.port = 0

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            server = self.loop.run_until_complete(asyncio.start_server(self._client, "127.0.0.1", 0))
            self.port = server.sockets[0].getsockname()[1]
            ready.set()
            self.loop.run_forever()

        threading.Thread(target=run, daemon=True).start()
        ready.wait(10)

    async def _client(self, reader, writer) -> None:
        try:
            up_r, up_w = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(self._pipe(reader, up_w, False), self._pipe(up_r, writer, True),
                             return_exceptions=True)

    async def _pipe(self, src, dst, count: bool) -> None:
        try:
            while data := await src.read(65536):
                if count:
                    self.received += len(data)
                dst.write(data)
                await dst.drain()
        finally:
            dst.close()


class JobTraffic:
    """Short CPU jobs at `rate` a second (their progress and state changes are the updates the
    page follows), plus `holds` endless jobs that keep GPU workers BUSY with a job link."""

    def __init__(self, address: str, rate: float, holds: int) -> None:
        self.address, self.rate, self.holds = address, rate, holds
        self.stop = threading.Event()
        self.submitted = 0
        self.thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)
        self.thread.start()

    async def _run(self) -> None:
        async with grpc.aio.insecure_channel(self.address) as channel:
            stub = jobs_pb2_grpc.JobServiceStub(channel)
            hold = pb.JobSpec(world_size=1, name="hold", placement=pb.Placement(device_type="cuda"),
                              collective=pb.CollectiveSpec(op="all_reduce", sizes=[1024], iters=1))
            for _ in range(self.holds):
                await stub.SubmitJob(pb.SubmitJobRequest(spec=hold, request_id=uuid.uuid4().hex), timeout=30)
            rng, pending = random.Random(7), set()

            async def submit(spec: pb.JobSpec) -> None:
                try:
                    await stub.SubmitJob(pb.SubmitJobRequest(spec=spec, request_id=uuid.uuid4().hex), timeout=30)
                    self.submitted += 1
                except grpc.aio.AioRpcError:
                    pass

            # Open loop: one job every 1/rate s whatever the answers take, so every fleet size
            # sees the same job rate (the page's updates).
            while not self.stop.is_set():
                spec = pb.JobSpec(world_size=rng.choice([1, 2, 4]), placement=pb.Placement(device_type="cpu"),
                                  collective=pb.CollectiveSpec(op="all_reduce", sizes=[1024, 65536, 1 << 20],
                                                               iters=1, warmup=0))
                task = asyncio.create_task(submit(spec))
                pending.add(task)
                task.add_done_callback(pending.discard)
                await asyncio.sleep(1 / self.rate)
            await asyncio.gather(*pending)


def ended_at(address: str):
    """{job id: when it ended} of those of the given ids that have ended, read from the coordinator."""
    stub = jobs_pb2_grpc.JobServiceStub(grpc.insecure_channel(address))
    terminal = (pb.SUCCEEDED, pb.FAILED, pb.CANCELLED)

    def read(ids: list[str]) -> dict[str, float]:
        jobs = [stub.GetJob(pb.GetJobRequest(job_id=i), timeout=30) for i in ids]
        return {j.id: j.finished_at for j in jobs if j.state in terminal}
    return read


def wait_until(check, what: str, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.5)


def phase(out: dict, name: str, run):
    try:
        return run()
    except Exception as exc:  # noqa: BLE001 - recorded, and the run is then invalid
        out.setdefault("phase_errors", {})[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        return {}


def measure(a: argparse.Namespace, tmp: Path) -> dict:
    verdicts = fleet_verdicts(a.workers)
    seed_verdicts(tmp / "jobs.db", verdicts)
    coord, address, http_url = start_coordinator(tmp)
    sims = SimFleet(address, a.workers)
    out: dict = {"workers": a.workers, "verdicts": {k: pb.Verdict.Name(v.verdict) for k, v in verdicts.items()},
                 "window_s": a.window, "rate_jobs_per_s": a.rate, "machine": machine(),
                 "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "commit": a.commit,
                 "loadavg_before": os.getloadavg()}
    traffic = None
    try:
        wait_until(lambda: sims.stats().registered >= a.workers, f"{a.workers} registrations")
        traffic = JobTraffic(address, a.rate, a.holds)
        time.sleep(5)  # the holds placed, the first short jobs running
        proxy = CountingProxy(int(http_url.rsplit(":", 1)[1]))
        base = f"http://127.0.0.1:{proxy.port}"
        with Browser(tmp / "chromium", a.workers) as browser:
            # The first load (the coordinator's feed cold), then reloads: the machine is shared,
            # so one sample can be far off.
            browser.driver.get(f"{base}/healthz")  # the browser's own start is not the page's
            loads = [browser.first_render(f"{base}/") for _ in range(a.loads)]
            out.update(loads[0])
            out["first_render_s_each_load"] = [ld["first_render_s"] for ld in loads]
            out["first_render_s_median"] = sorted(out["first_render_s_each_load"])[len(loads) // 2]
            for tab in ("jobs", "fleet"):
                browser.driver.get(f"{base}/#{tab}")
                time.sleep(3)  # settle: what follows is the steady state of an open tab
                cpu0, bytes0, t0 = browser.renderer_cpu_s(), proxy.received, time.monotonic()
                time.sleep(a.window)
                elapsed = time.monotonic() - t0
                cpu, fetched = browser.renderer_cpu_s() - cpu0, proxy.received - bytes0
                out[f"{tab}_tab"] = {"renderer_cpu_percent": cpu / elapsed * 100, "window_measured_s": elapsed,
                                     "fetched_mb_per_min": fetched / elapsed * 60 / 1e6}
            # Each phase on its own: one that fails (a page starved past the driver's timeouts) is
            # recorded as such and makes the run invalid, and the others' figures are kept.
            out["evidence"] = phase(out, "evidence", lambda: browser.evidence_clicks(base))
            submitted = traffic.submitted
            out["job_clicks"] = {mode: phase(out, f"job_clicks {mode}", lambda m=mode: browser.click_job_links(base, a.clicks, m))
                                 for mode in ("arrive", "rest")}
            out["jobs_submitted_while_clicking"] = traffic.submitted - submitted
            out["worker_clicks"] = phase(out, "worker_clicks", lambda: browser.click_worker_cells(base, a.clicks))
            if a.stale_loads:
                out["stale_rows"] = phase(out, "stale_rows", lambda: browser.stale_rows(base, a.stale_loads, ended_at(address)))
            out["jobs_submitted"] = traffic.submitted
            out["loadavg"] = os.getloadavg()
            st = sims.stats()  # streams the coordinator ended or that broke: a starved machine's sign
            out["sim_streams"] = {"registered": st.registered, "dropped": st.dropped, "failed": st.failed}
            out["page_errors"] = browser.js("return window.__errors")
            if a.screenshot:
                for tab in ("jobs", "fleet"):
                    browser.driver.get(f"{base}/#{tab}")
                    time.sleep(2)
                    browser.driver.save_screenshot(str(a.screenshot).replace(".png", f"-{tab}.png"))
    finally:
        if traffic:
            traffic.stop.set()
        sims.stop()
        coord.terminate()
        coord.wait(60)
    invalid = [f"{name} failed: {error}" for name, error in out.get("phase_errors", {}).items()]
    invalid += [why for bad, why in (
        (out.get("jobs_submitted_while_clicking", 0) < a.clicks, "too few jobs arrived while clicking"),
        (not (out.get("evidence") or {}).get("reached"), "no failed worker's evidence was reached"),
        (bool(out.get("page_errors")), "the page logged errors")) if bad]
    out["invalid"] = invalid
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=5000)
    ap.add_argument("--window", type=float, default=30.0, help="seconds of steady state measured on each tab")
    ap.add_argument("--rate", type=float, default=2.0, help="short jobs submitted a second")
    ap.add_argument("--holds", type=int, default=100, help="GPU workers kept BUSY by an endless job")
    ap.add_argument("--clicks", type=int, default=12)
    ap.add_argument("--loads", type=int, default=5, help="page loads timed (the first one cold)")
    ap.add_argument("--stale-loads", type=int, default=0,
                    help="loads of the jobs tab after which rows of ended jobs still shown live are counted")
    ap.add_argument("--commit", default="", help="the commit measured, for the record")
    ap.add_argument("--screenshot", type=Path, default=None,
                    help="save each tab's first screen (NAME-jobs.png, NAME-fleet.png) from this name (.png)")
    ap.add_argument("--out", type=Path, default=None, help="write the figures here (JSON)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="rl-ui-") as tmp:
        result = measure(a, Path(tmp))
    loadstats.emit(result, a.out, result["invalid"])


if __name__ == "__main__":
    main()
