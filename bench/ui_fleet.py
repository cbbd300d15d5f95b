"""The web UI's overview with thousands of workers, in headless Chromium: a real coordinator
process, N simulated daemons (bench/simfleet.py) and a stream of short jobs while the page is open.

    python bench/ui_fleet.py --workers 5000 --out bench/results/2026-11-24-fleet-ui/after-5000.json

Measured, on whatever UI the checkout serves:
- first render: from navigation start to the frame after every worker is in the page (each
  worker's element carries data-worker), read in the page with performance.now();
- over a window (--window s): the renderer processes' CPU (from /proc, all of the browser's
  renderers), and the bytes the browser fetched (counted by a TCP proxy between the browser and
  the coordinator, headers included);
- lost clicks: `--clicks` presses on job links (the jobs table's and, where the view has them,
  the fleet's) while jobs start and finish, as a person clicks: pointer down, 120 ms, up. A click
  is lost when no click event reaches the link (its element was replaced under the pointer);
- the page's length in screens, and (views that name failing workers) how many clicks take the
  overview to a failed worker's evidence.

Until the fleet checks give verdicts on main, --stand-in-verdicts (the default) runs the
coordinator in a process of this script whose worker list carries a few failed and suspect
verdicts (`stand_in_verdicts`, bench- and test-only), so the view has failures to show.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
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
from bench.simfleet import SimFleet  # noqa: E402
from bench.ui_fleet_browser import Browser  # noqa: E402
from ringleader.v1 import jobs_pb2 as pb  # noqa: E402
from ringleader.v1 import jobs_pb2_grpc  # noqa: E402

STAND_IN = {  # worker id -> verdict: 3 failed, 4 suspect, spread over the fleet
    **{f"sim-h{h:04}-d{d}": pb.WorkerHealth(
        verdict=pb.UNHEALTHY, check="gpu_check", figure="412.0 TFLOP/s", expected="median of 7 H100 peers 781.2 TFLOP/s",
        at=time.time(), job_id="0123456789ab") for h, d in ((17, 3), (301, 5), (588, 0))},
    **{f"sim-h{h:04}-d{d}": pb.WorkerHealth(
        verdict=pb.SUSPECT, check="link_matrix", figure="3.1 GB/s", expected="median across hosts 11.8 GB/s",
        at=time.time(), job_id="0123456789ab") for h, d in ((40, 1), (41, 1), (222, 7), (600, 2))},
}


def stand_in_verdicts(list_workers, verdicts: dict[str, pb.WorkerHealth]):
    """Bench- and test-only: the facade's worker list with these verdicts set, until the fleet
    checks give them."""

    def listed(*args, **kwargs):
        page = list_workers(*args, **kwargs)
        for info in page.workers:
            if info.worker_id in verdicts:
                info.health.CopyFrom(verdicts[info.worker_id])
        return page

    return listed


def _serve_with_stand_in_verdicts(db: str, pipe) -> None:
    from ringleader.app.process import CoordinatorConfig, RunningCoordinator

    async def main() -> None:
        rc = await RunningCoordinator(CoordinatorConfig(grpc_address="127.0.0.1:0", http_address="127.0.0.1:0",
                                                        db=db)).start()
        rc.core.list_workers = stand_in_verdicts(rc.core.list_workers, STAND_IN)
        pipe.send((rc.grpc_target, rc.http_url))
        await asyncio.get_running_loop().run_in_executor(None, pipe.recv)  # until told to stop
        await rc.stop(grace=0)

    asyncio.run(main())


def start_stand_in_coordinator(tmp: Path) -> tuple[mp.Process, str, str]:
    parent, child = mp.get_context("spawn").Pipe()
    proc = mp.get_context("spawn").Process(target=_serve_with_stand_in_verdicts, args=(str(tmp / "jobs.db"), child))
    proc.start()
    address, url = parent.recv()
    proc.stop_pipe = parent  # type: ignore[attr-defined]
    return proc, address, url


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


def wait_until(check, what: str, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.5)


def measure(a: argparse.Namespace, tmp: Path) -> dict:
    coord, address, http_url = start_stand_in_coordinator(tmp) if a.stand_in_verdicts else start_coordinator(tmp)
    sims = SimFleet(address, a.workers)
    out: dict = {"workers": a.workers, "stand_in_verdicts": a.stand_in_verdicts, "window_s": a.window, "machine": machine(),
                 "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "commit": a.commit}
    traffic = None
    try:
        wait_until(lambda: sims.stats().registered >= a.workers, f"{a.workers} registrations")
        traffic = JobTraffic(address, a.rate, a.holds)
        time.sleep(5)  # the holds placed, the first short jobs running
        proxy = CountingProxy(int(http_url.rsplit(":", 1)[1]))
        with Browser(tmp / "chromium", a.workers) as browser:
            # The first load (the coordinator's feed cold), then reloads: the machine is shared,
            # so one sample can be far off.
            browser.driver.get(f"http://127.0.0.1:{proxy.port}/healthz")  # the browser's own start is not the page's
            loads = [browser.first_render(f"http://127.0.0.1:{proxy.port}/") for _ in range(a.loads)]
            out.update(loads[0])
            out["first_render_s_each_load"] = [ld["first_render_s"] for ld in loads]
            out["first_render_s_median"] = sorted(out["first_render_s_each_load"])[len(loads) // 2]
            time.sleep(3)  # settle: what follows is the steady state of an open tab
            cpu0, bytes0, t0 = browser.renderer_cpu_s(), proxy.received, time.monotonic()
            time.sleep(a.window)
            elapsed = time.monotonic() - t0
            cpu, fetched = browser.renderer_cpu_s() - cpu0, proxy.received - bytes0
            out.update({"renderer_cpu_percent": cpu / elapsed * 100, "fetched_mb_per_min": fetched / elapsed * 60 / 1e6,
                        "window_measured_s": elapsed, "jobs_submitted": traffic.submitted})
            # The evidence first: then the failed worker's panel, with its check job's link, is open
            # for the clicks too (the view's other job links are the jobs table's).
            out["evidence"] = browser.evidence_clicks()
            out["clicks"] = browser.click_job_links(a.clicks)
            out["loadavg"] = os.getloadavg()
            out["page_errors"] = browser.js("return window.__errors")
            if a.screenshot:
                browser.js("window.scrollTo(0, 0)")
                browser.driver.save_screenshot(str(a.screenshot))
    finally:
        if traffic:
            traffic.stop.set()
        sims.stop()
        if a.stand_in_verdicts:
            coord.stop_pipe.send("stop")
            coord.join(60)
        else:
            coord.terminate()
            coord.wait(60)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=5000)
    ap.add_argument("--window", type=float, default=60.0, help="seconds of steady state measured")
    ap.add_argument("--rate", type=float, default=2.0, help="short jobs submitted a second")
    ap.add_argument("--holds", type=int, default=100, help="GPU workers kept BUSY by an endless job")
    ap.add_argument("--clicks", type=int, default=12)
    ap.add_argument("--loads", type=int, default=5, help="page loads timed (the first one cold)")
    ap.add_argument("--stand-in-verdicts", action=argparse.BooleanOptionalAction, default=True,
                    help="give a few workers failed and suspect verdicts (until the fleet checks do)")
    ap.add_argument("--commit", default="", help="the commit measured, for the record")
    ap.add_argument("--screenshot", type=Path, default=None, help="save the overview's first screen here (PNG)")
    ap.add_argument("--out", type=Path, default=None, help="write the figures here (JSON)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="rl-ui-") as tmp:
        result = measure(a, Path(tmp))
    text = json.dumps(result, indent=1)
    print(text)
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
