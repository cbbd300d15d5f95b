"""The web UI (to be written: see issue 3)."""

from fastapi import FastAPI


def mount(app: FastAPI) -> None:
    pass
