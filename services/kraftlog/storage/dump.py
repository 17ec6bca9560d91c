"""The pure half of ``kraftlog log dump``: turning a storage file's bytes into kafka-dump-log lines.

Owns the text format of the dump (after Kafka's ``DumpLogSegments``): one line
per record batch, one ``| offset: ...`` line per record with
``--deep-iteration`` / ``--print-data-log``, ``offset: N position: P`` for
``.index``, ``timestamp: T offset: O`` for ``.timeindex``, the aborted
transactions of a ``.txnindex`` copied from Kafka (kraftlog writes none, and
says so), and the entries of checkpoint files, ``leader-epoch-checkpoint`` and
``meta.properties``.

And its JSON Lines form (``--output json``): the same facts, one JSON object per
line, so a dump streams into ``jq`` or a script as it is read. Every object has a
``type``; its other keys are the text line's fields, under Kafka's DumpLogSegments
names (``baseOffset`` ... ``isvalid``; a timestamp's key is its type, ``CreateTime`` or
``LogAppendTime``, as in Kafka), with the same values (a batch's text line is rendered
from its JSON fields), so a script written against one reads the other:

* ``file`` {path, kind, baseOffset?}: starts each file (``baseOffset`` when the
  name encodes one, Kafka's "Log starting offset");
* ``batch`` {baseOffset, lastOffset, count, baseSequence, lastSequence, producerId,
  producerEpoch, partitionLeaderEpoch, isTransactional, isControl, position,
  CreateTime|LogAppendTime, size, magic, compresscodec, crc, isvalid};
* ``record`` {offset, CreateTime|LogAppendTime, keySize, valueSize, sequence,
  headerKeys (a list), controlType?}, and with ``--print-data-log`` ``key`` and
  ``payload``: a UTF-8 string, or base64 with ``keyEncoding`` / ``payloadEncoding``
  ``"base64"`` (``kraftlog consume --output json``'s rule), null for a null;
  ``__cluster_metadata`` payloads are the decoded message as an object, or the
  bytes plus ``payloadError`` when they do not decode;
* ``offsetIndexEntry`` {offset, position}, ``timeIndexEntry`` {timestamp, offset},
  ``preallocated`` {fromEntry}, ``note`` {note}, ``abortedTxn`` {version,
  producerId, firstOffset, lastOffset, lastStableOffset};
* ``checkpoint`` {version, entries}, ``offsetCheckpointEntry`` {topic, partition,
  offset}, ``leaderEpochEntry`` {epoch, startOffset}; ``metaProperties``
  {version, cluster.id, node.id, directory.id (null when absent), other keys};
* ``stopped`` {position, maxBytes, fileSize}: ``--max-bytes`` reached;
* ``error`` {error, notDumpedBytes?, position?}: why dumping this file stopped.

Called by :mod:`kraftlog.tools.storage_commands`, which reads the files (honouring
``--max-bytes``), picks the payload formatter (protobuf metadata records for
``__cluster_metadata``) and prints. This module does no I/O and imports no
protobuf: it must stay usable by the pure storage core and its tests.

Corrupt input never raises: the result holds every line that could be
decoded, then ``error`` says where (file and byte position or line) and why
dumping stopped, so the command can exit 1.
"""

from __future__ import annotations

import base64
import enum
import json
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kraftlog import errors
from kraftlog.storage import batch_header as bh
from kraftlog.storage import checkpoint, meta_properties, record_batch

PayloadFormatter = Callable[[bytes], str]
"""Renders a record value for ``payload:``; must not raise (fall back to hex)."""

ControlFormatter = Callable[["record_batch.ControlRecordType", bytes], str]
"""Renders a control record's value given its type; must not raise."""

JsonPayloadFormatter = Callable[[bytes], dict[str, Any]]
"""The ``payload`` keys of a JSON record object for a value (see :func:`bytes_json`);
must not raise."""

JsonControlFormatter = Callable[["record_batch.ControlRecordType", bytes], dict[str, Any]]
"""The ``payload`` keys of a JSON record object for a control record's value; must not raise."""

OUTPUT_FORMATS = ("text", "json")

MAX_BYTES_DEFAULT = 2**31 - 1
"""kafka-dump-log's ``--max-bytes`` default (Integer.MAX_VALUE)."""

