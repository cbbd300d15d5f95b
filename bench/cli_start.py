"""How long `ringleader` takes to start, and what it imports: the goal is under 0.3 s with no torch.

    python bench/cli_start.py [--tree PATH ...] [--runs 20]

For each source tree (default: this one): the median and minimum wall time of `ringleader
--version` and `ringleader submit --help` in fresh interpreters, the import time of
ringleader.app.cli (python -X importtime), and whether torch, cryptography or yaml were imported.
Prints a Markdown table; the machine is named in its first line.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

HEAVY = ("torch", "cryptography", "yaml")


def timed(tree: str, argv: list[str], runs: int) -> tuple[float, float, float]:
    """Median and minimum wall time, and the median CPU time (user + system) of the child, which
    a loaded machine disturbs less than the wall time."""
    env = {**os.environ, "PYTHONPATH": tree}
    walls, cpus = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "ringleader", *argv], env=env, capture_output=True, check=True)
        walls.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(walls), min(walls), statistics.median(cpus)


def imports(tree: str) -> tuple[float, list[str]]:
    """Cumulative import time of ringleader.app.cli (seconds) and the heavy packages it loads."""
    env = {**os.environ, "PYTHONPATH": tree}
    p = subprocess.run([sys.executable, "-X", "importtime", "-c", "import ringleader.app.cli"], env=env,
                       capture_output=True, text=True, check=True)
    total = next(int(m.group(1)) for line in p.stderr.splitlines()
                 if (m := re.match(r"import time:\s+\d+ \|\s+(\d+) \| ringleader\.app\.cli$", line)))
    loaded = sorted({name for line in p.stderr.splitlines() for name in HEAVY
                     if re.search(rf"\|\s+{name}(\.|$)", line)})
    return total / 1e6, loaded


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tree", action="append", default=[])
    ap.add_argument("--runs", type=int, default=20)
    a = ap.parse_args()
    trees = a.tree or [str(Path(__file__).resolve().parents[1])]
    print(f"# CLI start, {platform.node()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"load {os.getloadavg()[0]:.1f}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n")
    print("| tree | --version wall median / min, CPU median (s) | submit --help wall median / min, CPU median (s) "
          "| import ringleader.app.cli (s) | heavy imports |")
    print("|---|---|---|---|---|")
    for tree in trees:
        version, helptext = timed(tree, ["--version"], a.runs), timed(tree, ["submit", "--help"], a.runs)
        seconds, loaded = imports(tree)
        print(f"| {tree} | {version[0]:.3f} / {version[1]:.3f}, {version[2]:.3f} | "
              f"{helptext[0]:.3f} / {helptext[1]:.3f}, {helptext[2]:.3f} | {seconds:.3f} | {', '.join(loaded) or 'none'} |")


if __name__ == "__main__":
    main()
