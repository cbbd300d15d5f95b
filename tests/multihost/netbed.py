"""Hosts made of network namespaces on one machine: the multi-host path without more machines.

    switch   namespace {tag}-sw: bridge br0, one port per host (p0, p1, ...) and one for the test
    hosts    namespaces {tag}-h0, {tag}-h1, ...: eth0 = 198.18.N.(10 + i)/24 (veth to its port), lo,
             and mgmt0 = 192.0.2.(10 + i)/24, a second network no peer reaches (multi-homed hosts)
    the test this namespace: {tag}t = 198.18.N.1/24 on the bridge, so it reaches every host

A host's cable is pulled by taking its switch port down (its eth0 loses carrier: packets vanish,
nothing is refused), and plugged back by bringing the port up. Processes run in a host through
`nsenter --net` and `unshare --uts`, with a hostname of their own.

Built with pyroute2 (netlink from Python): the same code on CI and on the GPU machine, which has
no `ip` command. 198.18.0.0/15 is the range set aside for network benchmarks (RFC 2544): no real
network uses it. `remove()` deletes the namespaces, and with them every veth; beds left by test
runs that died are removed when the next one starts (the tag holds the creator's pid).
"""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

SUBNETS = ipaddress.ip_network("198.18.0.0/16")
_TAG = re.compile(r"^rl(\d+)-")
# Run argv with a hostname of its own (the UTS namespace is new: this changes no one else's).
_AS_HOST = "import os, socket, sys; socket.sethostname(sys.argv[1]); os.execvp(sys.argv[2], sys.argv[2:])"


