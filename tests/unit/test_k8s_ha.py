"""deploy/k8s/overlays/ha and ha-postgres: two coordinator replicas on PostgreSQL. They render with
kubectl's kustomize, validate against the Kubernetes schemas, meet Pod Security "restricted", and
agree with the code: the coordinator's flags parse, the DSN comes from a Secret through the
variable the config reads, readiness is the /readyz that a standby fails, no SQLite volume is
left, and only the coordinators reach the in-cluster database."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from deployfacts import dockerfile, exec_form, parse_cli
from test_k8s import K8S_VERSIONS, needs_kubectl, one, pod_templates, render, required_level
from ringleader_app.config import env_name
from ringleader_app.cli import build_parser

HA = ("ha", "ha-postgres", "ha-postgres-trial")
OPERATOR_KINDS = {"Cluster"}  # CloudNativePG's custom resource: no Kubernetes schema
# Where each overlay's coordinators read their DSN: the operator's generated Secret for the
# CloudNativePG cluster, the Secret the operator creates otherwise.
DSN = {"ha": ("ringleader-postgres", "dsn"), "ha-postgres": ("ringleader-postgres-app", "uri"),
       "ha-postgres-trial": ("ringleader-postgres", "dsn")}


def coordinator(docs) -> tuple[dict, dict, dict]:
    sts = one(docs, "StatefulSet", "ringleader-coordinator")
    pod = sts["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    return sts, pod, c


@needs_kubectl
@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("overlay", HA)
def test_ha_overlays_render_and_validate_strictly(overlay, version, tmp_path):
    docs = render(overlay)
    rendered = tmp_path / "rendered.yaml"
    rendered.write_text(yaml.safe_dump_all(docs))
    validate = shutil.which("kubernetes-validate", path=str(Path(sys.executable).parent)) or "kubernetes-validate"
    p = subprocess.run([validate, "--strict", "-k", version, str(rendered)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    passed = len(re.findall(r"^INFO .* passed for resource", p.stdout, re.M))
    assert passed == len([d for d in docs if d["kind"] not in OPERATOR_KINDS]), p.stdout


@needs_kubectl
@pytest.mark.parametrize("overlay", HA)
def test_two_coordinators_on_a_dsn_from_a_secret_ready_only_when_leading(overlay):
    docs = render(overlay)
    sts, pod, c = coordinator(docs)
    assert sts["spec"]["replicas"] == 2 and sts["spec"]["podManagementPolicy"] == "Parallel"
    a = parse_cli(exec_form(dockerfile("Dockerfile.coordinator"), "ENTRYPOINT") + c["args"])
    assert a.db == "" and a.lease_ttl > 0  # no --db flag: it would beat RINGLEADER_DB
    env = {e["name"]: e for e in c["env"]}
    db_var = next(env_name(x) for x in build_parser()._subparsers._group_actions[0].choices["coordinator"]._actions
                  if x.dest == "db")
    name, key = DSN[overlay]
    assert env[db_var]["valueFrom"]["secretKeyRef"] == {"name": name, "key": key}
    assert env["RINGLEADER_ADVERTISE_ADDRESS"]["value"] == "$(POD_IP):50051"
    assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    # The SQLite volume is gone with the single replica; a standby is live but not ready.
    assert "volumeClaimTemplates" not in sts["spec"]
    assert all(m["name"] != "data" for m in c["volumeMounts"])
    assert {m["name"] for m in c["volumeMounts"]} <= {v["name"] for v in pod["volumes"]}
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz" and c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert required_level(pod) == "restricted"
    pdb = one(docs, "PodDisruptionBudget", "ringleader-coordinator")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"].items() <= sts["spec"]["template"]["metadata"]["labels"].items()


@needs_kubectl
def test_the_trial_postgres_is_restricted_and_reached_only_by_the_coordinators():
    docs = render("ha-postgres-trial")
    pg = one(docs, "StatefulSet", "ringleader-postgres")
    pod = pg["spec"]["template"]["spec"]
    assert required_level(pod) == "restricted"
    (c,) = pod["containers"]
    env = {e["name"]: e for e in c["env"]}
    assert env["POSTGRES_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": "ringleader-postgres", "key": "password"}
    svc = one(docs, "Service", "ringleader-postgres")
    assert [p["port"] for p in svc["spec"]["ports"]] == [5432]
    policy = one(docs, "NetworkPolicy", "ringleader-postgres")["spec"]
    (rule,) = policy["ingress"]
    (source,) = rule["from"]
    coordinator_labels = {labels["app.kubernetes.io/component"]: labels for _, _, _, labels in pod_templates(docs)}["coordinator"]
    assert source["podSelector"]["matchLabels"].items() <= coordinator_labels.items()
    # The DSN the README's trial command puts in the Secret names this Service and its port.
    assert pg["metadata"]["labels"]["ringleader.io/trial"] == "true"
    assert c["livenessProbe"]["exec"]["command"][0] == "pg_isready" and c["readinessProbe"]["exec"]
    overlay = (Path(__file__).resolve().parents[2] / "deploy/k8s/overlays/ha-postgres-trial/kustomization.yaml").read_text()
    assert "@ringleader-postgres:5432/ringleader" in overlay
    assert not any(d["kind"] == "StatefulSet" and d["metadata"]["name"] == "ringleader-postgres" for d in render("ha"))


@needs_kubectl
def test_the_ha_database_is_a_cloudnativepg_cluster_with_a_synchronous_replica():
    docs = render("ha-postgres")
    cluster = one(docs, "Cluster", "ringleader-postgres")
    assert cluster["apiVersion"] == "postgresql.cnpg.io/v1" and cluster["metadata"]["namespace"] == "ringleader"
    spec = cluster["spec"]
    assert spec["instances"] >= 2  # a primary and a replica the operator promotes
    assert spec["postgresql"]["synchronous"] == {"method": "any", "number": 1, "dataDurability": "required"}
    assert spec["bootstrap"]["initdb"] == {"database": "ringleader", "owner": "ringleader"}
    assert not any(d["kind"] == "StatefulSet" and d["metadata"]["name"] == "ringleader-postgres" for d in docs)
