"""Page tokens of the worker listing: the sort key (host, device index, worker id) of the last
worker of a page, opaque to clients. Here, below the coordinator's roles, so that the registry
that pages and the health views that ask for one host's page share it."""

from __future__ import annotations

import base64
import binascii
import json

from ringleader.errors import InvalidSpec

SortKey = tuple[str, int, str]  # host, device index, worker id: the listing order
MAX_TOKEN = 2048  # a page token carries a sort key of two strings of at most 256 characters


def encode_token(key: SortKey) -> str:
    return base64.urlsafe_b64encode(json.dumps(key, separators=(",", ":")).encode()).decode()


def decode_token(token: str) -> SortKey:
    """The sort key a page token carries; InvalidSpec naming page_token if it is not one."""
    if len(token) > MAX_TOKEN:
        raise InvalidSpec("page_token", f"at most {MAX_TOKEN} characters")
    try:
        host, index, worker_id = json.loads(base64.urlsafe_b64decode(token.encode()))
        if isinstance(host, str) and isinstance(index, int) and isinstance(worker_id, str):
            return (host, index, worker_id)
    except (ValueError, TypeError, binascii.Error):
        pass
    raise InvalidSpec("page_token", "not a page token of this listing (pass next_page_token as it came)")
