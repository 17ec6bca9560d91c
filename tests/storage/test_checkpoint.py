"""Checkpoint files (Kafka's version/count/entries text format) and topic-partition keys."""

from __future__ import annotations

import pathlib
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftlog import errors
from kraftlog import ids as topic_partition
from kraftlog.ids import Epoch, Offset, TopicPartition
from kraftlog.storage import checkpoint


def tp(topic: str, partition: int) -> TopicPartition:
    return TopicPartition(topic=topic, partition=partition)


# --- topic partitions --------------------------------------------------------------------


@pytest.mark.parametrize("name", ["a", "orders", "my.topic_v2-x", "__consumer_offsets", "x" * 249, "..."])
def test_legal_topic_names(name: str) -> None:
    topic_partition.validate_topic_name(name)


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("", "can't be empty"),
        (".", "cannot be '.'"),
        ("..", "cannot be '..'"),
        ("x" * 250, "longer than 249"),
        ("has space", "character"),
        ("slash/topic", "character"),
        ("ümlaut", "character"),
    ],
)
def test_illegal_topic_names_raise_invalid_topic_error(name: str, reason: str) -> None:
    with pytest.raises(errors.InvalidTopicError, match=reason):
        topic_partition.validate_topic_name(name)


def test_topic_partition_dir_name_round_trips() -> None:
    key = tp("my-topic-with-dashes", 12)
    assert key.dir_name == "my-topic-with-dashes-12"
    assert str(key) == key.dir_name
    assert topic_partition.parse_dir_name(key.dir_name) == key
    assert topic_partition.parse_dir_name("__cluster_metadata-0") == tp("__cluster_metadata", 0)


@pytest.mark.parametrize("name", ["topic", "-3", "topic-", "topic-x", "topic-01", "topic-1.abc-delete",
                                  "a b-1", "topic-99999999999"])
def test_parse_dir_name_rejects_non_partition_dirs(name: str) -> None:
    with pytest.raises(errors.InvalidTopicError, match="directory name") as raised:
        topic_partition.parse_dir_name(name)
    assert isinstance(raised.value, ValueError)  # what callers caught before InvalidTopicError existed


def test_topic_partition_rejects_bad_partitions() -> None:
    with pytest.raises(ValueError, match="must be in"):
        tp("t", -1)
    with pytest.raises(ValueError, match="must be an int"):
        TopicPartition(topic="t", partition=True)


# --- offset checkpoints ------------------------------------------------------------------


def test_offset_checkpoint_round_trip_is_sorted_and_kafka_formatted(tmp_path: pathlib.Path) -> None:
    path = tmp_path / checkpoint.REPLICATION_OFFSET_CHECKPOINT
    file = checkpoint.OffsetCheckpointFile(path)
    offsets = {tp("orders", 1): 250, tp("orders", 0): 100, tp("audit", 3): 0}
    file.write(offsets)
    assert path.read_text() == "0\n3\naudit 3 0\norders 0 100\norders 1 250\n"
    assert file.read() == offsets
    assert sorted(p.name for p in tmp_path.iterdir()) == [checkpoint.REPLICATION_OFFSET_CHECKPOINT]


def test_missing_checkpoint_reads_empty(tmp_path: pathlib.Path) -> None:
    assert checkpoint.OffsetCheckpointFile(tmp_path / "recovery-point-offset-checkpoint").read() == {}
    assert checkpoint.LeaderEpochCheckpointFile(tmp_path / "leader-epoch-checkpoint").read() == []


def test_empty_map_round_trips(tmp_path: pathlib.Path) -> None:
    file = checkpoint.OffsetCheckpointFile(tmp_path / "log-start-offset-checkpoint")
    file.write({})
    assert file.path.read_text() == "0\n0\n"
    assert file.read() == {}


def test_write_refuses_negative_offsets(tmp_path: pathlib.Path) -> None:
    file = checkpoint.OffsetCheckpointFile(tmp_path / "replication-offset-checkpoint")
    with pytest.raises(ValueError, match="offset -1 of t-0"):
        file.write({tp("t", 0): -1})
    assert not file.path.exists()


