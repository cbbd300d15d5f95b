"""Argument types of the `ringleader` command: each turns one flag's text into its value or
says, in one line, what was expected."""

from __future__ import annotations

import argparse

from ringleader import spec as specs
from ringleader.errors import RingleaderError

OUTPUTS = ("table", "wide", "json", "yaml")


def sizes(text: str) -> list[int]:
    try:
        return [specs.parse_size(s, "sizes") for s in text.split(",") if s.strip()]
    except RingleaderError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def iters(text: str) -> int:
    """A count (at least 1), or "auto" (0 on the wire: chosen per size by the worker). A literal 0
    is refused: it would silently mean auto."""
    if text.strip().lower() == "auto":
        return specs.AUTO_ITERS
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a number of iterations, at least 1, or auto, got {text!r}")
    return int(text)


def count(text: str) -> int:
    """A whole number, at least 1 (ranks of a job, iterations, a listing's length)."""
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number, at least 1, got {text!r}")
    return int(text)


def non_negative(text: str) -> int:
    """A whole number, 0 or more (warm-up iterations)."""
    if not text.strip().isdigit():
        raise argparse.ArgumentTypeError(f"expected a whole number, 0 or more, got {text!r}")
    return int(text)


def cpu_list(text: str) -> tuple[int, ...]:
    """CPU numbers as taskset takes them: "2-31", "0,2,4", "1-3,8" (empty: none given)."""
    cpus: set[int] = set()
    for part in (p.strip() for p in text.split(",") if p.strip()):
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()) or (hi and int(hi) < int(lo)):
            raise argparse.ArgumentTypeError(f"expected CPU numbers like 2-31 or 0,2,4, got {text!r}")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return tuple(sorted(cpus))


def ranks(text: str) -> int:
    """A number of ranks that makes a collective: 2 or more."""
    if not text.isdigit() or int(text) < 2:
        raise argparse.ArgumentTypeError(f"expected a number of ranks, at least 2, got {text!r}")
    return int(text)


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def heartbeat_timeout(text: str) -> float:
    """Seconds, at least 2: workers beat every second, so a shorter wait loses them between beats."""
    value = seconds(text)
    if value < 2:
        raise argparse.ArgumentTypeError(f"expected at least 2 seconds (workers beat every second), got {text!r}")
    return value


def seconds_or_off(text: str) -> float:
    """Seconds, or 0 for off."""
    if text.strip() in ("0", "0.0"):
        return 0.0
    return seconds(text)


def share(text: str) -> float:
    """A share of a whole: a number from 0 to 1 (0.1 = 10 %)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"expected a share from 0 to 1 (0.1 = 10 %), got {text!r}")
    return value


def size(text: str) -> int:
    try:
        return specs.parse_size(text)
    except RingleaderError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def device(text: str) -> str:
    if text in ("cpu", "all") or (text.startswith("cuda:") and text[5:].isdigit()):
        return text
    raise argparse.ArgumentTypeError(f"expected cpu, cuda:N or all, got {text!r}")


def metrics_address(text: str) -> str:
    if text:
        from worker.metrics import parse_address  # imported only when the flag is used

        try:
            parse_address(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def output(text: str) -> str:
    if text not in OUTPUTS:  # -o was the reduce op's short flag once (nccl-tests' letter)
        raise argparse.ArgumentTypeError(f"expected {', '.join(OUTPUTS)}, got {text!r} "
                                         "(-o is the output format here; nccl-tests' -o, the reduce op, is --reduce-op)")
    return text


def url_list(text: str) -> list[str]:
    """URLs separated by commas (a flag given once, or its RINGLEADER_* variable)."""
    return [u.strip() for u in text.split(",") if u.strip()]


class Extend(argparse._StoreAction):
    """A repeatable option that its variable can set too (a store action, so ringleader_app/config.py
    gives it one): each use adds its list (the option's `type` returns one) to the earlier ones."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        setattr(namespace, self.dest, [*(getattr(namespace, self.dest, None) or []), *values])
