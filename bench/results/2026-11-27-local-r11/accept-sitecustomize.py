import os, time, sys
if os.environ.get("INST_OUT") and "coordinator" in sys.argv[1:3]:
    f = open(os.environ["INST_OUT"] + f".{os.getpid()}", "w", buffering=1)
    from coordinator.core import facade
    C = facade.Coordinator
    op, od = C.prefetch, C.durable
    async def prefetch(self, job_id="", request_id=""):
        t = time.perf_counter(); r = self.store.resident(job_id, request_id); t1 = time.perf_counter()
        await op(self, job_id, request_id)
        d = time.perf_counter() - t
        if d > 0.05: f.write(f"{time.monotonic():.3f} prefetch {d*1e3:.1f} resident_call {((t1-t)*1e3):.1f} res={r} job={job_id!r} req={bool(request_id)}\n")
    async def durable(self):
        t = time.perf_counter(); await od(self); d = time.perf_counter() - t
        if d > 0.05: f.write(f"{time.monotonic():.3f} durable {d*1e3:.1f}\n")
    C.prefetch, C.durable = prefetch, durable
    from coordinator.edge import hop
    oon = hop.on
    def on(loop, coro):
        t = time.perf_counter(); name = getattr(coro, '__qualname__', '?')
        fut = oon(loop, coro)
        def done(_):
            d = time.perf_counter() - t
            if d > 0.05: f.write(f"{time.monotonic():.3f} hop {name} {d*1e3:.1f}\n")
        fut.add_done_callback(done)
        return fut
    hop.on = on
if os.environ.get("INST_OUT") and "coordinator" in sys.argv[1:3]:
    from coordinator.edge import hop as _hop
    _orig_hopped = _hop._hopped
    def _hopped(method, core, edge):
        inner = _orig_hopped(method, core, edge)
        name = getattr(method, "__name__", "?")
        async def unary(request, context):
            rem = context.time_remaining()
            t = time.perf_counter()
            try:
                return await inner(request, context)
            finally:
                if rem is not None:
                    f.write(f"{time.monotonic():.3f} call {name} accept_ms {(float(os.environ.get('INST_DEADLINE', '30')) - rem)*1e3:.1f} body_ms {(time.perf_counter()-t)*1e3:.1f}\n")
        return unary
    _hop._hopped = _hopped
