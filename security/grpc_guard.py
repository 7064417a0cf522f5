"""MalformedRequestInterceptor: bytes that are not the RPC's message get INVALID_ARGUMENT.

grpc decodes a request before any servicer code runs; when the bytes do not
parse as the method's protobuf message (corrupt wire format, a string field
that is not UTF-8, a field of the wrong wire type) grpc answers ``UNKNOWN``
and logs a traceback, as if the server had a bug. This interceptor makes the
decoding lenient and answers such a request itself::

    bytes ─▶ decode ─┬─ a message ─▶ the next interceptor / the servicer
                     └─ fails ────▶ INVALID_ARGUMENT "... is not a valid
                                    pocketmq.v1.PullMessageRequest: <why>"

The nameserver, the broker and the broker's RocketMQ 5 endpoint all install it
first in their interceptor list. It only looks at decoding and composes with
any other interceptor.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

__all__ = ["MalformedRequestInterceptor"]


class _Malformed:
    """What the lenient decoder returns instead of raising."""

    __slots__ = ("error",)

    def __init__(self, error: Exception) -> None:
        self.error = error


class MalformedRequestInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self) -> None:
        # method -> (handler seen, handler wrapped), as in flow_control
        self._wrapped: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None or handler.request_deserializer is None or handler.request_streaming:
            return handler
        method = handler_call_details.method
        cached = self._wrapped.get(method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        wrapped = _wrap(method, handler)
        self._wrapped[method] = (handler, wrapped)
        return wrapped


def _wrap(method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    decode = handler.request_deserializer

    def lenient(data: bytes) -> Any:
        try:
            return decode(data)
        except Exception as exc:  # any failure to decode is the sender's
            return _Malformed(exc)

    async def refuse(request: _Malformed, context: grpc.aio.ServicerContext) -> None:
        await context.abort(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"{method}: the request bytes are not a valid message of this RPC "
            f"({request.error}); the client must send what the server's "
            ".proto defines",
        )

    if handler.unary_unary is not None:
        unary = handler.unary_unary

        async def unary_guarded(request: Any, context: grpc.aio.ServicerContext) -> Any:
            if isinstance(request, _Malformed):
                await refuse(request, context)
            return await unary(request, context)

        return grpc.unary_unary_rpc_method_handler(
            unary_guarded,
            request_deserializer=lenient,
            response_serializer=handler.response_serializer,
        )
    stream = handler.unary_stream

    async def stream_guarded(
        request: Any,
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[Any]:
        if isinstance(request, _Malformed):
            await refuse(request, context)
        replies = stream(request, context)
        if inspect.isasyncgen(replies):
            async for reply in replies:
                yield reply
        else:  # a coroutine that writes with context.write()
            await replies

    return grpc.unary_stream_rpc_method_handler(
        stream_guarded,
        request_deserializer=lenient,
        response_serializer=handler.response_serializer,
    )
