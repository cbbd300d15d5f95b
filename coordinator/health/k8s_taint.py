"""Label and taint the Kubernetes Node of a failed worker (`ringleader coordinator --k8s-taint-nodes`).

A worker quarantined for a failed check (verdict UNHEALTHY) gets its node, the `host` it
registered with (the worker DaemonSet passes spec.nodeName), labelled `ringleader.io/health=
unhealthy` and tainted `ringleader.io/unhealthy=<check>:NoSchedule`, and its status gets the
condition `RingleaderHealthy` False with the reason `CheckFailed` and a message that says which
worker failed what (the check's figure): `kubectl describe node` shows why. When no worker of
that node is failed any more (a passing recheck, or uncordon), the label and taint are removed and
the condition turns True (`ChecksPass`). Every other taint and condition is kept: the node is read
first, then written back with JSON merge patches (the node, then its status subresource). Calls run on one worker thread
(in order, never on the asyncio loop); a failing call is logged once per node and error, and never
raised. In-cluster configuration: the service account's token and CA (deploy/k8s/components/
node-taints grants nodes get and patch). Stdlib only.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import ssl
import threading
import time
import urllib.error
import urllib.request
from urllib.parse import quote

from ringleader.v1 import jobs_pb2 as pb

log = logging.getLogger("ringleader.coordinator")

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
LABEL = "ringleader.io/health"
TAINT = "ringleader.io/unhealthy"
MERGE_PATCH = "application/merge-patch+json"
CONDITION = "RingleaderHealthy"
MESSAGE_MAX = 1024  # characters of a condition's message


def in_cluster_url() -> str:
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST", ""), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    host = f"[{host}]" if ":" in host else host
    return f"https://{host}:{port}"


def node_patch(node: dict, check: str | None) -> dict:
    """The merge patch that sets (check given) or removes (None) our label and taint on `node`,
    keeping every other taint (a merge patch replaces the whole list)."""
    taints = [t for t in node.get("spec", {}).get("taints") or [] if t.get("key") != TAINT]
    if check is not None:
        taints.append({"key": TAINT, "value": check, "effect": "NoSchedule"})
    return {"metadata": {"labels": {LABEL: "unhealthy" if check is not None else None}},
            "spec": {"taints": taints}}


def condition_patch(node: dict, why: str | None, now: str) -> dict:
    """The status merge patch that sets our condition (False with `why`, or True when `why` is
    None), keeping every other condition (a merge patch replaces the whole list)."""
    conditions = node.get("status", {}).get("conditions") or []
    ours = next((c for c in conditions if c.get("type") == CONDITION), None)
    status = "False" if why is not None else "True"
    condition = {"type": CONDITION, "status": status, "lastHeartbeatTime": now,
                 "lastTransitionTime": ours["lastTransitionTime"] if ours and ours.get("status") == status
                 and ours.get("lastTransitionTime") else now,
                 "reason": "CheckFailed" if why is not None else "ChecksPass",
                 "message": (why or "no ringleader worker of this node is failed")[:MESSAGE_MAX]}
    return {"status": {"conditions": [c for c in conditions if c.get("type") != CONDITION] + [condition]}}


def failed_message(failed: dict[str, str]) -> str:
    return "; ".join(f"worker {w} failed {why}" for w, why in sorted(failed.items()))


class NodeTainter:
    """Keeps each node's label and taint in step with its workers' verdicts."""

    def __init__(self, base_url: str = "", token_path: str = f"{SA_DIR}/token",
                 ca_path: str | None = f"{SA_DIR}/ca.crt", timeout_s: float = 10.0) -> None:
        self.base_url = (base_url or in_cluster_url()).rstrip("/")
        self.token_path, self.ca_path, self.timeout_s = token_path, ca_path, timeout_s
        self._failed: dict[str, dict[str, tuple[str, str]]] = {}  # node -> {worker: (check, why)} (loop's side)
        self._warned: set[tuple[str, str]] = set()
        self._queue: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="k8s-taint", daemon=True)
        self._thread.start()

    def observe(self, info: pb.WorkerInfo) -> None:
        """A FleetHealth observer: a quarantine change of this worker (coordinator/health/fleet.py)."""
        h = info.health
        # A failed worker the circuit breaker left in service keeps its node: an operator decides.
        out = h.verdict == pb.UNHEALTHY and not h.breaker_held or h.validate_needs_approval
        self.update(info.host, info.worker_id, out, h.check,
                    f"{h.check}: {h.figure}" if h.figure else h.check)

    def update(self, node: str, worker_id: str, unhealthy: bool, check: str = "", why: str = "") -> None:
        """Record a worker's state and queue the node's write when the node's state or the reasons
        changed. Never blocks: safe to call on the asyncio loop."""
        if not node:
            return
        failed = self._failed.setdefault(node, {})
        before = dict(failed)
        if unhealthy:
            failed[worker_id] = (check or "unknown", why or check or "unknown")
        else:
            failed.pop(worker_id, None)
        if not failed:
            self._failed.pop(node, None)
        # Written when the reasons change (a removal even if not added here: a restart).
        if failed != before or not failed and not unhealthy:
            first = next(iter(failed.values()), None)
            self._queue.put((node, first[0] if first else None,
                             failed_message({w: y for w, (_, y) in failed.items()}) if failed else None))

    def close(self, timeout_s: float = 5.0) -> None:
        """Finish the queued writes (up to timeout_s) and stop the thread."""
        self._queue.put(None)
        self._thread.join(timeout_s)

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            self.write(*item)

    def write(self, node: str, check: str | None, why: str | None = None) -> bool:
        """GET the node, PATCH its label and taints, then its status' condition; False (logged) on
        any error."""
        path = f"/api/v1/nodes/{quote(node, safe='')}"
        try:
            current = self._call("GET", path)
            self._call("PATCH", path, node_patch(current, check))
            now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            self._call("PATCH", path + "/status",
                       condition_patch(current, (why or f"a worker failed {check}") if check is not None else None, now))
        except Exception as e:  # noqa: BLE001 - an API failure must never reach the coordinator
            error = f"{type(e).__name__}: {e}"
            if (node, error) not in self._warned:
                self._warned.add((node, error))
                log.warning("node %s: could not %s its taint %s: %s", node,
                            "add" if check is not None else "remove", TAINT, error)
            return False
        log.info("node %s: %s taint %s", node, "added" if check is not None else "removed", TAINT)
        return True

    def _call(self, method: str, path: str, body: dict | None = None) -> dict:
        headers = {"Accept": "application/json"}
        if self.token_path and os.path.exists(self.token_path):
            with open(self.token_path, encoding="utf-8") as f:  # re-read: the token is rotated
                headers["Authorization"] = f"Bearer {f.read().strip()}"
        data = None
        if body is not None:
            data, headers["Content-Type"] = json.dumps(body).encode(), MERGE_PATCH
        req = urllib.request.Request(self.base_url + path, data=data, headers=headers, method=method)
        context = None
        if self.base_url.startswith("https:"):
            context = ssl.create_default_context(cafile=self.ca_path if self.ca_path else None)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s, context=context) as resp:
                return json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as e:
            with e:  # the API's Status names the cause (e.g. 403: the RBAC is missing)
                raise RuntimeError(f"{method} HTTP {e.code}: {e.read(300).decode(errors='replace')}") from None
