"""A worker pod's Kubernetes credential as its identity (`ringleader coordinator --k8s-token-review`).

Each worker pod gets a projected ServiceAccount token with audience "ringleader" at start
(deploy/k8s/components/k8s-identity); its daemons send it in Register.k8s_token. When a daemon
presents no secret or another one for a bound id (a replaced pod: the secret was on its emptyDir),
the coordinator asks the API server's TokenReview whether the token is valid, for this audience
and the workers' ServiceAccount, and which node the pod runs on (a bound token's
`authentication.kubernetes.io/node-name`). A token naming node N vouches for a worker that
registers with host N (the DaemonSet passes spec.nodeName) and an id of that node (`N-...`, the
default `N-cudaK`): a pod can speak only for its own node's GPUs, and a token stolen from one node
cannot take over another's ids. The token itself is never stored or logged.

In-cluster configuration, as coordinator/health/k8s_taint.py: the coordinator's own ServiceAccount
token and CA, and RBAC to create tokenreviews (components/k8s-identity). Stdlib only; the call
runs on a worker thread, never on the asyncio loop.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import urllib.error
import urllib.request

from coordinator.health.k8s_taint import SA_DIR, in_cluster_url
from ringleader.v1 import workers_pb2 as wpb

log = logging.getLogger("ringleader.coordinator")

AUDIENCE = "ringleader"
NODE_NAME = "authentication.kubernetes.io/node-name"
DEFAULT_ACCOUNT = "system:serviceaccount:ringleader:ringleader-worker"


class TokenReviewer:
    """`vouch(reg)`: who the Kubernetes token in `reg` proves the daemon is, or "" (logged why)."""

    def __init__(self, base_url: str = "", token_path: str = f"{SA_DIR}/token",
                 ca_path: str | None = f"{SA_DIR}/ca.crt", account: str = DEFAULT_ACCOUNT,
                 timeout_s: float = 5.0) -> None:
        self.base_url = (base_url or in_cluster_url()).rstrip("/")
        self.token_path, self.ca_path, self.timeout_s = token_path, ca_path, timeout_s
        self.account = account

    async def vouch(self, reg: wpb.Register) -> str:
        try:
            status = await asyncio.to_thread(self._review, reg.k8s_token)
        except Exception as e:  # noqa: BLE001 - an API failure refuses the re-claim, never the coordinator
            log.warning("worker %s: TokenReview failed (%s: %s): its token vouches for nothing",
                        reg.worker_id, type(e).__name__, e)
            return ""
        why = self.refuse(reg, status)
        if why:
            log.warning("worker %s: its Kubernetes token does not vouch for it: %s", reg.worker_id, why)
            return ""
        return f"a Kubernetes token of node {reg.host}"

    def refuse(self, reg: wpb.Register, status: dict) -> str:
        """Why this TokenReview status does not vouch for `reg` ("" if it does)."""
        user = status.get("user") or {}
        nodes = (user.get("extra") or {}).get(NODE_NAME) or []
        if not status.get("authenticated"):
            return f"not authenticated ({status.get('error') or 'no reason given'})"
        if AUDIENCE not in (status.get("audiences") or [AUDIENCE]):
            return f"its audiences {status.get('audiences')} do not include {AUDIENCE!r}"
        if user.get("username") != self.account:
            return f"it is {user.get('username')!r}'s token, not the workers' ({self.account})"
        if len(nodes) != 1:
            return "it names no node (a token bound to a pod: Kubernetes 1.30 or later)"
        if reg.host != nodes[0] or not reg.worker_id.startswith(nodes[0] + "-"):
            return (f"it is node {nodes[0]}'s: it vouches for ids {nodes[0]}-... registering with host "
                    f"{nodes[0]}, not {reg.worker_id} on host {reg.host}")
        return ""

    def _review(self, token: str) -> dict:
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                "spec": {"token": token, "audiences": [AUDIENCE]}}
        headers = {"Accept": "application/json", "Content-Type": "application/json"}
        if self.token_path:
            with open(self.token_path, encoding="utf-8") as f:  # re-read: the token is rotated
                headers["Authorization"] = f"Bearer {f.read().strip()}"
        req = urllib.request.Request(self.base_url + "/apis/authentication.k8s.io/v1/tokenreviews",
                                     data=json.dumps(body).encode(), headers=headers, method="POST")
        context = None
        if self.base_url.startswith("https:"):
            context = ssl.create_default_context(cafile=self.ca_path if self.ca_path else None)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s, context=context) as resp:
                return json.loads(resp.read() or b"{}").get("status") or {}
        except urllib.error.HTTPError as e:
            with e:  # the API's Status names the cause (e.g. 403: the RBAC is missing)
                raise RuntimeError(f"HTTP {e.code}: {e.read(300).decode(errors='replace')}") from None
