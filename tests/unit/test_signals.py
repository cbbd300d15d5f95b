"""ringleader/signals.py: a stop signal reaches a loop whose self-pipe other threads have filled
(asyncio's own signal handling drops it there: "Exception ignored when trying to write to the
signal wakeup fd", and the process does not stop)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import asyncio, os, signal, threading
from ringleader.signals import on_stop_signals

async def main():
    loop = asyncio.get_running_loop()
    stopped = asyncio.Event()
    on_stop_signals(loop, stopped.set)
    def wake_often():
        for _ in range(100_000):
            loop.call_soon_threadsafe(int)
    t = threading.Thread(target=wake_often)
    t.start()
    t.join()  # meanwhile the loop is held: nothing drains its self-pipe, which fills
    os.kill(os.getpid(), signal.SIGTERM)
    try:
        await asyncio.wait_for(stopped.wait(), 10)
        print("stopped")
    except TimeoutError:
        print("lost")

asyncio.run(main())
"""


def test_sigterm_reaches_a_loop_whose_self_pipe_is_full():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.stdout.strip() == "stopped", (out.stdout, out.stderr[-2000:])
