#!/usr/bin/env python3
"""Write deploy/prometheus/rules/ringleader.rules.yml as a PrometheusRule for the Prometheus
Operator (deploy/k8s/overlays/prometheus-operator/prometheusrule.yaml): one source of rules, two
ways to load them. --check exits 1 when the checked-in file is stale (tests run it)."""

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
RULES = ROOT / "deploy/prometheus/rules/ringleader.rules.yml"
OUT = ROOT / "deploy/k8s/overlays/prometheus-operator/prometheusrule.yaml"
HEADER = """\
# Generated from deploy/prometheus/rules/ringleader.rules.yml by scripts/gen-prometheusrule.py:
# edit the rules file, then run the script. The label matches kube-prometheus-stack's default
# ruleSelector for a release called kube-prometheus-stack (as monitors.yaml).
"""


class _Literal(str):
    pass


def _literal(dumper: yaml.Dumper, value: _Literal) -> yaml.Node:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")


def _blocks(node):
    """Multi-line strings (PromQL) as literal blocks, as they are written in the rules file."""
    if isinstance(node, dict):
        return {k: _blocks(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_blocks(v) for v in node]
    return _Literal(node) if isinstance(node, str) and "\n" in node else node


def render() -> str:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    rule = {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
            "metadata": {"name": "ringleader", "labels": {"release": "kube-prometheus-stack"}},
            "spec": {"groups": _blocks(groups)}}
    yaml.add_representer(_Literal, _literal)
    return HEADER + yaml.dump(rule, sort_keys=False, width=120)


def main() -> int:
    text = render()
    if "--check" in sys.argv[1:]:
        if not OUT.exists() or OUT.read_text() != text:
            print(f"{OUT.relative_to(ROOT)} is stale: run scripts/gen-prometheusrule.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
