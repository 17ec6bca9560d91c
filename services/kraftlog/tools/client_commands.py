"""``kraftlog produce`` and ``kraftlog consume``: console producer and consumer.

Like ``kafka-console-producer.sh`` / ``kafka-console-consumer.sh``:

``kraftlog produce --bootstrap-server HOST:PORT --topic T [--key-separator SEP]
[--header K=V ...] [--acks 0|1|all] [--partition N] [--value V]`` sends each
line of stdin (or the one ``--value``) as a record; with ``--key-separator``
each line is ``KEY<SEP>VALUE``. It prints nothing on success and exits 1 with one
line naming the error (and how many records failed) otherwise.

``kraftlog consume --bootstrap-server HOST:PORT --topic T [--partition N]
[--from-beginning | --offset N|earliest|latest] [--max-messages N]
[--timeout-ms MS] [--print-key] [--print-headers] [--print-offset]
[--print-partition] [--print-timestamp] [--output table|json] [--group G]`` prints
records (value only, or tab-separated fields in Kafka's formatter order, or one JSON
object per line), stops after ``--max-messages`` or ``--timeout-ms`` without a
record, and prints ``Processed a total of N messages`` on stderr. With ``--group``
it starts each partition at the group's committed offset (else earliest with
``--from-beginning``, latest otherwise, as kafka-console-consumer does) and commits
the positions after printing each batch of records.

A batch that does not decode (CORRUPT_MESSAGE: a bad CRC, records that do not parse)
stops the tool after the records before it were printed: one error line names the
topic, partition and offset (and the offset to start from to skip it), exit code 1.
``--skip-corrupt`` instead prints that line as a warning, skips the batch and goes on.

``--bootstrap-server`` defaults to ``$KRAFTLOG_BOOTSTRAP_SERVER`` on both tools.
``--output`` is ``table`` (Kafka's formatter lines; ``text`` is the older name) or
``json`` (lowerCamelCase keys, :mod:`kraftlog.cli_conventions`); a bad value is a usage
error (exit 2).

Bad arguments, unknown topics and unreachable brokers (named) raise
:class:`kraftlog.errors.KraftlogError`, which :mod:`kraftlog.tools.cli` prints as one
line with exit code 1. Edge module: stdin/stdout and the client library.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any, BinaryIO

from kraftlog import cli_conventions as conventions
from kraftlog import errors, malloc_tuning
from kraftlog.client import config as client_config
from kraftlog.client import consumer as consumer_mod
from kraftlog.client import errors as client_errors
from kraftlog.client import producer as producer_mod
from kraftlog.ids import TopicPartition, validate_topic_name
from kraftlog.storage import record_batch as rb
from kraftlog.telemetry import tracing

CLI_MAX_BLOCK_MS = 5000
CLI_REQUEST_TIMEOUT_MS = 10000
CLI_DELIVERY_TIMEOUT_MS = 30000
CLOSE_TIMEOUT_MS = 5000


def register(subparsers: Any) -> None:
    """Add ``produce`` and ``consume`` to the ``kraftlog`` command."""
    produce = subparsers.add_parser(
        "produce", help="send records from stdin to a topic (kafka-console-producer)",
        description="Send each line of stdin (or --value) as one record to TOPIC.")
    _bootstrap_option(produce)
    produce.add_argument("--topic", required=True)
    produce.add_argument("--key-separator", metavar="SEP",
                         help="each line is KEY<SEP>VALUE (split at the first SEP)")
    produce.add_argument("--header", action="append", default=[], metavar="KEY=VALUE",
                         help="a header added to every record; repeatable")
    produce.add_argument("--acks", default="all", metavar="0|1|all",
                         help="acknowledgements the leader waits for (default all)")
    produce.add_argument("--partition", metavar="N",
                         help="send every record to this partition (default: by key)")
    produce.add_argument("--value", help="send this one record instead of reading stdin")
    produce.add_argument("--compression-type", default="none",
                         metavar="none|gzip|lz4|zstd", help="batch compression (default none)")
    produce.add_argument("--producer-property", action="append", default=[],
                         metavar="KEY=VALUE", help="a producer setting (Kafka name); repeatable")
    produce.set_defaults(func=_traced(run_produce))

    consume = subparsers.add_parser(
        "consume", help="print records of a topic (kafka-console-consumer)",
        description="Print the committed records of TOPIC (all partitions, or --partition).")
    _bootstrap_option(consume)
    consume.add_argument("--topic", required=True)
    consume.add_argument("--partition", metavar="N", help="read only this partition")
    consume.add_argument("--from-beginning", action="store_true",
                         help="start at the earliest offset (default: only new records)")
    consume.add_argument("--offset", metavar="N|earliest|latest",
                         help="start offset of --partition")
    consume.add_argument("--max-messages", metavar="N", help="exit after N records")
    consume.add_argument("--timeout-ms", metavar="MS",
                         help="exit after MS milliseconds without a record")
    for name, what in (("key", "the key"), ("headers", "the headers"), ("offset", "the offset"),
                       ("partition", "the partition"), ("timestamp", "the timestamp")):
        consume.add_argument(f"--print-{name}", action="store_true", help=f"print {what}")
    conventions.add_output_option(
        consume, help_text="table: the values (and --print-* fields) as Kafka's formatter "
                           "prints them (default; 'text' also works); json: one object per "
                           "record and line")
    consume.add_argument("--group", metavar="G",
                         help="consumer group: start from its committed offsets and commit "
                              "after printing")
    consume.add_argument("--skip-corrupt", action="store_true",
                         help="warn about a batch that does not decode and skip it "
                              "(default: print the records before it, then stop with an error)")
    consume.add_argument("--consumer-property", action="append", default=[],
                         metavar="KEY=VALUE", help="a consumer setting (Kafka name); repeatable")
    consume.set_defaults(func=_traced(run_consume))


def _bootstrap_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap-server", default=None, metavar="HOST:PORT[,HOST:PORT]",
                        help="brokers to ask for metadata (default: "
                             f"${conventions.BOOTSTRAP_SERVER_ENV})")


# -- argument checks ---------------------------------------------------------------------------

def bootstrap_servers(flag: str | None) -> tuple[str, ...]:
    """``--bootstrap-server``, else ``$KRAFTLOG_BOOTSTRAP_SERVER``; one of them is needed."""
    if flag is not None:
        return client_config.parse_bootstrap_servers(flag, key="--bootstrap-server")
    env = conventions.env_default(conventions.BOOTSTRAP_SERVER_ENV)
    if env is None:
        raise errors.ConfigError(f"give --bootstrap-server HOST:PORT[,...] or set "
                                 f"${conventions.BOOTSTRAP_SERVER_ENV}")
    return client_config.parse_bootstrap_servers(
        env, key=f"${conventions.BOOTSTRAP_SERVER_ENV}")


def _traced(run: Any) -> Any:
    """Run a tool with OpenTelemetry set up from the ``OTEL_*`` variables (off unless they
    configure an exporter): its Produce / Fetch calls get CLIENT spans that the brokers'
    spans continue."""
    def traced(args: argparse.Namespace) -> int:
        tracer = tracing.setup_tracing(role="client", node_id=None)
        try:
            code: int = run(args)
            return code
        finally:
            tracer.shutdown()
    return traced


def _int_arg(name: str, value: str | None, *, minimum: int) -> int | None:
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        raise errors.ConfigError(f"{name} {value!r} is not an integer") from None
    if number < minimum:
        raise errors.ConfigError(f"{name} must be >= {minimum}, got {number}")
    return number


def parse_header(text: str) -> tuple[str, bytes]:
    """``KEY=VALUE`` (VALUE may be empty or contain '='); ConfigError otherwise."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise errors.ConfigError(f"--header {text!r} is not KEY=VALUE (a non-empty key, '=', "
                                 "a value)")
    return key, value.encode("utf-8")


