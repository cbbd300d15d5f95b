# What a coordinator restart costs once every worker has run a job: with r16's kept Done, each
# daemon names its last job when it registers again, and the coordinator aborts it, reads that
# job's members and stores its rank's log before it frees the worker.
# A fleet of simulated daemons (bench/simfleet.py) runs one job each; the coordinator is killed
# (SIGKILL) and started again on the same port and database; the probe times until every worker is
# idle again and reports the second coordinator's statements (SQLC_OUT: r15's trace callback).
# usage (from a tree's root): SQLC_OUT=/tmp/x PYTHONPATH=<sitecustomize dir>:. python restart-storm.py N
import asyncio, os, re, signal, socket, subprocess, sys, tempfile, time, urllib.request
from pathlib import Path

sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.join(os.getcwd(), "bench"))
import grpc  # noqa: E402
from simfleet import SimFleet  # noqa: E402
from ringleader.v1 import jobs_pb2 as pb, jobs_pb2_grpc  # noqa: E402


def start(tmp: Path, port: int, tag: str) -> tuple[subprocess.Popen, str]:
    env = dict(os.environ, SQLC_OUT=os.environ.get("SQLC_OUT", "/tmp/sqlc-storm") + "-" + tag)
    log = open(tmp / f"coordinator-{tag}.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "ringleader", "coordinator", "--grpc-address", f"127.0.0.1:{port}",
                             "--http-address", "127.0.0.1:0", "--db", str(tmp / "jobs.db")],
                            stdout=subprocess.PIPE, stderr=log, text=True, env=env)
    line = proc.stdout.readline().strip()
    assert line.startswith("ringleader coordinator: gRPC "), line
    return proc, line.split()[-1]


def idle(http_url: str) -> float:
    try:
        text = urllib.request.urlopen(f"{http_url}/metrics", timeout=10).read().decode()
    except OSError:
        return 0.0
    return sum(float(v) for v in re.findall(r'^ringleader_workers\{[^}]*state="idle"[^}]*\} (\S+)$', text, re.M))


async def main(n: int) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="storm-"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc, url = start(tmp, port, "first")
    sims = SimFleet(f"127.0.0.1:{port}", n)
    try:
        while idle(url) < n:
            await asyncio.sleep(0.5)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            stub = jobs_pb2_grpc.JobServiceStub(ch)
            spec = pb.JobSpec(world_size=1, collective=pb.CollectiveSpec(op="all_reduce", sizes=[1024], iters=1))
            sem = asyncio.Semaphore(32)

            async def one() -> None:
                async with sem:
                    await stub.SubmitJob(pb.SubmitJobRequest(spec=spec), timeout=60)
            await asyncio.gather(*(one() for _ in range(n)))
        while sims.stats().done < n:
            await asyncio.sleep(0.5)
        ran = sims.stats().done
        await asyncio.sleep(2.0)  # every Done committed
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        t0 = time.monotonic()
        proc, url = start(tmp, port, "second")
        up = time.monotonic() - t0
        while idle(url) < n:
            await asyncio.sleep(0.1)
        back = time.monotonic() - t0
        await asyncio.sleep(2.0)  # what the last Dones stored, committed
        print(f"workers {n} jobs run {ran}: restarted in {up:.2f} s, every worker idle {back:.2f} s after the start")
    finally:
        sims.stop()
        proc.terminate()
        proc.wait(60)


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1])))
