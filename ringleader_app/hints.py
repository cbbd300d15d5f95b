"""What to try when the coordinator cannot be reached: gRPC says "Socket closed" or "handshake
failed" for several TLS mistakes; the flags the user gave tell which one it likely is."""

from __future__ import annotations

import argparse

# What gRPC's details say when a connection is made and then dropped during the TLS handshake
# (rather than refused: a coordinator that is not running).
_DROPPED = ("socket closed", "handshake", "connection reset", "ssl", "tls", "end of tcp stream")


def unavailable(details: str, a: argparse.Namespace) -> str:
    """A hint to append to an UNAVAILABLE error ("" when there is nothing useful to say)."""
    text = details.lower()
    if not any(word in text for word in _DROPPED):
        return ""
    ca, cert = getattr(a, "tls_ca", ""), getattr(a, "tls_cert", "")
    if not ca:
        return ("\nhint: the connection was dropped during set-up: if the coordinator serves TLS "
                "(--tls-cert), give --tls-ca with its CA (or RINGLEADER_TLS_CA)")
    if not cert:
        return ("\nhint: the coordinator dropped the TLS handshake: if it requires client certificates "
                "(mTLS, --tls-client-ca), give --tls-cert and --tls-key (`ringleader certs` writes a client pair)")
    return ("\nhint: the TLS handshake failed: check that --tls-ca signed the coordinator's certificate, that "
            "the address is a name in it (`ringleader certs --host`), and that the coordinator trusts "
            "--tls-cert's CA")
