"""Control records, snapshot files and the raft configuration surface."""

from __future__ import annotations

import pytest

from kraftlog.errors import ConfigError, CorruptRecordError
from kraftlog.raft import control_records as cr
from kraftlog.raft import snapshot as snap
from kraftlog.raft.messages import OffsetAndEpoch
from kraftlog.raft.raft_config import RaftConfig, parse_voters
from kraftlog.storage import record_batch as rb


def test_parse_voters_kafka_syntax() -> None:
    assert parse_voters("1@ctrl-0.kraft:9093, 2@[::1]:9094,3@10.0.0.3:1") == {
        1: "ctrl-0.kraft:9093", 2: "[::1]:9094", 3: "10.0.0.3:1"}


@pytest.mark.parametrize(("value", "fragment"), [
    ("", "is empty"),
    ("1@host", "'1@host' is not id@host:port"),
    ("x@host:1", "not id@host:port"),
    ("1@host:70000", "port 70000 out of range"),
    ("1@a:1,1@b:2", "lists node 1 twice"),
])
def test_parse_voters_rejects_bad_entries(value: str, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        parse_voters(value)


def test_raft_config_defaults_and_validation() -> None:
    config = RaftConfig()
    assert (config.election_timeout_ms, config.fetch_timeout_ms, config.append_linger_ms,
            config.check_quorum_timeout_ms) == (1000, 2000, 25, 3000)
    with pytest.raises(ConfigError, match="fetch_timeout_ms must be > 0, got 0"):
        RaftConfig(fetch_timeout_ms=0)
    with pytest.raises(ConfigError, match="append_linger_ms must be >= 0"):
        RaftConfig(append_linger_ms=-1)


def test_leader_change_round_trip_and_corruption() -> None:
    message = cr.LeaderChangeMessage(leader_id=2, voters=(1, 2, 3), granting_voters=(2, 3))
    encoded = cr.encode_leader_change(message)
    assert cr.decode_leader_change(encoded) == message
    with pytest.raises(CorruptRecordError, match="granting_voters count 2 exceeds the value"):
        cr.decode_leader_change(encoded[:-2])
    with pytest.raises(CorruptRecordError, match="truncated reading leader_id at byte 2"):
        cr.decode_leader_change(encoded[:4])
    with pytest.raises(CorruptRecordError, match="2 trailing bytes"):
        cr.decode_leader_change(encoded + b"\0\0")
    with pytest.raises(CorruptRecordError, match="unknown version 9"):
        cr.decode_leader_change(b"\0\x09" + encoded[2:])
    with pytest.raises(CorruptRecordError, match="voters count 1000000"):
        cr.decode_leader_change(encoded[:6] + (1_000_000).to_bytes(4, "big"))


def test_control_keys_are_kafkas() -> None:
    assert cr.encode_key(cr.ControlRecordType.LEADER_CHANGE) == b"\x00\x00\x00\x02"
    with pytest.raises(CorruptRecordError, match="unknown control record type"):
        cr.decode_key(b"\x00\x00\x00\x63")


def test_snapshot_file_names() -> None:
    snapshot_id = OffsetAndEpoch(offset=1234, epoch=5)
    name = snap.snapshot_file_name(snapshot_id)
    assert name == "00000000000000001234-0000000005.checkpoint"
    assert snap.parse_snapshot_file_name(name) == snapshot_id
    assert snap.parse_snapshot_file_name(name + ".part") is None
    assert snap.parse_snapshot_file_name("00000000000000001234.log") is None
    with pytest.raises(ValueError):
        snap.snapshot_file_name(OffsetAndEpoch(offset=-1, epoch=0))


def test_snapshot_writer_reader_round_trip() -> None:
    snapshot_id = OffsetAndEpoch(offset=10, epoch=2)
    writer = snap.SnapshotWriter(snapshot_id, last_contained_log_timestamp=77, now_ms=5)
    writer.append([b"a", b"b"])
    writer.append([b"c"])
    data = writer.build()
    batches = rb.decode_batches(data)
    assert batches[0].is_control and batches[-1].is_control and len(batches) == 4
    reader = snap.read_snapshot_records(snapshot_id, data)
    assert list(reader) == [b"a", b"b", b"c"] and reader.last_contained_log_timestamp == 77


def test_snapshot_reader_rejects_bad_framing() -> None:
    snapshot_id = OffsetAndEpoch(offset=10, epoch=2)
    writer = snap.SnapshotWriter(snapshot_id, last_contained_log_timestamp=0, now_ms=0)
    writer.append([b"a"])
    data = writer.build()
    name = "00000000000000000010-0000000002.checkpoint"
    footer = rb.decode_batches(data)[-1]
    with pytest.raises(CorruptRecordError, match=f"snapshot {name}: batch 1 must be one SNAPSHOT_FOOTER"):
        snap.read_snapshot_records(snapshot_id, data[:footer.position])
    with pytest.raises(CorruptRecordError, match="trailing bytes"):
        snap.read_snapshot_records(snapshot_id, data + b"\x00" * 5)
    corrupt = bytearray(data)
    corrupt[70] ^= 0xFF
    with pytest.raises(CorruptRecordError, match=f"snapshot {name}"):
        snap.read_snapshot_records(snapshot_id, bytes(corrupt))
