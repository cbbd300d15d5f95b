"""A port that is free right now, for tests that start torch.distributed groups by hand.

The product never does this (rank 0 binds its store on port 0 and reports it); a test's own
process group may, since nothing else on a test machine races for the port in the instant."""

import socket


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]