NO_SEQUENCE = -1
_MAX_SEQUENCE = 2**31 - 1
_SEGMENT_NAME = re.compile(r"([0-9]{20})\.(log|index|timeindex|txnindex)")
_SNAPSHOT_NAME = re.compile(r"([0-9]{20})-([0-9]{10})\.checkpoint")
_OFFSET_ENTRY = struct.Struct(">ii")  # relativeOffset, position
_TIME_ENTRY = struct.Struct(">qi")  # timestamp, relativeOffset
# Kafka's AbortedTxn: version int16, producerId, firstOffset, lastOffset, lastStableOffset int64.
_TXN_ENTRY = struct.Struct(">hqqqq")
TXN_INDEX_NOTE = ("kraftlog writes no .txnindex (it has no transactions, so nothing is ever aborted); "
                  "this file comes from Kafka")

class FileKind(enum.Enum):
    """What a file in a data directory is, decided by its name as kafka-dump-log does."""

    LOG = "log"
    OFFSET_INDEX = "index"
    TIME_INDEX = "timeindex"
    TXN_INDEX = "txnindex"
    SNAPSHOT = "snapshot"  # a raft snapshot <offset>-<epoch>.checkpoint: record batches
    OFFSET_CHECKPOINT = "offset-checkpoint"
    LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
    META_PROPERTIES = "meta.properties"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True, kw_only=True)
class DumpOptions:
    print_data_log: bool = False
    """Print each record's key and payload (implies deep iteration)."""
    deep_iteration: bool = False
    """Print one line per record, not only per batch."""
    max_bytes: int = MAX_BYTES_DEFAULT
    """Read at most this many bytes of a log file (the caller enforces it)."""
    output: str = "text"
    """``text`` (kafka-dump-log's lines) or ``json`` (JSON Lines, see the module doc)."""

    @property
    def records(self) -> bool:
        return self.deep_iteration or self.print_data_log


@dataclass(frozen=True, slots=True, kw_only=True)
class DumpResult:
    lines: tuple[str, ...]
    error: str | None
    """Why dumping stopped early, naming the file and where; None when the whole file was good."""


def _field_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def fields_text(item: dict[str, Any]) -> str:
    """The text line of a dump object: its fields (but ``type``) as ``key: value``."""
    return " ".join(f"{key}: {_field_text(value)}" for key, value in item.items() if key != "type")


class _Sink:
    """Collects a file's dump as text lines or as JSON Lines (``DumpOptions.output``)."""

    def __init__(self, output: str) -> None:
        self.json = output == "json"
        self.lines: list[str] = []

    def item(self, kind: str, fields: dict[str, Any]) -> None:
        """An object whose text line is its fields as ``key: value``."""
        if self.json:
            self.lines.append(json.dumps({"type": kind, **fields}))
        else:
            self.lines.append(fields_text(fields))

    def line(self, text: str, kind: str, fields: dict[str, Any]) -> None:
        """An object whose text line is written out (the JSON object is built from fields)."""
        self.lines.append(json.dumps({"type": kind, **fields}) if self.json else text)

    def result(self, error: str | None) -> DumpResult:
        return DumpResult(lines=tuple(self.lines), error=error)


def failure(error: str, options: DumpOptions) -> DumpResult:
    """A file that could not be dumped at all (missing, unreadable, of an unknown kind)."""
    sink = _Sink(options.output)
    sink.line(f"Error: {error}", "error", {"error": error})
    return sink.result(error)


def file_kind(name: str) -> FileKind:
    if name == meta_properties.FILE_NAME:
        return FileKind.META_PROPERTIES
    if name == checkpoint.LEADER_EPOCH_CHECKPOINT:
        return FileKind.LEADER_EPOCH_CHECKPOINT
    if name in checkpoint.OFFSET_CHECKPOINT_FILES:
        return FileKind.OFFSET_CHECKPOINT
    if name.endswith(".log"):
        return FileKind.LOG
    if name.endswith(".index"):
        return FileKind.OFFSET_INDEX
    if name.endswith(".timeindex"):
        return FileKind.TIME_INDEX
    if name.endswith(".txnindex"):
        return FileKind.TXN_INDEX
    if name.endswith(".checkpoint"):
        return FileKind.SNAPSHOT
    return FileKind.UNKNOWN


