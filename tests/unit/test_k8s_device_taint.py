"""Per-GPU quarantine in Kubernetes (coordinator/health/k8s_taint.py, devices on) against a recorded
API contract: a fake API server (a real http.server on 127.0.0.1; no cluster here) that answers as
the Kubernetes API does (201 on create, 409 AlreadyExists, 404 on a missing rule) and validates
every DeviceTaintRule it is sent against the official schema of the version the rules target
(kubernetes-validate, strict). A failed GPU gets a rule for its device, not a node taint; every
worker of a node failed taints the node; a pass deletes the rule; a restarted tainter finds its
rules and lifts them."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

import kubernetes_validate
import pytest

from coordinator.health.k8s_device_taint import DEVICE_TAINT_API, REASON, TAINT
from coordinator.health.k8s_taint import NodeTainter
from ringleader.v1 import jobs_pb2 as pb

K8S_VERSION = "1.36"  # DeviceTaintRule's first beta (resource.k8s.io/v1beta2)
RULES = f"/apis/{DEVICE_TAINT_API}/devicetaintrules"
FOREIGN = {"key": "nvidia.com/gpu", "effect": "NoSchedule"}


class RecordedAPI:
    """Nodes and DeviceTaintRules; `calls`: (method, path); `invalid`: schema errors of bodies sent."""

    def __init__(self) -> None:
        self.nodes = {"node-a": {"metadata": {"name": "node-a", "labels": {}}, "spec": {"taints": [FOREIGN]},
                                 "status": {"conditions": []}}}
        self.rules: dict[str, dict] = {}
        self.calls: list[tuple[str, str]] = []
        self.invalid: list[str] = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a) -> None:
                pass

            def _answer(self, code: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _body(self) -> dict:
                return json.loads(self.rfile.read(int(self.headers["Content-Length"])))

            def do_GET(self) -> None:
                path = urlparse(self.path).path
                api.calls.append(("GET", self.path))
                if path == RULES:
                    return self._answer(200, {"kind": "DeviceTaintRuleList", "items": list(api.rules.values())})
                self._answer(200, api.nodes[path.rsplit("/", 1)[-1]])

            def do_POST(self) -> None:
                body = self._body()
                api.calls.append(("POST", self.path))
                assert self.headers["Content-Type"] == "application/json"
                try:
                    kubernetes_validate.validate(body, K8S_VERSION, strict=True)
                except kubernetes_validate.ValidationError as e:
                    api.invalid.append(str(e))
                    return self._answer(422, {"kind": "Status", "reason": "Invalid"})
                name = body["metadata"]["name"]
                if name in api.rules:
                    return self._answer(409, {"kind": "Status", "reason": "AlreadyExists"})
                api.rules[name] = body
                self._answer(201, body)

            def do_PATCH(self) -> None:
                body = self._body()
                api.calls.append(("PATCH", self.path))
                if self.path.startswith(RULES):
                    rule = api.rules[self.path.rsplit("/", 1)[-1]]
                    rule["metadata"]["annotations"].update(body["metadata"]["annotations"])
                    rule["spec"] = body["spec"]
                    try:
                        kubernetes_validate.validate(rule, K8S_VERSION, strict=True)
                    except kubernetes_validate.ValidationError as e:
                        api.invalid.append(str(e))
                    return self._answer(200, rule)
                if self.path.endswith("/status"):
                    node = api.nodes[self.path.rsplit("/", 2)[-2]]
                    node["status"]["conditions"] = body["status"]["conditions"]
                    return self._answer(200, node)
                node = api.nodes[self.path.rsplit("/", 1)[-1]]
                node["spec"]["taints"] = body["spec"]["taints"]
                self._answer(200, node)

            def do_DELETE(self) -> None:
                api.calls.append(("DELETE", self.path))
                if api.rules.pop(self.path.rsplit("/", 1)[-1], None) is None:
                    return self._answer(404, {"kind": "Status", "reason": "NotFound"})
                self._answer(200, {"kind": "Status", "status": "Success"})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def node_taints(self) -> list[dict]:
        return self.nodes["node-a"]["spec"]["taints"]


@pytest.fixture
def api():
    a = RecordedAPI()
    yield a
    a.server.shutdown()
    a.server.server_close()


def gpu(worker_id: str, index: int, verdict: int, check: str = "gpu_check", figure: str = "",
        held: bool = False) -> pb.WorkerInfo:
    return pb.WorkerInfo(worker_id=worker_id, host="node-a", device=pb.Device(type="cuda", index=index, name="H200"),
                         health=pb.WorkerHealth(verdict=verdict, check=check, figure=figure, breaker_held=held,
                                                expected="median of 7 H200 peers 781.2" if figure else ""))


def tainter_for(api: RecordedAPI, fleet: dict[str, pb.WorkerInfo]) -> NodeTainter:
    return NodeTainter(api.url, token_path="", ca_path=None, devices=True,
                       host_workers=lambda host: [w for w in fleet.values() if w.host == host])


def test_a_failed_gpu_taints_its_device_and_the_node_only_when_every_worker_of_it_failed(api):
    fleet = {f"a{i}": gpu(f"a{i}", i, pb.HEALTHY) for i in range(2)}
    t = tainter_for(api, fleet)
    fleet["a1"] = gpu("a1", 1, pb.UNHEALTHY, figure="412.0 TFLOP/s")
    t.observe(fleet["a1"])
    t.close()
    assert api.invalid == []
    (rule,) = api.rules.values()
    assert rule["apiVersion"] == DEVICE_TAINT_API and rule["kind"] == "DeviceTaintRule"
    assert rule["spec"]["deviceSelector"] == {"driver": "gpu.nvidia.com", "pool": "node-a", "device": "gpu-1"}
    assert rule["spec"]["taint"] == {"key": TAINT, "value": "gpu_check", "effect": "NoSchedule"}
    assert rule["metadata"]["annotations"][REASON] == \
        "gpu_check UNHEALTHY: 412.0 TFLOP/s; expected median of 7 H200 peers 781.2"
    assert api.node_taints() == [FOREIGN]  # the node's other GPU stays schedulable

    t = tainter_for(api, fleet)  # a restart: it finds its rule (a GET with the label selector)
    fleet["a0"] = gpu("a0", 0, pb.UNHEALTHY, check="sdc_check", figure="checksum 0x1 of 2")
    t.observe(fleet["a0"])  # every worker of the node failed: host-wide
    fleet["a1"] = gpu("a1", 1, pb.UNHEALTHY, check="link_matrix", figure="1.0 GB/s")
    t.observe(fleet["a1"])  # failed again, another check: the rule is replaced (409, then a patch)
    t.close()
    assert api.invalid == [] and sorted(r["spec"]["deviceSelector"]["device"] for r in api.rules.values()) == \
        ["gpu-0", "gpu-1"]
    assert {r["spec"]["deviceSelector"]["device"]: r["spec"]["taint"]["value"] for r in api.rules.values()} == \
        {"gpu-0": "sdc_check", "gpu-1": "link_matrix"}
    assert [tt["key"] for tt in api.node_taints()] == [FOREIGN["key"], TAINT]
    (cond,) = api.nodes["node-a"]["status"]["conditions"]
    assert cond["status"] == "False" and "every worker of the node failed" in cond["message"]

    t = tainter_for(api, fleet)
    fleet["a1"] = gpu("a1", 1, pb.HEALTHY, check="link_matrix")
    t.observe(fleet["a1"])  # a passed recheck: its rule is deleted, the node is not host-wide any more
    t.close()
    assert [r["spec"]["deviceSelector"]["device"] for r in api.rules.values()] == ["gpu-0"]
    assert api.node_taints() == [FOREIGN]
    assert ("DELETE", f"{RULES}/ringleader-node-a-gpu-1") in api.calls


def test_a_gpu_the_circuit_breaker_held_in_service_is_not_tainted_and_a_healthy_one_costs_no_call(api):
    fleet = {"a0": gpu("a0", 0, pb.UNHEALTHY, figure="1 TFLOP/s", held=True), "a1": gpu("a1", 1, pb.HEALTHY)}
    t = tainter_for(api, fleet)
    t.observe(fleet["a0"])
    t.observe(fleet["a1"])
    t.close()
    assert api.rules == {} and api.node_taints() == [FOREIGN]
    assert [c for c in api.calls if c[0] in ("POST", "DELETE")] == []
