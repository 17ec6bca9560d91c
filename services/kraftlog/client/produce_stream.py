"""One pipelined ``ProduceStream`` to one broker: requests in flight by correlation id.

Owns :class:`ProduceStream`, the client end of BrokerService.ProduceStream (Kafka's
clients pipeline their requests on one TCP connection the same way): ``send`` numbers a
request with the next correlation id, hands it to gRPC's writer and returns at once; a
reader thread takes each answer as it comes (answers may overtake one another) and calls
the callback given with its request. Requests sent while earlier ones are unanswered are
what makes the stream worth having: a message on an open stream costs both ends a fraction
of a unary call's CPU.

When the stream ends for any reason (the broker's status, a transport failure, a request
past its deadline found by :meth:`ProduceStream.expire`, :meth:`ProduceStream.close`),
every unanswered request's callback gets ``None`` and the status name (``UNAVAILABLE``,
``DEADLINE_EXCEEDED``, ``UNIMPLEMENTED``, ...), once, and the stream takes no more
requests; the caller opens a new one. Whether those requests were appended is unknown
(except after UNIMPLEMENTED: nothing was read), which is for the caller to honour: the
producer keeps such batches' identity (``maybe_written``).

Callers: :class:`kraftlog.client.producer.Producer` (its sender thread sends and expires;
callbacks run on this module's reader thread). Edge module: threads and gRPC; no produce
rule lives here.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterator

import grpc

from kraftlog.v1 import broker_pb2, broker_pb2_grpc

logger = logging.getLogger(__name__)

OnAnswer = Callable[[broker_pb2.ProduceResponse | None, str], None]
"""Called once per request: (its answer, "") or (None, the gRPC status name the stream ended
with)."""

_MAX_CORRELATION_ID = (1 << 31) - 1


class ProduceStream:
    """One open ProduceStream call to ``address``. See the module docstring."""

    def __init__(self, stub: broker_pb2_grpc.BrokerServiceStub, address: str) -> None:
        self.address = address
        self._lock = threading.Lock()
        self._requests: queue.SimpleQueue[broker_pb2.ProduceRequest | None] = queue.SimpleQueue()
        self._pending: dict[int, tuple[float, OnAnswer]] = {}
        """Correlation id -> (deadline as time.monotonic(), callback) of unanswered requests."""
        self._next_id = 1
        self._closed = False
        self._ended_by_us: str | None = None
        self._call = stub.ProduceStream(self._outgoing())
        self._reader = threading.Thread(target=self._read, daemon=True,
                                        name=f"kraftlog-produce-stream-{address}")
        self._reader.start()

    @property
    def closed(self) -> bool:
        """No more requests are taken (the stream ended or is ending)."""
        return self._closed

    def send(self, request: broker_pb2.ProduceRequest, *, deadline: float,
             on_answer: OnAnswer) -> bool:
        """Queue ``request`` (its correlation_id is set here); False when the stream is
        closed, and then ``on_answer`` will never be called."""
        with self._lock:
            if self._closed:
                return False
            correlation_id = self._next_id
            self._next_id = correlation_id % _MAX_CORRELATION_ID + 1
            request.correlation_id = correlation_id
            self._pending[correlation_id] = (deadline, on_answer)
        self._requests.put(request)
        return True

    def expire(self, now: float) -> None:
        """End the stream if a request is unanswered past its deadline (``now`` in
        time.monotonic()): its answer can no longer be told apart from a lost one."""
        with self._lock:
            late = any(deadline <= now for deadline, _ in self._pending.values())
        if late:
            self._end("DEADLINE_EXCEEDED")

    def close(self) -> None:
        """End the stream; unanswered requests are called back with CANCELLED."""
        self._end("CANCELLED")

    def _end(self, status: str) -> None:
        with self._lock:
            if self._ended_by_us is None:
                self._ended_by_us = status
            self._closed = True
        self._requests.put(None)
        self._call.cancel()

    def _outgoing(self) -> Iterator[broker_pb2.ProduceRequest]:
        # Consumed by gRPC's own request thread; None half-closes the stream.
        while (request := self._requests.get()) is not None:
            yield request

    def _read(self) -> None:
        status = "UNAVAILABLE"  # the broker ended the stream with requests unanswered
        try:
            for response in self._call:
                with self._lock:
                    entry = self._pending.pop(response.correlation_id, None)
                if entry is not None:
                    _call_back(entry[1], response, "")
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            status = code.name if code is not None else type(exc).__name__
        with self._lock:
            self._closed = True
            if self._ended_by_us is not None:
                status = self._ended_by_us
            unanswered = list(self._pending.values())
            self._pending.clear()
        self._requests.put(None)
        if unanswered:
            logger.debug("produce stream to %s ended (%s) with %d request(s) unanswered",
                         self.address, status, len(unanswered))
        for _deadline, on_answer in unanswered:
            _call_back(on_answer, None, status)


def _call_back(on_answer: OnAnswer, response: broker_pb2.ProduceResponse | None,
               status: str) -> None:
    # The caller's code: a failure in it is logged and must not end the reader, whose other
    # requests would never be called back (gRPC treats a unary call's done-callback so too).
    try:
        on_answer(response, status)
    except Exception:
        logger.exception("a produce answer's callback failed")
