"""The generated Kafka message codecs: not stale, round-trip at every version, hostile-input safe,
and byte-identical to what real clients (kcat / librdkafka 2.0, confluent-kafka / librdkafka
2.16) sent.

The golden frames in ``golden_requests.json`` were captured by a logging TCP proxy between
each client and a kraftlog broker's Kafka listener (1 broker, topic ``golden``,
``client.id=golden``): kcat producing ``hello`` idempotently with acks=all and consuming it,
confluent-kafka producing ``world`` and consuming both with a committed offset, and its
AdminClient creating and deleting ``golden-admin2``.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import pathlib
import shutil
import subprocess
import sys
import types
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kraftlog.ids import Uuid
from kraftlog.protocol import api_keys, headers, schema, wire
from kraftlog.storage import record_batch

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gen_kafka_messages.py"
SPEC_DIR = ROOT / "services" / "kraftlog" / "protocol" / "specs"
GENERATED_DIR = ROOT / "services" / "kraftlog" / "protocol" / "generated"
GOLDEN = pathlib.Path(__file__).with_name("golden_requests.json")


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          check=False, cwd=ROOT)


# -- staleness ---------------------------------------------------------------------------------

def test_committed_codecs_match_the_specs() -> None:
    result = _run("--check")
    assert result.returncode == 0, ("protocol/generated is stale; run .venv/bin/python "
                                    "scripts/gen_kafka_messages.py\n" + result.stdout + result.stderr)


def test_check_names_stale_missing_and_extra_files_then_regenerate_fixes_them(
        tmp_path: pathlib.Path) -> None:
    out = tmp_path / "generated"
    shutil.copytree(GENERATED_DIR, out, ignore=shutil.ignore_patterns("__pycache__"))
    with (out / "fetch.py").open("a") as handle:
        handle.write("# hand edit\n")
    (out / "produce.py").unlink()
    (out / "retired.py").write_text("# from a spec that no longer exists\n")
    stale = _run("--check", "--out-dir", str(out))
    assert stale.returncode == 1
    assert "differs" in stale.stdout and "fetch.py" in stale.stdout
    assert "missing" in stale.stdout and "produce.py" in stale.stdout
    assert "extra" in stale.stdout and "retired.py" in stale.stdout
    assert _run("--out-dir", str(out)).returncode == 0
    assert _run("--check", "--out-dir", str(out)).returncode == 0
    assert not (out / "retired.py").exists()


def test_a_broken_spec_fails_with_one_line_naming_file_and_line(tmp_path: pathlib.Path) -> None:
    specs = tmp_path / "specs"
    shutil.copytree(SPEC_DIR, specs)
    path = specs / "fetch.spec"
    path.write_text(path.read_text().replace("max_wait_ms: int32 0+", "max_wait_ms int32 0+"))
    result = _run("--check", "--spec-dir", str(specs), "--out-dir", str(tmp_path / "out"))
    assert result.returncode == 2
    assert "fetch.spec:" in result.stderr and "Traceback" not in result.stderr


# -- round trip ---------------------------------------------------------------------------------

_INT_RANGES = {"int8": 7, "int16": 15, "int32": 31, "int64": 63}


def _value(field: schema.FieldSpec, version: int, element: bool = False) -> st.SearchStrategy[Any]:
    kind = field.type_name[2:] if field.type_name.startswith("[]") and element else field.type_name
    if kind.startswith("[]"):
        items = st.lists(_value(field, version, element=True), max_size=3)
        if field.nullable_in(version) and field.default_null:
            return st.none() | items
        return items
    if kind in _INT_RANGES:
        bits = _INT_RANGES[kind]
        return st.integers(-(1 << bits), (1 << bits) - 1)
    if kind == "uint16":
        return st.integers(0, 65535)
    if kind == "bool":
        return st.booleans()
    if kind == "float64":
        return st.floats(allow_nan=False)
    if kind == "uuid":
        return st.binary(min_size=16, max_size=16).map(Uuid)
    if kind == "string":
        text = st.text(max_size=12)
        return st.none() | text if field.nullable_in(version) and not element else text
    if kind in ("bytes", "records"):
        blob = st.binary(max_size=40)
        return st.none() | blob if field.nullable_in(version) and not element else blob
    assert field.struct is not None, field
    return _instance(field.struct, version)


def _instance(cls: type, version: int) -> st.SearchStrategy[Any]:
    fields: dict[str, st.SearchStrategy[Any]] = {
        f.name: _value(f, version) for f in cls.FIELDS if f.present(version)}  # type: ignore[attr-defined]
    return st.fixed_dictionaries(fields).map(lambda values: cls(**values))


def _message_versions() -> list[tuple[type, int]]:
    found = []
    for api in sorted(api_keys.SERVED.values(), key=lambda a: a.key):
        for cls in (api.request, api.response):
            found += [(cls, v) for v in range(cls.MIN_VERSION, cls.MAX_VERSION + 1)]
    return found


@pytest.mark.parametrize(("cls", "version"), _message_versions(),
                         ids=lambda p: p.__name__ if isinstance(p, type) else f"v{p}")
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_message_round_trips_at_every_version(cls: type, version: int,
                                                    data: st.DataObject) -> None:
    message = data.draw(_instance(cls, version))
    encoded = message.encode(version).getvalue()
    decoded = cls.decode(encoded, version)  # type: ignore[attr-defined]
    assert decoded == message
    assert decoded.encode(version).getvalue() == encoded


def test_a_field_outside_its_versions_is_not_written() -> None:
    fetch = importlib.import_module("kraftlog.protocol.generated.fetch")
    request = fetch.FetchRequest(topics=[fetch.FetchTopic(topic="t", topic_id=Uuid(b"\x01" * 16))])
    by_name = fetch.FetchRequest.decode(request.encode(12).getvalue(), 12)
    by_id = fetch.FetchRequest.decode(request.encode(13).getvalue(), 13)
    assert by_name.topics[0].topic == "t" and by_name.topics[0].topic_id == Uuid(b"\x00" * 16)
    assert by_id.topics[0].topic == "" and by_id.topics[0].topic_id == Uuid(b"\x01" * 16)


def test_flexible_versions_use_compact_lengths_and_tagged_fields() -> None:
    produce = importlib.import_module("kraftlog.protocol.generated.produce")
    answer = produce.PartitionProduceResponse(index=1, current_leader=produce.LeaderIdAndEpoch(
        leader_id=2, leader_epoch=3))
    w = wire.Writer()
    answer.write(w, 10)
    data = w.getvalue()
    # index, error, base offset, append time, log start, record_errors (compact: 0+1),
    # error_message null (compact: 0), then 1 tagged field: tag 0, 9 bytes: (2, 3) and the
    # struct's own empty tagged-field section.
    leader = (2).to_bytes(4, "big") + (3).to_bytes(4, "big") + b"\x00"
    assert data[-12:] == bytes([0x01, 0x00, 0x09]) + leader
    assert data[-14:-12] == bytes([0x01, 0x00])
    w9 = wire.Writer()
    answer.write(w9, 9)  # the tag exists from version 10 only
    assert w9.getvalue().endswith(bytes([0x01, 0x00, 0x00]))


# -- hostile input ------------------------------------------------------------------------------

@pytest.mark.parametrize(("cls", "version"), [(a.request, v) for a in api_keys.SERVED.values()
                                              for v in range(a.min_version, a.max_version + 1)],
                         ids=lambda p: p.__name__ if isinstance(p, type) else f"v{p}")
@settings(max_examples=15, deadline=None)
@given(data=st.binary(max_size=64))
def test_random_bytes_decode_or_raise_malformed_message(cls: type, version: int,
                                                        data: bytes) -> None:
    with contextlib.suppress(wire.MalformedMessage):
        cls.decode(data, version)  # type: ignore[attr-defined]


@pytest.mark.parametrize("cut", [1, 2, 5, 9])
def test_every_truncated_golden_request_is_malformed(cut: int) -> None:
    for entry in json.loads(GOLDEN.read_text()):
        frame = bytes.fromhex(entry["frame"])
        api = api_keys.SERVED[entry["api_key"]]
        r = wire.Reader(frame[:-cut])
        with pytest.raises(wire.MalformedMessage):
            headers.read_request_header(r, flexible=api.flexible(entry["api_version"]))
            api.request.read(r, entry["api_version"])
            r.expect_end("request")


def test_a_huge_array_length_is_malformed_before_anything_is_allocated() -> None:
    metadata = importlib.import_module("kraftlog.protocol.generated.metadata")
    with pytest.raises(wire.MalformedMessage, match="array length"):
        metadata.MetadataRequest.decode(b"\x7f\xff\xff\xff", 1)


# -- golden bytes from real clients ----------------------------------------------------------------

def _golden() -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = json.loads(GOLDEN.read_text())
    return entries


@pytest.mark.parametrize("entry", _golden(),
                         ids=lambda e: f"{e['client'].split()[0]}-key{e['api_key']}-v{e['api_version']}")
def test_a_real_clients_request_decodes_and_re_encodes_to_the_same_bytes(entry: dict[str, Any]) -> None:
    frame = bytes.fromhex(entry["frame"])
    version = entry["api_version"]
    api = api_keys.SERVED[entry["api_key"]]
    assert api.supports(version), "a version real clients send is served"
    flexible = api.flexible(version)
    r = wire.Reader(frame)
    header = headers.read_request_header(r, flexible=flexible)
    request = api.request.read(r, version)
    r.expect_end("request")
    assert header.api_key == entry["api_key"] and header.client_id == "golden"
    w = wire.Writer()
    headers.write_request_header(w, header, flexible=flexible)
    request.write(w, version)
    assert w.getvalue() == frame
    _check_meaning(api.key, version, request)


def _check_meaning(key: api_keys.ApiKey, version: int, request: Any) -> None:
    """What each captured request is known to say."""
    if key is api_keys.ApiKey.API_VERSIONS:
        assert request.client_software_name in ("librdkafka", "confluent-kafka-python")
    elif key is api_keys.ApiKey.METADATA:
        assert request.topics is None or [t.name for t in request.topics] == ["golden"]
    elif key is api_keys.ApiKey.PRODUCE:
        assert request.acks == -1 and request.transactional_id is None
        [topic] = request.topic_data
        [part] = topic.partition_data
        assert (topic.name, part.index) == ("golden", 0)
        [batch] = record_batch.decode_batches(part.records)
        assert batch.producer_id >= 0, "idempotent: the batch carries a producer id"
        assert [r.value for r in batch.records] in ([b"hello"], [b"world"])
    elif key is api_keys.ApiKey.FETCH:
        [topic] = request.topics
        assert [p.partition for p in topic.partitions] == [0]
        if version >= 13:
            assert topic.topic_id != Uuid(b"\x00" * 16)
        else:
            assert topic.topic == "golden"
    elif key is api_keys.ApiKey.INIT_PRODUCER_ID:
        assert request.transactional_id is None
    elif key is api_keys.ApiKey.FIND_COORDINATOR:
        assert request.key == "golden-group" and request.key_type == 0
    elif key is api_keys.ApiKey.OFFSET_COMMIT:
        assert request.group_id == "golden-group"
        assert [(p.partition_index, p.committed_offset) for t in request.topics
                for p in t.partitions] == [(0, 2)]
    elif key is api_keys.ApiKey.OFFSET_FETCH:
        assert [g.group_id for g in request.groups] == ["golden-group"]
    elif key is api_keys.ApiKey.CREATE_TOPICS:
        [topic] = request.topics
        assert (topic.name, topic.num_partitions, topic.replication_factor) == ("golden-admin2", 2, 1)
    elif key is api_keys.ApiKey.DELETE_TOPICS:
        assert request.topic_names == ["golden-admin2"]


def test_the_golden_frames_cover_both_clients_and_every_served_api_but_none() -> None:
    covered = {(e["client"].split()[0], e["api_key"]) for e in _golden()}
    assert {key for _, key in covered} == set(api_keys.SERVED)
    assert {client for client, _ in covered} == {"kcat", "confluent-kafka"}


def test_the_generated_modules_are_typed_dataclasses() -> None:
    for path in sorted(GENERATED_DIR.glob("*.py")):
        if path.name == "__init__.py":
            continue
        module: types.ModuleType = importlib.import_module(f"kraftlog.protocol.generated.{path.stem}")
        assert module.__doc__ and "do not edit" in module.__doc__