def base_offset_of(name: str) -> int | None:
    """The base offset a segment or snapshot file name encodes, None when it encodes none."""
    match = _SEGMENT_NAME.fullmatch(name) or _SNAPSHOT_NAME.fullmatch(name)
    return int(match.group(1)) if match else None


def escape_text(text: str) -> str:
    """Make text safe for one output line: control characters and undecodable bytes
    (``surrogateescape``) as ``\\xNN``, newline and tab as ``\\n`` / ``\\t``, ``\\`` doubled."""
    out: list[str] = []
    for char in text:
        code = ord(char)
        if char == "\\":
            out.append("\\\\")
        elif char == "\n":
            out.append("\\n")
        elif char == "\t":
            out.append("\\t")
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        elif 0xDC80 <= code <= 0xDCFF:
            # A byte that was not UTF-8, kept by the surrogateescape decoder.
            out.append(f"\\x{code - 0xDC00:02x}")
        else:
            out.append(char)
    return "".join(out)


def utf8_payload(value: bytes) -> str:
    """The default payload rendering: UTF-8 text as Kafka prints it, undecodable bytes escaped."""
    return escape_text(value.decode("utf-8", "surrogateescape"))


def hex_payload(value: bytes) -> str:
    return "0x" + value.hex()


def hex_control(record_type: record_batch.ControlRecordType, value: bytes) -> str:
    return hex_payload(value)


def bytes_json(name: str, value: bytes | None) -> dict[str, Any]:
    """``{name: text}`` for UTF-8 bytes, ``{name: base64, nameEncoding: "base64"}`` otherwise,
    ``{name: None}`` for a null (``kraftlog consume --output json``'s rule)."""
    if value is None:
        return {name: None}
    try:
        return {name: value.decode("utf-8")}
    except UnicodeDecodeError:
        return {name: base64.b64encode(value).decode("ascii"), f"{name}Encoding": "base64"}


def bytes_json_payload(value: bytes) -> dict[str, Any]:
    return bytes_json("payload", value)


def bytes_json_control(record_type: record_batch.ControlRecordType, value: bytes) -> dict[str, Any]:
    return bytes_json("payload", value)


def _increment_sequence(base_sequence: int, delta: int) -> int:
    # Producer sequences wrap at Integer.MAX_VALUE (DefaultRecordBatch.incrementSequence).
    if base_sequence == NO_SEQUENCE:
        return NO_SEQUENCE
    if base_sequence > _MAX_SEQUENCE - delta:
        return delta - (_MAX_SEQUENCE - base_sequence) - 1
    return base_sequence + delta


def _timestamp_label(timestamp_type: bh.TimestampType) -> str:
    if timestamp_type == bh.TimestampType.LOG_APPEND_TIME:
        return "LogAppendTime"
    return "CreateTime"


def _codec_name(header: bh.BatchHeader) -> str:
    try:
        return header.compression.name.lower()
    except errors.CorruptRecordError:
        # An unknown codec id still gets a line; validate() reports it.
        return f"unknown({header.attributes & 0x07})"


def batch_fields(header: bh.BatchHeader, *, position: int, is_valid: bool) -> dict[str, Any]:
    """The fields of the batch whose header starts at byte ``position``, in Kafka's order."""
    return {
        "baseOffset": header.base_offset, "lastOffset": header.last_offset,
        "count": header.record_count, "baseSequence": header.base_sequence,
        "lastSequence": _increment_sequence(header.base_sequence, header.last_offset_delta),
        "producerId": header.producer_id, "producerEpoch": header.producer_epoch,
        "partitionLeaderEpoch": header.partition_leader_epoch,
        "isTransactional": header.is_transactional, "isControl": header.is_control,
        "position": position, _timestamp_label(header.timestamp_type): header.max_timestamp,
        "size": header.size_in_bytes, "magic": header.magic,
        "compresscodec": _codec_name(header), "crc": header.crc, "isvalid": is_valid,
    }


def format_batch_line(header: bh.BatchHeader, *, position: int, is_valid: bool) -> str:
    """One kafka-dump-log batch line for the batch whose header starts at byte ``position``."""
    return fields_text(batch_fields(header, position=position, is_valid=is_valid))


