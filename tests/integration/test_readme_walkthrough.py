"""README.md, run top to bottom as a newcomer on a CPU machine would: the CPU block of "A cluster
by hand" (a coordinator, two CPU workers, the sweep with --wait), then "The CLI in five lines" on
that cluster, then the REST examples with curl. The commands are taken from the README's text, so
a README that drifts from the product fails here.

Bounded for CI: the sweep's largest size becomes 256K (README_MAX_BYTES), the five lines' world
size the two workers this machine has. Each command runs as `python -m ringleader` with a
RINGLEADER_* environment that points it at free ports and a private HOME (state, database).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ports import free_port

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
README_MAX_BYTES = "256K"


def section(title: str) -> str:
    start = README.index(f"## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start:end if end > 0 else None]


def blocks(text: str) -> list[list[str]]:
    """The indented code blocks of `text`, each as its lines (comments dropped)."""
    out = []
    for block in re.findall(r"(?:^    .*\n)+", text, re.M):
        lines = [re.sub(r"\s+#.*$", "", line.strip()) for line in block.splitlines()]
        out.append([line for line in lines if line])
    return out


def bounded(line: str) -> str:
    """The README's line with its sweep bounded for CI and its world size what two workers hold."""
    line = re.sub(r"(-e|--max-bytes) \S+", rf"\1 {README_MAX_BYTES}", line)
    return re.sub(r"--world-size \d+", "--world-size 2", line)


class Shell:
    """Runs README lines: `ringleader ...` as this interpreter's module, `curl` as itself."""

    def __init__(self, tmp: Path) -> None:
        grpc_port, http_port = free_port(), free_port()
        self.http = f"127.0.0.1:{http_port}"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("RINGLEADER_")}
        self.env.update(HOME=str(tmp), RINGLEADER_COORDINATOR=f"127.0.0.1:{grpc_port}",
                        RINGLEADER_GRPC_ADDRESS=f"127.0.0.1:{grpc_port}", RINGLEADER_HTTP_ADDRESS=self.http)
        self.background: list[subprocess.Popen] = []
        self.logs: list = []
        self.tmp = tmp

    def argv(self, line: str) -> list[str]:
        words = shlex.split(line.rstrip(" &"))
        if words[0] == "ringleader":
            return [sys.executable, "-m", "ringleader", *words[1:]]
        return [w.replace("localhost:8080", self.http) for w in words]

    def start(self, line: str) -> None:
        log = open(self.tmp / f"bg{len(self.background)}.log", "w")
        self.logs.append(log)
        self.background.append(subprocess.Popen(self.argv(line), env=self.env, stdout=log, stderr=subprocess.STDOUT))

    def run(self, line: str, timeout: float = 240) -> subprocess.CompletedProcess:
        p = subprocess.run(self.argv(line), env=self.env, capture_output=True, text=True, timeout=timeout)
        assert p.returncode == 0, f"`{line}` exited {p.returncode}:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
        return p

    def wait_for_workers(self, n: int, timeout: float = 120) -> None:
        """What a newcomer does between starting the workers and submitting: wait until listed."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            p = subprocess.run(self.argv("ringleader workers -o json"), env=self.env, capture_output=True, text=True)
            if p.returncode == 0 and sum(w["state"] == "IDLE" for w in json.loads(p.stdout)["workers"]) >= n:
                return
            time.sleep(0.5)
        raise AssertionError(f"{n} workers did not connect in {timeout} s")

    def stop(self) -> None:
        for p in reversed(self.background):
            p.terminate()
        for p in self.background:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for log in self.logs:
            log.close()


@pytest.mark.timeout(900)
def test_the_readme_runs_top_to_bottom_on_a_cpu_machine(tmp_path):
    (cpu,) = [b for b in blocks(section("A cluster by hand")) if any("--device cpu" in line for line in b)]
    five = blocks(section("The CLI in five lines"))[0]
    rest = [b for b in blocks(section("REST API and dashboard")) if b[0].startswith("curl")][0]
    sh = Shell(tmp_path)
    try:
        for line in cpu:
            if line.endswith("&"):
                sh.start(line)
                if "worker" in line:
                    continue
                time.sleep(1)  # the coordinator binds before the workers dial it (they retry anyway)
            else:
                sh.wait_for_workers(sum("worker --device cpu" in x for x in cpu))
                p = sh.run(bounded(line))
                assert "# Out of bounds values : 0 OK" in p.stdout, p.stdout
                assert re.search(r"\]\s+1/\d+\s+8 B  running", p.stderr), p.stderr  # each size as it starts
                assert "QUEUED: waiting for workers" not in p.stderr
        job_id = ""
        for line in five:
            p = sh.run(bounded(line.replace("JOB_ID", job_id)))
            if line.startswith("ringleader submit"):
                assert "# Avg bus bandwidth" in p.stdout
                job_id = json.loads(sh.run("ringleader jobs -o json").stdout)["jobs"][0]["id"]  # newest first
        if shutil.which("curl"):
            created = json.loads(sh.run(rest[0]).stdout)
            assert created["state"] in ("QUEUED", "RUNNING"), created
            for line in rest[1:]:
                out = sh.run(line.replace("JOB_ID", created["id"])).stdout
                assert out.strip(), line
            assert "size_bytes" in sh.run(rest[1].replace("JOB_ID", created["id"])).stdout
    finally:
        sh.stop()
