"""The application entry points: the `ringleader` command (cli), its gRPC client, tables, the
demo and the coordinator process wiring. They may import every package; nothing imports them."""