def _control_type(key: bytes | None) -> record_batch.ControlRecordType | str:
    # Control records: transaction markers, and KRaft's own (KIP-595 LEADER_CHANGE,
    # KIP-630 snapshot header/footer, KIP-853 kraft.version and voters).
    try:
        return record_batch.decode_control_record_key(key)
    except errors.CorruptRecordError as exc:
        return f"INVALID({exc})"


def format_record_line(
    record: record_batch.Record,
    header: bh.BatchHeader,
    *,
    print_data_log: bool,
    payload_formatter: PayloadFormatter,
    control_formatter: ControlFormatter = hex_control,
) -> str:
    """One ``| offset: ...`` record line (Kafka's layout; key and payload only with print_data_log)."""
    sequence = _increment_sequence(header.base_sequence, record.offset - header.base_offset)
    key_size = -1 if record.key is None else len(record.key)
    value_size = -1 if record.value is None else len(record.value)
    header_keys = ",".join(escape_text(h.key) for h in record.headers)
    line = (
        f"| offset: {record.offset} {_timestamp_label(header.timestamp_type)}: {record.timestamp_ms} "
        f"keySize: {key_size} valueSize: {value_size} sequence: {sequence} "
        f"headerKeys: [{header_keys}]"
    )
    control_type = _control_type(record.key) if header.is_control else None
    if control_type is not None:
        name = control_type if isinstance(control_type, str) else control_type.name
        line += f" controlType: {name}"
    if print_data_log:
        key = "null" if record.key is None else utf8_payload(record.key)
        if control_type is not None:
            if record.value is None:
                payload = "null"
            elif isinstance(control_type, str):
                payload = hex_payload(record.value)
            else:
                payload = control_formatter(control_type, record.value)
        else:
            payload = "null" if record.value is None else payload_formatter(record.value)
        line += f" key: {key} payload: {payload}"
    return line


def record_json_fields(
    record: record_batch.Record,
    header: bh.BatchHeader,
    *,
    print_data_log: bool,
    payload_formatter: JsonPayloadFormatter = bytes_json_payload,
    control_formatter: JsonControlFormatter = bytes_json_control,
) -> dict[str, Any]:
    """A ``record`` object's fields: those of :func:`format_record_line`, headerKeys a list,
    key and payload per :func:`bytes_json` (or the formatter's decoding)."""
    fields: dict[str, Any] = {
        "offset": record.offset,
        _timestamp_label(header.timestamp_type): record.timestamp_ms,
        "keySize": -1 if record.key is None else len(record.key),
        "valueSize": -1 if record.value is None else len(record.value),
        "sequence": _increment_sequence(header.base_sequence, record.offset - header.base_offset),
        "headerKeys": [h.key for h in record.headers],
    }
    control_type = _control_type(record.key) if header.is_control else None
    if control_type is not None:
        fields["controlType"] = control_type if isinstance(control_type, str) else control_type.name
    if print_data_log:
        fields.update(bytes_json("key", record.key))
        if record.value is None:
            fields["payload"] = None
        elif control_type is None:
            fields.update(payload_formatter(record.value))
        elif isinstance(control_type, str):
            fields.update(bytes_json_payload(record.value))
        else:
            fields.update(control_formatter(control_type, record.value))
    return fields


def _describe_tail(data: bytes, position: int) -> str:
    remaining = len(data) - position
    if remaining < bh.FRAME.size:
        return f"{remaining} trailing bytes are too few for a batch header (a torn write?)"
    base_offset, batch_length = bh.FRAME.unpack_from(data, position)
    needed = bh.LOG_OVERHEAD + batch_length
    if remaining < bh.HEADER_SIZE:
        return (f"incomplete batch header: {remaining} bytes remain, a v2 header needs "
                f"{bh.HEADER_SIZE} (a torn write?)")
    return (f"incomplete batch (baseOffset {base_offset}): it needs {needed} bytes but only "
            f"{remaining} remain (a torn write?)")


