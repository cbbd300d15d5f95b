"""REST API under /api/v1 (to be written: see issue 3)."""

from fastapi import APIRouter

from coordinator.core import Coordinator


def router(core: Coordinator) -> APIRouter:
    return APIRouter(prefix="/api/v1")
