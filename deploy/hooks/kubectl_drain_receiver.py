#!/usr/bin/env python3
"""A sample remediation hook receiver: a starting point, not a product (docs/hooks.md).

Listens for ringleader's CloudEvents (`ringleader coordinator --webhook http://THIS:8088/`) and
acts on each worker's `data.action` through kubectl, on the node the worker registered as its host
(the worker DaemonSet passes spec.nodeName):

- "drain": `kubectl cordon NODE`, then `kubectl drain NODE --ignore-daemonsets
  --delete-emptydir-data --timeout=...` (the ringleader worker pods, a DaemonSet, stay);
- "hold": nothing (the circuit breaker left the worker in service: a person decides);
- "return": `kubectl uncordon NODE` once no worker of that node is to be drained any more.

Events are deduplicated by id (ringleader sends a verdict change again, with the same id, until a
2xx answer). Answers 500 when kubectl fails, so ringleader tries again with backoff. Stdlib only;
`--dry-run` prints the commands instead of running them. Draining a whole node for one GPU is
coarse: with per-GPU quarantine (--k8s-taint-devices) the scheduler already avoids the device;
adapt `act` to your policy (a ticket, a GPU reset, a reboot).

    python3 kubectl_drain_receiver.py --port 8088 [--dry-run] [--drain-timeout 300s]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SEEN_MAX = 10000


class Policy:
    def __init__(self, dry_run: bool, drain_timeout: str) -> None:
        self.dry_run, self.drain_timeout = dry_run, drain_timeout
        self.lock = threading.Lock()  # one event at a time: kubectl calls stay in order
        self.seen: dict[str, None] = {}
        self.out: dict[str, set[str]] = {}  # node -> workers to keep drained

    def handle(self, event: dict) -> None:
        if event.get("specversion") != "1.0" or not str(event.get("type", "")).startswith("io.ringleader."):
            raise ValueError("not a ringleader CloudEvent")
        with self.lock:
            if event["id"] in self.seen:
                return
            self.act(event["data"])
            self.seen[event["id"]] = None
            if len(self.seen) > SEEN_MAX:
                del self.seen[next(iter(self.seen))]

    def act(self, data: dict) -> None:
        node, worker, what = data.get("host", ""), data.get("worker_id", ""), data.get("action", "")
        if not node:
            print(f"worker {worker}: no host in the event; nothing to do", file=sys.stderr)
            return
        why = f"{data.get('check')} {data.get('verdict')}: {data.get('figure')} (expected {data.get('expected')})"
        if what == "drain":
            self.out.setdefault(node, set()).add(worker)
            print(f"draining node {node}: worker {worker} {why}", file=sys.stderr)
            self.kubectl("cordon", node)
            self.kubectl("drain", node, "--ignore-daemonsets", "--delete-emptydir-data",
                         f"--timeout={self.drain_timeout}")
        elif what == "hold":
            print(f"worker {worker} on {node} failed but is held in service by the circuit breaker: "
                  f"not draining ({why})", file=sys.stderr)
        elif what == "return":
            left = self.out.get(node, set())
            left.discard(worker)
            if not left and node in self.out:
                del self.out[node]
                print(f"uncordoning node {node}: worker {worker} is back", file=sys.stderr)
                self.kubectl("uncordon", node)

    def kubectl(self, *args: str) -> None:
        cmd = ["kubectl", *args]
        if self.dry_run:
            print("would run: " + " ".join(cmd), file=sys.stderr)
            return
        subprocess.run(cmd, check=True, timeout=900)


def serve(port: int, policy: Policy) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            try:
                policy.handle(json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0)))))
                code = 204
            except (ValueError, KeyError) as e:
                print(f"bad event: {e}", file=sys.stderr)
                code = 400  # ringleader tries again, then gives up and logs it
            except (subprocess.SubprocessError, OSError) as e:
                print(f"kubectl failed: {e}", file=sys.stderr)
                code = 500  # tried again with backoff
            self.send_response(code)
            self.send_header("Content-Length", "0")
            self.end_headers()

    return ThreadingHTTPServer(("0.0.0.0", port), Handler)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--port", type=int, default=8088)
    p.add_argument("--dry-run", action="store_true", help="print the kubectl commands instead of running them")
    p.add_argument("--drain-timeout", default="300s")
    a = p.parse_args()
    serve(a.port, Policy(a.dry_run, a.drain_timeout)).serve_forever()


if __name__ == "__main__":
    main()