def dump_log(
    data: bytes,
    *,
    path: str,
    options: DumpOptions,
    base_offset: int | None = None,
    file_size: int | None = None,
    payload_formatter: PayloadFormatter = utf8_payload,
    control_formatter: ControlFormatter = hex_control,
    json_payload_formatter: JsonPayloadFormatter = bytes_json_payload,
    json_control_formatter: JsonControlFormatter = bytes_json_control,
    kind: FileKind = FileKind.LOG,
) -> DumpResult:
    """Dump a ``.log`` segment (or a raft snapshot), given its first ``len(data)`` bytes.

    ``file_size`` is the whole file's size when ``data`` was cut at
    ``--max-bytes``: a batch cut by that limit is not corruption. Validation
    follows recovery: the dump stops at the first batch with a bad size,
    magic or CRC, or whose offsets go backwards, the point where
    :func:`batch_header.scan_valid_prefix` would truncate.
    """
    sink = _Sink(options.output)
    _start(sink, path, kind, base_offset)
    limited = file_size is not None and file_size > len(data)
    view = memoryview(data)
    position = 0
    next_offset: int | None = None
    error: str | None = None

    def stopped() -> None:
        sink.line(f"Stopped at position {position}: --max-bytes {len(data)} reached "
                  f"(the file has {file_size} bytes)", "stopped",
                  {"position": position, "maxBytes": len(data), "fileSize": file_size})

    try:
        for header in bh.iter_batches(view):
            size = header.size_in_bytes
            try:
                header.validate()
            except errors.CorruptRecordError as exc:
                sink.item("batch", batch_fields(header, position=position, is_valid=False))
                error = f"{path}: {exc}"
                break
            sink.item("batch", batch_fields(header, position=position, is_valid=True))
            if next_offset is not None and header.base_offset < next_offset:
                error = (f"{path}: batch at position {position} has baseOffset {header.base_offset} "
                         f"below the previous batch's next offset {next_offset}")
                break
            next_offset = header.next_offset
            if options.records:
                for batch in record_batch.decode_batches(view[position:position + size]):
                    for record in batch.records:
                        if sink.json:
                            sink.item("record", record_json_fields(
                                record, header, print_data_log=options.print_data_log,
                                payload_formatter=json_payload_formatter,
                                control_formatter=json_control_formatter,
                            ))
                            continue
                        sink.lines.append(format_record_line(
                            record, header, print_data_log=options.print_data_log,
                            payload_formatter=payload_formatter,
                            control_formatter=control_formatter,
                        ))
            position += size
        else:
            if position < len(data):
                if limited:
                    stopped()
                else:
                    error = f"{path}: at position {position}: {_describe_tail(data, position)}"
    except errors.CorruptRecordError as exc:
        error = f"{path}: in the batch at position {position}: {exc}"
    if error is None and limited and position == len(data):
        stopped()
    if error is not None:
        left = len(data) - position
        sink.line(f"Error: {error}; {left} bytes from position {position} not dumped", "error",
                  {"error": error, "position": position, "notDumpedBytes": left})
    return sink.result(error)


def _start(sink: _Sink, path: str, kind: FileKind, base_offset: int | None) -> None:
    """The ``Dumping PATH`` line (and ``Log starting offset`` of a segment or snapshot)."""
    fields: dict[str, Any] = {"path": path, "kind": kind.value}
    if base_offset is not None:
        fields["baseOffset"] = base_offset
    if sink.json:
        sink.item("file", fields)
        return
    sink.lines.append(f"Dumping {path}")
    if base_offset is not None and kind in (FileKind.LOG, FileKind.SNAPSHOT):
        sink.lines.append(f"Log starting offset: {base_offset}")


def _fail(sink: _Sink, error: str) -> DumpResult:
    sink.line(f"Error: {error}", "error", {"error": error})
    return sink.result(error)


