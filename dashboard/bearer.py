"""The users' token as OpenAPI's bearer scheme, so clients and generators see how to authenticate.

The guard (dashboard/guard.py) checks the token before any route runs, for the UI and /metrics
too; routers declare the scheme with `dependencies=[Security(BEARER)]`, which does not check it
again (auto_error=False).
"""

from fastapi.security import HTTPBearer

BEARER = HTTPBearer(auto_error=False, description="the users' token (the coordinator's --token-file); "
                                                  "required when the coordinator has one")


def optional(schema: dict) -> dict:
    """Mark the scheme optional on every operation that declares it (`{}` first): a coordinator
    without a users' token serves the API to anyone on loopback, so the document must not say
    the token is required (schemathesis' ignored_auth check holds the API to what it declares)."""
    for item in schema.get("paths", {}).values():
        for op in item.values():
            if isinstance(op, dict) and op.get("security") == [{"HTTPBearer": []}]:
                op["security"] = [{}, {"HTTPBearer": []}]
    return schema