def test_reader_accepts_crlf_and_a_missing_final_newline(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "replication-offset-checkpoint"
    path.write_bytes(b"0\r\n1\r\nt 0 5")
    assert checkpoint.OffsetCheckpointFile(path).read() == {tp("t", 0): 5}


OFFSET_CORRUPTIONS = [
    (b"", "line 1: file is empty"),
    (b"garbage\n", r"line 1: version 'garbage' is not an integer"),
    (b"1\n1\nt 0 5\n", "line 1: unrecognised checkpoint version 1, expected 0"),
    (b"0\n", "line 2: file ends after the version line"),
    (b"0\nx\n", "line 2: entry count 'x' is not an integer"),
    (b"0\n-1\n", "line 2: entry count -1 is negative"),
    (b"0\n2\nt 0 5\n", "line 4: file ends after 1 entries, the count line promised 2"),
    (b"0\n1\nt 0 5\nt 1 6\n", "line 4: unexpected data after the 1 entries"),
    (b"0\n1\nt 0 5\n\n", "line 4: unexpected data after the 1 entries"),
    (b"0\n1\nt 0\n", "line 3: expected 3 fields"),
    (b"0\n1\nt 0 5 9\n", "line 3: expected 3 fields"),
    (b"0\n1\nt x 5\n", "line 3: partition 'x' is not an integer"),
    (b"0\n1\nt 0 -5\n", "line 3: offset -5 is negative"),
    (b"0\n1\nt -1 5\n", "line 3: partition -1 is negative"),
    (b"0\n1\nt 0 +5\n", "line 3: offset '\\+5' is not an integer"),
    (b"0\n1\nt 0 99999999999999999999\n", "line 3: offset .* out of range"),
    (b"0\n1\nbad/topic 0 5\n", "line 3: topic name 'bad/topic' is illegal"),
    (b"0\n2\nt 0 5\nt 0 6\n", "line 4: duplicate entry for partition t-0"),
    (b"0\n1\nt\xff 0 5\n", r"line 3: not UTF-8 text \(byte 0xff at file offset 5\)"),
]


@pytest.mark.parametrize(("content", "reason"), OFFSET_CORRUPTIONS)
def test_corrupt_offset_checkpoint_names_file_and_line(
    tmp_path: pathlib.Path, content: bytes, reason: str
) -> None:
    path = tmp_path / "replication-offset-checkpoint"
    path.write_bytes(content)
    with pytest.raises(errors.CorruptFileError) as info:
        checkpoint.OffsetCheckpointFile(path).read()
    assert info.value.path == str(path)
    assert str(info.value).startswith(f"{path}: ")
    assert re.search(reason, info.value.reason), info.value.reason


def test_checkpoint_path_that_is_a_directory_is_a_clear_error(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "replication-offset-checkpoint"
    path.mkdir()
    with pytest.raises(errors.CorruptFileError, match="is a directory"):
        checkpoint.OffsetCheckpointFile(path).read()


# --- epoch checkpoints -------------------------------------------------------------------


def test_epoch_checkpoint_round_trip(tmp_path: pathlib.Path) -> None:
    file = checkpoint.LeaderEpochCheckpointFile(tmp_path / "leader-epoch-checkpoint")
    entries = [checkpoint.EpochEntry(epoch=Epoch(e), start_offset=Offset(o)) for e, o in [(0, 0), (3, 17)]]
    file.write(entries)
    assert file.path.read_text() == "0\n2\n0 0\n3 17\n"
    assert file.read() == entries


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"0\n1\n1\n", "line 3: expected 2 fields 'epoch startOffset', found 1"),
        (b"0\n1\n-1 0\n", "line 3: epoch -1 is negative"),
        (b"0\n1\n1 -3\n", "line 3: start offset -3 is negative"),
        (b"0\n1\n4294967296 0\n", "line 3: epoch 4294967296 is out of range"),
        (b"0\n2\n2 0\n1 5\n", "line 4: entry \\(epoch 1, start offset 5\\) does not follow"),
        (b"0\n2\n1 5\n2 5\n", "line 4: .*must strictly increase"),
        (b"0\n1\n1 5\ntrailing\n", "line 4: unexpected data"),
    ],
)
def test_corrupt_epoch_checkpoint_names_file_and_line(
    tmp_path: pathlib.Path, content: bytes, reason: str
) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_bytes(content)
    with pytest.raises(errors.CorruptFileError, match=reason) as info:
        checkpoint.LeaderEpochCheckpointFile(path).read()
    assert info.value.path == str(path)


# --- properties --------------------------------------------------------------------------

TOPICS = st.text(alphabet="abcXYZ019._-", min_size=1, max_size=20).filter(lambda t: t not in (".", ".."))


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.builds(lambda t, p: tp(t, p), TOPICS, st.integers(0, 2**31 - 1)),
                       st.integers(0, 2**63 - 1), max_size=10))
def test_offset_checkpoint_round_trips_any_map(offsets: dict[TopicPartition, int]) -> None:
    text = checkpoint.format_checkpoint(sorted(offsets.items()), checkpoint.OffsetEntryFormatter())
    parsed = checkpoint.parse_checkpoint(text.encode(), checkpoint.OffsetEntryFormatter(), path="p")
    assert dict(parsed) == offsets


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=40))
def test_arbitrary_bytes_parse_or_fail_with_a_corrupt_file_error(data: bytes) -> None:
    try:
        checkpoint.parse_checkpoint(data, checkpoint.OffsetEntryFormatter(), path="cp")
    except errors.CorruptFileError as exc:
        assert exc.path == "cp" and exc.reason.startswith("line ")
