"""`ringleader certs DIR`: a CA, certificates and both tokens for a test cluster.

    ca.pem                      the CA (its key, ca.key, stays here: keep it offline)
    server.pem / server.key     the coordinator (gRPC and HTTPS); names: localhost, this host's
                                name, 127.0.0.1, ::1 and every --host given
    client.pem / client.key     users' tools (mTLS client certificate of user "client")
    worker-ID.pem / .key        one per --worker ID: that worker's mTLS client certificate
    users.token, workers.token  random bearer tokens (32 bytes, URL-safe base64)

Every client certificate names one identity and one role in a URI SAN (SPIFFE's form):
spiffe://ringleader/worker/ID or spiffe://ringleader/user/NAME. The coordinator lets a worker's
certificate register only its own id, and keeps users' and workers' certificates apart
(coordinator/edge/identity.py). Run again with only --worker to issue more workers' certificates
from the same CA.

Keys and tokens are written readable by their owner only. Existing files are kept unless
--force: a new CA would lock out every certificate already handed out.
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import os
import re
import secrets
import socket
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import (
    Encoding, NoEncryption, PrivateFormat, load_pem_private_key,
)

from ringleader.errors import EXIT_OK, InvalidSpec

FILES = ("ca.pem", "ca.key", "server.pem", "server.key", "client.pem", "client.key", "users.token", "workers.token")
TRUST_DOMAIN = "ringleader"  # coordinator/edge/identity.py reads these SANs
USER_NAME = "client"  # the user client.pem names
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")  # safe in a URI path and in a file name


def run(a: argparse.Namespace) -> int:
    written = write_cluster_files(Path(a.dir), a.host, days=a.days, force=a.force, workers=a.worker)
    for path in written:
        print(path)
    return EXIT_OK


def worker_files(worker_id: str) -> tuple[str, str]:
    return f"worker-{worker_id}.pem", f"worker-{worker_id}.key"


def write_cluster_files(folder: Path, hosts: list[str] = (), days: int = 365, force: bool = False,
                        workers: list[str] = ()) -> list[Path]:
    """Write a new CA and every file, or with only `workers` on an existing CA, those workers'
    certificates; returns the paths written."""
    if days < 1:
        raise InvalidSpec("--days", "must be at least 1")
    for wid in workers:
        if not _ID.fullmatch(wid):
            raise InvalidSpec("--worker", f"a worker id of 1-128 letters, digits and ._- (starting with a letter "
                                          f"or digit), got {wid[:64]!r}")
    folder.mkdir(parents=True, exist_ok=True)
    existing = [name for name in FILES if (folder / name).exists()]
    if existing and not force:
        if not workers or not (folder / "ca.key").exists() or hosts:
            raise InvalidSpec("dir", f"{folder / existing[0]} exists: pass --force to replace every file, "
                                     "or only --worker ID to add workers' certificates")
        return _write_workers(folder, _load_ca(folder), workers, days)
    ca_key, ca_cert = _ca(days)
    names = ["localhost", socket.gethostname(), "127.0.0.1", "::1", *hosts]
    out: dict[str, bytes] = {"ca.pem": _pem(ca_cert), "ca.key": _key_pem(ca_key)}
    out["server.pem"], out["server.key"] = _leaf("ringleader-server", (ca_key, ca_cert), days, server_names=names)
    out["client.pem"], out["client.key"] = _leaf("ringleader-client", (ca_key, ca_cert), days, uri=_uri("user", USER_NAME))
    out["users.token"] = (secrets.token_urlsafe(32) + "\n").encode()
    out["workers.token"] = (secrets.token_urlsafe(32) + "\n").encode()
    for name, data in out.items():
        _write(folder / name, data, private=name.endswith((".key", ".token")))
    return [folder / name for name in FILES] + _write_workers(folder, (ca_key, ca_cert), workers, days, force)


def _write_workers(folder: Path, ca, workers, days: int, force: bool = False) -> list[Path]:
    written = []
    for wid in workers:
        pem, key = worker_files(wid)
        if (folder / pem).exists() and not force:
            raise InvalidSpec("--worker", f"{folder / pem} exists: pass --force to replace it")
        cert, private = _leaf(f"ringleader-worker-{wid}", ca, days, uri=_uri("worker", wid))
        _write(folder / pem, cert, private=False)
        _write(folder / key, private, private=True)
        written += [folder / pem, folder / key]
    return written


def _load_ca(folder: Path):
    try:
        key = load_pem_private_key((folder / "ca.key").read_bytes(), password=None)
        return key, x509.load_pem_x509_certificate((folder / "ca.pem").read_bytes())
    except (OSError, ValueError) as exc:
        raise InvalidSpec("dir", f"cannot read the CA in {folder}: {exc}") from None


def _uri(role: str, name: str) -> str:
    return f"spiffe://{TRUST_DOMAIN}/{role}/{name}"


def _write(path: Path, data: bytes, private: bool) -> None:
    path.unlink(missing_ok=True)  # a fresh file gets the mode below, whatever the old one had
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _ca(days: int):
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, f"ringleader test CA {secrets.token_hex(4)}")])
    cert = (_base(name, name, key.public_key(), days)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    return key, cert


def _leaf(common_name: str, ca, days: int, server_names: list[str] | None = None,
          uri: str = "") -> tuple[bytes, bytes]:
    """(certificate, key) as PEM: a server's with its names, or a client's naming `uri`."""
    ca_key, ca_cert = ca
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, common_name)])
    usage = x509.ExtendedKeyUsageOID.SERVER_AUTH if server_names else x509.ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (_base(name, ca_cert.subject, key.public_key(), days)
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False))
    sans = _general_names(server_names) if server_names else [x509.UniformResourceIdentifier(uri)]
    builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return _pem(builder.sign(ca_key, hashes.SHA256())), _key_pem(key)


def _base(subject, issuer, public_key, days: int):
    now = datetime.datetime.now(datetime.timezone.utc)
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))  # tolerate a little clock skew
            .not_valid_after(now + datetime.timedelta(days=days)))


def _general_names(names: list[str]) -> list:
    out, seen = [], set()
    for n in names:
        if not n or n in seen:
            continue
        seen.add(n)
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(n)))
        except ValueError:
            out.append(x509.DNSName(n))
    return out


def _pem(cert) -> bytes:
    return cert.public_bytes(Encoding.PEM)


def _key_pem(key) -> bytes:
    return key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
