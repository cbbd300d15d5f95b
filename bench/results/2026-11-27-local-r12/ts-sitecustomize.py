# Probe: where a user call's time goes. The client stamps each unary call with its send time
# (x-t0, CLOCK_MONOTONIC: one clock on one machine); the coordinator notes when the outermost
# interceptor sees the call, when the handler starts and ends.
import os, sys, time
OUT = os.environ.get("TS_OUT")
if OUT:
    import grpc
    f = open(f"{OUT}.{os.getpid()}", "w", buffering=1)
    if "coordinator" in sys.argv[1:3]:
        class Probe(grpc.aio.ServerInterceptor):
            async def intercept_service(self, continuation, d):
                t_i = time.monotonic()
                t0 = dict(d.invocation_metadata or ()).get("x-t0")
                h = await continuation(d)
                if h is None or t0 is None or not h.unary_unary:
                    return h
                inner, name = h.unary_unary, d.method.rpartition("/")[2]
                async def unary(req, ctx):
                    t_h = time.monotonic()
                    try:
                        return await inner(req, ctx)
                    finally:
                        f.write(f"S {t0} {name} {t_i:.6f} {t_h:.6f} {time.monotonic():.6f}\n")
                return grpc.unary_unary_rpc_method_handler(unary, h.request_deserializer, h.response_serializer)
        _server = grpc.aio.server
        def server(*a, interceptors=(), **k):
            return _server(*a, interceptors=[Probe(), *(interceptors or ())], **k)
        grpc.aio.server = server
    elif "control_plane" in " ".join(sys.argv[:1]):
        class Stamp(grpc.aio.UnaryUnaryClientInterceptor):
            async def intercept_unary_unary(self, continuation, details, request):
                t0 = f"{time.monotonic():.6f}"
                md = grpc.aio.Metadata(*tuple(details.metadata or ()), ("x-t0", t0))
                call = await continuation(details._replace(metadata=md), request)
                call.add_done_callback(lambda c: f.write(f"C {t0} {time.monotonic():.6f}\n"))
                return call
        _ch = grpc.aio.insecure_channel
        def insecure_channel(target, options=None, compression=None, interceptors=None):
            return _ch(target, options, compression, [Stamp(), *(interceptors or [])])
        grpc.aio.insecure_channel = insecure_channel
sys.path.insert(0, "/work/main/.dev/yield")
import yieldprobe  # noqa
if os.environ.get("PROBE_CLIENT_OUT") and "coordinator" in sys.argv[1:3]:
    import subprocess
    from coordinator.edge import server as _srv
    _start = _srv.start_server
    async def start_server(*a, **k):
        s, port = await _start(*a, **k)
        subprocess.Popen([sys.executable, "/work/main/.dev/ts/probe_client.py", f"127.0.0.1:{port}",
                          os.environ["PROBE_CLIENT_OUT"], os.environ.get("PROBE_S", "100")],
                         env={**os.environ, "PROBE_CLIENT_OUT": "", "TS_OUT": ""})
        return s, port
    _srv.start_server = start_server