def dump_offset_index(data: bytes, *, path: str, base_offset: int, output: str = "text") -> DumpResult:
    """``offset: N position: P`` per ``.index`` entry (8 bytes: relative offset, position)."""
    sink = _Sink(output)
    _start(sink, path, FileKind.OFFSET_INDEX, base_offset)
    error: str | None = None
    count = len(data) // _OFFSET_ENTRY.size
    previous: tuple[int, int] | None = None
    for index in range(count):
        relative, position = _OFFSET_ENTRY.unpack_from(data, index * _OFFSET_ENTRY.size)
        if index > 0 and relative == 0 and position == 0:
            # Kafka preallocates index files; a zero entry after the first is unused space.
            return _preallocated(sink, index)
        if relative < 0 or position < 0 or (
            previous is not None and (relative <= previous[0] or position <= previous[1])
        ):
            error = (f"{path}: entry {index} at byte {index * _OFFSET_ENTRY.size} "
                     f"(relative offset {relative}, position {position}) does not increase "
                     "past the previous entry")
            break
        sink.item("offsetIndexEntry", {"offset": base_offset + relative, "position": position})
        previous = (relative, position)
    else:
        if len(data) % _OFFSET_ENTRY.size:
            error = (f"{path}: {len(data) % _OFFSET_ENTRY.size} trailing bytes after {count} "
                     f"entries are not a whole {_OFFSET_ENTRY.size}-byte entry (a torn write?)")
    return sink.result(None) if error is None else _fail(sink, error)


def _preallocated(sink: _Sink, index: int) -> DumpResult:
    sink.line(f"(entries from {index} on are zero-filled preallocated space)", "preallocated",
              {"fromEntry": index})
    return sink.result(None)


def dump_time_index(data: bytes, *, path: str, base_offset: int, output: str = "text") -> DumpResult:
    """``timestamp: T offset: O`` per ``.timeindex`` entry (12 bytes: timestamp, relative offset)."""
    sink = _Sink(output)
    _start(sink, path, FileKind.TIME_INDEX, base_offset)
    error: str | None = None
    count = len(data) // _TIME_ENTRY.size
    previous: tuple[int, int] | None = None
    for index in range(count):
        timestamp, relative = _TIME_ENTRY.unpack_from(data, index * _TIME_ENTRY.size)
        if index > 0 and timestamp == 0 and relative == 0:
            return _preallocated(sink, index)
        if relative < 0 or (
            previous is not None and (timestamp <= previous[0] or relative < previous[1])
        ):
            error = (f"{path}: entry {index} at byte {index * _TIME_ENTRY.size} "
                     f"(timestamp {timestamp}, relative offset {relative}) does not increase "
                     "past the previous entry")
            break
        sink.item("timeIndexEntry", {"timestamp": timestamp, "offset": base_offset + relative})
        previous = (timestamp, relative)
    else:
        if len(data) % _TIME_ENTRY.size:
            error = (f"{path}: {len(data) % _TIME_ENTRY.size} trailing bytes after {count} "
                     f"entries are not a whole {_TIME_ENTRY.size}-byte entry (a torn write?)")
    return sink.result(None) if error is None else _fail(sink, error)


def dump_txn_index(data: bytes, *, path: str, base_offset: int | None = None,
                   output: str = "text") -> DumpResult:
    """A Kafka ``.txnindex``: one line per aborted transaction (34-byte entries), as kafka-dump-log prints.

    kraftlog never writes one; the first line says so, so that nobody looks
    for transaction state kraftlog does not keep.
    """
    sink = _Sink(output)
    _start(sink, path, FileKind.TXN_INDEX, base_offset)
    sink.line(f"Note: {TXN_INDEX_NOTE}", "note", {"note": TXN_INDEX_NOTE})
    error: str | None = None
    count = len(data) // _TXN_ENTRY.size
    for index in range(count):
        version, producer_id, first, last, last_stable = _TXN_ENTRY.unpack_from(data, index * _TXN_ENTRY.size)
        if version != 0:
            error = (f"{path}: entry {index} at byte {index * _TXN_ENTRY.size} has version {version} "
                     "(Kafka writes version 0)")
            break
        sink.item("abortedTxn", {"version": version, "producerId": producer_id, "firstOffset": first,
                                 "lastOffset": last, "lastStableOffset": last_stable})
    else:
        if len(data) % _TXN_ENTRY.size:
            error = (f"{path}: {len(data) % _TXN_ENTRY.size} trailing bytes after {count} "
                     f"entries are not a whole {_TXN_ENTRY.size}-byte entry (a torn write?)")
    return sink.result(None) if error is None else _fail(sink, error)


