"""The front door of every kraftlog gRPC service: what reaches a handler, and what leaves it.

Owns :func:`add_service`, which every server uses instead of the generated
``add_*Servicer_to_server`` (RaftService, ControllerService, BrokerService, AdminService,
health and reflection). It registers the same methods, each wrapped so that:

- a request that protobuf cannot decode (random bytes, a truncated message) never reaches
  the handler: the call ends with gRPC ``INVALID_ARGUMENT`` and a message naming the
  expected type (gRPC's default was ``UNKNOWN``, with a full ERROR traceback logged per
  request). Streaming requests are checked message by message;
- an exception the handler did not expect ends the call with ``INTERNAL`` and a fixed
  text naming only the method (the default sent ``str(exc)``, which may hold a server file
  path) and is logged with its traceback. An :class:`~kraftlog.errors.InvariantViolation`
  is logged every time (at CRITICAL); it is a bug, never the caller's fault;
- those log lines are rate limited per method (:class:`RateLimitedLog`): at most one each
  ``interval_s``, the next one saying how many were left out, so a flood of bad requests
  costs a few lines rather than one traceback each;
- the calls in flight are known, so :func:`stop_server` can end the ones still running
  when the grace period is over with ``UNAVAILABLE`` itself. Left to grpc.aio, a call
  still open then (a replica's idle FetchStream, a parked Fetch) is cancelled from under
  the server and grpc logs an ERROR traceback for each: a clean shutdown logged errors.

Expected outcomes are not its business: handlers validate the fields they are given and
answer Kafka error codes in the response (STYLE.md rule 7); ``asyncio.CancelledError`` and
gRPC's own abort pass through untouched. :func:`public_message` strips directories from
text that is about to leave the process (error messages built from local exceptions).

Edge module: grpc. Holds no kraftlog logic and knows no service.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import re
import time
import weakref
from collections.abc import AsyncIterator, Callable, Hashable
from typing import Any

import grpc
import grpc.aio

from kraftlog import errors

logger = logging.getLogger(__name__)

DEFAULT_LOG_INTERVAL_S = 10.0
"""At most one log line per method and kind of failure in this many seconds."""

_ABSOLUTE_PATH = re.compile(r"(?<![\w.:/-])/(?:[^\s/'\"():,]+/)+(?=[^\s/'\"():,]+)")


def public_message(text: str) -> str:
    """``text`` with the directories of absolute paths removed (``/data/k1/meta.properties``
    becomes ``meta.properties``): what a client may see of a local error."""
    return _ABSOLUTE_PATH.sub("", text)


class RateLimitedLog:
    """Decides which of many similar log lines to write: the first per key, then at most one
    per ``interval_s``; :meth:`admit` returns how many were suppressed in between."""

    def __init__(self, *, interval_s: float = DEFAULT_LOG_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._interval_s = interval_s
        self._clock = clock
        self._last: dict[Hashable, float] = {}
        self._suppressed: dict[Hashable, int] = {}

    def admit(self, key: Hashable) -> int | None:
        """None: skip this line. Otherwise log it, with the returned count of skipped ones."""
        now = self._clock()
        last = self._last.get(key)
        if last is not None and now - last < self._interval_s:
            self._suppressed[key] = self._suppressed.get(key, 0) + 1
            return None
        self._last[key] = now
        return self._suppressed.pop(key, 0)


class _Undecodable:
    """What the deserializer hands over instead of a message it could not parse."""

    __slots__ = ("error",)

    def __init__(self, error: Exception) -> None:
        self.error = error


def _tolerant(deserialize: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    if deserialize is None:
        return None

    def run(data: bytes) -> Any:
        try:
            return deserialize(data)
        except Exception as exc:  # DecodeError and friends: the caller's bytes, not our bug
            return _Undecodable(exc)

    return run


def _request_type(deserialize: Callable[[bytes], Any] | None) -> str:
    owner = getattr(deserialize, "__self__", None)  # Message.FromString is a bound classmethod
    descriptor = getattr(owner, "DESCRIPTOR", None)
    return getattr(descriptor, "full_name", None) or "request"


class _Calls:
    """The handler tasks of one server's calls in flight, for :func:`stop_server`."""

    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[Any]] = set()
        self.closing = False

    def enter(self) -> asyncio.Task[Any] | None:
        task = asyncio.current_task()
        if task is not None:
            self.tasks.add(task)
        return task

    def leave(self, task: asyncio.Task[Any] | None) -> None:
        if task is not None:
            self.tasks.discard(task)

    def ended_by_us(self, task: asyncio.Task[Any] | None) -> bool:
        """Whether the cancel being handled is :func:`stop_server`'s alone (then consumed)."""
        return self.closing and task is not None and task.uncancel() == 0


