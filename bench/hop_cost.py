"""What a round trip between the coordinator's two loops costs (coordinator/edge/hop.py): a
coroutine on the "edge" loop (a thread of its own) awaits N trivial bodies run on the "core" loop
(this thread's), as every unary call's handler does. CPU and wall time per round trip, for
`hop.on` and for asyncio's own run_coroutine_threadsafe + wrap_future.

    python bench/hop_cost.py [--n 20000] [--rounds 2]

Asserts its scenario: every one of the N bodies ran on the core loop and its answer came back;
otherwise the run is INVALID and exits 1.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from coordinator.edge.hop import EdgeLoop, on  # noqa: E402


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def nothing() -> int:
    if threading.current_thread() is not threading.main_thread():
        sys.exit("INVALID: a body ran off the core loop's thread")
    return 1


def stdlib_on(loop: asyncio.AbstractEventLoop, coro):
    return asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, loop))


async def measure(n: int, rounds: int) -> list[dict]:
    core, edge = asyncio.get_running_loop(), EdgeLoop()
    out = []
    try:
        for r in range(rounds):
            for name, hop in (("hop.on", on), ("run_coroutine_threadsafe", stdlib_on)):
                async def client() -> int:
                    return sum([await hop(core, nothing()) for _ in range(n)])
                c0, t0 = cpu_s(), time.perf_counter()
                answered = await on(edge.loop, client())
                if answered != n:
                    sys.exit(f"INVALID: {answered} of {n} round trips answered")
                out.append({"round": r, "hop": name, "n": n, "cpu_us": (cpu_s() - c0) / n * 1e6,
                            "wall_us": (time.perf_counter() - t0) / n * 1e6})
    finally:
        edge.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    for row in asyncio.run(measure(a.n, a.rounds)):
        print(f"round {row['round']}  {row['hop']:26s} CPU {row['cpu_us']:6.1f} us  wall {row['wall_us']:6.1f} us"
              f"  per round trip ({row['n']:,})")


if __name__ == "__main__":
    main()
