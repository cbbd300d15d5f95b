"""Request bytes that do not parse answer INVALID_ARGUMENT naming the message, rather than what
grpc does when a handler's deserializer raises (UNKNOWN, with a traceback in the log).

The innermost server interceptor: it gives every unary-request handler a deserializer that
returns a marker instead of raising, and a behavior that answers the marker with the status.
"""

from __future__ import annotations

import inspect

import grpc


class _Malformed:
    def __init__(self, why: str) -> None:
        self.why = why


def _lenient(deserialize, message: str):
    def parse(data: bytes):
        try:
            return deserialize(data)
        except Exception as exc:  # protobuf's DecodeError, or anything a deserializer raises
            return _Malformed(f"request: the bytes are not a {message} ({type(exc).__name__})")

    return parse


async def _refuse(request, context) -> bool:
    if isinstance(request, _Malformed):
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.why)
    return False


class MalformedRequestInterceptor(grpc.aio.ServerInterceptor):
    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None or handler.request_streaming or handler.request_deserializer is None:
            return handler
        message = handler_call_details.method.rpartition("/")[2] + "'s request"
        parse = _lenient(handler.request_deserializer, message)
        if handler.unary_unary:
            inner = handler.unary_unary

            async def unary(request, context):
                await _refuse(request, context)
                answer = inner(request, context)
                return await answer if inspect.isawaitable(answer) else answer

            return grpc.unary_unary_rpc_method_handler(unary, parse, handler.response_serializer)
        inner_stream = handler.unary_stream

        async def stream(request, context):
            await _refuse(request, context)
            async for item in inner_stream(request, context):
                yield item

        return grpc.unary_stream_rpc_method_handler(stream, parse, handler.response_serializer)
