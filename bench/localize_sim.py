"""Localization and link-matrix planning at fleet scale, against a pure model of a fleet: rounds
needed, coordinator CPU per round, and how often the wrong culprit is named with noisy figures.

    python bench/localize_sim.py [--trials 100] [--out bench/out/localize-sim]

The model: N workers, 8 per host, every one of them a suspect (no known-good worker to start
from, no baseline: the hardest start). A group's figure is its slowest member's speed (a
collective runs at its slowest rank's pace), times a slow host link's factor when the group spans
that host and another, times (1 + e), e ~ N(0, noise) drawn per measurement. One culprit per
trial, chosen at random: a slow GPU (that worker at `factor`) or a slow host link (the host's
network at `factor`: every worker of that host must be named, and the host). A trial is right when
exactly the culprit (GPU: the worker; link: the host) is named.

The link-matrix schedule is the round-robin (circle) method: n - 1 rounds of n/2 disjoint pairs;
its cost per round is timed for a few rounds (the full 16,384-worker schedule has 134 M pairs).
What is right or wrong is the measurement here (reported per scenario, not asserted); asserted:
every round of the schedule is n/2 disjoint pairs.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from coordinator.health.planner import Planner  # noqa: E402

PER_HOST = 8


def fleet(n: int) -> dict[str, str]:
    return {f"w{i}": f"h{i // PER_HOST}" for i in range(n)}


def measure_fn(host_of, slow_worker: str, slow_host: str, factor: float, noise: float, rng: random.Random):
    def measure(groups):
        out = {}
        for g in groups:
            speed = factor if slow_worker in g.members else 1.0
            if slow_host:
                hosts = {host_of[w] for w in g.members}
                if slow_host in hosts and len(hosts) > 1:
                    speed = factor
            out[g] = 100.0 * speed * (1 + rng.gauss(0, noise))
        return out
    return measure


def trial(n: int, kind: str, factor: float, noise: float, rng: random.Random) -> dict:
    host_of = fleet(n)
    bad = rng.randrange(n)
    slow_worker = f"w{bad}" if kind == "gpu" else ""
    slow_host = f"h{bad // PER_HOST}" if kind == "link" else ""
    measure = measure_fn(host_of, slow_worker, slow_host, factor, noise, rng)
    planner = Planner(list(host_of), host_of)
    cpu = []
    while True:
        t0 = time.process_time()
        groups = planner.next_round()
        cpu_plan = time.process_time() - t0
        if groups is None:
            break
        figures = measure(groups)  # the fleet's part: not the coordinator's CPU
        t0 = time.process_time()
        planner.record(figures)
        cpu.append(cpu_plan + time.process_time() - t0)
    v = planner.verdict()
    right = v.culprits == [slow_worker] if kind == "gpu" else (
        v.hosts == [slow_host] and sorted(v.culprits) == sorted(w for w, h in host_of.items() if h == slow_host))
    truth = {slow_worker} if kind == "gpu" else {w for w, h in host_of.items() if h == slow_host}
    return {"rounds": v.rounds, "right": right, "named": v.culprits[:3], "cpu_ms_per_round": 1e3 * statistics.mean(cpu),
            "clean_named": bool(set(v.culprits) - truth),  # the failure that quarantines a good worker
            "said_unsure": not right and bool(v.unresolved)}


def round_robin_cost(n: int, rounds: int = 4) -> float:
    """ms of CPU to produce one round of the circle method's schedule (n even)."""
    t0 = time.process_time()
    ring = list(range(1, n))
    for r in range(rounds):
        rot = ring[r:] + ring[:r]
        pairs = [(0, rot[0])] + [(rot[i], rot[-i]) for i in range(1, n // 2)]
        assert len(pairs) == n // 2
    return 1e3 * (time.process_time() - t0) / rounds


def scenario(n: int, kind: str, factor: float, noise: float, trials: int, seed: int) -> dict:
    rng = random.Random(seed)
    runs = [trial(n, kind, factor, noise, rng) for _ in range(trials)]
    goal = math.ceil(math.log2(n)) + 2
    rounds = [r["rounds"] for r in runs]
    return {
        "workers": n, "culprit": kind, "factor": factor, "noise": noise, "trials": trials,
        "goal_rounds": goal, "within_goal_and_right": sum(r["right"] and r["rounds"] <= goal for r in runs),
        "wrong": sum(not r["right"] for r in runs), "rounds_median": statistics.median(rounds),
        "clean_worker_named": sum(r["clean_named"] for r in runs),
        "not_right_but_said_unsure": sum(r["said_unsure"] for r in runs),
        "rounds_max": max(rounds), "cpu_ms_per_round_median": statistics.median(r["cpu_ms_per_round"] for r in runs),
        "wrong_examples": [r["named"] for r in runs if not r["right"]][:3],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--noise", type=float, default=0.05)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    rows = []
    for n in (1024, 16384):
        for kind in ("gpu", "link"):
            for factor in (0.5, 0.7):
                rows.append(scenario(n, kind, factor, args.noise, args.trials, seed=n + int(factor * 10)))
                print(json.dumps(rows[-1]), flush=True)
    rr = {n: round_robin_cost(n) for n in (1024, 16384)}
    report = {"machine": f"{platform.node()} {platform.processor() or platform.machine()}, python {platform.python_version()}",
              "date": time.strftime("%Y-%m-%d", time.gmtime()), "scenarios": rows, "round_robin_ms_per_round": rr}
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "localize_sim.json").write_text(json.dumps(report, indent=1) + "\n")
        (out / "localize_sim.md").write_text(markdown(report))
    print(markdown(report))


def markdown(report: dict) -> str:
    lines = [f"# Localization at fleet scale ({report['date']}, {report['machine']})", "",
             "| workers | culprit | speed | noise | goal rounds | right within goal | wrong | of which a clean worker "
             "named | of which unsure (unresolved reported) | rounds median / max | CPU ms / round |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in report["scenarios"]:
        lines.append(f"| {r['workers']} | {r['culprit']} | {r['factor']} | {r['noise']} | {r['goal_rounds']} | "
                     f"{r['within_goal_and_right']}/{r['trials']} | {r['wrong']} | {r['clean_worker_named']} | "
                     f"{r['not_right_but_said_unsure']} | {r['rounds_median']} / "
                     f"{r['rounds_max']} | {r['cpu_ms_per_round_median']:.2f} |")
    lines += ["", "Link-matrix round-robin schedule, CPU per round: " +
              ", ".join(f"{n} workers {ms:.2f} ms" for n, ms in report["round_robin_ms_per_round"].items()), ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
