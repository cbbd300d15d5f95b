"""ringleader: a gRPC service that orchestrates GPU collective jobs."""

__version__ = "0.1.0"
