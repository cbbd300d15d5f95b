"""gRPC server metrics: a grpc.aio interceptor timing every RPC by method and status code."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time

import grpc
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

RPC_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

FAMILIES = (  # (name, help) of the latency histogram and of the call counter
    ("ringleader_grpc_server_handling_seconds",
     "Time to handle a gRPC call (unary and short streams; long-lived streams excluded)"),
    ("ringleader_grpc_server_handled_total", "gRPC calls completed, long-lived streams included"),
)

# Streams that live as long as a worker daemon (Connect) or a job / a health watcher: their
# duration says nothing about latency, so they are left out of the latency histogram. They are
# counted in ringleader_grpc_server_handled_total when they end, and open ones in
# ringleader_grpc_server_streams_open. Short streams (reflection) are timed like unary calls.
LONG_LIVED_METHODS = frozenset({
    "/ringleader.v1.WorkerService/Connect",
    "/ringleader.v1.JobService/WatchJob",
    "/ringleader.v1.JobService/SubmitAndWatchJob",
    "/grpc.health.v1.Health/Watch",
})


def latency_and_count(registry: CollectorRegistry, labels: list[str], histogram: tuple[str, str],
                      counter: tuple[str, str]) -> tuple[Histogram, Counter]:
    """A request-latency histogram and a request counter with the same labels ((name, help) each):
    the pair every server of the coordinator exports (gRPC here, HTTP in dashboard/)."""
    return (Histogram(*histogram, labels, buckets=RPC_LATENCY_BUCKETS, registry=registry),
            Counter(*counter, labels, registry=registry))


class RpcMetricsInterceptor(grpc.aio.ServerInterceptor):
    """Times every RPC of the gRPC server, labelled by service, method, kind and status code.

    Unary RPCs and short streams go into ringleader_grpc_server_handling_seconds (the time from
    the handler's start to its end). The long-lived streams in LONG_LIVED_METHODS are only counted
    when they end (ringleader_grpc_server_handled_total) and gauged while open
    (ringleader_grpc_server_streams_open). Unknown methods are not recorded (their names would be
    unbounded label values).
    """

    LABELS = ["grpc_service", "grpc_method", "grpc_type", "grpc_code"]

    def __init__(self, registry: CollectorRegistry) -> None:
        self.handling, self.handled = latency_and_count(registry, self.LABELS, *FAMILIES)
        self.streams_open = Gauge("ringleader_grpc_server_streams_open",
                                  "Long-lived gRPC streams open now (worker connections, job watchers)",
                                  ["grpc_service", "grpc_method"], registry=registry)

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method
        service, _, name = method.lstrip("/").rpartition("/")
        kind = ("bidi_stream" if handler.request_streaming and handler.response_streaming else
                "client_stream" if handler.request_streaming else
                "server_stream" if handler.response_streaming else "unary")
        long_lived = method in LONG_LIVED_METHODS
        if long_lived:  # the label set exists from the start: 0 open streams
            self.streams_open.labels(service, name)

        def record(context, start: float, outcome: grpc.StatusCode | None) -> None:
            code = outcome or _context_code(context) or grpc.StatusCode.OK
            labels = (service, name, kind, code.name)
            self.handled.labels(*labels).inc()
            if not long_lived:
                self.handling.labels(*labels).observe(time.perf_counter() - start)

        return _wrap_handler(handler, record, self.streams_open.labels(service, name) if long_lived else None)


def _context_code(context) -> grpc.StatusCode | None:
    try:
        code = context.code()
    except Exception:  # not every context implementation exposes it
        return None
    if isinstance(code, grpc.StatusCode) or code is None:
        return code
    for c in grpc.StatusCode:  # some versions return the integer value
        if c.value[0] == code:
            return c
    return None


def _failure_code(exc: BaseException, context) -> grpc.StatusCode:
    if isinstance(exc, (asyncio.CancelledError, GeneratorExit)):
        return grpc.StatusCode.CANCELLED
    # context.abort() sets the code before it raises; any other exception is UNKNOWN to the client.
    code = _context_code(context)
    return code if code and code != grpc.StatusCode.OK else grpc.StatusCode.UNKNOWN


def _wrap_handler(handler, record, open_gauge):
    """A copy of `handler` whose behaviour is timed; keeps the behaviour's kind (coroutine
    function, async generator function or plain function), which the aio server dispatches on."""
    if handler.request_streaming and handler.response_streaming:
        behavior, factory = handler.stream_stream, grpc.stream_stream_rpc_method_handler
    elif handler.request_streaming:
        behavior, factory = handler.stream_unary, grpc.stream_unary_rpc_method_handler
    elif handler.response_streaming:
        behavior, factory = handler.unary_stream, grpc.unary_stream_rpc_method_handler
    else:
        behavior, factory = handler.unary_unary, grpc.unary_unary_rpc_method_handler

    @contextlib.contextmanager
    def recorded(context):
        """Time what runs inside; the outcome is the exception's status, else the context's."""
        if open_gauge is not None:
            open_gauge.inc()
        start, outcome = time.perf_counter(), None
        try:
            yield
        except BaseException as exc:
            outcome = _failure_code(exc, context)
            raise
        finally:
            if open_gauge is not None:
                open_gauge.dec()
            record(context, start, outcome)

    if inspect.isasyncgenfunction(behavior):
        async def wrapped(request, context):
            with recorded(context):
                async for response in behavior(request, context):
                    yield response
    elif inspect.iscoroutinefunction(behavior):
        async def wrapped(request, context):
            with recorded(context):
                return await behavior(request, context)
    elif handler.response_streaming:  # a sync generator, run by the server in its thread pool
        def wrapped(request, context):
            with recorded(context):
                yield from behavior(request, context)
    else:
        def wrapped(request, context):
            with recorded(context):
                return behavior(request, context)

    return factory(wrapped, request_deserializer=handler.request_deserializer,
                   response_serializer=handler.response_serializer)
