"""Client settings, the error tree, and the console tools' argument errors (no cluster)."""

from __future__ import annotations

import io
import json
import sys
from typing import Any

import pytest

from kraftlog import client
from kraftlog.client import errors as client_errors
from kraftlog.error_codes import ErrorCode
from kraftlog.errors import ConfigError, KraftlogError
from kraftlog.storage import batch_header as bh
from kraftlog.storage import record_batch as rb
from kraftlog.storage.compression import CompressionType
from kraftlog.tools import cli
from kraftlog.tools import client_commands as commands
from tests.quorum_cluster import free_ports


def test_producer_config_from_kafka_names() -> None:
    config = client.ProducerConfig.from_properties({
        "bootstrap.servers": "a:1, b:2", "acks": "1", "linger.ms": "7",
        "compression.type": "lz4", "batch.size": "65536"})
    assert config.bootstrap_servers == ("a:1", "b:2")
    assert config.acks is client.Acks.LEADER and config.linger_ms == 7
    assert config.compression_type is CompressionType.LZ4 and config.batch_size == 65536
    assert client.ProducerConfig(bootstrap_servers=("h:9",), acks="all").acks is client.Acks.ALL


@pytest.mark.parametrize(("properties", "message"), [
    ({"bootstrap.servers": "nohost"}, "not HOST:PORT"),
    ({"bootstrap.servers": "h:70000"}, "not HOST:PORT"),
    ({"bootstrap.servers": ""}, "is empty"),
    ({"bootstrap.servers": "h:1", "acks": "2"}, "acks='2' is invalid"),
    ({"bootstrap.servers": "h:1", "compression.type": "snappy"}, "snappy is not supported"),
    ({"bootstrap.servers": "h:1", "compression.type": "brotli"}, "compression.type"),
    ({"bootstrap.servers": "h:1", "linger.ms": "-1"}, "linger.ms"),
    ({"bootstrap.servers": "h:1", "batch.size": "x"}, "batch.size='x' is not an integer"),
    ({"bootstrap.servers": "h:1", "no.such": "1"}, "unknown ProducerConfig setting"),
    ({"acks": "1"}, "bootstrap.servers is required"),
    ({"bootstrap.servers": "h:1", "delivery.timeout.ms": "10"}, "delivery.timeout.ms"),
])
def test_producer_config_rejects_bad_values(properties: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        client.ProducerConfig.from_properties(properties)


def test_consumer_config() -> None:
    config = client.ConsumerConfig.from_properties({"bootstrap.servers": "h:1",
                                                    "auto.offset.reset": "earliest",
                                                    "check.crcs": "true"})
    assert config.auto_offset_reset is client.OffsetReset.EARLIEST
    with pytest.raises(ConfigError, match=r"auto\.offset\.reset=.smallest."):
        client.ConsumerConfig(bootstrap_servers=("h:1",), auto_offset_reset="smallest")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"max\.poll\.records"):
        client.ConsumerConfig(bootstrap_servers=("h:1",), max_poll_records=0)


def test_error_tree_and_retriable_codes() -> None:
    error = client_errors.error_for(ErrorCode.NOT_ENOUGH_REPLICAS, "only 1 in sync",
                                    context="t-0 on h:1")
    assert str(error) == "NOT_ENOUGH_REPLICAS (t-0 on h:1): only 1 in sync"
    assert error.retriable and isinstance(error, KraftlogError)
    unknown = client_errors.error_for(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, topic="x")
    assert isinstance(unknown, client.UnknownTopicError) and unknown.topic == "x"
    for code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH,
                 ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.REQUEST_TIMED_OUT):
        assert client_errors.is_retriable(code)
    for code in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.INVALID_REQUIRED_ACKS,
                 ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_RECORD):
        assert not client_errors.is_retriable(code)
    assert client_errors.needs_metadata_refresh(ErrorCode.FENCED_LEADER_EPOCH)
    assert not client_errors.needs_metadata_refresh(ErrorCode.NOT_ENOUGH_REPLICAS)
    assert client_errors.code_of(9999) is ErrorCode.UNKNOWN_SERVER_ERROR
    unavailable = client.BrokersUnavailableError({"a:1": "UNAVAILABLE"}, "metadata")
    assert str(unavailable) == "metadata: no broker reachable: a:1 (UNAVAILABLE)"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize(("argv", "message"), [
    (["produce", "--topic", "t", "--header", "novalue"], "--header 'novalue' is not KEY=VALUE"),
    (["produce", "--topic", "t", "--header", "=v"], "is not KEY=VALUE"),
    (["produce", "--topic", "t", "--acks", "2"], "acks='2' is invalid"),
    (["produce", "--topic", "t", "--partition", "-1"], "--partition must be >= 0"),
    (["produce", "--topic", "bad/name"], "--topic: topic name 'bad/name' is illegal"),
    (["produce", "--topic", "t", "--key-separator", ""], "--key-separator must not be empty"),
    (["produce", "--topic", "t", "--producer-property", "x"], "is not KEY=VALUE"),
    (["consume", "--topic", "t", "--partition", "0", "--offset", "-5"],
     "--offset must be >= 0, got -5"),
    (["consume", "--topic", "t", "--offset", "3"], "--offset needs --partition"),
    (["consume", "--topic", "t", "--partition", "0", "--offset", "1", "--from-beginning"],
     "cannot be used together"),
    (["consume", "--topic", "t", "--max-messages", "0"], "--max-messages must be >= 1"),
    (["consume", "--topic", "t", "--timeout-ms", "soon"], "--timeout-ms 'soon' is not an integer"),
])
def test_cli_bad_arguments_are_one_line(capsys: pytest.CaptureFixture[str], argv: list[str],
                                        message: str) -> None:
    code, out, err = run(capsys, *argv, "--bootstrap-server", "127.0.0.1:1")
    assert code == 1 and out == ""
    assert err.strip().splitlines() == [f"kraftlog: error: {err.strip()[17:]}"]
    assert message in err


