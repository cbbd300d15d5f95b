# Experiment only (r9): the coordinator's gRPC server on the core loop (no edge thread, no hops),
# the rest of this tree unchanged. Applied in the coordinator process only.
import os, sys
if "coordinator" in sys.argv[1:2]:
    import asyncio, inspect
    from coordinator.edge import hop, server

    class SameLoop:
        def __init__(self):
            self.loop = asyncio.get_running_loop()
        async def _await(self, coro):
            return await coro
        def run(self, coro):
            return self._await(coro)
        def close(self):
            pass

    def _hopped(method, core, edge):
        async def unary(request, context):
            answer = method(request, context)
            return (await answer) if inspect.isawaitable(answer) else answer
        return unary

    server.EdgeLoop = SameLoop
    hop._hopped = _hopped
