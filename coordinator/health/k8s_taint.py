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

Per GPU (`--k8s-taint-devices`): a failed worker on a CUDA device marks that device, not its
node: a DeviceTaintRule (resource.k8s.io, DEVICE_TAINT_API) selecting the NVIDIA DRA driver's
device (driver gpu.nvidia.com, pool = the node's name, device `gpu-<index>`) with the taint
`ringleader.io/unhealthy=<check>:NoSchedule`, the verdict in its `ringleader.io/reason`
annotation; the scheduler keeps placing claims on the node's other GPUs. The node keeps its label,
taint and condition for host-wide findings only: every worker of the node failed. A passing
recheck deletes the rule. deploy/k8s/components/device-taints grants the rules' verbs.
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
from typing import Callable
from urllib.parse import quote

from coordinator.health.k8s_device_taint import (DEVICE_TAINT_API, TAINT, device_taint_rule, is_out, rule_name,
                                                  verdict_text)
from ringleader.v1 import jobs_pb2 as pb

log = logging.getLogger("ringleader.coordinator")

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
LABEL = "ringleader.io/health"
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
                 ca_path: str | None = f"{SA_DIR}/ca.crt", timeout_s: float = 10.0, devices: bool = False,
                 host_workers: Callable[[str], list[pb.WorkerInfo]] | None = None,
                 device_api: str = DEVICE_TAINT_API) -> None:
        """`devices`: taint a failed GPU's device (DeviceTaintRule) and its node only for host-wide
        findings; `host_workers(node)`: the workers the coordinator lists on a node (to tell one)."""
        self.devices, self.host_workers, self.device_api = devices, host_workers, device_api
        self._ruled: set[str] = set()  # rule names written or found (the thread's side)
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
        if self.devices and info.device.type == "cuda" and info.host:
            self._observe_device(info)
            return
        self.update(info.host, info.worker_id, is_out(h), h.check, f"{h.check}: {h.figure}" if h.figure else h.check)

    def _observe_device(self, info: pb.WorkerInfo) -> None:
        """Per GPU: the device's rule follows the worker; the node's taint follows the host-wide
        finding (every worker the coordinator lists on the node is out)."""
        h, node = info.health, info.host
        name = rule_name(node, info.device.index)
        if is_out(h):
            self._queue.put(("rule", device_taint_rule(node, info.device.index, info.worker_id, h.check,
                                                       verdict_text(h), self.device_api)))
        else:  # the thread deletes it only if there is one (written, or found at start)
            self._queue.put(("unrule", name))
        listed = {w.worker_id: w for w in (self.host_workers(node) if self.host_workers else [])}
        listed[info.worker_id] = info
        host_wide = all(is_out(w.health) for w in listed.values())
        for w in listed.values():
            self.update(node, w.worker_id, host_wide, w.health.check or "unknown",
                        f"every worker of the node failed; {w.worker_id}: {verdict_text(w.health)}")

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
        if self.devices:
            self._load_rules()
        while (item := self._queue.get()) is not None:
            if item[0] == "rule":
                self._ruled.add(item[1]["metadata"]["name"])
                self.write_rule(item[1])
            elif item[0] == "unrule":
                if item[1] in self._ruled:
                    self._ruled.discard(item[1])
                    self.delete_rule(item[1])
            else:
                self.write(*item)

    def _load_rules(self) -> None:
        """The rules an earlier coordinator wrote, so that a pass after a restart lifts them."""
        try:
            found = self._call("GET", self._rules_path() + "?labelSelector=" + quote("app.kubernetes.io/managed-by=ringleader"))
        except Exception as e:  # noqa: BLE001
            self._warn("DeviceTaintRules", "list", e)
            return
        self._ruled.update(r["metadata"]["name"] for r in found.get("items") or [])

    def _rules_path(self) -> str:
        return f"/apis/{self.device_api}/devicetaintrules"

    def write_rule(self, rule: dict) -> bool:
        """Create the device's rule, or replace its taint and reason (a merge patch) if it exists."""
        name = rule["metadata"]["name"]
        try:
            try:
                self._call("POST", self._rules_path(), rule, content_type="application/json")
            except ApiError as e:
                if e.code != 409:  # AlreadyExists: the same device failed again, another check
                    raise
                self._call("PATCH", f"{self._rules_path()}/{quote(name, safe='')}",
                           {"metadata": {"annotations": rule["metadata"]["annotations"]}, "spec": rule["spec"]})
        except Exception as e:  # noqa: BLE001 - an API failure must never reach the coordinator
            self._warn(name, "add", e)
            return False
        log.info("device %s of node %s: DeviceTaintRule %s added", rule["spec"]["deviceSelector"]["device"],
                 rule["spec"]["deviceSelector"]["pool"], name)
        return True

    def delete_rule(self, name: str) -> bool:
        try:
            self._call("DELETE", f"{self._rules_path()}/{quote(name, safe='')}")
        except ApiError as e:
            if e.code == 404:
                return True  # none: nothing to lift
            self._warn(name, "remove", e)
            return False
        except Exception as e:  # noqa: BLE001
            self._warn(name, "remove", e)
            return False
        log.info("DeviceTaintRule %s removed", name)
        return True

    def _warn(self, what: str, action: str, e: Exception) -> None:
        error = f"{type(e).__name__}: {e}"
        if (what, error) not in self._warned:
            self._warned.add((what, error))
            log.warning("%s: could not %s its taint %s: %s", what, action, TAINT, error)

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

    def _call(self, method: str, path: str, body: dict | None = None, content_type: str = MERGE_PATCH) -> dict:
        headers = {"Accept": "application/json"}
        if self.token_path and os.path.exists(self.token_path):
            with open(self.token_path, encoding="utf-8") as f:  # re-read: the token is rotated
                headers["Authorization"] = f"Bearer {f.read().strip()}"
        data = None
        if body is not None:
            data, headers["Content-Type"] = json.dumps(body).encode(), content_type
        req = urllib.request.Request(self.base_url + path, data=data, headers=headers, method=method)
        context = None
        if self.base_url.startswith("https:"):
            context = ssl.create_default_context(cafile=self.ca_path if self.ca_path else None)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s, context=context) as resp:
                return json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as e:
            with e:  # the API's Status names the cause (e.g. 403: the RBAC is missing)
                raise ApiError(e.code, f"{method} HTTP {e.code}: {e.read(300).decode(errors='replace')}") from None


class ApiError(RuntimeError):
    """The API server's answer to a call, other than 2xx (`code`: its HTTP status)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code

