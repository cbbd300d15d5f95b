"""`ringleader certs DIR`: a CA, certificates and both tokens for a test cluster.

    ca.pem                      the CA (its key, ca.key, stays here: keep it offline)
    server.pem / server.key     the coordinator (gRPC and HTTPS); names: localhost, this host's
                                name, 127.0.0.1, ::1 and every --host given
    worker.pem / worker.key     worker daemons (mTLS client certificate)
    client.pem / client.key     users' tools (mTLS client certificate)
    users.token, workers.token  random bearer tokens (32 bytes, URL-safe base64)

Keys and tokens are written readable by their owner only. Existing files are kept unless
--force: a new CA would lock out every certificate already handed out.
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import os
import secrets
import socket
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

from ringleader.errors import EXIT_OK, InvalidSpec

FILES = ("ca.pem", "ca.key", "server.pem", "server.key", "worker.pem", "worker.key", "client.pem", "client.key",
         "users.token", "workers.token")


def run(a: argparse.Namespace) -> int:
    written = write_cluster_files(Path(a.dir), a.host, days=a.days, force=a.force)
    for path in written:
        print(path)
    return EXIT_OK


def write_cluster_files(folder: Path, hosts: list[str] = (), days: int = 365, force: bool = False) -> list[Path]:
    if days < 1:
        raise InvalidSpec("--days", "must be at least 1")
    folder.mkdir(parents=True, exist_ok=True)
    existing = [name for name in FILES if (folder / name).exists()]
    if existing and not force:
        raise InvalidSpec("dir", f"{folder / existing[0]} exists: pass --force to replace every file")
    ca_key, ca_cert = _ca(days)
    names = ["localhost", socket.gethostname(), "127.0.0.1", "::1", *hosts]
    out: dict[str, bytes] = {"ca.pem": _pem(ca_cert), "ca.key": _key_pem(ca_key)}
    for role, server in (("server", True), ("worker", False), ("client", False)):
        key, cert = _leaf(f"ringleader-{role}", ca_key, ca_cert, days, names if server else None)
        out[f"{role}.pem"], out[f"{role}.key"] = _pem(cert), _key_pem(key)
    out["users.token"] = (secrets.token_urlsafe(32) + "\n").encode()
    out["workers.token"] = (secrets.token_urlsafe(32) + "\n").encode()
    for name, data in out.items():
        _write(folder / name, data, private=name.endswith((".key", ".token")))
    return [folder / name for name in FILES]


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


def _leaf(common_name: str, ca_key, ca_cert, days: int, server_names: list[str] | None):
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, common_name)])
    usage = x509.ExtendedKeyUsageOID.SERVER_AUTH if server_names else x509.ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (_base(name, ca_cert.subject, key.public_key(), days)
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False))
    if server_names:
        builder = builder.add_extension(x509.SubjectAlternativeName(_general_names(server_names)), critical=False)
    return key, builder.sign(ca_key, hashes.SHA256())


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