def dump_offset_checkpoint(data: bytes, *, path: str, output: str = "text") -> DumpResult:
    sink = _Sink(output)
    _start(sink, path, FileKind.OFFSET_CHECKPOINT, None)
    try:
        entries = checkpoint.parse_checkpoint(data, checkpoint.OffsetEntryFormatter(), path=path)
    except errors.CorruptFileError as exc:
        return _fail(sink, str(exc))
    sink.item("checkpoint", {"version": checkpoint.CURRENT_VERSION, "entries": len(entries)})
    for tp, offset in entries:
        sink.item("offsetCheckpointEntry",
                  {"topic": tp.topic, "partition": tp.partition, "offset": offset})
    return sink.result(None)


def dump_leader_epoch_checkpoint(data: bytes, *, path: str, output: str = "text") -> DumpResult:
    sink = _Sink(output)
    _start(sink, path, FileKind.LEADER_EPOCH_CHECKPOINT, None)
    try:
        entries = checkpoint.parse_checkpoint(data, checkpoint.EpochEntryFormatter(), path=path)
    except errors.CorruptFileError as exc:
        return _fail(sink, str(exc))
    sink.item("checkpoint", {"version": checkpoint.CURRENT_VERSION, "entries": len(entries)})
    for e in entries:
        sink.item("leaderEpochEntry", {"epoch": e.epoch, "startOffset": e.start_offset})
    return sink.result(None)


def dump_meta_properties(data: bytes, *, path: str, output: str = "text") -> DumpResult:
    sink = _Sink(output)
    _start(sink, path, FileKind.META_PROPERTIES, None)
    try:
        props = meta_properties.parse_properties(data, path=path)
    except errors.CorruptFileError as exc:
        return _fail(sink, str(exc))
    directory_id = None if props.directory_id is None else str(props.directory_id)
    fields: dict[str, Any] = {"version": int(props.version), "cluster.id": str(props.cluster_id),
                              "node.id": props.node_id, "directory.id": directory_id}
    fields.update(sorted(props.other.items()))
    if sink.json:
        sink.item("metaProperties", fields)
    else:
        fields["directory.id"] = "(none)" if directory_id is None else directory_id
        sink.lines.extend(f"{key}: {value}" for key, value in fields.items())
    return sink.result(None)


def dump_file(
    name: str,
    data: bytes,
    *,
    path: str,
    options: DumpOptions,
    file_size: int | None = None,
    payload_formatter: PayloadFormatter = utf8_payload,
    control_formatter: ControlFormatter = hex_control,
    json_payload_formatter: JsonPayloadFormatter = bytes_json_payload,
    json_control_formatter: JsonControlFormatter = bytes_json_control,
) -> DumpResult:
    """Dispatch on the file name; ``name`` is the base name, ``path`` what to print."""
    kind = file_kind(name)
    base_offset = base_offset_of(name)
    output = options.output
    if kind in (FileKind.LOG, FileKind.SNAPSHOT):
        return dump_log(data, path=path, options=options, base_offset=base_offset,
                        file_size=file_size, payload_formatter=payload_formatter,
                        control_formatter=control_formatter,
                        json_payload_formatter=json_payload_formatter,
                        json_control_formatter=json_control_formatter, kind=kind)
    if kind in (FileKind.OFFSET_INDEX, FileKind.TIME_INDEX):
        if base_offset is None:
            sink = _Sink(output)
            _start(sink, path, kind, None)
            return _fail(sink, f"{path}: file name is not <20-digit base offset>.{kind.value}")
        if kind == FileKind.OFFSET_INDEX:
            return dump_offset_index(data, path=path, base_offset=base_offset, output=output)
        return dump_time_index(data, path=path, base_offset=base_offset, output=output)
    if kind == FileKind.TXN_INDEX:
        return dump_txn_index(data, path=path, base_offset=base_offset, output=output)
    if kind == FileKind.OFFSET_CHECKPOINT:
        return dump_offset_checkpoint(data, path=path, output=output)
    if kind == FileKind.LEADER_EPOCH_CHECKPOINT:
        return dump_leader_epoch_checkpoint(data, path=path, output=output)
    if kind == FileKind.META_PROPERTIES:
        return dump_meta_properties(data, path=path, output=output)
    return failure(f"{path}: unknown file type (expected .log, .index, .timeindex, .txnindex, "
                   "a snapshot .checkpoint, a checkpoint file or meta.properties)", options)
