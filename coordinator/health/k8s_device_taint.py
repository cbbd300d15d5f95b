"""The Kubernetes objects of per-GPU quarantine (coordinator/health/k8s_taint.py's
`--k8s-taint-devices`): the DeviceTaintRule that keeps new claims off one failed GPU, named and
labelled so that a restarted coordinator finds its own. Pure."""

from __future__ import annotations

import hashlib
import re

from ringleader.v1 import jobs_pb2 as pb

TAINT = "ringleader.io/unhealthy"
# DeviceTaintRule: v1alpha3 in Kubernetes 1.33-1.35 (feature gate DRADeviceTaints), v1beta2 from
# 1.36, v1 from 1.37 (the API versions kubernetes-validate's schemas carry).
DEVICE_TAINT_API = "resource.k8s.io/v1beta2"
DRA_DRIVER = "gpu.nvidia.com"  # NVIDIA's DRA driver for GPUs (k8s-dra-driver-gpu)
REASON = "ringleader.io/reason"
ANNOTATION_MAX = 4096


def device_name(index: int) -> str:
    """The NVIDIA DRA driver's name of a whole GPU in its ResourceSlice (`gpu-<minor>`); a worker's
    device index is taken as that number (true when CUDA enumerates in PCI bus order, as the
    worker DaemonSet sets CUDA_DEVICE_ORDER=PCI_BUS_ID)."""
    return f"gpu-{index}"


def rule_name(node: str, index: int) -> str:
    """A DNS-1123 subdomain naming the rule of one device of one node."""
    name = re.sub(r"[^a-z0-9.-]+", "-", f"ringleader-{node.lower()}-{device_name(index)}").strip("-.")
    if len(name) > 253:
        name = name[:220] + "-" + hashlib.sha256(name.encode()).hexdigest()[:16]
    return name


def label_value(text: str) -> str:
    """A valid label value (at most 63 of [A-Za-z0-9_.-], alphanumeric at both ends)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text)[:63].strip("-_.") or "unknown"


def device_taint_rule(node: str, index: int, worker_id: str, check: str, why: str,
                      api: str = DEVICE_TAINT_API) -> dict:
    """The DeviceTaintRule that keeps new claims off one GPU of `node`."""
    return {"apiVersion": api, "kind": "DeviceTaintRule",
            "metadata": {"name": rule_name(node, index),
                         "labels": {"app.kubernetes.io/managed-by": "ringleader", "ringleader.io/node": label_value(node)},
                         "annotations": {"ringleader.io/worker": worker_id, REASON: why[:ANNOTATION_MAX]}},
            "spec": {"deviceSelector": {"driver": DRA_DRIVER, "pool": node, "device": device_name(index)},
                     "taint": {"key": TAINT, "value": label_value(check), "effect": "NoSchedule"}}}


def is_out(h: pb.WorkerHealth) -> bool:
    """Whether a worker's verdict keeps it out: failed (a failed worker the circuit breaker left in
    service is not: an operator decides), or a repeat offender awaiting approval."""
    return h.verdict == pb.UNHEALTHY and not h.breaker_held or h.validate_needs_approval


def verdict_text(h: pb.WorkerHealth) -> str:
    text = f"{h.check} {pb.Verdict.Name(h.verdict)}"
    if h.figure:
        text += f": {h.figure}"
    if h.expected:
        text += f"; expected {h.expected}"
    return text
