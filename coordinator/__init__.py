"""The coordinator: gRPC server, scheduler, rendezvous, job store and metrics. Never imports torch."""
