"""What faces the network: gRPC servicers and server, credentials, worker identity, Prometheus exposition."""