def unavailable() -> str:
    """Why a bed cannot be built here ("" if it can)."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, veth pairs and a bridge)"
    for tool in ("nsenter", "unshare"):
        if not shutil.which(tool):
            return f"needs {tool} (util-linux)"
    try:
        import pyroute2  # noqa: F401
    except ImportError:
        return "needs pyroute2 (pip install -e '.[dev]')"
    return ""


class NetBed:
    def __init__(self, hosts: int) -> None:
        from pyroute2 import netns

        self.tag = f"rl{os.getpid()}"
        self.hosts = [f"h{i}" for i in range(hosts)]
        self.run_dir = Path(netns.NETNS_RUN_DIR)
        self.subnet = _free_subnet()
        self.test_ip = str(self.subnet.network_address + 1)
        self._created: list[str] = []

    # ---- life --------------------------------------------------------------------------------

    @classmethod
    def create(cls, hosts: int) -> "NetBed":
        remove_stale()
        bed = cls(hosts)
        try:
            bed._build()
        except BaseException:
            bed.remove()
            raise
        return bed

    def _build(self) -> None:
        from pyroute2 import IPRoute, NetNS, netns

        for name in (self.ns("sw"), *map(self.ns, self.hosts)):
            netns.create(name)
            self._created.append(name)
        with NetNS(self.ns("sw")) as sw:
            sw.link("add", ifname="br0", kind="bridge")
            bridge = sw.link_lookup(ifname="br0")[0]
            sw.link("set", index=bridge, state="up")
            for i, host in enumerate(self.hosts):
                sw.link("add", ifname=f"p{i}", kind="veth", peer={"ifname": "eth0", "net_ns_fd": self.ns(host)})
                sw.link("set", index=sw.link_lookup(ifname=f"p{i}")[0], master=bridge, state="up")
        for i, host in enumerate(self.hosts):
            with NetNS(self.ns(host)) as ns:
                ns.link("add", ifname="mgmt0", kind="veth", peer="mgmt1")  # both ends here: a dead end
                for name, address, prefix in (("eth0", self.ip(host), self.subnet.prefixlen),
                                              ("mgmt0", f"192.0.2.{10 + i}", 24)):
                    link = ns.link_lookup(ifname=name)[0]
                    ns.addr("add", index=link, address=address, prefixlen=prefix)
                    ns.link("set", index=link, state="up")
                for name in ("mgmt1", "lo"):
                    ns.link("set", index=ns.link_lookup(ifname=name)[0], state="up")
        with IPRoute() as here:
            here.link("add", ifname=self.test_ifname, kind="veth", peer={"ifname": "pt", "net_ns_fd": self.ns("sw")})
            link = here.link_lookup(ifname=self.test_ifname)[0]
            here.addr("add", index=link, address=self.test_ip, prefixlen=self.subnet.prefixlen)
            here.link("set", index=link, state="up")
        with NetNS(self.ns("sw")) as sw:
            sw.link("set", index=sw.link_lookup(ifname="pt")[0], master=sw.link_lookup(ifname="br0")[0], state="up")

    def remove(self) -> None:
        from pyroute2 import IPRoute, netns

        with IPRoute() as here:  # at once: a namespace's own links go only when the kernel gets to it
            for link in here.link_lookup(ifname=self.test_ifname):
                here.link("del", index=link)
        for name in reversed(self._created):
            try:
                netns.remove(name)
            except OSError:
                pass
        self._created.clear()

    # ---- names -------------------------------------------------------------------------------

    def ns(self, host: str) -> str:
        return f"{self.tag}-{host}"

    @property
    def test_ifname(self) -> str:
        return f"{self.tag}t"[:15]

    def ip(self, host: str) -> str:
        return str(self.subnet.network_address + 10 + self.hosts.index(host))

    # ---- using it ----------------------------------------------------------------------------

    def command(self, host: str, argv: Sequence[str]) -> list[str]:
        """`argv` run inside `host`, with `host` as its hostname."""
        return ["nsenter", f"--net={self.run_dir / self.ns(host)}", "--", "unshare", "--uts", "--",
                sys.executable, "-c", _AS_HOST, host, *argv]

    def set_link(self, host: str, up: bool) -> None:
        """Plug `host`'s cable in or pull it out (its switch port up or down)."""
        from pyroute2 import NetNS

        with NetNS(self.ns("sw")) as sw:
            port = sw.link_lookup(ifname=f"p{self.hosts.index(host)}")[0]
            sw.link("set", index=port, state="up" if up else "down")

    def rate_limit(self, host: str, rate: str, on: bool = True, both: bool = True, burst: str = "64kb",
                   latency: str = "200ms") -> None:
        """A tc token bucket (tbf) on `host`'s cable, or none (`on` false): on its eth0 (what it
        sends) and, with `both`, on its switch port (what it receives). A real slow link: this
        kernel has no netem."""
        ends = [(self.ns(host), "eth0")] + ([(self.ns("sw"), f"p{self.hosts.index(host)}")] if both else [])
        for ns, dev in ends:
            args = ["add", "dev", dev, "root", "tbf", "rate", rate, "burst", burst, "latency", latency] if on else \
                ["del", "dev", dev, "root"]
            subprocess.run(["nsenter", f"--net={self.run_dir / ns}", "--", "tc", "qdisc", *args], check=True)

    def wait_reachable(self, host: str, port: int, timeout: float = 10.0) -> None:
        import socket

        deadline = time.monotonic() + timeout
        while True:
            try:
                with socket.create_connection((self.ip(host), port), timeout=1):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)


def _free_subnet() -> ipaddress.IPv4Network:
    """A /24 of 198.18.0.0/16 that no address of this namespace uses (parallel runs differ)."""
    from pyroute2 import IPRoute

    with IPRoute() as here:
        used = {ipaddress.ip_address(a.get_attr("IFA_ADDRESS")) for a in here.get_addr(family=2)}
    nets, start = list(SUBNETS.subnets(new_prefix=24))[1:255], os.getpid()
    for k in range(len(nets)):
        net = nets[(start + k) % len(nets)]
        if not any(a in net for a in used):
            return net
    raise RuntimeError("no free /24 in 198.18.0.0/16")


def remove_stale() -> None:
    """Remove the namespaces of beds whose creating process is gone."""
    from pyroute2 import netns

    for name in netns.listnetns():
        m = _TAG.match(name)
        if m and not _alive(int(m.group(1))):
            try:
                netns.remove(name)
            except OSError:
                pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True

