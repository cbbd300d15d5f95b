"""deploy/ stays consistent with the code: the Grafana dashboard queries metrics that exist, the
container commands parse with the CLI, ports and names agree across Docker, compose, Kubernetes
and Prometheus."""

import asyncio
import json
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
import types
from pathlib import Path

import grpc
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from coordinator.jobs import Queued
from coordinator.service import Coordinator
from coordinator.metrics import CoordinatorMetrics
from coordinator.store_memory import MemoryJobStore
from ringleader import jobspec
from ringleader.app.cli import build_parser
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import workers_pb2 as wpb
from worker.metrics import DEFAULT_PORT, WorkerMetrics

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
DASHBOARD = DEPLOY / "grafana" / "ringleader-dashboard.json"
COORDINATOR_HTTP_PORT, COORDINATOR_GRPC_PORT = 8080, 50051


# ---- the metrics both sides expose ----------------------------------------------------------


class _Ctx:
    def code(self):
        return None


def coordinator_metric_names() -> set[str]:
    core = Coordinator(MemoryJobStore())
    metrics = CoordinatorMetrics(core)
    core.workers.add(wpb.Register(worker_id="w0", host="h", backend="nccl",
                                  device=pb.Device(type="cuda", index=0, memory_bytes=1 << 30)))
    spec = pb.JobSpec(world_size=2, collective=pb.CollectiveSpec(op="all_reduce"))
    job = pb.Job(id="j1", spec=spec, state=pb.QUEUED, created_at=100.0)
    core.book.queued[job.id] = Queued(job, jobspec.normalize(spec))  # one queued job for the scrape-time gauges
    events = [
        pb.JobEvent(job_id="j1", seq=1, state=pb.StateChange(state=pb.QUEUED)),
        pb.JobEvent(job_id="j1", seq=2, state=pb.StateChange(state=pb.RUNNING)),
        pb.JobEvent(job_id="j1", seq=3, result=pb.SizeResult(op="all_reduce", dtype="float32", size_bytes=1 << 20,
                                                             time_us=50.0, busbw_gbps=40.0, algbw_gbps=20.0,
                                                             wrong=3, world_size=2)),
        pb.JobEvent(job_id="j1", seq=4, state=pb.StateChange(state=pb.SUCCEEDED)),
    ]
    ran = pb.Job(id="j1", spec=spec, created_at=100.0, started_at=101.0, finished_at=105.0)
    for e in events:
        metrics._on_event(e, ran)

    async def one_rpc():
        async def submit(request, context):
            return pb.Job()

        async def continuation(details):
            return grpc.unary_unary_rpc_method_handler(submit)

        details = types.SimpleNamespace(method="/ringleader.v1.JobService/SubmitJob", invocation_metadata=())
        handler = await metrics.interceptor.intercept_service(continuation, details)
        await handler.unary_unary(pb.SubmitJobRequest(), _Ctx())

    asyncio.run(one_rpc())
    return _sample_names(metrics.render()[0].decode())


class _FakeNvml(types.ModuleType):
    """pynvml as far as worker/metrics.py uses it."""

    def __init__(self):
        super().__init__("pynvml")
        self.nvmlInit = lambda: None
        self.nvmlDeviceGetHandleByUUID = lambda uuid: ("handle", uuid)
        self.nvmlDeviceGetHandleByIndex = lambda i: ("handle", i)
        self.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(total=80 << 30, used=10 << 30, free=70 << 30)
        self.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=42, memory=7)


class _Executor:
    op_seq = 12


def _daemon(device, facts):
    from worker.api import DeviceInfo
    from worker.daemon import WorkerConfig, WorkerDaemon

    d = WorkerDaemon(WorkerConfig(coordinator="127.0.0.1:1", device=device, worker_id=f"w-{device}",
                                  advertise_host="127.0.0.1"))
    d.device = DeviceInfo(**facts)
    d.executor = _Executor()
    d.restarts = 1
    return d


