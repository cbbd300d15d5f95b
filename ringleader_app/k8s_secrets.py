"""`ringleader certs DIR --k8s`: the files of `ringleader certs`, with the coordinator's certificate
also valid for its Kubernetes Service names, plus DIR/k8s-secrets.yaml: the three Secrets that
deploy/k8s's pods mount, for `kubectl apply -f` (about a dozen openssl and kubectl commands before).

    ringleader-tokens            token (the users'), worker-token
    ringleader-coordinator-tls   tls.crt, tls.key (server.pem/.key), ca.crt
    ringleader-worker-tls        tls.crt, tls.key (worker.pem/.key), ca.crt

worker.pem is a client certificate that names no worker: every pod of the DaemonSet mounts the
same Secret, so each worker proves its name by the workers' token and the per-worker secret it
is issued at its first registration (docs/security.md), not by the certificate. The file holds
private keys and tokens: it is written readable by its owner only.
"""

from __future__ import annotations

import argparse
import base64
import os
from pathlib import Path

from ringleader.errors import EXIT_OK

NAMESPACE = "ringleader"
SERVICE = "ringleader-coordinator"
SERVICE_NAMES = (SERVICE, f"{SERVICE}.{NAMESPACE}", f"{SERVICE}.{NAMESPACE}.svc",
                 f"{SERVICE}.{NAMESPACE}.svc.cluster.local")
MANIFEST = "k8s-secrets.yaml"
SECRETS = {  # Secret -> key -> file written by `ringleader certs`
    "ringleader-tokens": {"token": "users.token", "worker-token": "workers.token"},
    "ringleader-coordinator-tls": {"tls.crt": "server.pem", "tls.key": "server.key", "ca.crt": "ca.pem"},
    "ringleader-worker-tls": {"tls.crt": "worker.pem", "tls.key": "worker.key", "ca.crt": "ca.pem"},
}


def add_flag(certs_parser: argparse.ArgumentParser) -> None:
    certs_parser.add_argument("--k8s", action="store_true",
                              help=f"also write DIR/{MANIFEST}: the Secrets deploy/k8s mounts (kubectl apply -f), "
                                   f"the coordinator's certificate valid for its Service ({SERVICE})")


def run(a: argparse.Namespace) -> int:
    from ringleader_app import certs  # cryptography loads only for this command

    if not a.k8s:
        return certs.run(a)
    folder = Path(a.dir)
    written = certs.write_cluster_files(folder, [*a.host, *SERVICE_NAMES], days=a.days, force=a.force,
                                        workers=a.worker)
    # The DaemonSet's shared certificate: a client certificate naming no one (see above).
    pem, key = certs._leaf("ringleader-worker", certs._load_ca(folder), a.days)
    for name, data, private in (("worker.pem", pem, False), ("worker.key", key, True)):
        certs._write(folder / name, data, private=private)
        written.append(folder / name)
    written.append(write_manifest(folder))
    for path in written:
        print(path)
    return EXIT_OK


def manifest(folder: Path, namespace: str = NAMESPACE) -> str:
    import yaml

    docs = [{"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
             "metadata": {"name": name, "namespace": namespace,
                          "labels": {"app.kubernetes.io/name": "ringleader"}},
             "data": {key: base64.b64encode((folder / file).read_bytes()).decode() for key, file in keys.items()}}
            for name, keys in SECRETS.items()]
    return yaml.safe_dump_all(docs, sort_keys=False)


def write_manifest(folder: Path) -> Path:
    path = folder / MANIFEST
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(manifest(folder))
    return path
