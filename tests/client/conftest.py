"""An in-process fake BrokerService for the client's unit tests.

One broker (node 1) leading every partition of its topics, on a real gRPC
server in this process: Metadata, Produce (offsets assigned by patching each
batch's baseOffset, errors scripted per partition; idempotent batches checked as
a Kafka broker does: the next sequence of the producer id, else the original
offset for one of its last 5 batches, else OUT_OF_ORDER_SEQUENCE_NUMBER, or
UNKNOWN_PRODUCER_ID for an unknown producer not starting at 0), Fetch (from the stored
batches, OFFSET_OUT_OF_RANGE outside [log start, end]), ListOffsets. Requests are
recorded so tests can check batching and retries. ProduceStream handles each request on
a thread of its own as unary Produce does (so answers may come out of order), or answers
UNIMPLEMENTED (``stream_produce`` False), or breaks the stream after a number of
requests, written but unanswered (``break_stream_after``).
"""

from __future__ import annotations

import contextlib
import queue
import struct
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest

from kraftlog.error_codes import ErrorCode
from kraftlog.storage import batch_header as bh
from kraftlog.storage import record_batch as rb
from kraftlog.v1 import broker_pb2, broker_pb2_grpc, common_pb2


def _error(code: ErrorCode, message: str = "") -> common_pb2.Error:
    return common_pb2.Error(code=int(code), message=message)  # type: ignore[arg-type]


