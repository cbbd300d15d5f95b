"""deploy/k8s: every overlay renders with kubectl's kustomize, validates against the Kubernetes
schemas of the oldest and newest versions supported, meets the Pod Security level its namespace
enforces (and needs that level), and agrees with the code (CLI flags, ports, probes, Secrets) and
with deploy/README.md's commands."""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from deployfacts import COORDINATOR_GRPC_PORT, COORDINATOR_HTTP_PORT, DEPLOY, ROOT, dockerfile, exec_form, parse_cli
from ringleader import __version__
from worker.metrics import DEFAULT_PORT

K8S = DEPLOY / "k8s"
OVERLAYS = ("single-node", "multi-node-ib", "prometheus-operator")
DEPLOYMENTS = ("single-node", "multi-node-ib")  # the overlays that run ringleader (the other monitors it)
K8S_VERSIONS = ("1.31", "1.37")  # oldest and newest supported (kubernetes-validate ships both schemas)
CUSTOM_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}  # the Prometheus Operator's CRDs
KUBECTL = shutil.which("kubectl")
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="needs kubectl (with its built-in kustomize; .ci/run installs it)")


# ---- rendering ------------------------------------------------------------------------------


@functools.cache
def render_dir(path: str) -> tuple[dict, ...]:
    p = subprocess.run([KUBECTL, "kustomize", path], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return tuple(d for d in yaml.safe_load_all(p.stdout) if d)


def render(overlay: str) -> tuple[dict, ...]:
    return render_dir(str(K8S / "overlays" / overlay))


def one(docs, kind: str, name: str | None = None) -> dict:
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, (kind, name, len(found))
    return found[0]


def worker_sets(docs) -> list[dict]:
    """The worker DaemonSets: one per GPU count (deploy/k8s/base/gpus/N/)."""
    found = [d for d in docs if d["kind"] == "DaemonSet"]
    assert found and all(d["metadata"]["name"].startswith("ringleader-worker-gpus-") for d in found)
    return found


def settings() -> dict:
    return yaml.safe_load((K8S / "base" / "settings.yaml").read_text())["data"]


def pod_templates(docs):
    """(namespace, workload name, pod spec, pod labels) of every workload."""
    for d in docs:
        if d["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
            t = d["spec"]["template"]
            yield d["metadata"]["namespace"], d["metadata"]["name"], t["spec"], t["metadata"]["labels"]


# ---- Pod Security Standards, as the admission controller checks them -------------------------

LEVELS = ("privileged", "baseline", "restricted")
BASELINE_CAPABILITIES = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                         "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                      "projected", "secret"}


def pss_violations(pod: dict, level: str) -> list[str]:
    """What keeps a pod spec from `level` ("baseline" or "restricted"; nothing for "privileged")."""
    if level == "privileged":
        return []
    out = []
    containers = pod.get("initContainers", []) + pod["containers"]
    psc = pod.get("securityContext", {})
    for ns in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(ns):
            out.append(ns)
    for v in pod.get("volumes", []):
        if "hostPath" in v:
            out.append(f"hostPath volume {v['name']}")
    if psc.get("seccompProfile", {}).get("type") == "Unconfined":
        out.append("seccomp Unconfined")
    for c in containers:
        sc = c.get("securityContext", {})
        if sc.get("privileged"):
            out.append(f"{c['name']}: privileged")
        added = set(sc.get("capabilities", {}).get("add", []))
        if added - BASELINE_CAPABILITIES:
            out.append(f"{c['name']}: adds {sorted(added - BASELINE_CAPABILITIES)}")
        # The API server sets hostPort = containerPort for host-network pods.
        if any(p.get("hostPort") for p in c.get("ports", [])) or (pod.get("hostNetwork") and c.get("ports")):
            out.append(f"{c['name']}: host ports")
        if sc.get("seccompProfile", {}).get("type") == "Unconfined":
            out.append(f"{c['name']}: seccomp Unconfined")
    if level == "baseline":
        return out
    for v in pod.get("volumes", []):
        kinds = set(v) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            out.append(f"volume {v['name']}: {sorted(kinds)}")
    for c in containers:
        sc = c.get("securityContext", {})
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(f"{c['name']}: allowPrivilegeEscalation not false")
        if not sc.get("runAsNonRoot", psc.get("runAsNonRoot")):
            out.append(f"{c['name']}: runAsNonRoot not true")
        if sc.get("runAsUser", psc.get("runAsUser")) == 0:
            out.append(f"{c['name']}: runAsUser 0")
        seccomp = sc.get("seccompProfile", psc.get("seccompProfile", {})).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            out.append(f"{c['name']}: seccompProfile {seccomp}")
        caps = sc.get("capabilities", {})
        if "ALL" not in caps.get("drop", []):
            out.append(f"{c['name']}: capabilities not dropping ALL")
        if set(caps.get("add", [])) - {"NET_BIND_SERVICE"}:
            out.append(f"{c['name']}: adds capabilities")
    return out


def required_level(pod: dict) -> str:
    return next(level for level in reversed(LEVELS) if not pss_violations(pod, level))


def test_the_pod_security_check_finds_violations():
    """The checker the overlays are held to can fail."""
    ok = {"securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
          "containers": [{"name": "c", "securityContext": {"allowPrivilegeEscalation": False,
                                                            "capabilities": {"drop": ["ALL"]}}}]}
    assert required_level(ok) == "restricted"
    no_seccomp = json.loads(json.dumps(ok))
    del no_seccomp["securityContext"]["seccompProfile"]
    assert pss_violations(no_seccomp, "restricted") == ["c: seccompProfile None"]
    assert required_level(no_seccomp) == "baseline"
    host = dict(ok, hostNetwork=True)
    assert required_level(host) == "privileged"
    ipc_lock = json.loads(json.dumps(ok))
    ipc_lock["containers"][0]["securityContext"]["capabilities"]["add"] = ["IPC_LOCK"]
    assert pss_violations(ipc_lock, "baseline") == ["c: adds ['IPC_LOCK']"]
    assert "volume v: ['hostPath']" in pss_violations(dict(ok, volumes=[{"name": "v", "hostPath": {}}]), "restricted")


def with_component(tmp_path: Path, component: str, overlay: str = "single-node") -> tuple[dict, ...]:
    """`overlay` with deploy/k8s/components/`component`, as an overlay would include it."""
    here = tmp_path / f"with-{component}"  # kustomize takes relative paths only
    here.mkdir()
    (here / "kustomization.yaml").write_text(yaml.safe_dump({
        "resources": [os.path.relpath(K8S / "overlays" / overlay, here)],
        "components": [os.path.relpath(K8S / "components" / component, here)]}))
    return render_dir(str(here))


# ---- every overlay ------------------------------------------------------------------------------


@needs_kubectl
@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("overlay", OVERLAYS + ("single-node+nvidia-runtime", "single-node+node-taints",
                                                "single-node+k8s-identity", "single-node+device-taints"))
def test_overlay_renders_and_validates_strictly(overlay, version, tmp_path):
    if overlay == "single-node+nvidia-runtime":  # the component, as an overlay would include it
        docs = with_component(tmp_path, "nvidia-runtime")
        assert {d["spec"]["template"]["spec"]["runtimeClassName"] for d in worker_sets(docs)} == {"nvidia"}
    elif overlay in ("single-node+node-taints", "single-node+k8s-identity", "single-node+device-taints"):
        docs = with_component(tmp_path, overlay.split("+")[1])
    else:
        docs = render(overlay)
    rendered = tmp_path / "rendered.yaml"
    rendered.write_text(yaml.safe_dump_all(docs))
    validate = shutil.which("kubernetes-validate", path=str(Path(sys.executable).parent)) or "kubernetes-validate"
    p = subprocess.run([validate, "--strict", "-k", version, str(rendered)], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    # Every built-in kind passed its schema; only the operator's custom resources have none.
    passed = len(re.findall(r"^INFO .* passed for resource", p.stdout, re.M))
    assert passed == len([d for d in docs if d["kind"] not in CUSTOM_KINDS]), p.stdout
    assert {d["kind"] for d in docs if d["kind"] in CUSTOM_KINDS} == (
        CUSTOM_KINDS if overlay == "prometheus-operator" else set())


@needs_kubectl
@pytest.mark.parametrize("overlay", DEPLOYMENTS)
def test_every_pod_meets_its_namespace_pod_security_level_and_needs_it(overlay):
    docs = render(overlay)
    namespaces = {d["metadata"]["name"]: d["metadata"]["labels"] for d in docs if d["kind"] == "Namespace"}
    assert namespaces, "the overlay creates its namespace"
    for labels in namespaces.values():
        for mode in ("enforce", "audit", "warn"):
            assert labels[f"pod-security.kubernetes.io/{mode}"] in LEVELS, mode
    pods = list(pod_templates(docs))
    for ns, name, pod, _ in pods:
        level = namespaces[ns]["pod-security.kubernetes.io/enforce"]
        assert not pss_violations(pod, level), (name, level, pss_violations(pod, level))
    for ns, labels in namespaces.items():  # and no weaker a level than its pods need
        needed = min((required_level(p) for n, _, p, _ in pods if n == ns), key=LEVELS.index, default="restricted")
        assert labels["pod-security.kubernetes.io/enforce"] == needed, ns
    # The coordinator is "restricted" everywhere; so are the workers on the pod network.
    coordinator = one(docs, "StatefulSet", "ringleader-coordinator")["spec"]["template"]["spec"]
    assert required_level(coordinator) == "restricted"
    for ds in worker_sets(docs):
        worker = ds["spec"]["template"]["spec"]
        assert required_level(worker) == ("restricted" if overlay == "single-node" else "privileged")


@needs_kubectl
@pytest.mark.parametrize("overlay", DEPLOYMENTS)
def test_images_come_from_the_one_registry_and_tag(overlay):
    s = settings()
    assert s["IMAGE_TAG"] == __version__
    images = {c["image"] for _, _, pod, _ in pod_templates(render(overlay)) for c in pod["containers"]}
    assert images == {f"{s['IMAGE_REGISTRY']}/ringleader-{x}:{__version__}" for x in ("coordinator", "worker")}


# ---- the coordinator --------------------------------------------------------------------------


@needs_kubectl
@pytest.mark.parametrize("overlay", DEPLOYMENTS)
def test_coordinator_statefulset_service_volume_and_probes_agree(overlay):
    docs = render(overlay)
    sts = one(docs, "StatefulSet", "ringleader-coordinator")
    svc = one(docs, "Service", "ringleader-coordinator")
    assert sts["spec"]["replicas"] == 1 and sts["spec"]["serviceName"] == svc["metadata"]["name"]
    pod = sts["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    a = parse_cli(exec_form(dockerfile("Dockerfile.coordinator"), "ENTRYPOINT") + c["args"])
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"grpc": int(a.grpc_address.rsplit(":", 1)[1]), "http": int(a.http_address.rsplit(":", 1)[1])}
    assert ports == {"grpc": COORDINATOR_GRPC_PORT, "http": COORDINATOR_HTTP_PORT}
    assert {p["name"]: p["port"] for p in svc["spec"]["ports"]} == ports
    assert svc["spec"]["selector"].items() <= sts["spec"]["template"]["metadata"]["labels"].items()
    # The database lies on the claim of volumeClaimTemplates; everything else written is an emptyDir.
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    (claim,) = sts["spec"]["volumeClaimTemplates"]
    (db_mount,) = [path for path in mounts if a.db.startswith(path + "/")]
    assert mounts[db_mount] == claim["metadata"]["name"]
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]]
    # Both tokens and TLS are files from Secrets (the contract's flags).
    args = dict(zip(c["args"][::2], c["args"][1::2]))
    for flag in ("--token-file", "--worker-token-file", "--tls-cert", "--tls-key", "--tls-client-ca"):
        assert secret_key_at(pod, c, args[flag]), flag
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        get = c[probe]["httpGet"]
        assert (get["path"], get["port"], get["scheme"]) == (path, "http", "HTTPS")


def secret_key_at(pod: dict, container: dict, path: str) -> tuple[str, str] | None:
    """(Secret name, key) that a container sees at `path`, or None."""
    volumes = {v["name"]: v for v in pod["volumes"]}
    for m in container["volumeMounts"]:
        if path.startswith(m["mountPath"] + "/") and "secret" in volumes[m["name"]]:
            secret = volumes[m["name"]]["secret"]
            file = path[len(m["mountPath"]) + 1:]
            if "items" not in secret:
                return secret["secretName"], file
            items = {i["path"]: i["key"] for i in secret["items"]}
            return (secret["secretName"], items[file]) if file in items else None
    return None


# ---- the workers ------------------------------------------------------------------------------


@needs_kubectl
@pytest.mark.parametrize("overlay", DEPLOYMENTS)
def test_workers_are_guaranteed_qos_sized_by_their_gpu_count(overlay):
    for ds in worker_sets(render(overlay)):
        pod = ds["spec"]["template"]["spec"]
        n = int(pod["nodeSelector"]["nvidia.com/gpu.count"])
        for c in pod["containers"]:
            r = c["resources"]
            assert r["requests"] == r["limits"], c["name"]  # Guaranteed: every resource, requests == limits
            assert (r["limits"]["nvidia.com/gpu"], r["limits"]["cpu"], r["limits"]["memory"]) == \
                (str(n), str(2 * n), f"{16 * n}Gi")
        (dshm,) = [v for v in pod["volumes"] if v["name"] == "dshm"]
        assert dshm["emptyDir"] == {"medium": "Memory", "sizeLimit": f"{2 * n}Gi"}
        assert {"key": "nvidia.com/gpu", "operator": "Exists"} in pod["tolerations"]
    pdb = one(render(overlay), "PodDisruptionBudget", "ringleader-worker")
    # An integer: the API reads a string as a percentage, which DaemonSet pods cannot use.
    s = settings()
    assert pdb["spec"]["minAvailable"] == s["WORKERS_MIN_AVAILABLE"] and isinstance(pdb["spec"]["minAvailable"], int)
    for ds in worker_sets(render(overlay)):
        assert pdb["spec"]["selector"]["matchLabels"].items() <= ds["spec"]["template"]["metadata"]["labels"].items()


def _scheduled_on(docs, node_labels: dict) -> list[dict]:
    """The DaemonSets whose pods a node with these labels runs (nodeSelector: every pair matches)."""
    return [d for d in docs if d["kind"] == "DaemonSet"
            and d["spec"]["template"]["spec"]["nodeSelector"].items() <= node_labels.items()]


@needs_kubectl
@pytest.mark.parametrize("overlay", DEPLOYMENTS)
@pytest.mark.parametrize("gpus", [1, 2, 4, 8])
def test_a_node_runs_one_worker_pod_holding_all_its_gpus(overlay, gpus):
    """A node as GPU feature discovery labels it: exactly one worker DaemonSet lands there, and
    its pod requests the node's GPU count (the manifests once asked 8 of every node)."""
    docs = render(overlay)
    node = {"kubernetes.io/hostname": "n1", "nvidia.com/gpu.present": "true", "nvidia.com/gpu.count": str(gpus)}
    (ds,) = _scheduled_on(docs, node)
    (c,) = ds["spec"]["template"]["spec"]["containers"]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == str(gpus)
    assert parse_cli(exec_form(dockerfile("Dockerfile.worker"), "ENTRYPOINT") + c["args"]).device == "all"
    assert not _scheduled_on(docs, {"kubernetes.io/hostname": "cpu-only"})  # no GPU: no worker
    # Distinct selectors: no DaemonSet adopts another's pods.
    selectors = [tuple(sorted(d["spec"]["selector"]["matchLabels"].items())) for d in worker_sets(docs)]
    assert len(set(selectors)) == len(selectors)


@needs_kubectl
def test_plain_prometheus_finds_the_pods_through_headless_services():
    docs = render("single-node")
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus-kubernetes.yml").read_text())
    for job in config["scrape_configs"]:
        (sd,) = job["dns_sd_configs"]
        (name,) = sd["names"]
        service, namespace, _ = name.split(".", 2)
        svc = one(docs, "Service", service)
        assert svc["metadata"]["namespace"] == namespace and svc["spec"]["clusterIP"] == "None"
        component = job["job_name"].removeprefix("ringleader-")
        assert svc["spec"]["selector"]["app.kubernetes.io/component"] == component
        assert sd["port"] in {int(p["port"]) for p in svc["spec"]["ports"]}
    for ds in worker_sets(docs):
        assert ds["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"] == "9401"


@needs_kubectl
@pytest.mark.parametrize("overlay", DEPLOYMENTS)
def test_worker_command_probes_and_secrets(overlay):
    docs = render(overlay)
    for ds in worker_sets(docs):
        _check_worker_pod(docs, ds["spec"]["template"]["spec"])


def _check_worker_pod(docs, pod: dict) -> None:
    (c,) = pod["containers"]
    a = parse_cli(exec_form(dockerfile("Dockerfile.worker"), "ENTRYPOINT") + c["args"])
    assert a.device == "all" and a.metrics_address == f"0.0.0.0:{DEFAULT_PORT}"
    assert a.advertise_host == "$(POD_IP)"
    env = {e["name"]: e for e in c["env"]}
    assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    host, port = env["RINGLEADER_COORDINATOR"]["value"].rsplit(":", 1)
    svc = one(docs, "Service", "ringleader-coordinator")
    assert host == svc["metadata"]["name"] and int(port) == COORDINATOR_GRPC_PORT
    assert [(p["name"], p["containerPort"]) for p in c["ports"]] == [("metrics", DEFAULT_PORT)]
    # The probes are the worker's own endpoints (worker/health.py) on the metrics port.
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert c["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    args = dict(zip(c["args"][::2], c["args"][1::2]))
    assert secret_key_at(pod, c, args["--token-file"]) == ("ringleader-tokens", "worker-token")
    for flag in ("--tls-ca", "--tls-cert", "--tls-key"):
        assert secret_key_at(pod, c, args[flag])[0] == "ringleader-worker-tls", flag
    # Workers never see the users' token: of ringleader-tokens they mount the worker token only.
    tokens = [v["secret"] for v in pod["volumes"] if v.get("secret", {}).get("secretName") == "ringleader-tokens"]
    assert [i["key"] for t in tokens for i in t["items"]] == ["worker-token"]


@needs_kubectl
def test_the_ib_overlay_uses_the_host_network_and_the_rdma_devices_from_its_values():
    docs = render("multi-node-ib")
    values = yaml.safe_load((K8S / "overlays/multi-node-ib/values.yaml").read_text())["data"]
    for ds in worker_sets(docs):
        _check_ib_worker(ds["spec"]["template"]["spec"], values)
    policy = one(docs, "NetworkPolicy", "ringleader-coordinator")
    assert {"ipBlock": {"cidr": values["NODE_CIDR"]}} in [f for rule in policy["spec"]["ingress"] for f in rule["from"]]
    assert not [d for d in docs if d["kind"] == "ConfigMap"]  # values.yaml is local-config only


def _check_ib_worker(pod: dict, values: dict) -> None:
    (c,) = pod["containers"]
    assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert (env["NCCL_IB_HCA"], env["NCCL_SOCKET_IFNAME"]) == (values["NCCL_IB_HCA"], values["NCCL_SOCKET_IFNAME"])
    assert "NCCL_IB_DISABLE" not in env
    rdma = [k for k in c["resources"]["limits"] if k.startswith("rdma/")]
    assert rdma and all(c["resources"]["requests"][k] == c["resources"]["limits"][k] for k in rdma)
    assert c["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]


@needs_kubectl
def test_single_node_workers_disable_ib_on_the_pod_network():
    for ds in worker_sets(render("single-node")):
        pod = ds["spec"]["template"]["spec"]
        assert not pod.get("hostNetwork")
        assert {"name": "NCCL_IB_DISABLE", "value": "1"} in pod["containers"][0]["env"]


# ---- network policies -------------------------------------------------------------------------


@needs_kubectl
@pytest.mark.parametrize("overlay", DEPLOYMENTS)
def test_network_policies_admit_workers_and_users_to_the_coordinator_only(overlay):
    docs = render(overlay)
    policies = {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "NetworkPolicy"}
    deny = policies.pop("ringleader-default-deny-ingress")
    assert deny == {"podSelector": {}, "policyTypes": ["Ingress"]}
    pods = {labels["app.kubernetes.io/component"]: (pod, labels) for _, _, pod, labels in pod_templates(docs)}
    for spec in policies.values():
        (target,) = [k for k, (_, labels) in pods.items() if spec["podSelector"]["matchLabels"].items() <= labels.items()]
        port_names = {p["name"] for c in pods[target][0]["containers"] for p in c["ports"]}
        for rule in spec["ingress"]:
            assert {p["port"] for p in rule.get("ports", [])} <= port_names, (target, rule)
    coordinator = policies["ringleader-coordinator"]["ingress"]
    worker_labels = pods["worker"][1]
    from_workers = [r for r in coordinator for f in r["from"] if "podSelector" in f and "namespaceSelector" not in f
                    and f["podSelector"]["matchLabels"].items() <= worker_labels.items()]
    assert [p["port"] for r in from_workers for p in r["ports"]] == ["grpc"]
    clients = [r for r in coordinator for f in r["from"] if f.get("podSelector", {}).get("matchLabels") ==
               {"ringleader.io/client": "true"}]
    assert {p["port"] for r in clients for p in r["ports"]} == {"grpc", "http"}


# ---- the Prometheus Operator overlay -------------------------------------------------------------


@needs_kubectl
def test_monitors_scrape_named_ports_and_the_dashboard_is_a_sidecar_configmap():
    monitoring = render("prometheus-operator")
    deployment = render("single-node")
    svc = one(deployment, "Service", "ringleader-coordinator")
    sm = one(monitoring, "ServiceMonitor")
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert {e["port"] for e in sm["spec"]["endpoints"]} <= {p["name"] for p in svc["spec"]["ports"]}
    assert {e["scheme"] for e in sm["spec"]["endpoints"]} == {"https"}
    pm = one(monitoring, "PodMonitor")
    for ds in worker_sets(deployment):
        assert pm["spec"]["selector"]["matchLabels"].items() <= ds["spec"]["template"]["metadata"]["labels"].items()
    assert {e["port"] for e in pm["spec"]["podMetricsEndpoints"]} == {"metrics"}
    dashboard = one(monitoring, "ConfigMap", "ringleader-grafana-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(dashboard["data"]["ringleader-dashboard.json"]) == json.loads(
        (DEPLOY / "grafana" / "ringleader-dashboard.json").read_text())
    assert {d["metadata"]["namespace"] for d in monitoring} == {"ringleader"}


# ---- deploy/README.md's commands ----------------------------------------------------------------


def readme_blocks() -> list[str]:
    return re.findall(r"^```sh\n(.*?)^```", (DEPLOY / "README.md").read_text(), re.M | re.S)


def readme_commands(program: str) -> list[list[str]]:
    lines = "\n".join(readme_blocks()).replace("\\\n", " ").splitlines()
    return [shlex.split(line.split(" &")[0]) for line in lines if line.startswith(program + " ")]


@needs_kubectl
def test_readme_applies_overlays_that_render():
    applied = [c[3] for c in readme_commands("kubectl") if c[1:3] == ["apply", "-k"]]
    assert {Path(p).name for p in applied} >= {"single-node", "prometheus-operator"}
    for path in applied:
        assert render_dir(str(ROOT / path))


@needs_kubectl
def test_readme_creates_the_secrets_the_pods_mount(tmp_path, capsys):
    """Runs the README's `ringleader certs DIR --k8s`, checks that its `kubectl apply -f` names the
    manifest written, and compares the Secrets with what the rendered pods mount."""
    from cryptography import x509

    from ringleader_app.cli import main

    (certs,) = [c for c in readme_commands("ringleader") if c[1] == "certs"]
    (apply,) = [c for c in readme_commands("kubectl") if c[1:3] == ["apply", "-f"]]
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        with pytest.raises(SystemExit) as exit_:
            main(certs[1:])
    finally:
        os.chdir(cwd)
    assert exit_.value.code == 0, capsys.readouterr().err
    manifest = tmp_path / apply[3]
    assert manifest.stat().st_mode & 0o077 == 0  # private keys and tokens: owner only
    docs = list(yaml.safe_load_all(manifest.read_text()))
    created = {d["metadata"]["name"]: set(d["data"]) for d in docs}
    assert {d["metadata"]["namespace"] for d in docs} == {"ringleader"}
    for overlay in DEPLOYMENTS:
        docs_ = render(overlay)
        for _, name, pod, _ in pod_templates(docs_):
            for c in pod["containers"]:
                for m in c["volumeMounts"]:
                    vol = next((v for v in pod["volumes"] if v["name"] == m["name"]), {})  # or a claim template
                    if "secret" in vol:
                        s = vol["secret"]
                        keys = {i["key"] for i in s.get("items", [])} or created.get(s["secretName"], {"?"})
                        assert s["secretName"] in created and keys <= created[s["secretName"]], (overlay, name, s)
    assert created["ringleader-tokens"] == {"token", "worker-token"}
    assert created["ringleader-coordinator-tls"] == created["ringleader-worker-tls"] == {"tls.crt", "tls.key", "ca.crt"}
    # The workers reach the coordinator by its Service's name: the certificate must carry it.
    svc = one(render("single-node"), "Service", "ringleader-coordinator")["metadata"]["name"]
    cert = x509.load_pem_x509_certificate((tmp_path / "pki" / "server.pem").read_bytes())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert {svc, f"{svc}.ringleader.svc"} <= set(names)


@needs_kubectl
def test_readme_port_forward_and_cli_commands_fit_the_manifests():
    docs = render("single-node")
    svc = one(docs, "Service", "ringleader-coordinator")
    (pf,) = [c for c in readme_commands("kubectl") if "port-forward" in c]
    assert f"svc/{svc['metadata']['name']}" in pf
    assert {int(x.split(":")[1]) for x in pf if re.fullmatch(r"\d+:\d+", x)} == {p["port"] for p in svc["spec"]["ports"]}
    rollouts = [c[-1] for c in readme_commands("kubectl") if "rollout" in c]
    assert set(rollouts) == {f"{d['kind'].lower()}/{d['metadata']['name']}" for d in docs
                             if d["kind"] in ("StatefulSet", "DaemonSet")}
    submits = readme_commands("ringleader")
    assert any(c[1] == "submit" for c in submits)
    for argv in submits:
        parse_cli(argv)


@needs_kubectl
@pytest.mark.parametrize("overlay", DEPLOYMENTS)
def test_workers_register_with_their_node_name(overlay):
    for ds in worker_sets(render(overlay)):
        env = {e["name"]: e for e in ds["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert env["RINGLEADER_HOST_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
        assert parse_cli(["ringleader", "worker", "--host-name", "n1"]).host_name == "n1"


@needs_kubectl
def test_node_taints_component_grants_nodes_get_patch_and_turns_the_flag_on(tmp_path):
    plain = one(render("single-node"), "StatefulSet", "ringleader-coordinator")["spec"]["template"]["spec"]
    assert plain["automountServiceAccountToken"] is False and "serviceAccountName" not in plain  # off by default
    assert not any(d["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding") for d in render("single-node"))
    docs = with_component(tmp_path, "node-taints")
    sa = one(docs, "ServiceAccount", "ringleader-coordinator")
    role = one(docs, "ClusterRole", "ringleader-node-taints")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]},
                             {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]}]
    binding = one(docs, "ClusterRoleBinding", "ringleader-node-taints")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"],
                                    "namespace": sa["metadata"]["namespace"]}]
    sts = one(docs, "StatefulSet", "ringleader-coordinator")
    assert sts["metadata"]["namespace"] == sa["metadata"]["namespace"] == "ringleader"
    pod = sts["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "ringleader-coordinator" and pod["automountServiceAccountToken"] is True
    (c,) = pod["containers"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["RINGLEADER_K8S_TAINT_NODES"] == "1"
    a = parse_cli(exec_form(dockerfile("Dockerfile.coordinator"), "ENTRYPOINT") + c["args"])
    assert a.command == "coordinator" and not a.k8s_taint_nodes  # on through its variable:
    from ringleader_app import config
    from ringleader_app.cli import build_parser

    (flag,) = [x for x in config.subparsers(build_parser())["coordinator"]._actions if x.dest == "k8s_taint_nodes"]
    assert config.env_name(flag) in env
    for ds in worker_sets(docs):  # a replaced worker pod comes back on its tainted node, to be rechecked
        assert {"key": "ringleader.io/unhealthy", "operator": "Exists"} in ds["spec"]["template"]["spec"]["tolerations"]


@needs_kubectl
def test_k8s_identity_component_gives_worker_pods_a_node_token_and_the_coordinator_token_review(tmp_path):
    from coordinator.edge.k8s_identity import AUDIENCE, DEFAULT_ACCOUNT
    from ringleader_app import config
    from ringleader_app.cli import build_parser

    docs = with_component(tmp_path, "k8s-identity")
    sa = one(docs, "ServiceAccount", "ringleader-worker")
    assert DEFAULT_ACCOUNT == f"system:serviceaccount:{sa['metadata']['namespace']}:{sa['metadata']['name']}"
    binding = one(docs, "ClusterRoleBinding", "ringleader-token-review")
    assert binding["roleRef"]["name"] == "system:auth-delegator"  # create tokenreviews, nothing more
    assert {"kind": "ServiceAccount", "name": "default", "namespace": "ringleader"} in binding["subjects"]
    flags = {name: x for name, cmd in (("coordinator", "k8s_token_review"), ("worker", "k8s_token_file"))
             for x in config.subparsers(build_parser())[name]._actions if x.dest == cmd}
    pod = one(docs, "StatefulSet", "ringleader-coordinator")["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is True
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env[config.env_name(flags["coordinator"])] == "1"
    for ds in worker_sets(docs):
        spec = ds["spec"]["template"]["spec"]
        assert spec["serviceAccountName"] == sa["metadata"]["name"]
        assert spec["automountServiceAccountToken"] is False  # the API token is not mounted; this one is
        (c,) = spec["containers"]
        path = {e["name"]: e.get("value") for e in c["env"]}[config.env_name(flags["worker"])]
        mount = next(m for m in c["volumeMounts"] if path.startswith(m["mountPath"] + "/"))
        volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
        (source,) = volume["projected"]["sources"]
        token = source["serviceAccountToken"]
        assert token["audience"] == AUDIENCE and path == f"{mount['mountPath']}/{token['path']}"
        env = {e["name"]: e.get("valueFrom") for e in c["env"]}  # the ids' host is the node the token names
        assert env["RINGLEADER_HOST_NAME"]["fieldRef"]["fieldPath"] == "spec.nodeName"


@needs_kubectl
def test_device_taints_component_grants_the_rules_verbs_and_keeps_node_taints_for_host_wide_findings(tmp_path):
    docs = with_component(tmp_path, "device-taints")
    role = one(docs, "ClusterRole", "ringleader-device-taints")
    assert role["rules"] == [{"apiGroups": ["resource.k8s.io"], "resources": ["devicetaintrules"],
                              "verbs": ["list", "create", "patch", "delete"]}]
    binding = one(docs, "ClusterRoleBinding", "ringleader-device-taints")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "ringleader-coordinator", "namespace": "ringleader"}]
    one(docs, "ClusterRole", "ringleader-node-taints")  # host-wide findings still taint the node
    (c,) = one(docs, "StatefulSet", "ringleader-coordinator")["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["RINGLEADER_K8S_TAINT_DEVICES"] == "1" and env["RINGLEADER_K8S_TAINT_NODES"] == "1"
