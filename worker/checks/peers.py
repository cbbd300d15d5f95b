"""What the ranks of a check know of each other: host, device model, and which device they use.

Gathered once per check (one small all_gather of Python objects), so a runner can group ranks
by device model (peers to compare with) and take turns on a shared device (CPU workers of one
host share its cores; several ranks may share one GPU), so that one rank's measurement is not
slowed by another's.
"""

from __future__ import annotations

import platform
import socket
from dataclasses import dataclass


@dataclass(frozen=True)
class Peer:
    host: str
    model: str  # the device's model name: peers of the same model are comparable
    resource: str  # ranks with the same resource share the hardware being measured
    device_type: str = "cpu"


def machine() -> str:
    """The physical machine: the kernel's boot id, the same in every network or UTS namespace of
    one kernel (the namespace bed's hosts share one machine's cores), else the host name."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip() or socket.gethostname()
    except OSError:
        return socket.gethostname()


def me(device) -> Peer:
    import torch

    host = socket.gethostname()
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        uuid = str(getattr(props, "uuid", "")) or f"cuda:{device.index}"
        return Peer(host, props.name, f"{machine()}/{uuid}", "cuda")
    # CPU workers of one machine share its cores, whatever host name their namespace gives them.
    return Peer(host, platform.processor() or platform.machine() or "cpu", f"{machine()}/cpu")


def gather(value) -> list:
    """`value` from every rank, in rank order (any picklable value; a collective on every rank)."""
    import torch.distributed as dist

    out: list = [None] * dist.get_world_size()
    dist.all_gather_object(out, value)
    return out


def turns(peers: list[Peer], rank: int) -> tuple[int, int]:
    """(this rank's turn, number of turns): ranks sharing a resource take turns, in rank order;
    ranks on different resources measure in the same turn."""
    seen: dict[str, int] = {}
    mine = 0
    for r, p in enumerate(peers):
        if r == rank:
            mine = seen.get(p.resource, 0)
        seen[p.resource] = seen.get(p.resource, 0) + 1
    return mine, max(seen.values())


def median(values: list[float]) -> float:
    import statistics

    return float(statistics.median(values)) if values else 0.0
