"""What bench/control_plane.py measures and how it reports it: call latencies, a process's CPU
and RSS (from /proc), and the results table. Not a bench by itself: it asserts nothing; the benches
that use it mark a run INVALID when their scenario did not hold."""

from __future__ import annotations

import asyncio
import collections
import os
import re
import time
import urllib.request
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, all its threads (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime (fields 14 and 15)


def rss_mb(pid: int) -> float:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0.0
    m = re.search(r"VmRSS:\s+(\d+) kB", status)
    return int(m.group(1)) / 1024 if m else 0.0


def children(pid: int) -> list[int]:
    """The live child processes of `pid` (the SQLite store's writer process, for a coordinator)."""
    out: list[int] = []
    for stat in Path("/proc").glob("[0-9]*/stat"):  # (/proc/PID/task/*/children needs a kernel option)
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            pass
    return out


class ProcessWatch:
    """A process and its children, together: the coordinator's CPU and RSS include its worker
    relay's process."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.rss_max_mb = 0.0
        self.rss_own_max_mb = 0.0  # the coordinator's own process
        self.rss_children_max_mb = 0.0  # its relays (and the store's writer), together

    def cpu_s(self) -> float:
        return sum(cpu_seconds(p) for p in (self.pid, *children(self.pid)))

    def own_cpu_s(self) -> float:
        return cpu_seconds(self.pid)

    async def sample_forever(self, every_s: float = 1.0) -> None:
        while True:
            own, kids = rss_mb(self.pid), sum(rss_mb(p) for p in children(self.pid))
            self.rss_max_mb = max(self.rss_max_mb, own + kids)
            self.rss_own_max_mb = max(self.rss_own_max_mb, own)
            self.rss_children_max_mb = max(self.rss_children_max_mb, kids)
            await asyncio.sleep(every_s)


class Recorder:
    """Latencies of one kind of call, with when each started (perf_counter seconds)."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float]] = []  # (start, latency)
        self.errors: collections.Counter[str] = collections.Counter()

    def ok(self, start: float, latency: float) -> None:
        self.samples.append((start, latency))

    def fail(self, start: float, code: str) -> None:
        self.errors[code] += 1

    def summary(self, t0: float, window_s: float = 10.0) -> dict:
        lat = sorted(s[1] for s in self.samples)
        windows: dict[int, list[float]] = collections.defaultdict(list)
        for start, latency in self.samples:
            windows[int((start - t0) // window_s)].append(latency)
        return {"n": len(lat), "errors": dict(self.errors), "p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99),
                "max_ms": lat[-1] * 1e3 if lat else None,
                "p99_ms_per_10s": [pct(sorted(windows[k]), 99) for k in sorted(windows)],
                # where in a window its tail lies: the slowest call started in each second
                "max_ms_per_1s": per_second_max(self.samples, t0)}


def per_second_max(samples: list[tuple[float, float]], t0: float) -> list[float]:
    worst: dict[int, float] = collections.defaultdict(float)
    for start, latency in samples:
        second = int(start - t0)
        worst[second] = max(worst[second], latency)
    return [round(worst[k] * 1e3, 1) for k in range(max(worst) + 1)] if worst else []


def pct(sorted_s: list[float], p: float) -> float | None:
    if not sorted_s:
        return None
    return sorted_s[min(len(sorted_s) - 1, int(len(sorted_s) * p / 100))] * 1e3


def metric(http_url: str, name: str) -> float | None:
    """One sample from the coordinator's /metrics: `name` as exposed, with its labels if it has
    any (ringleader_jobs_finished_total{state="failed"})."""
    return metrics(http_url, name)[0]


def metrics(http_url: str, *names: str) -> list[float | None]:
    """Samples of `names` from one scrape of /metrics (None: not there, or no answer)."""
    try:
        text = urllib.request.urlopen(f"{http_url}/metrics", timeout=10).read().decode()
    except OSError:
        return [None] * len(names)
    found = (re.search(rf"^{re.escape(name)} (\S+)$", text, re.M) for name in names)
    return [float(m.group(1)) if m else None for m in found]


COLUMNS = ("workers", "queued", "submit p50 / p99 ms", "get p50 / p99 ms", "list p50 / p99 ms", "errors",
           "coord CPU %", "RSS MB (own + relays)", "CPU us / heartbeat (own)", "CPU us / job", "lost",
           "loop stalls (gc)", "scenario")
STALL = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) \S+ \S+ event loop stalled (\d+) ms: "
                   r"(?:garbage collection (\d+) ms)?(.*)$", re.M)


def stalls(log: str, since: float = 0.0, until: float = float("inf")) -> list[dict]:
    """The stall watch's warnings (coordinator/shell/stallwatch.py) in a coordinator's log that
    ended between `since` and `until` (time.time()): when, how long, how much of it collection."""
    out = []
    for m in STALL.finditer(log):
        at = time.mktime(time.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")) + int(m.group(2)) / 1e3
        if since <= at <= until:
            out.append({"at_s": round(at - since, 3) if since else at, "ms": int(m.group(3)),
                        "gc_ms": int(m.group(4) or 0), "what": m.group(5).split("; the loop's stack")[0].strip("; ")[:300]})
    return out


def cells(run: dict) -> list[str]:
    cfg, hb = run["config"], run["heartbeat"]
    heartbeat_cpu_rate = hb["cpu_s"] / cfg["heartbeat_window"]
    # A job's CPU: the measured window's, less what heartbeats cost meanwhile, per submit.
    per_job = (run["cpu_s"] - heartbeat_cpu_rate * run["elapsed_s"]) / max(1, run["submit"]["n"]) * 1e6
    if "cpu_ms_per_job" in run:  # churn: the window's CPU over the jobs that ran in it
        per_job = run["cpu_ms_per_job"] * 1e3
    scenario = cfg.get("churn") and "churn" or cfg["queue"] and "deep-queue" or "steady"
    if run.get("invalid"):
        scenario += " INVALID: " + "; ".join(run["invalid"])
    errors = sum(sum(run[k]["errors"].values()) for k in ("submit", "get", "list_workers"))
    depth = run.get("queue_depth_end")

    def lat(k: str) -> str:
        return f"{run[k]['p50_ms']:.1f} / {run[k]['p99_ms']:.1f}"

    queued = f"{cfg['queue']:,} → {int(depth):,}" if cfg["queue"] and depth is not None else "0"
    return [f"{cfg['workers']:,}" + (f" ({cfg['duration']:.0f} s)" if cfg["duration"] != 60 else ""), queued,
            lat("submit"), lat("get"), lat("list_workers"), str(errors), f"{run['cpu_percent']:.0f}",
            f"{run['rss_mb_max']:.0f}" + (f" ({run['rss_own_mb_max']:.0f} + {run['rss_relays_mb_max']:.0f})"
                                          if "rss_own_mb_max" in run else ""),
            f"{hb['cpu_us_per_heartbeat']:.0f}" + (f" ({hb['own_cpu_us_per_heartbeat']:.1f})"
                                                   if "own_cpu_us_per_heartbeat" in hb else ""), f"{per_job:.0f}",
            str(run["workers_declared_lost"]), stall_cell(run.get("loop_stalls")), scenario]


def stall_cell(found: list[dict] | None) -> str:
    """`n (longest ms, its collection ms)`; "-" where the run did not look."""
    if found is None:
        return "-"
    if not found:
        return "0"
    worst = max(found, key=lambda s: s["ms"])
    return f"{len(found)} ({worst['ms']} ms, gc {worst['gc_ms']})"


def row(run: dict) -> str:
    return " | ".join(f"{c}={v}" for c, v in zip(COLUMNS, cells(run)))


def table(results: dict) -> str:
    m = results["machine"]
    lines = [f"Machine: {m['nproc']} CPUs ({m['cpu_model']}), Python {m['python']}, grpcio {m['grpcio']}, "
             f"Linux {m['kernel']}", "",
             "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(cells(run)) + " |" for run in results["runs"]]
    pinned = {tuple(r["config"].get("coordinator_cpus", ())) for r in results["runs"]} - {()}
    if pinned:
        lines += ["", f"The coordinator ran pinned to CPUs {', '.join(','.join(map(str, p)) for p in pinned)}; "
                      "the load generator on the others."]
    lines += ["", "Load average (1 min) before / after each run: "
              + ", ".join(f"{r['loadavg_before'][0]:.1f} / {r['loadavg_after'][0]:.1f}" for r in results["runs"])]
    return "\n".join(lines) + "\n"


def emit(result: dict, out: Path | None, invalid: list[str]) -> None:
    """Print a bench's figures as JSON, write them to `out` too, and exit 1 naming why the run is
    invalid if it is (a bench asserts its own scenario)."""
    import json
    import sys

    text = json.dumps(result, indent=1)
    print(text)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")
    if invalid:
        sys.exit(f"invalid run: {'; '.join(invalid)}")
