"""coordinator/health/k8s_taint.py against a fake Kubernetes API server (a real http.server on 127.0.0.1
in a thread; no cluster here): a failed worker's Node gets the label and taint, other taints kept;
healthy again or uncordoned removes them; an API error is logged, never raised; off by default."""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from coordinator.health.k8s_taint import CONDITION, LABEL, TAINT, NodeTainter
from ringleader_app.process import CoordinatorConfig, RunningCoordinator
from ringleader.v1 import jobs_pb2 as pb

FOREIGN = {"key": "nvidia.com/gpu", "effect": "NoSchedule"}
READY = {"type": "Ready", "status": "True", "reason": "KubeletReady"}


class FakeKubeAPI:
    """Nodes by name; records (method, path, content type, body); `fail` answers 500."""

    def __init__(self) -> None:
        self.nodes = {"node-a": {"metadata": {"name": "node-a", "labels": {"zone": "x"}},
                                 "spec": {"taints": [FOREIGN]}, "status": {"conditions": [READY]}}}
        self.calls: list[tuple[str, str, str, dict | None]] = []
        self.fail = False
        self.auth: list[str | None] = []  # each request's Authorization header
        fake = self

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

            def do_GET(self) -> None:
                fake.auth.append(self.headers["Authorization"])
                fake.calls.append(("GET", self.path, "", None))
                node = fake.nodes.get(self.path.rsplit("/", 1)[-1])
                if fake.fail or node is None:
                    return self._answer(500 if fake.fail else 404, {"kind": "Status"})
                self._answer(200, node)

            def do_PATCH(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.calls.append(("PATCH", self.path, self.headers["Content-Type"], body))
                if self.path.endswith("/status"):  # the status subresource: only its conditions here
                    node = fake.nodes[self.path.rsplit("/", 2)[-2]]
                    node.setdefault("status", {})["conditions"] = body["status"]["conditions"]
                    return self._answer(200, node)
                node = fake.nodes[self.path.rsplit("/", 1)[-1]]
                labels = node["metadata"].setdefault("labels", {})
                for k, v in body["metadata"]["labels"].items():
                    labels.pop(k, None) if v is None else labels.__setitem__(k, v)
                node["spec"]["taints"] = body["spec"]["taints"]
                self._answer(200, node)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def fake_api():
    api = FakeKubeAPI()
    yield api
    api.server.shutdown()
    api.server.server_close()


@pytest.fixture
def tainter(fake_api, tmp_path):
    token = tmp_path / "token"
    token.write_text("secret-token\n")
    t = NodeTainter(fake_api.url, token_path=str(token), ca_path=None)
    yield t
    t.close()


def info(worker_id: str, verdict: int, check: str = "gpu", host: str = "node-a", figure: str = "") -> pb.WorkerInfo:
    return pb.WorkerInfo(worker_id=worker_id, host=host,
                         health=pb.WorkerHealth(verdict=verdict, check=check, figure=figure))


def ours(node: dict) -> dict:
    (c,) = [c for c in node["status"]["conditions"] if c["type"] == CONDITION]
    return c


def test_a_failed_worker_taints_its_node_says_why_in_a_condition_keeping_others_and_healthy_removes_them(fake_api, tainter):
    tainter.observe(info("node-a-cuda0", pb.UNHEALTHY, "gpu", figure="412 TFLOP/s"))
    tainter.close()
    (get, patch, status) = fake_api.calls
    assert get[:2] == ("GET", "/api/v1/nodes/node-a")
    assert patch[:3] == ("PATCH", "/api/v1/nodes/node-a", "application/merge-patch+json")
    assert status[:3] == ("PATCH", "/api/v1/nodes/node-a/status", "application/merge-patch+json")
    node = fake_api.nodes["node-a"]
    assert node["metadata"]["labels"] == {"zone": "x", LABEL: "unhealthy"}
    assert node["spec"]["taints"] == [FOREIGN, {"key": TAINT, "value": "gpu", "effect": "NoSchedule"}]
    assert node["status"]["conditions"][0] == READY  # kept
    c = ours(node)
    assert (c["status"], c["reason"], c["message"]) == ("False", "CheckFailed", "worker node-a-cuda0 failed gpu: 412 TFLOP/s")
    t2 = NodeTainter(fake_api.url, token_path="", ca_path=None)
    t2.observe(info("node-a-cuda0", pb.UNHEALTHY, "gpu", figure="412 TFLOP/s"))
    t2.observe(info("node-a-cuda1", pb.UNHEALTHY, "nccl"))  # a second reason: the message says both
    t2.observe(info("node-a-cuda0", pb.HEALTHY))  # cuda1 still failed: the taint stays
    t2.close()
    assert node["spec"]["taints"] == [FOREIGN, {"key": TAINT, "value": "nccl", "effect": "NoSchedule"}]
    assert ours(node)["message"] == "worker node-a-cuda1 failed nccl"
    t3 = NodeTainter(fake_api.url, token_path="", ca_path=None)
    t3.observe(info("node-a-cuda1", pb.UNHEALTHY, "nccl"))
    t3.observe(info("node-a-cuda1", pb.SUSPECT, "nccl"))  # uncordoned: released by hand to SUSPECT
    t3.close()
    assert node["metadata"]["labels"] == {"zone": "x"} and node["spec"]["taints"] == [FOREIGN]
    assert node["status"]["conditions"][0] == READY and (ours(node)["status"], ours(node)["reason"]) == ("True", "ChecksPass")


def test_the_service_account_token_is_sent_when_there_is_one(fake_api, tainter):
    assert tainter.write("node-a", "gpu")
    assert NodeTainter(fake_api.url, token_path="", ca_path=None).write("node-a", None)
    assert fake_api.auth == ["Bearer secret-token", None]


def test_an_api_error_is_logged_once_per_node_and_error_and_never_raised(fake_api, tainter, caplog):
    fake_api.fail = True
    with caplog.at_level(logging.WARNING, "ringleader.coordinator"):
        assert not tainter.write("node-a", "gpu")
        assert not tainter.write("node-a", "gpu")
        assert not tainter.write("missing", "gpu")
        tainter.observe(info("w", pb.UNHEALTHY, host="node-a"))
        tainter.close()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2 and "node-a" in warnings[0] and "500" in warnings[0], warnings
    unreachable = NodeTainter("http://127.0.0.1:1", token_path="", ca_path=None, timeout_s=2)
    assert not unreachable.write("node-a", None)
    unreachable.close()


def test_fleet_health_tells_its_observers_of_quarantine_changes_with_the_host(tmp_path):
    from coordinator.shell.facade import Coordinator
    from coordinator.store.factory import open_store
    from ringleader.v1 import workers_pb2 as wpb

    seen: list[pb.WorkerInfo] = []
    store = open_store(":memory:")
    core = Coordinator(store, health_observers=[seen.append])
    core.register(wpb.Register(worker_id="w1", host="node-a", address="10.0.0.1", backend="gloo",
                               device=pb.Device(type="cpu", name="cpu")))
    core.cordon("w1", True)
    core.cordon("w1", False)
    assert [(i.host, i.health.cordoned, i.state) for i in seen] == [
        ("node-a", True, pb.QUARANTINED), ("node-a", False, pb.IDLE)]
    store.close()


def test_the_flag_off_means_no_tainter(tmp_path):
    off = RunningCoordinator(CoordinatorConfig(db=":memory:", http_address=""))
    assert off.tainter is None and off.core.fleet.observers == ()
    off.store.close()
    on = RunningCoordinator(CoordinatorConfig(db=":memory:", http_address="", k8s_taint_nodes=True))
    assert isinstance(on.tainter, NodeTainter) and on.core.fleet.observers == (on.tainter.observe,)
    on.tainter.close()
    on.store.close()