class FakeBroker(broker_pb2_grpc.BrokerServiceServicer):
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.topics: dict[str, int] = {"t": 2}
        self.logs: dict[tuple[str, int], list[bytes]] = {}
        self.log_start: dict[tuple[str, int], int] = {}
        self.produce_errors: dict[tuple[str, int], list[ErrorCode]] = {}
        self.produce_requests: list[broker_pb2.ProduceRequest] = []
        self.fetch_requests: list[broker_pb2.FetchRequest] = []
        self.empty_fetch_hold_ms = 50
        """The longest an empty Fetch answer is held (up to the request's max_wait_ms)."""
        self.produce_metadata: list[dict[str, str]] = []
        self.metadata_requests = 0
        self.port = 0
        self.next_producer_id = 4000
        self.init_producer_id_errors: list[ErrorCode] = []
        self.init_producer_id_unimplemented = False
        self.producers: dict[tuple[str, int, int], list[tuple[int, int, int]]] = {}
        """(topic, partition, producer id) -> its last 5 batches: (first seq, last seq, offset)."""
        self.produce_delays: dict[tuple[str, int], list[float]] = {}
        """Seconds a partition's next Produce waits before it is handled (requests overlap)."""
        self.by_sequence: dict[int, list[tuple[float, ErrorCode | None]]] = {}
        """For the next idempotent batches with this base sequence (any partition), one
        plan each: seconds to wait, and then either the error to refuse it with or, for
        None, write it (or find it a duplicate) and answer REQUEST_TIMED_OUT after the
        wait (its answer was lost)."""
        self.answered_codes: list[ErrorCode] = []
        self.duplicates = 0
        self.produce_running = 0
        self.produce_most = 0
        """The most Produce requests handled at once."""
        self.stream_produce = True
        """Serve ProduceStream; False: UNIMPLEMENTED (a broker from before it)."""
        self.break_stream_after: int | None = None
        """Break the next ProduceStream (UNAVAILABLE) once it handled this many requests,
        the last of them written but unanswered."""
        self.produce_streams = 0
        self.stream_requests = 0

    def InitProducerId(self, request: Any, context: Any) -> Any:
        if self.init_producer_id_unimplemented:  # a broker from before idempotent produce
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not implemented!")
        with self.lock:
            if self.init_producer_id_errors:
                code = self.init_producer_id_errors.pop(0)
                return broker_pb2.InitProducerIdResponse(error=_error(code, "scripted"),
                                                         producer_id=-1, producer_epoch=-1)
            self.next_producer_id += 1
            return broker_pb2.InitProducerIdResponse(error=_error(ErrorCode.NONE),
                                                     producer_id=self.next_producer_id,
                                                     producer_epoch=0)

    def end(self, key: tuple[str, int]) -> int:
        batches = self.logs.get(key, [])
        return bh.BatchHeader(batches[-1]).base_offset + bh.BatchHeader(
            batches[-1]).last_offset_delta + 1 if batches else 0

    def Metadata(self, request: Any, context: Any) -> Any:
        with self.lock:
            self.metadata_requests += 1
        answer = broker_pb2.MetadataResponse(cluster_id="fake", controller_id=1, brokers=[
            broker_pb2.MetadataResponse.MetadataResponseBroker(
                node_id=1, endpoint=common_pb2.Endpoint(host="127.0.0.1", port=self.port))])
        for name in request.topics or sorted(self.topics):
            count = self.topics.get(name)
            if count is None:
                answer.topics.append(broker_pb2.MetadataResponse.MetadataResponseTopic(
                    name=name, error=_error(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "no such topic")))
                continue
            answer.topics.append(broker_pb2.MetadataResponse.MetadataResponseTopic(
                name=name, partitions=[broker_pb2.MetadataResponse.MetadataResponsePartition(
                    partition_index=p, leader_id=1, leader_epoch=0, replica_nodes=[1],
                    isr_nodes=[1]) for p in range(count)]))
        return answer

    def _check_sequence(self, key: tuple[str, int], records: bytes) -> tuple[ErrorCode, int]:
        """An idempotent batch's verdict (one batch per partition and request): NONE and -1
        to append it, NONE and an offset for a duplicate, or the refusal."""
        header = bh.BatchHeader(records)
        if header.producer_id < 0:
            return ErrorCode.NONE, -1
        first, last = header.base_sequence, header.base_sequence + header.last_offset_delta
        cached = self.producers.get((*key, header.producer_id))
        if cached is None:
            return (ErrorCode.NONE, -1) if first == 0 else (ErrorCode.UNKNOWN_PRODUCER_ID, -1)
        for c_first, c_last, offset in cached:
            if (c_first, c_last) == (first, last):
                return ErrorCode.NONE, offset
        if first != cached[-1][1] + 1:
            return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1
        return ErrorCode.NONE, -1

    def Produce(self, request: Any, context: Any) -> Any:
        with self.lock:
            self.produce_running += 1
            self.produce_most = max(self.produce_most, self.produce_running)
        try:
            return self._produce(request, context)
        finally:
            with self.lock:
                self.produce_running -= 1

    def ProduceStream(self, request_iterator: Any, context: Any) -> Any:
        if not self.stream_produce:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not implemented!")
        with self.lock:
            self.produce_streams += 1
            break_after, self.break_stream_after = self.break_stream_after, None
        answers: queue.SimpleQueue[Any] = queue.SimpleQueue()
        handled = [0]

        def handle(request: Any) -> None:
            answer = self.Produce(request, context)
            answer.correlation_id = request.correlation_id
            with self.lock:
                handled[0] += 1
                broken = break_after is not None and handled[0] >= break_after
            answers.put("break" if broken else answer)

        def read() -> None:
            handlers = []
            with contextlib.suppress(grpc.RpcError):  # the client cancelled the stream
                for request in request_iterator:
                    with self.lock:
                        self.stream_requests += 1
                    handler = threading.Thread(target=handle, args=(request,), daemon=True)
                    handler.start()
                    handlers.append(handler)
            for handler in handlers:
                handler.join()
            answers.put(None)

        threading.Thread(target=read, daemon=True).start()
        while (answer := answers.get()) is not None:
            if answer == "break":
                context.abort(grpc.StatusCode.UNAVAILABLE, "the fake broker broke the stream")
            yield answer

    def _produce(self, request: Any, context: Any) -> Any:
        # Scripts are taken in arrival order; a delayed request is handled after later ones.
        before = after = 0.0
        scripted: dict[tuple[str, int], ErrorCode] = {}
        lost: dict[tuple[str, int], tuple[int, tuple[float, ErrorCode | None]]] = {}
        with self.lock:
            for topic in request.topic_data:
                for data in topic.partition_data:
                    key = (topic.name, data.index)
                    script = self.produce_errors.get(key)
                    scripted[key] = script.pop(0) if script else ErrorCode.NONE
                    pauses = self.produce_delays.get(key)
                    pause = pauses.pop(0) if pauses else 0.0
                    header = bh.BatchHeader(data.records)
                    plans = (self.by_sequence.get(header.base_sequence)
                             if header.producer_id >= 0 else None)
                    planned = plans.pop(0) if plans else None
                    if planned is not None:
                        pause, refusal = planned
                        if refusal is None:
                            lost[key] = (header.base_sequence, planned)
                            after = max(after, pause)
                            continue
                        scripted[key] = refusal
                    before = max(before, pause)
        time.sleep(before)
        with self.lock:
            self.produce_requests.append(request)
            self.produce_metadata.append(dict(context.invocation_metadata()))
            answer = broker_pb2.ProduceResponse()
            for topic in request.topic_data:
                parts = []
                for data in topic.partition_data:
                    key = (topic.name, data.index)
                    code = scripted[key]
                    duplicate = -1
                    if code is ErrorCode.NONE:
                        code, duplicate = self._check_sequence(key, data.records)
                    if code is not ErrorCode.NONE and key in lost:
                        # Refused (it overtook an earlier batch): the plan to lose its
                        # answer waits for the batch's next arrival.
                        sequence, plan = lost.pop(key)
                        self.by_sequence.setdefault(sequence, []).insert(0, plan)
                    if code is not ErrorCode.NONE:
                        self.answered_codes.append(code)
                        parts.append(broker_pb2.ProduceResponse.PartitionProduceResponse(
                            index=data.index, error=_error(code, f"scripted {code.name}"),
                            base_offset=-1, log_append_time_ms=-1, log_start_offset=-1))
                        continue
                    if duplicate >= 0:
                        self.duplicates += 1
                        found = ErrorCode.REQUEST_TIMED_OUT if key in lost else ErrorCode.NONE
                        self.answered_codes.append(found)
                        parts.append(broker_pb2.ProduceResponse.PartitionProduceResponse(
                            index=data.index, error=_error(found),
                            base_offset=-1 if found else duplicate,
                            log_append_time_ms=-1, log_start_offset=0))
                        continue
                    base = self.end(key)
                    header = bh.BatchHeader(data.records)
                    if header.producer_id >= 0:
                        cached = self.producers.setdefault((*key, header.producer_id), [])
                        cached.append((header.base_sequence,
                                       header.base_sequence + header.last_offset_delta, base))
                        del cached[:-5]
                    next_offset = base
                    raw = bytearray(data.records)
                    for header in list(bh.iter_batches(raw)):
                        struct.pack_into(">q", raw, header.position, next_offset)
                        next_offset += header.last_offset_delta + 1
                    for header in bh.iter_batches(bytes(raw)):
                        self.logs.setdefault(key, []).append(
                            bytes(raw[header.position:header.position + header.size_in_bytes]))
                    written = ErrorCode.REQUEST_TIMED_OUT if key in lost else ErrorCode.NONE
                    self.answered_codes.append(written)
                    parts.append(broker_pb2.ProduceResponse.PartitionProduceResponse(
                        index=data.index, error=_error(written),
                        base_offset=base if request.acks != 0 and not written else -1,
                        log_append_time_ms=-1, log_start_offset=0))
                answer.responses.append(broker_pb2.ProduceResponse.TopicProduceResponse(
                    name=topic.name, partition_responses=parts))
        time.sleep(after)
        return answer

    def Fetch(self, request: Any, context: Any) -> Any:
        answer = broker_pb2.FetchResponse()
        empty = True
        with self.lock:
            self.fetch_requests.append(request)
            for topic in request.topics:
                parts = []
                for part in topic.partitions:
                    key = (topic.topic, part.partition)
                    end = self.end(key)
                    start = self.log_start.get(key, 0)
                    if not start <= part.fetch_offset <= end:
                        parts.append(broker_pb2.FetchResponse.PartitionData(
                            partition_index=part.partition,
                            error=_error(ErrorCode.OFFSET_OUT_OF_RANGE), high_watermark=end))
                        continue
                    batches = [b for b in self.logs.get(key, []) if (
                        bh.BatchHeader(b).base_offset + bh.BatchHeader(b).last_offset_delta
                        >= part.fetch_offset and bh.BatchHeader(b).base_offset >= start)]
                    # Whole batches up to partition_max_bytes, at least one (as Kafka does).
                    size = 0
                    for count, batch in enumerate(batches):
                        size += len(batch)
                        if count and size > part.partition_max_bytes:
                            batches = batches[:count]
                            break
                    data = b"".join(batches)
                    empty = empty and not data
                    parts.append(broker_pb2.FetchResponse.PartitionData(
                        partition_index=part.partition, error=_error(ErrorCode.NONE),
                        high_watermark=end, last_stable_offset=end, log_start_offset=start,
                        records=data))
                answer.responses.append(broker_pb2.FetchResponse.FetchableTopicResponse(
                    topic=topic.topic, partitions=parts))
        if empty:
            time.sleep(min(request.max_wait_ms, self.empty_fetch_hold_ms) / 1000)
        return answer

    def ListOffsets(self, request: Any, context: Any) -> Any:
        answer = broker_pb2.ListOffsetsResponse()
        with self.lock:
            for topic in request.topics:
                parts = []
                for part in topic.partitions:
                    key = (topic.name, part.partition_index)
                    offset, timestamp = -1, -1
                    if part.timestamp == -1:
                        offset = self.end(key)
                    elif part.timestamp == -2:
                        offset = self.log_start.get(key, 0)
                    else:
                        for batch in rb.decode_batches(b"".join(self.logs.get(key, []))):
                            hit = [r for r in batch.records if r.timestamp_ms >= part.timestamp]
                            if hit:
                                offset, timestamp = hit[0].offset, hit[0].timestamp_ms
                                break
                    parts.append(broker_pb2.ListOffsetsResponse.ListOffsetsPartitionResponse(
                        partition_index=part.partition_index, error=_error(ErrorCode.NONE),
                        offset=offset, timestamp=timestamp, leader_epoch=0))
                answer.topics.append(broker_pb2.ListOffsetsResponse.ListOffsetsTopicResponse(
                    name=topic.name, partitions=parts))
        return answer


@pytest.fixture
def fake_broker() -> Iterator[FakeBroker]:
    broker = FakeBroker()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    broker_pb2_grpc.add_BrokerServiceServicer_to_server(broker, server)
    broker.port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield broker
    finally:
        server.stop(grace=None)
