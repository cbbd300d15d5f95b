"""Scratch stand-in coordinator (kept as the record of build-cpu-abc.txt): the dashboard's static
files from STATIC, a full fleet answer of N records shaped like bench/simfleet.py's (3 failed, 4
suspect, every 25th GPU worker busy), the kinds, an empty jobs list; no server cost to speak of,
so a fresh browser's loads against it show the page's own work.
    STATIC=dashboard/static N=5000 PORT=18765 PYTHONPATH=$PWD python standin_server.py"""
import json, os, sys, time, threading, random
from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler
from pathlib import Path
from urllib.parse import urlsplit, parse_qs
sys.path.insert(0, os.getcwd())
from ringleader import kinds
STATIC = Path(os.environ.get("STATIC", "dashboard/static"))
N = int(os.environ.get("N", "5000"))
def fleet(n):
    out = []
    hosts = (n + 7) // 8
    for i in range(n):
        h = i // 8
        gpu = h < hosts / 2
        r = {"id": f"sim-h{h:04}-d{i%8}", "host": f"sim-h{h:04}", "dev": "NVIDIA H100 80GB HBM3" if gpu else "simulated CPU",
             "type": "cuda" if gpu else "cpu", "idx": i % 8, "st": "IDLE"}
        if gpu and i % 25 == 0: r["st"] = "BUSY"; r["job"] = f"{i:012x}"
        out.append(r)
    for f in (0.03, 0.48, 0.94):
        out[int(n*f)].update(v="UNHEALTHY", check="gpu_check", fig="412.0 TFLOP/s", exp="median of 7 H100 peers 781.2 TFLOP/s", at=time.time(), vjob="0123456789ab", cord=False, re=0, st="QUARANTINED")
    for f in (0.064, 0.066, 0.355, 0.96):
        out[int(n*f)].update(v="SUSPECT", check="link_matrix", fig="3.1 GB/s", exp="median across hosts 11.8 GB/s", at=time.time(), vjob="0123456789ab", cord=False, re=0)
    return out
FLEET = json.dumps({"version": 5, "jobs": {"running": 100, "queued": 0}, "links_job": "", "full": True, "workers": fleet(N)}, separators=(",", ":")).encode()
KINDS = json.dumps({"kinds": [{"name": k.name, "listed_as": list(k.listed_as), "result": k.result} for k in kinds.TABLE]}).encode()
DELAY = float(os.environ.get("DELAY", "0"))
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def send(self, code, body, ctype):
        self.send_response(code); self.send_header("Content-Type", ctype); self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-cache"); self.end_headers(); self.wfile.write(body)
    def do_GET(self):
        u = urlsplit(self.path); q = parse_qs(u.query)
        if u.path in ("/", "/index.html"):
            return self.send(200, (STATIC / "index.html").read_bytes(), "text/html")
        if u.path.startswith("/static/"):
            p = STATIC / u.path[len("/static/"):]
            ct = "text/css" if p.suffix == ".css" else "text/javascript"
            return self.send(200, p.read_bytes(), ct) if p.is_file() else self.send(404, b"", "text/plain")
        if u.path == "/api/v1/fleet":
            if q.get("since", ["0"])[0] != "0":
                time.sleep(float(q.get("wait", ["0"])[0]))
                return self.send(200, json.dumps({"version": 5, "jobs": {"running": 100, "queued": 0}, "links_job": "", "full": False, "workers": [], "removed": []}).encode(), "application/json")
            time.sleep(DELAY)
            return self.send(200, FLEET, "application/json")
        if u.path == "/api/v1/kinds":
            return self.send(200, KINDS, "application/json")
        if u.path == "/api/v1/jobs":
            return self.send(200, b'{"jobs": [], "next_before": null}', "application/json")
        if u.path == "/api/v1/events":
            return self.send(204, b"", "text/plain")
        if u.path == "/healthz":
            return self.send(200, b"ok", "text/plain")
        self.send(404, b"{}", "application/json")
srv = ThreadingHTTPServer(("127.0.0.1", int(os.environ.get("PORT", "0"))), H)
print(f"http://127.0.0.1:{srv.server_port}", flush=True)
srv.serve_forever()
