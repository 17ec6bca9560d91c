"""Pipelined idempotent produce against 3 real controllers + 3 brokers.

One topic, 2 partitions, replication factor 3, min.insync.replicas=2. The producer
sends small batches with ``max.in.flight.requests.per.connection=5`` (acks=all,
idempotent) on its ProduceStreams; the answers of a few Produce requests are dropped
on the client side after the broker wrote them (a lost answer: the stream breaks, and
with it the answers of every request still unanswered on it), so their batches are
resent while later ones were written. Checked: partitions really had several requests in flight;
every record is read back exactly once, each partition in send order at the offsets
its future reported; and the producer kept its producer id (no sequence error was
taken for a lost producer state). Every wait is bounded; all children are killed.
"""

from __future__ import annotations

import pathlib
import threading
import time
from typing import Any

import grpc
import pytest

from kraftlog import client
from tests.quorum_cluster import Topic, running_cluster, wait_for_full_isr

TOPIC = "pipelined"
PARTITIONS = 2
RECORDS = 1500


class _LostAnswer(grpc.RpcError, grpc.Future):  # type: ignore[misc]
    """A Produce call that reached the broker but whose answer the client never saw."""

    def __init__(self, call: grpc.Future) -> None:
        self._call = call

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def result(self, timeout: float | None = None) -> Any:
        self._call.result(timeout)  # the broker answered ...
        raise self  # ... and the answer was lost

    def add_done_callback(self, fn: Any) -> None:
        self._call.add_done_callback(lambda _done: fn(self))

    def cancel(self) -> bool:
        return bool(self._call.cancel())

    def cancelled(self) -> bool:
        return bool(self._call.cancelled())

    def running(self) -> bool:
        return bool(self._call.running())

    def done(self) -> bool:
        return bool(self._call.done())

    def exception(self, timeout: float | None = None) -> Any:
        return self

    def traceback(self, timeout: float | None = None) -> Any:
        return None


class _StreamLost(grpc.RpcError):  # type: ignore[misc]
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE


class _LossyStream:
    """A ProduceStream call whose connection drops when the answer of a request numbered in
    ``drop`` arrives: that answer and every later one are lost."""

    def __init__(self, call: Any, numbers: dict[int, int], drop: set[int]) -> None:
        self._call = call
        self._numbers = numbers
        self._drop = drop

    def __iter__(self) -> _LossyStream:
        return self

    def __next__(self) -> Any:
        response = next(self._call)
        if self._numbers.get(response.correlation_id) in self._drop:
            self._call.cancel()
            raise _StreamLost()
        return response

    def cancel(self) -> bool:
        return bool(self._call.cancel())


class _DroppingStub:
    """Wraps a BrokerServiceStub: the answers of the Produce requests numbered in ``drop``
    (unary calls or requests on a ProduceStream) are lost; records the most requests any
    partition had unanswered at once."""

    def __init__(self, stub: Any, shared: dict[str, Any]) -> None:
        self._stub = stub
        self._shared = shared
        outer = self

        class _Produce:
            def future(self, request: Any, timeout: float | None = None) -> Any:
                return outer._produce(request, timeout)

            def __call__(self, *args: Any, **kwargs: Any) -> Any:
                return stub.Produce(*args, **kwargs)

        self.Produce = _Produce()
        self.ProduceStream = outer._stream

    def _produce(self, request: Any, timeout: float | None) -> Any:
        shared = self._shared
        with shared["lock"]:
            shared["calls"] += 1
            number = shared["calls"]
        call = self._stub.Produce.future(request, timeout=timeout)
        return _LostAnswer(call) if number in shared["drop"] else call

    def _stream(self, request_iterator: Any, **kwargs: Any) -> Any:
        shared = self._shared
        numbers: dict[int, int] = {}

        def counted() -> Any:
            for request in request_iterator:
                with shared["lock"]:
                    shared["calls"] += 1
                    numbers[request.correlation_id] = shared["calls"]
                yield request

        return _LossyStream(self._stub.ProduceStream(counted(), **kwargs), numbers, shared["drop"])

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stub, name)


def test_pipelined_idempotent_produce_survives_lost_answers_in_order(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with running_cluster(tmp_path, topics=[
            Topic(name=TOPIC, partitions=PARTITIONS, min_insync_replicas=2)]) as running:
        bootstrap = running.bootstrap
        config = client.ProducerConfig(
            bootstrap_servers=bootstrap, acks=client.Acks.ALL, linger_ms=0, batch_size=4096,
            max_in_flight_requests_per_connection=5, retry_backoff_ms=20,
            request_timeout_ms=10000, delivery_timeout_ms=60000)
        producer = client.Producer(config)
        try:
            wait_for_full_isr(producer, TOPIC, PARTITIONS)
            producer.send(TOPIC, b"warm-up", partition=0).result(timeout=10)
            first_pid = producer._producer_id
            shared: dict[str, Any] = {"lock": threading.Lock(), "calls": 0,
                                      "drop": {3, 10, 11, 25}, "most": 0}
            real_stub = producer._channels.stub
            monkeypatch.setattr(producer._channels, "stub",
                                lambda address: _DroppingStub(real_stub(address), shared))
            for stream in list(producer._streams.values()):
                stream.close()  # the warm-up's: the next requests open streams that lose answers
            real_send = producer._send_request

            def send_request(address: str, partitions: Any) -> None:
                with producer._lock:
                    shared["most"] = max([shared["most"], *map(len, producer._in_flight.values())])
                real_send(address, partitions)

            monkeypatch.setattr(producer, "_send_request", send_request)
            values = [f"r{i:05d}-".encode() + b"x" * 200 for i in range(RECORDS)]
            futures = [producer.send(TOPIC, value, partition=i % PARTITIONS)
                       for i, value in enumerate(values)]
            producer.flush(60000)
            metas = [f.result(timeout=1) for f in futures]
            assert producer._producer_id == first_pid  # no reset: every batch in sequence
        finally:
            producer.close(timeout_ms=5000)
        assert shared["calls"] > max(shared["drop"])  # the answers were dropped
        assert shared["most"] >= 2, "no partition ever had two requests in flight"

        # Read everything back: each record exactly once, in send order, at its offset.
        consumer_config = client.ConsumerConfig(bootstrap_servers=bootstrap,
                                                auto_offset_reset=client.OffsetReset.EARLIEST)
        read: dict[int, list[client.ConsumerRecord]] = {p: [] for p in range(PARTITIONS)}
        with client.Consumer(consumer_config) as consumer:
            consumer.assign_topic(TOPIC)
            consumer.seek_to_beginning()
            deadline = time.monotonic() + 20
            total = 0
            while total < RECORDS + 1 and time.monotonic() < deadline:
                for record in consumer.poll(max_records=2000, timeout_ms=500):
                    read[record.partition].append(record)
                    total += 1
        for p in range(PARTITIONS):
            got = [(r.offset, r.value) for r in read[p] if r.value != b"warm-up"]
            sent = [(meta.offset, value) for i, (meta, value) in enumerate(zip(metas, values, strict=True))
                    if i % PARTITIONS == p]
            assert got == sent
