"""The link check's size, chosen by link kind so that each link is saturated (a ping-pong below
that measures latency, not the link). Measured: on 2 x H100 NVLink, 512 KiB read 3.9-13.7 GB/s
of a 370 GB/s link, 256 MiB 353.9 GB/s and 1 GiB 371.1 (nccl-tests' sendrecv: 361.2 at 1 GiB);
on CPU workers with gloo, 512 KiB finishes in milliseconds over loopback or a namespace link.

A size given in the spec (link_matrix.size_bytes) is used for every link.
"""

from __future__ import annotations

MiB = 1 << 20
# (kind, size, why). NVLink or PCIe peer-to-peer between two GPUs of one host: 256 MiB, the
# smallest size at which NVLink reads within 5 % of its plateau. Across hosts or through host
# memory (GPUs sharing a device, no P2P): 64 MiB, past the knee of a 400 Gb/s NIC's curve. CPU
# workers (gloo over TCP): 512 KiB, enough for a namespace link at hundreds of Mbit/s to dominate
# its latency, and short enough that a whole matrix of 8 hosts takes seconds.
SIZES = {
    "gpu_same_host": (256 * MiB, "same-host GPU pair (NVLink or PCIe P2P)"),
    "gpu_shared_device": (64 * MiB, "ranks sharing one GPU (through host sockets)"),
    "gpu_cross_host": (64 * MiB, "GPUs on different hosts (network)"),
    "cpu": (MiB // 2, "CPU workers (gloo over TCP)"),
}


def kind(a, b) -> str:
    """The kind of link between two peers (worker/checks/peers.py's Peer)."""
    if a.device_type != "cuda" or b.device_type != "cuda":
        return "cpu"
    if a.host != b.host:
        return "gpu_cross_host"
    return "gpu_shared_device" if a.resource == b.resource else "gpu_same_host"


def choose(given: int, everyone: list, links: list[tuple[int, int, int]]) -> tuple[list[int], str]:
    """(size per link, the reason reported with the result): the same on every rank."""
    if given:
        return [given] * len(links), f"given: {given} bytes"
    kinds = [kind(everyone[a], everyone[b]) for a, b, _ in links]
    used = sorted(set(kinds), key=lambda k: SIZES[k][0])
    return [SIZES[k][0] for k in kinds], "; ".join(f"{SIZES[k][1]}: {SIZES[k][0]} bytes" for k in used)