def worker_text(monkeypatch) -> str:
    monkeypatch.setitem(sys.modules, "pynvml", _FakeNvml())
    gpu = _daemon("cuda:0", dict(type="cuda", index=0, name="NVIDIA H100", uuid="1234-abcd", memory_bytes=80 << 30,
                                 backend="nccl"))
    cpu = _daemon("cpu", dict(type="cpu", index=0, name="x86_64", uuid="", memory_bytes=1 << 30, backend="gloo"))
    return WorkerMetrics([gpu, cpu]).render().decode()


def _sample_names(text: str) -> set[str]:
    return {s.name for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_worker_metrics_through_nvml(monkeypatch):
    samples = {(s.name, s.labels.get("device")): s.value
               for fam in text_string_to_metric_families(worker_text(monkeypatch)) for s in fam.samples}
    assert samples[("ringleader_worker_device_memory_total_bytes", "cuda:0")] == 80 << 30
    assert samples[("ringleader_worker_device_memory_used_bytes", "cuda:0")] == 10 << 30
    assert samples[("ringleader_worker_gpu_utilization_ratio", "cuda:0")] == pytest.approx(0.42)
    assert samples[("ringleader_worker_executor_restarts_total", "cuda:0")] == 1
    assert samples[("ringleader_worker_ops_total", "cpu")] == 12


# ---- Grafana --------------------------------------------------------------------------------


def _dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def _queries(dash: dict) -> list[str]:
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    for v in dash["templating"]["list"]:
        q = v.get("query")
        exprs.append(q.get("query", "") if isinstance(q, dict) else q or "")
    return exprs


def test_dashboard_is_valid_grafana_json():
    dash = _dashboard()
    assert dash["uid"] == "ringleader" and dash["title"]
    assert 36 <= dash["schemaVersion"] <= 41
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    titles = " | ".join(p["title"].lower() for p in dash["panels"])
    for needed in ("bus bandwidth", "latency p50 / p99", "queue depth", "jobs by state", "workers by state",
                   "job duration", "executor restarts"):
        assert needed in titles, needed
    for p in dash["panels"]:
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24, p["title"]
        assert p["targets"] and all(t["expr"] and t["refId"] for t in p["targets"]), p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), p["title"]


def test_dashboard_queries_only_metrics_that_exist(monkeypatch):
    exposed = coordinator_metric_names() | _sample_names(worker_text(monkeypatch))
    used = {name for q in _queries(_dashboard()) for name in re.findall(r"\bringleader_[a-zA-Z0-9_]+", q)}
    assert used, "no ringleader_ metric in the dashboard"
    assert not used - exposed, f"the dashboard queries metrics nobody exposes: {sorted(used - exposed)}"
    # The panels the brief asks for query these.
    for name in ("ringleader_collective_busbw_bytes_per_second", "ringleader_collective_op_latency_seconds_bucket",
                 "ringleader_queue_depth", "ringleader_jobs", "ringleader_workers",
                 "ringleader_job_duration_seconds_bucket", "ringleader_worker_executor_restarts_total"):
        assert name in used, name


# ---- Prometheus -----------------------------------------------------------------------------


def _prometheus() -> dict:
    return yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())


def test_prometheus_scrapes_coordinator_and_workers_on_their_ports():
    jobs = {j["job_name"]: j for j in _prometheus()["scrape_configs"]}
    coord = [t for sc in jobs["ringleader-coordinator"]["static_configs"] for t in sc["targets"]]
    workers = [t for sc in jobs["ringleader-worker"]["static_configs"] for t in sc["targets"]]
    assert coord == [f"coordinator:{COORDINATOR_HTTP_PORT}"]
    assert workers and all(t.endswith(f":{DEFAULT_PORT}") for t in workers)
    assert all(j.get("metrics_path", "/metrics") == "/metrics" for j in jobs.values())


