"""gRPC channel settings shared by the coordinator's server and the worker daemons' channels.

Worker streams live for days and may be idle between jobs: both ends ping, so a dead peer
(a pulled cable, a frozen VM) is noticed in seconds rather than at the next TCP timeout.
"""

KEEPALIVE_OPTIONS = [
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
]
# Every answer is at most 4 MiB, gRPC's default receive limit, so any client can read any answer:
# lists and the baselines export page by count and by bytes, specs and reports are bounded
# (jobs.proto).
MAX_MESSAGE_BYTES = 4 << 20
# A request may be larger, up to the REST API's limit for the one large input (a baselines
# import of 100,000 entries: dashboard/body_limit.py), so both APIs take the same tables; every
# other request is refused by its own field bounds once parsed.
MAX_REQUEST_BYTES = 32 << 20
SERVER_OPTIONS = KEEPALIVE_OPTIONS + [
    # A port already taken fails to bind instead of being shared: with gRPC's default
    # SO_REUSEPORT a second coordinator on the same port took half the calls meant for the first.
    ("grpc.so_reuseport", 0),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.http2.min_ping_interval_without_data_ms", 5_000),  # accept the clients' pings
    ("grpc.max_receive_message_length", MAX_REQUEST_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
]
# A saturated coordinator's RESOURCE_EXHAUSTED carries, in its trailing metadata, the seconds
# after which to try again (as HTTP's Retry-After header does on its 429).
RETRY_AFTER = "retry-after"
