"""Configuration as evidence: the fleet grouped by what each worker registered as its fingerprint
(Register.fingerprint, worker/fingerprint.py), the odd worker and the odd setting named, and the
key that keeps a gang from mixing settings NCCL needs equal. Pure; no I/O.

Two uses:
- drift (`FleetConfig`): workers of one backend and device model are compared entry by entry
  (versions, topology, settings); a worker whose value of an entry is held by fewer workers than
  another value is named with it ("NCCL_PROTO=LL (2 others: unset)"); on a tie every side is
  named, since nothing says which is odd. Settings that are per host by design (`PER_HOST`) are
  not compared. Counts are kept as workers come and go, so a listing costs the entries of one
  group per worker, never a comparison of pairs.
- gang equality (`gang_key`): the NCCL and torch versions and the settings of `GANG_EQUAL`, as
  one string. The scheduler treats workers of different keys as it treats different backends: a
  gang is drawn from one key only (coordinator/core/sched_index.py), so a job is never started
  with a mismatch, and a job no single key can hold waits with a reason naming the worker and
  the setting (coordinator/core/waiting.py).
"""

from __future__ import annotations

import json
from collections import Counter

from ringleader.v1 import jobs_pb2 as pb

# Settings every rank of one NCCL communicator must agree on: the transports it may use, the
# protocol and algorithm it picks, its buffers and channels. A rank that disagrees builds a
# different plan from its peers' (a crash or a hang: NCCL's docs ask for them to be set alike).
GANG_EQUAL = ("NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL", "NCCL_SHM_DISABLE", "NCCL_IB_DISABLE", "NCCL_NET",
              "NCCL_NET_PLUGIN", "NCCL_PROTO", "NCCL_ALGO", "NCCL_NVLS_ENABLE", "NCCL_CUMEM_ENABLE",
              "NCCL_COLLNET_ENABLE", "NCCL_BUFFSIZE", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS",
              "NCCL_CROSS_NIC", "NCCL_NET_GDR_LEVEL", "NCCL_LL128_BUFFSIZE", "NCCL_LL_BUFFSIZE")
GANG_SOFTWARE = ("nccl", "torch")
# Settings that differ from host to host by design (interfaces, host ids, debug output): never
# compared. ringleader's shared-GPU mode gives each rank its own NCCL_HOSTID.
PER_HOST = ("NCCL_SOCKET_IFNAME", "NCCL_HOSTID", "NCCL_IB_HCA", "NCCL_TOPO_FILE", "GLOO_SOCKET_IFNAME",
            "UCX_NET_DEVICES", "TORCH_DISTRIBUTED_DEBUG")
PER_HOST_PREFIXES = ("NCCL_DEBUG",)
PARTS = ("software", "topology", "settings")
UNSET = "unset"

Entry = tuple[str, str]  # (part, key)


def gang_key(fp: pb.ConfigFingerprint) -> str:
    """What a gang needs equal, as one string ("" for a worker that sent no fingerprint, which is
    then placed only with others like it)."""
    items = [("software", k, fp.software[k]) for k in GANG_SOFTWARE if k in fp.software]
    items += [("settings", k, fp.settings[k]) for k in GANG_EQUAL if k in fp.settings]
    return json.dumps(items, separators=(",", ":")) if items or fp.software else ""


def _entries(key: str) -> dict[str, str]:
    return {k: v for _, k, v in json.loads(key)} if key else {}


def gang_difference(a: str, b: str) -> str:
    """What differs between two gang keys, e.g. "NCCL_PROTO=LL vs unset"."""
    ea, eb = _entries(a), _entries(b)
    diffs = [f"{k}={ea.get(k, UNSET)} vs {eb.get(k, UNSET)}" for k in sorted(ea.keys() | eb.keys())
             if ea.get(k) != eb.get(k)]
    return ", ".join(diffs) or ("no fingerprint vs one" if bool(a) != bool(b) else "")


def compared(part: str, key: str) -> bool:
    return not (part == "settings" and (key in PER_HOST or key.startswith(PER_HOST_PREFIXES)))


def entries(fp: pb.ConfigFingerprint) -> dict[Entry, str]:
    return {(part, k): v for part in PARTS for k, v in getattr(fp, part).items() if compared(part, k)}