@pytest.mark.parametrize("command", ["produce", "consume"])
def test_cli_names_unreachable_brokers(capsys: pytest.CaptureFixture[str],
                                       monkeypatch: pytest.MonkeyPatch, command: str) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"a\n")))
    ports = free_ports(2)
    servers = ",".join(f"127.0.0.1:{p}" for p in ports)
    code, _out, err = run(capsys, command, "--bootstrap-server", servers, "--topic", "t")
    assert code == 1
    assert len(err.strip().splitlines()) == 1
    assert "no broker reachable" in err
    for port in ports:
        assert f"127.0.0.1:{port} (UNAVAILABLE)" in err


def test_cli_produce_and_consume_with_the_fake_broker(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        fake_broker: Any) -> None:
    server = f"127.0.0.1:{fake_broker.port}"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"k1|v1\nk2|v2\r\n")))
    code, out, err = run(capsys, "produce", "--bootstrap-server", server, "--topic", "t",
                         "--key-separator", "|", "--header", "a=b=c", "--partition", "1")
    assert (code, out, err) == (0, "", "")
    code, out, err = run(capsys, "consume", "--bootstrap-server", server, "--topic", "t",
                         "--from-beginning", "--max-messages", "2", "--print-key",
                         "--print-headers", "--print-offset", "--print-partition")
    assert code == 0, err
    assert out == "Partition:1\tOffset:0\ta:b=c\tk1\tv1\nPartition:1\tOffset:1\ta:b=c\tk2\tv2\n"
    assert err == "Processed a total of 2 messages\n"
    code, out, _err = run(capsys, "consume", "--bootstrap-server", server, "--topic", "t",
                          "--partition", "1", "--offset", "1", "--output", "json",
                          "--timeout-ms", "300")
    assert code == 0
    [row] = [json.loads(line) for line in out.splitlines()]
    assert row["key"] == "k2" and row["value"] == "v2" and row["offset"] == 1
    assert row["headers"] == [{"key": "a", "value": "b=c"}]
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"ok|1\nnoseparator\n")))
    code, _out, err = run(capsys, "produce", "--bootstrap-server", server, "--topic", "t",
                          "--key-separator", "|")
    assert code == 1 and "line 2 has no key separator '|'" in err


def test_cli_produce_one_value_with_acks_and_compression(
        capsys: pytest.CaptureFixture[str], fake_broker: Any) -> None:
    code, out, err = run(capsys, "produce", "--bootstrap-server",
                         f"127.0.0.1:{fake_broker.port}", "--topic", "t", "--value", "hello",
                         "--acks", "0", "--compression-type", "gzip", "--partition", "0")
    assert (code, out, err) == (0, "", "")
    [request] = fake_broker.produce_requests
    assert request.acks == 0
    [batch] = rb.decode_batches(request.topic_data[0].partition_data[0].records)
    assert batch.compression is CompressionType.GZIP
    assert [r.value for r in batch.records] == [b"hello"]


@pytest.mark.parametrize("command", ["produce", "consume"])
def test_cli_unknown_topic_is_one_line(capsys: pytest.CaptureFixture[str],
                                       monkeypatch: pytest.MonkeyPatch, fake_broker: Any,
                                       command: str) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"a\n")))
    wait = (["--producer-property", "max.block.ms=1000"] if command == "produce"
            else ["--consumer-property", "default.api.timeout.ms=1000"])
    code, out, err = run(capsys, command, "--bootstrap-server", f"127.0.0.1:{fake_broker.port}",
                         "--topic", "missing", *wait)
    assert code == 1 and out == ""
    assert err.strip().splitlines() == [
        "kraftlog: error: UNKNOWN_TOPIC_OR_PARTITION (after waiting for metadata): "
        "no such topic"]


def test_json_output_keeps_binary_as_base64() -> None:
    record = client.ConsumerRecord(topic="t", partition=0, offset=3, timestamp_ms=5,
                                   timestamp_type=bh.TimestampType.LOG_APPEND_TIME,
                                   key=None, value=b"\xff\x00", headers=(), leader_epoch=0)
    row = json.loads(commands.format_json(record))
    assert row == {"topic": "t", "partition": 0, "offset": 3, "timestamp": 5,
                   "timestampType": "LogAppendTime", "key": None, "value": "/wA=",
                   "valueEncoding": "base64", "headers": []}
