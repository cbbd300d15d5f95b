"""A webhook receiver for the remediation hooks' tests (a real HTTP server on 127.0.0.1, in a thread)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Receiver:
    """A webhook receiver: answers 500 to the first `fail_first` POSTs, records the rest."""

    def __init__(self, fail_first: int = 0) -> None:
        self.fail_first, self.posts, self.events = fail_first, 0, []
        self.content_types: list[str] = []
        self.lock = threading.Lock()
        me = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with me.lock:
                    me.posts += 1
                    failing = me.posts <= me.fail_first
                    if not failing:
                        me.events.append(body)
                        me.content_types.append(self.headers["Content-Type"])
                self.send_response(500 if failing else 204)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait_for(self, n: int, timeout_s: float = 20.0) -> list[dict]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self.lock:
                if len(self.events) >= n:
                    return list(self.events)
            time.sleep(0.02)
        raise AssertionError(f"{len(self.events)} events arrived, expected {n}: {self.events}")