_SERVER_CALLS: weakref.WeakKeyDictionary[Any, _Calls] = weakref.WeakKeyDictionary()


def _calls_of(server: Any) -> _Calls:
    calls = _SERVER_CALLS.get(server)
    if calls is None:
        calls = _SERVER_CALLS[server] = _Calls()
    return calls


async def stop_server(server: Any, grace_s: float) -> None:
    """``server.stop(grace_s)``, and the calls still running when the grace is over end with
    UNAVAILABLE here rather than being cancelled by grpc.aio (which logs each as an error)."""
    calls = _calls_of(server)
    stopping = asyncio.ensure_future(server.stop(grace_s + 1.0))  # refuses new calls at once
    try:
        pending = set(calls.tasks)
        if pending:
            await asyncio.wait(pending, timeout=grace_s)
        calls.closing = True
        for task in list(calls.tasks):
            task.cancel()
    finally:
        await stopping


class _Guard:
    """The checks around one method's handler."""

    def __init__(self, method: str, request_type: str, log: RateLimitedLog,
                 calls: _Calls) -> None:
        self.method = method
        self.request_type = request_type
        self.log = log
        self.calls = calls

    async def shut_down(self, context: Any) -> None:
        await context.abort(grpc.StatusCode.UNAVAILABLE,
                            f"{self.method}: the server is shutting down")

    async def refuse_undecodable(self, context: Any, request: _Undecodable) -> None:
        suppressed = self.log.admit(("undecodable", self.method))
        if suppressed is not None:
            logger.warning("event=undecodable_request method=%s type=%s error=%r suppressed=%d",
                           self.method, self.request_type, type(request.error).__name__,
                           suppressed)
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                            f"{self.method}: the request is not a valid {self.request_type}")

    async def fail(self, context: Any, exc: Exception) -> None:
        if isinstance(exc, NotImplementedError):
            # What a generated servicer's method does for an RPC the server does not serve.
            await context.abort(grpc.StatusCode.UNIMPLEMENTED,
                                f"{self.method} is not implemented by this server")
        if isinstance(exc, errors.InvariantViolation):
            logger.critical("event=handler_invariant_violation method=%s", self.method,
                            exc_info=exc)
        else:
            suppressed = self.log.admit(("failed", self.method))
            if suppressed is not None:
                logger.error("event=handler_failed method=%s error=%s suppressed=%d",
                             self.method, type(exc).__name__, suppressed, exc_info=exc)
        await context.abort(grpc.StatusCode.INTERNAL,
                            f"{self.method}: internal server error (logged by the server)")

    async def requests(self, iterator: Any, context: Any) -> AsyncIterator[Any]:
        async for request in iterator:
            if isinstance(request, _Undecodable):
                await self.refuse_undecodable(context, request)
            yield request


_PASS_THROUGH = (asyncio.CancelledError, grpc.aio.AbortError, grpc.aio.UsageError)


