"""The coordinator's HTTP side: REST API, live web UI and /metrics (FastAPI, same process)."""
