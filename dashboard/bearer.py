"""The users' token as OpenAPI's bearer scheme, so clients and generators see how to authenticate.

The guard (dashboard/guard.py) checks the token before any route runs, for the UI and /metrics
too; routers declare the scheme with `dependencies=[Security(BEARER)]`, which does not check it
again (auto_error=False).
"""

from fastapi.security import HTTPBearer

BEARER = HTTPBearer(auto_error=False, description="the users' token (the coordinator's --token-file); "
                                                  "required when the coordinator has one")