class _Group:
    def __init__(self) -> None:
        self.n = 0
        self.values: dict[Entry, Counter[str]] = {}  # entry -> value -> workers (unset not counted)


class FleetConfig:
    """Connected workers' fingerprints by group (backend, device model), with the counts that
    name the odd ones."""

    def __init__(self) -> None:
        self._groups: dict[tuple[str, str], _Group] = {}
        self._of: dict[str, tuple[tuple[str, str], dict[Entry, str]]] = {}  # worker -> (group, entries)
        self._changes = 0
        self._drifting: tuple[int, Counter[str]] | None = None  # (at change, counts): a scrape's
        self._drift: tuple[int, dict[str, str]] = (0, {})  # (at change, worker -> words): a listing's
        # Per group, the workers last said to differ: a worker joining or leaving the group changes
        # their words ("2 others" -> "3 others"), and the registry touches them for the readers.
        self._drifters: dict[tuple[str, str], set[str]] = {}

    def add(self, worker_id: str, group: tuple[str, str], fp: pb.ConfigFingerprint) -> None:
        self.remove(worker_id)
        self._changes += 1
        mine = entries(fp)
        g = self._groups.setdefault(group, _Group())
        g.n += 1
        for entry, value in mine.items():
            g.values.setdefault(entry, Counter())[value] += 1
        self._of[worker_id] = (group, mine)

    def remove(self, worker_id: str) -> None:
        found = self._of.pop(worker_id, None)
        if found is None:
            return
        self._changes += 1
        group, mine = found
        self._drifters.get(group, set()).discard(worker_id)
        g = self._groups[group]
        g.n -= 1
        for entry, value in mine.items():
            c = g.values[entry]
            c[value] -= 1
            if not c[value]:
                del c[value]
                if not c:
                    del g.values[entry]
        if not g.n:
            del self._groups[group]

    def odd(self, worker_id: str) -> list[tuple[Entry, str, str, int]]:
        """The entries in which the worker is unlike the others of its group: (entry, its value,
        the others' most common value, how many others hold that one)."""
        found = self._of.get(worker_id)
        if found is None:
            return []
        group, mine = found
        g = self._groups[group]
        out = []
        for entry in sorted(g.values):
            counts = g.values[entry]
            unset = g.n - sum(counts.values())
            mine_v = mine.get(entry, UNSET)
            held = counts[mine_v] if mine_v != UNSET else unset
            if held == g.n:
                continue
            others = Counter(counts)
            if unset:
                others[UNSET] = unset
            others[mine_v] -= 1  # the others' values, not counting this worker's own
            best_v, best_n = max(((v, n) for v, n in others.items() if v != mine_v), key=lambda x: (x[1], x[0]))
            if best_n >= held:  # fewer hold its value than another one (or a tie): named
                out.append((entry, mine_v, best_v, best_n))
        return out

    def drift(self, worker_id: str) -> str:
        """How the worker differs from its group, in words ("" when alike); worked out again only
        after the fleet changed (the fleet view asks it of every worker each second)."""
        if self._drift[0] != self._changes:
            self._drift = (self._changes, {})
        memo = self._drift[1]
        if (said := memo.get(worker_id)) is not None:
            return said
        words = []
        for (part, key), mine, theirs, n in self.odd(worker_id):
            words.append(f"{key}={mine} ({n} other{'s' if n > 1 else ''}: {theirs})")
        said = memo[worker_id] = "; ".join(words)
        if (found := self._of.get(worker_id)) is not None:
            drifters = self._drifters.setdefault(found[0], set())
            (drifters.add if said else drifters.discard)(worker_id)
        return said

    def drifters(self, group: tuple[str, str]) -> list[str]:
        """The workers of `group` whose words last said they differ (those a change of the group
        rewords; one that starts to differ on a change is found by the readers' next look)."""
        return list(self._drifters.get(group, ()))

    def drifting(self) -> Counter[str]:
        """Connected workers unlike their group, by the part they differ in (the metric), counted
        again only after the fleet changed."""
        if self._drifting is not None and self._drifting[0] == self._changes:
            return self._drifting[1]
        out: Counter[str] = Counter()
        for wid in self._of:
            for part in sorted({e[0] for e, *_ in self.odd(wid)}):
                out[part] += 1
        self._drifting = (self._changes, out)
        return out