def _wrap(guard: _Guard, behaviour: Callable[..., Any], *, streaming_request: bool,
          streaming_response: bool) -> Callable[..., Any]:
    """One method's behaviour, guarded. The request (or request iterator) is checked before
    the handler sees it; each way out is one of: the answer, the handler's own abort, our
    INVALID_ARGUMENT / INTERNAL / shutdown UNAVAILABLE, or a cancel that is not ours."""
    calls = guard.calls

    def admit(request: Any, context: Any) -> Any:
        if streaming_request:
            return guard.requests(request, context)
        return request

    if streaming_response and not inspect.iscoroutinefunction(behaviour):
        # An async generator, or a plain function returning an (async) iterator: answers
        # are yielded. A coroutine that writes with context.write takes the path below.
        async def stream(request: Any, context: Any) -> AsyncIterator[Any]:
            if isinstance(request, _Undecodable):
                await guard.refuse_undecodable(context, request)
            task = calls.enter()
            try:
                answers = behaviour(admit(request, context), context)
                if hasattr(answers, "__aiter__"):
                    async for item in answers:
                        yield item
                else:
                    for item in answers:
                        yield item
            except asyncio.CancelledError:
                if not calls.ended_by_us(task):
                    raise
                await guard.shut_down(context)
            except _PASS_THROUGH:
                raise
            except Exception as exc:
                await guard.fail(context, exc)
            finally:
                calls.leave(task)
        return stream

    async def call(request: Any, context: Any) -> Any:
        if isinstance(request, _Undecodable):
            await guard.refuse_undecodable(context, request)
        task = calls.enter()
        try:
            answer = behaviour(admit(request, context), context)
            return await answer if inspect.isawaitable(answer) else answer
        except asyncio.CancelledError:
            if not calls.ended_by_us(task):
                raise
            await guard.shut_down(context)
        except _PASS_THROUGH:
            raise
        except Exception as exc:
            await guard.fail(context, exc)
        finally:
            calls.leave(task)
        raise AssertionError("unreachable: abort raises")
    return call


def _guard_handler(method: str, handler: grpc.RpcMethodHandler, log: RateLimitedLog,
                   calls: _Calls) -> grpc.RpcMethodHandler:
    """``handler`` (one method's) with the checks of the module docstring around it."""
    guard = _Guard(method, _request_type(handler.request_deserializer), log, calls)
    deserialize = _tolerant(handler.request_deserializer)
    serialize = handler.response_serializer
    if handler.unary_unary is not None:
        return grpc.unary_unary_rpc_method_handler(
            _wrap(guard, handler.unary_unary, streaming_request=False, streaming_response=False),
            request_deserializer=deserialize, response_serializer=serialize)
    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(
            _wrap(guard, handler.unary_stream, streaming_request=False, streaming_response=True),
            request_deserializer=deserialize, response_serializer=serialize)
    if handler.stream_unary is not None:
        return grpc.stream_unary_rpc_method_handler(
            _wrap(guard, handler.stream_unary, streaming_request=True, streaming_response=False),
            request_deserializer=deserialize, response_serializer=serialize)
    return grpc.stream_stream_rpc_method_handler(
        _wrap(guard, handler.stream_stream, streaming_request=True, streaming_response=True),
        request_deserializer=deserialize, response_serializer=serialize)


class _Registrations:
    """Stands in for the server while a generated ``add_*_to_server`` registers a service."""

    def __init__(self) -> None:
        self.services: dict[str, dict[str, grpc.RpcMethodHandler]] = {}

    def add_registered_method_handlers(self, service: str,
                                       handlers: dict[str, grpc.RpcMethodHandler]) -> None:
        self.services[service] = dict(handlers)

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        for handler in handlers:
            # grpc.method_handlers_generic_handler's object; generated code also passes the
            # same handlers to add_registered_method_handlers, which wins.
            service = getattr(handler, "_name", None)
            methods = getattr(handler, "_method_handlers", None)
            if service is None or methods is None:
                raise TypeError(f"cannot guard generic handler {handler!r}")
            self.services.setdefault(service, dict(methods))


def add_service(add: Callable[[Any], None], server: Any, *,
                log: RateLimitedLog | None = None) -> None:
    """Run ``add(registrar)`` (e.g. ``lambda s: add_FooServicer_to_server(servicer, s)``)
    and register what it adds on ``server``, every method guarded."""
    registrations = _Registrations()
    add(registrations)
    log = log or RateLimitedLog()
    calls = _calls_of(server)
    for service, handlers in registrations.services.items():
        guarded = {name: _guard_handler(f"/{service}/{name}", handler, log, calls)
                   for name, handler in handlers.items()}
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service,
                                                                              guarded),))
        if hasattr(server, "add_registered_method_handlers"):
            server.add_registered_method_handlers(service, guarded)
