"""``kraftlog delete-records --offset-json-file FILE``: kafka-delete-records over the AdminService.

The file is kafka-delete-records.sh's JSON::

    {"partitions": [{"topic": "t", "partition": 0, "offset": 10}], "version": 1}

(``offset`` -1: everything up to the high watermark). Each partition's leader moves its
log start offset there and deletes the records below it; the tool prints Kafka's lines::

    Executing records delete operation
    Records delete operation completed:
    partition: t-0	low_watermark: 10
    partition: t-1	error: OFFSET_OUT_OF_RANGE: ...

and exits 1 when any partition failed (Kafka's tool exits 0 regardless). ``--output json``
prints one object instead, ``{"partitions": [{"topic", "partition", "lowWatermark"} or
{"topic", "partition", "error", "message"}]}`` (lowerCamelCase keys,
:mod:`kraftlog.cli_conventions`). A file that is
not that JSON is one error line, before anything is sent. Consumers positioned below the
new log start offset get OFFSET_OUT_OF_RANGE at their next fetch and reset by
``auto.offset.reset``. Edge module (the admin client, asyncio through ``topic_commands``).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from kraftlog import errors
from kraftlog.admin import admin_client as ac
from kraftlog.error_codes import ErrorCode
from kraftlog.ids import validate_topic_name
from kraftlog.tools import reassign_commands, topic_commands

SUPPORTED_VERSION = 1
EXPECTED = ('{"partitions": [{"topic": "t", "partition": 0, "offset": 10}, ...], '
            '"version": 1}')


def parse_offset_json(text: str, source: str) -> dict[tuple[str, int], int]:
    """kafka-delete-records' offset JSON -> {(topic, partition): offset}, in file order.

    ConfigError (one line naming ``source`` and the entry) for anything else: bad JSON, a
    missing or mistyped field, an offset below -1, an invalid topic name, a partition
    given twice or an unknown version."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise errors.ConfigError(f"{source}: not valid JSON: {exc.msg} at line {exc.lineno} "
                                 f"column {exc.colno}") from None
    if not isinstance(data, dict):
        raise errors.ConfigError(f"{source}: expected an object {EXPECTED}")
    version = data.get("version", SUPPORTED_VERSION)
    if version != SUPPORTED_VERSION or isinstance(version, bool):
        raise errors.ConfigError(f"{source}: unsupported version {version!r} (only "
                                 f"{SUPPORTED_VERSION})")
    entries = data.get("partitions")
    if not isinstance(entries, list) or not entries:
        raise errors.ConfigError(f"{source}: expected a non-empty \"partitions\" list: {EXPECTED}")
    result: dict[tuple[str, int], int] = {}
    for index, entry in enumerate(entries):
        fields = entry if isinstance(entry, dict) else {}
        topic, partition, offset = (fields.get("topic"), fields.get("partition"),
                                    fields.get("offset"))
        if (not isinstance(topic, str) or not isinstance(partition, int)
                or isinstance(partition, bool) or partition < 0
                or not isinstance(offset, int) or isinstance(offset, bool) or offset < -1):
            raise errors.ConfigError(
                f"{source}: partitions[{index}] must be {{\"topic\": NAME, \"partition\": N >= 0, "
                f"\"offset\": N >= -1}}, got {json.dumps(entry)}")
        try:
            validate_topic_name(topic)
        except errors.InvalidTopicError as exc:
            raise errors.ConfigError(f"{source}: partitions[{index}]: {exc}") from None
        if (topic, partition) in result:
            raise errors.ConfigError(f"{source}: the offset json file contains {topic}-{partition} "
                                     "more than once")
        result[(topic, partition)] = offset
    return result


def result_lines(answer: Any) -> tuple[list[str], bool]:
    """Kafka's per-partition lines for a DeleteRecordsResponse, and whether any failed."""
    lines: list[str] = []
    failed = False
    for topic in answer.topics:
        for part in topic.partitions:
            name = f"{topic.name}-{part.partition_index}"
            code = ErrorCode(part.error.code)
            if code is ErrorCode.NONE:
                lines.append(f"partition: {name}\tlow_watermark: {part.low_watermark}")
            else:
                failed = True
                message = part.error.message
                lines.append(f"partition: {name}\terror: {code.name}"
                             + (f": {message}" if message and message != code.name else ""))
    return lines, failed


def result_json(answer: Any) -> tuple[dict[str, Any], bool]:
    """``--output json``: per partition its new low watermark or its error; any failed?"""
    partitions: list[dict[str, Any]] = []
    for topic in answer.topics:
        for part in topic.partitions:
            code = ErrorCode(part.error.code)
            entry: dict[str, Any] = {"topic": topic.name, "partition": part.partition_index}
            if code is ErrorCode.NONE:
                entry["lowWatermark"] = part.low_watermark
            else:
                entry["error"] = code.name
                entry["message"] = part.error.message
            partitions.append(entry)
    return {"partitions": partitions}, any("error" in e for e in partitions)


def run_delete_records(args: argparse.Namespace) -> int:
    offsets = parse_offset_json(
        reassign_commands.read_file(args.offset_json_file, "offset json file"),
        args.offset_json_file)

    async def body(admin: ac.AdminClient) -> Any:
        return await admin.delete_records(offsets, check=False)

    if args.output == "json":
        payload, failed = result_json(topic_commands._run(args, body))
        print(json.dumps(payload))
        return 1 if failed else 0
    print("Executing records delete operation", flush=True)
    answer = topic_commands._run(args, body)
    lines, failed = result_lines(answer)
    print("Records delete operation completed:")
    for line in lines:
        print(line)
    return 1 if failed else 0


def register(subparsers: Any) -> None:
    """Add ``delete-records`` to the ``kraftlog`` command."""
    parser = subparsers.add_parser(
        "delete-records", help="delete records below offsets (kafka-delete-records)",
        description="Move partitions' log start offsets forward, deleting the records "
                    "before them. FILE: " + EXPECTED + " (offset -1: the high watermark).")
    topic_commands._common(parser, output=True)
    parser.add_argument("--offset-json-file", required=True, metavar="FILE",
                        help="kafka-delete-records' JSON of partitions and offsets")
    parser.set_defaults(func=run_delete_records)
