"""Why a TLS handshake with the coordinator failed, in the operator's words.

gRPC reports every failed connection as UNAVAILABLE. A coordinator that refuses this worker's
client certificate (TLS 1.3 checks it after the client has finished) only closes the socket, so
the worker compares its own certificate's issuer with the CA it trusts to say which file is wrong.
"""

from __future__ import annotations

from ringleader.security import TlsFiles

# What gRPC's details say when this side refused the coordinator, and what to check.
_MARKERS = (
    ("CERTIFICATE_VERIFY_FAILED", "the coordinator's certificate is not signed by the CA this worker trusts (--tls-ca)"),
    ("WRONG_VERSION_NUMBER", "the coordinator does not speak TLS (drop --tls-ca)"),
)


def tls_refusal(details: str, tls: TlsFiles) -> str:
    """The reason a TLS connection failed ("" if it was not that)."""
    if not tls.ca:
        return ""
    for marker, reason in _MARKERS:
        if marker in details:
            return f"TLS handshake failed: {reason} [{marker}]"
    if "Socket closed" not in details:
        return ""
    if not tls.cert:
        return ("the coordinator closed the connection during the TLS handshake: it may require a client "
                "certificate (--tls-cert, --tls-key)")
    issuer, ca = _names(tls)
    if issuer and ca and issuer != ca:
        return (f"the coordinator closed the connection during the TLS handshake: this worker's certificate "
                f"(--tls-cert) is issued by {issuer!r}, not by the CA it trusts for the coordinator ({ca!r}, "
                "--tls-ca); a coordinator requiring client certificates accepts only those of its own CA")
    return ("the coordinator closed the connection during the TLS handshake: it may not trust this worker's "
            "certificate (--tls-cert)")


def _names(tls: TlsFiles) -> tuple[str, str]:
    """(our certificate's issuer, the trusted CA's subject), "" where unreadable."""
    from cryptography import x509

    try:
        with open(tls.cert, "rb") as f:
            issuer = x509.load_pem_x509_certificate(f.read()).issuer.rfc4514_string()
        with open(tls.ca, "rb") as f:
            ca = x509.load_pem_x509_certificate(f.read()).subject.rfc4514_string()
    except (OSError, ValueError):
        return "", ""
    return issuer, ca