@pytest.mark.skipif(shutil.which("promtool") is None, reason="needs promtool (apt-get install prometheus)")
def test_prometheus_config_passes_promtool():
    p = subprocess.run(["promtool", "check", "config", "--syntax-only", str(DEPLOY / "prometheus" / "prometheus.yml")],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stdout + p.stderr


# ---- Docker ---------------------------------------------------------------------------------


def _dockerfile(name: str) -> str:
    return (DEPLOY / "docker" / name).read_text()


def _exec_form(dockerfile: str, instruction: str) -> list[str]:
    m = re.search(rf"^{instruction}\s+(\[.*\])\s*$", dockerfile, re.M)
    assert m, instruction
    return json.loads(m.group(1))


def _parse_cli(argv: list[str]):
    assert argv[0] == "ringleader", argv
    try:
        return build_parser().parse_args(argv[1:])
    except SystemExit:
        pytest.fail(f"the CLI rejects {shlex.join(argv)}")


def _pip_installs(dockerfile: str) -> set[str]:
    joined = dockerfile.replace("\\\n", " ")
    reqs = set()
    for line in joined.splitlines():
        if "pip install" in line and "--no-deps" not in line:
            reqs |= set(re.findall(r'"([^"]+)"', line.split("pip install", 1)[1]))
    return reqs


def _project_dependencies() -> set[str]:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    return {d for d in deps if not d.startswith("torch")}


def test_coordinator_image_installs_everything_but_torch():
    df = _dockerfile("Dockerfile.coordinator")
    assert re.search(r"^FROM python:3\.11-slim\s*$", df, re.M)
    assert _pip_installs(df) == _project_dependencies()
    assert "pip install --no-deps ." in df
    a = _parse_cli(_exec_form(df, "ENTRYPOINT") + _exec_form(df, "CMD"))
    assert a.command == "coordinator"
    assert a.grpc_address == f"0.0.0.0:{COORDINATOR_GRPC_PORT}" and a.http_address == f"0.0.0.0:{COORDINATOR_HTTP_PORT}"
    assert a.db.startswith("/var/lib/ringleader/")
    assert f"EXPOSE {COORDINATOR_GRPC_PORT} {COORDINATOR_HTTP_PORT}" in df


def test_worker_image_keeps_the_base_torch_and_runs_all_devices():
    df = _dockerfile("Dockerfile.worker")
    base = re.search(r"^ARG BASE_IMAGE=(\S+)$", df, re.M).group(1)
    assert base.startswith("nvcr.io/nvidia/pytorch:") and not base.endswith(":latest")
    assert _pip_installs(df) == _project_dependencies() | {"nvidia-ml-py"}
    assert "pip install --no-deps ." in df
    entry = _exec_form(df, "ENTRYPOINT")
    assert entry == ["ringleader", "worker", "--device", "all"]
    a = _parse_cli(entry + _exec_form(df, "CMD"))
    assert a.metrics_address == f"0.0.0.0:{DEFAULT_PORT}"
    assert f"EXPOSE {DEFAULT_PORT}" in df


def test_compose_file():
    compose = yaml.safe_load((DEPLOY / "docker" / "compose.yaml").read_text())
    s = compose["services"]
    assert set(s) == {"coordinator", "worker", "prometheus", "grafana"}
    here = DEPLOY / "docker"
    for name in ("coordinator", "worker"):
        assert (here / s[name]["build"]["context"] / s[name]["build"]["dockerfile"]).is_file()
    coord = _parse_cli(_exec_form(_dockerfile("Dockerfile.coordinator"), "ENTRYPOINT") + s["coordinator"]["command"])
    assert coord.grpc_address.endswith(f":{COORDINATOR_GRPC_PORT}") and coord.http_address.endswith(f":{COORDINATOR_HTTP_PORT}")
    assert f"{COORDINATOR_HTTP_PORT}:{COORDINATOR_HTTP_PORT}" in s["coordinator"]["ports"]
    worker = _parse_cli(_exec_form(_dockerfile("Dockerfile.worker"), "ENTRYPOINT") + s["worker"]["command"])
    assert worker.metrics_address.endswith(f":{DEFAULT_PORT}")
    assert s["worker"]["environment"]["RINGLEADER_COORDINATOR"] == f"coordinator:{COORDINATOR_GRPC_PORT}"
    gpus = s["worker"]["deploy"]["resources"]["reservations"]["devices"]
    assert gpus[0]["driver"] == "nvidia" and "gpu" in gpus[0]["capabilities"]
    # Mounted files exist, and the dashboard lies where the provisioning looks.
    for svc in ("prometheus", "grafana"):
        for v in s[svc]["volumes"]:
            src = v.split(":")[0]
            if src.startswith("."):
                assert (here / src).exists(), v
    provider = yaml.safe_load((DEPLOY / "grafana/provisioning/dashboards/ringleader.yml").read_text())
    path = provider["providers"][0]["options"]["path"]
    assert any(v.split(":")[1].startswith(path + "/") and v.split(":")[0].endswith(".json")
               for v in s["grafana"]["volumes"])


# ---- Kubernetes -----------------------------------------------------------------------------


def _k8s() -> dict:
    docs = {}
    for f in sorted((DEPLOY / "k8s").glob("*.yaml")):
        for doc in yaml.safe_load_all(f.read_text()):
            if doc and "kind" in doc and doc["kind"] != "Kustomization":
                docs[(doc["kind"], doc["metadata"]["name"])] = doc
    return docs


def test_kustomization_lists_every_manifest():
    k = yaml.safe_load((DEPLOY / "k8s" / "kustomization.yaml").read_text())
    files = {f.name for f in (DEPLOY / "k8s").glob("*.yaml")} - {"kustomization.yaml"}
    assert set(k["resources"]) == files


def test_coordinator_deployment_service_and_volume_agree():
    docs = _k8s()
    dep = docs[("Deployment", "ringleader-coordinator")]
    svc = docs[("Service", "ringleader-coordinator")]
    assert dep["spec"]["replicas"] == 1 and dep["spec"]["strategy"]["type"] == "Recreate"
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    a = _parse_cli(_exec_form(_dockerfile("Dockerfile.coordinator"), "ENTRYPOINT") + c["args"])
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"grpc": int(a.grpc_address.rsplit(":", 1)[1]), "http": int(a.http_address.rsplit(":", 1)[1])}
    assert {p["name"]: p["port"] for p in svc["spec"]["ports"]} == ports
    assert svc["spec"]["selector"].items() <= dep["spec"]["template"]["metadata"]["labels"].items()
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if "persistentVolumeClaim" in v}
    (db_volume,) = [n for n, path in mounts.items() if a.db.startswith(path + "/")]
    assert ("PersistentVolumeClaim", claims[db_volume]) in docs


def test_worker_daemonset_on_gpu_nodes_with_host_network():
    docs = _k8s()
    ds = docs[("DaemonSet", "ringleader-worker")]
    pod = ds["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    (c,) = pod["containers"]
    assert int(c["resources"]["limits"]["nvidia.com/gpu"]) >= 1
    a = _parse_cli(_exec_form(_dockerfile("Dockerfile.worker"), "ENTRYPOINT") + c["args"])
    assert a.device == "all" and a.metrics_address.endswith(f":{DEFAULT_PORT}")
    env = {e["name"]: e for e in c["env"]}
    host, port = env["RINGLEADER_COORDINATOR"]["value"].rsplit(":", 1)
    svc = docs[("Service", "ringleader-coordinator")]
    assert host.split(".")[0] == svc["metadata"]["name"] and host.split(".")[1] == svc["metadata"]["namespace"]
    assert int(port) in [p["port"] for p in svc["spec"]["ports"] if p["name"] == "grpc"]
    assert "NCCL_NVLS_ENABLE" in (DEPLOY / "k8s" / "worker-daemonset.yaml").read_text()
    assert [p["containerPort"] for p in c["ports"]] == [DEFAULT_PORT]
    assert ds["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"] == str(DEFAULT_PORT)