def _properties(flag: str, items: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise errors.ConfigError(f"{flag} {item!r} is not KEY=VALUE")
        out[key.strip()] = value.strip()
    return out


def _topic(name: str) -> str:
    try:
        validate_topic_name(name)
    except errors.InvalidTopicError as exc:
        raise errors.ConfigError(f"--topic: {exc}") from None
    return name


# -- produce -----------------------------------------------------------------------------------

class _Outcome:
    """Counts acknowledgements and keeps the first failure (futures complete on the sender)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.sent = 0
        self.failed = 0
        self.first_error: BaseException | None = None

    def track(self, future: producer_mod.RecordFuture) -> None:
        self.sent += 1
        future.add_done_callback(self._done)

    def _done(self, future: producer_mod.RecordFuture) -> None:
        error = future.exception()
        if error is None:
            return
        with self._lock:
            self.failed += 1
            if self.first_error is None:
                self.first_error = error


def _lines(stream: BinaryIO) -> Any:
    for raw in stream:
        if raw.endswith(b"\r\n"):
            yield raw[:-2]
        elif raw.endswith(b"\n"):
            yield raw[:-1]
        else:
            yield raw


def run_produce(args: argparse.Namespace) -> int:
    topic = _topic(args.topic)
    headers = [parse_header(h) for h in args.header]
    acks = client_config.Acks.parse(args.acks)
    partition = _int_arg("--partition", args.partition, minimum=0)
    separator = args.key_separator.encode("utf-8") if args.key_separator is not None else None
    if separator is not None and not separator:
        raise errors.ConfigError("--key-separator must not be empty")
    properties: dict[str, Any] = {
        "bootstrap.servers": bootstrap_servers(args.bootstrap_server),
        "acks": acks, "compression.type": args.compression_type,
        "max.block.ms": CLI_MAX_BLOCK_MS, "request.timeout.ms": CLI_REQUEST_TIMEOUT_MS,
        "delivery.timeout.ms": CLI_DELIVERY_TIMEOUT_MS,
    }
    properties.update(_properties("--producer-property", args.producer_property))
    config = client_config.ProducerConfig.from_properties(properties)
    outcome = _Outcome()
    malloc_tuning.tune()  # this process moves records in bulk
    producer = producer_mod.Producer(config)
    try:
        values = [args.value.encode("utf-8")] if args.value is not None else _lines(
            sys.stdin.buffer)
        for number, line in enumerate(values, start=1):
            key: bytes | None = None
            value = line
            if separator is not None:
                key, found, value = line.partition(separator)
                if not found:
                    raise errors.ConfigError(
                        f"line {number} has no key separator {args.key_separator!r}")
            outcome.track(producer.send(topic, value, key=key, headers=headers,
                                        partition=partition))
        producer.flush(CLI_DELIVERY_TIMEOUT_MS + CLOSE_TIMEOUT_MS)
    finally:
        producer.close(timeout_ms=CLOSE_TIMEOUT_MS)
    if outcome.failed:
        raise client_errors.ClientError(
            f"{outcome.failed} of {outcome.sent} records failed: {outcome.first_error}")
    return 0


# -- consume -----------------------------------------------------------------------------------

def _bytes_json(record: dict[str, Any], name: str, data: bytes | None) -> None:
    if data is None:
        record[name] = None
        return
    try:
        record[name] = data.decode("utf-8")
    except UnicodeDecodeError:
        record[name] = base64.b64encode(data).decode("ascii")
        record[f"{name}Encoding"] = "base64"


def _timestamp_name(record: consumer_mod.ConsumerRecord) -> str:
    return ("LogAppendTime" if record.timestamp_type == rb.TimestampType.LOG_APPEND_TIME
            else "CreateTime")


def format_json(record: consumer_mod.ConsumerRecord) -> bytes:
    out: dict[str, Any] = {"topic": record.topic, "partition": record.partition,
                           "offset": record.offset, "timestamp": record.timestamp_ms,
                           "timestampType": _timestamp_name(record)}
    _bytes_json(out, "key", record.key)
    _bytes_json(out, "value", record.value)
    headers = []
    for header in record.headers:
        entry: dict[str, Any] = {"key": header.key}
        _bytes_json(entry, "value", header.value)
        headers.append(entry)
    out["headers"] = headers
    return json.dumps(out, separators=(",", ":")).encode("utf-8")


def format_text(record: consumer_mod.ConsumerRecord, args: argparse.Namespace) -> bytes:
    """Kafka's DefaultMessageFormatter order: timestamp, partition, offset, headers, key, value."""
    fields: list[bytes] = []
    if args.print_timestamp:
        fields.append(f"{_timestamp_name(record)}:{record.timestamp_ms}".encode())
    if args.print_partition:
        fields.append(f"Partition:{record.partition}".encode())
    if args.print_offset:
        fields.append(f"Offset:{record.offset}".encode())
    if args.print_headers:
        fields.append(b",".join(h.key.encode() + b":" + (b"null" if h.value is None else h.value)
                                for h in record.headers) or b"NO_HEADERS")
    if args.print_key:
        fields.append(b"null" if record.key is None else record.key)
    fields.append(b"null" if record.value is None else record.value)
    return b"\t".join(fields)


def run_consume(args: argparse.Namespace) -> int:
    topic = _topic(args.topic)
    partition = _int_arg("--partition", args.partition, minimum=0)
    max_messages = _int_arg("--max-messages", args.max_messages, minimum=1)
    timeout_ms = _int_arg("--timeout-ms", args.timeout_ms, minimum=0)
    start_offset: int | None = None
    start: str = "latest"
    if args.offset is not None:
        if partition is None:
            raise errors.ConfigError("--offset needs --partition")
        if args.from_beginning:
            raise errors.ConfigError("--offset and --from-beginning cannot be used together")
        if args.offset in ("earliest", "latest"):
            start = args.offset
        else:
            start_offset = _int_arg("--offset", args.offset, minimum=0)
    elif args.from_beginning:
        start = "earliest"
    properties: dict[str, Any] = {
        "bootstrap.servers": bootstrap_servers(args.bootstrap_server),
        "auto.offset.reset": start, "default.api.timeout.ms": CLI_REQUEST_TIMEOUT_MS,
    }
    group = args.group
    if group is not None:
        if not group:
            raise errors.ConfigError("--group must not be empty")
        # Committed explicitly after each printed batch (and the committed offset, not a
        # seek, decides where a partition starts unless --offset is given).
        properties.update({"group.id": group, "enable.auto.commit": False})
    properties.update(_properties("--consumer-property", args.consumer_property))
    config = client_config.ConsumerConfig.from_properties(properties)
    out = sys.stdout.buffer
    count = 0
    started = False
    try:
        malloc_tuning.tune()  # this process moves records in bulk
        with consumer_mod.Consumer(config) as consumer:
            if partition is None:
                partitions = consumer.assign_topic(topic)
            else:
                partitions = [TopicPartition(topic=topic, partition=partition)]
                consumer.assign(partitions)
            if start_offset is not None:
                consumer.seek(partitions[0], start_offset)
            elif group is not None:
                pass  # committed offsets, else auto.offset.reset (earliest / latest)
            elif start == "earliest":
                consumer.seek_to_beginning()
            else:
                consumer.seek_to_end()
            started = True
            last_record = time.monotonic()
            while max_messages is None or count < max_messages:
                wait_ms = 1000
                if timeout_ms is not None:
                    left_ms = int((last_record + timeout_ms / 1000 - time.monotonic()) * 1000)
                    if left_ms <= 0:
                        break
                    wait_ms = min(wait_ms, left_ms)
                limit = None if max_messages is None else max_messages - count
                try:
                    records = consumer.poll(max_records=limit, timeout_ms=wait_ms)
                except client_errors.CorruptRecordBatchError as exc:
                    if not args.skip_corrupt or exc.next_offset is None:
                        raise
                    print(f"kraftlog: warning: skipping a corrupt batch: {exc}", file=sys.stderr)
                    consumer.seek(exc.topic_partition, exc.next_offset)
                    continue
                if not records:
                    continue
                last_record = time.monotonic()
                lines = [format_json(r) if args.output == "json" else format_text(r, args)
                         for r in records]
                out.write(b"\n".join(lines) + b"\n")
                out.flush()
                count += len(records)
                if group is not None:
                    consumer.commit()
    except BrokenPipeError:
        return 0
    finally:
        if started:
            print(f"Processed a total of {count} messages", file=sys.stderr)
    return 0
