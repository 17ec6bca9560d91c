"""``kraftlog storage format|random-uuid|info`` and ``kraftlog log dump`` through ``cli.main``."""

from __future__ import annotations

import base64
import json
import pathlib
import struct
from typing import Any

import pytest

from kraftlog import ids as uuid
from kraftlog.raft import messages, voter_set
from kraftlog.raft import snapshot as raft_snapshot
from kraftlog.storage import batch_header as bh
from kraftlog.storage import checkpoint, meta_properties
from kraftlog.storage import record_batch as rb
from kraftlog.tools import cli

BOOTSTRAP_CHECKPOINT = "00000000000000000000-0000000000.checkpoint"
CLUSTER = "MkU3OEVBNTcwNTJENDM2Qg"
OTHER_CLUSTER = "AbCdEfGhIjKlMnOpQrStUg"
DIR_ID_1 = "J8aAPcfLQt2bqs1JT_rMgQ"
DIR_ID_2 = "PfT8tc0gTCu4o0O3p7QSVg"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def snapshot(root: pathlib.Path) -> dict[str, tuple[bytes, int]]:
    """Every file under root with its bytes and mtime, to prove nothing was touched."""
    return {
        str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


# --- random-uuid -------------------------------------------------------------------------


def test_random_uuid_prints_a_fresh_parseable_cluster_id(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "storage", "random-uuid")
    code2, out2, _ = run(capsys, "storage", "random-uuid")
    assert code == code2 == 0
    assert out != out2
    value = uuid.parse_uuid(out.strip())
    assert value not in uuid.RESERVED


# --- format ------------------------------------------------------------------------------


def test_format_fresh_dirs(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    d1, d2 = tmp_path / "d1", tmp_path / "nested" / "d2"
    code, out, err = run(capsys, "storage", "format", "--cluster-id", CLUSTER, "--node-id", "3",
                         "--data-dir", str(d1), "--data-dir", str(d2))
    assert (code, err) == (0, "")
    assert f"Formatting metadata directory {d1}" in out and f"Formatting directory {d2}" in out
    p1, p2 = meta_properties.read(d1), meta_properties.read(d2)
    assert p1 is not None and p2 is not None
    assert (p1.cluster_id, p1.node_id, p2.cluster_id, p2.node_id) == (CLUSTER, 3, CLUSTER, 3)
    assert p1.directory_id is not None and p2.directory_id is not None
    assert p1.directory_id != p2.directory_id
    text = (d1 / "meta.properties").read_text().splitlines()
    assert text[0] == "#" and text[1].startswith("#") and "version=1" in text
    assert (d1 / "__cluster_metadata-0").is_dir()
    assert not (d2 / "__cluster_metadata-0").exists()
    # Static voters (kraft.version 0): no bootstrap voter set.
    assert not (d1 / "__cluster_metadata-0" / BOOTSTRAP_CHECKPOINT).exists()


def test_format_separate_metadata_dir(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    data, meta = tmp_path / "data", tmp_path / "meta"
    code, _, _ = run(capsys, "storage", "format", "--cluster-id", CLUSTER, "--node-id", "0",
                     "--data-dir", str(data), "--metadata-dir", str(meta))
    assert code == 0
    assert (meta / "__cluster_metadata-0").is_dir() and not (data / "__cluster_metadata-0").exists()
    assert meta_properties.read(meta) is not None and meta_properties.read(data) is not None


def test_reformat_with_same_ids_is_idempotent_and_leaves_bytes_unchanged(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ("storage", "format", "--cluster-id", CLUSTER, "--node-id", "1", "--data-dir", str(tmp_path / "d"))
    assert run(capsys, *args)[0] == 0
    before = snapshot(tmp_path)
    code, out, err = run(capsys, *args)
    assert (code, err) == (0, "")
    assert "already formatted" in out
    assert snapshot(tmp_path) == before


def test_ignore_formatted_skips_every_formatted_dir_even_a_foreign_one(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    foreign, fresh = tmp_path / "foreign", tmp_path / "fresh"
    run(capsys, "storage", "format", "--cluster-id", OTHER_CLUSTER, "--node-id", "1", "--data-dir", str(foreign))
    before = (foreign / "meta.properties").read_bytes()
    args = ("storage", "format", "--cluster-id", CLUSTER, "--node-id", "1",
            "--data-dir", str(foreign), "--data-dir", str(fresh))
    assert run(capsys, *args)[0] == 1  # without the flag: refused
    assert not fresh.exists()
    code, out, err = run(capsys, *args, "--ignore-formatted")
    assert (code, err) == (0, "")
    assert f"{foreign}: already formatted (cluster.id={OTHER_CLUSTER}, node.id=1); skipped (--ignore-formatted)" in out
    assert f"Formatting directory {fresh}" in out
    assert (foreign / "meta.properties").read_bytes() == before
    assert meta_properties.read(fresh) is not None
    code, out, _ = run(capsys, *args, "-g")
    assert code == 0 and out.endswith("All of the log directories are already formatted.\n")


def test_reformat_formats_only_the_new_dir(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    run(capsys, "storage", "format", "--cluster-id", CLUSTER, "--node-id", "1", "--data-dir", str(d1))
    before = (d1 / "meta.properties").read_bytes()
    code, out, _ = run(capsys, "storage", "format", "--cluster-id", CLUSTER, "--node-id", "1",
                       "--data-dir", str(d1), "--data-dir", str(d2))
    assert code == 0 and "already formatted" in out and f"Formatting directory {d2}" in out
    assert (d1 / "meta.properties").read_bytes() == before
    assert meta_properties.read(d2) is not None


@pytest.mark.parametrize(
    ("cluster", "node", "reason"),
    [(OTHER_CLUSTER, "1", f"is formatted for cluster {CLUSTER}, not {OTHER_CLUSTER}"),
     (CLUSTER, "2", "is formatted for node 1, not 2")],
)
def test_reformat_for_another_cluster_or_node_is_refused_and_touches_nothing(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], cluster: str, node: str, reason: str
) -> None:
    formatted, fresh = tmp_path / "formatted", tmp_path / "fresh"
    run(capsys, "storage", "format", "--cluster-id", CLUSTER, "--node-id", "1", "--data-dir", str(formatted))
    before = snapshot(tmp_path)
    # The fresh dir comes first: it must not be formatted either (all dirs are checked first).
    code, out, err = run(capsys, "storage", "format", "--cluster-id", cluster, "--node-id", node,
                         "--data-dir", str(fresh), "--data-dir", str(formatted))
    assert code == 1 and out == ""
    assert err.startswith("kraftlog: error: refusing to format, nothing was written: ")
    assert f"{formatted} {reason}" in err and err[-1] == "\n" and err.count("\n") == 1
    assert snapshot(tmp_path) == before
    assert not fresh.exists()


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (("--cluster-id", "not-a-uuid"), "cluster id does not appear to be a valid UUID"),
        (("--cluster-id", "AAAAAAAAAAAAAAAAAAAAAA"), "this id is reserved"),
        (("--cluster-id", CLUSTER, "--node-id", "-1"), "--node-id -1: a node id must be >= 0"),
        (("--cluster-id", CLUSTER, "--initial-controllers", "1@h:9093"), "no ':' after the port"),
        (("--cluster-id", CLUSTER, "--initial-controllers", f"1h:9093:{DIR_ID_1}"), "no '@' found"),
        (("--cluster-id", CLUSTER, "--initial-controllers", f"x@h:9093:{DIR_ID_1}"), "node id 'x' is not"),
        (("--cluster-id", CLUSTER, f"--initial-controllers=-2@h:9093:{DIR_ID_1}"), "node id -2 is negative"),
        (("--cluster-id", CLUSTER, "--initial-controllers", f"1@h:0:{DIR_ID_1}"), "port 0 is not in"),
        (("--cluster-id", CLUSTER, "--initial-controllers", f"1@h:65536:{DIR_ID_1}"), "port 65536 is not in"),
        (("--cluster-id", CLUSTER, "--initial-controllers", f"1@h:p:{DIR_ID_1}"), "port 'p' is not"),
        (("--cluster-id", CLUSTER, "--initial-controllers", f"1@:9093:{DIR_ID_1}"), "the host is empty"),
        (("--cluster-id", CLUSTER, "--initial-controllers", f"1@[::1:9093:{DIR_ID_1}"), "no closing"),
        (("--cluster-id", CLUSTER, "--initial-controllers", "1@h:9093:short"), "directory id: 'short'"),
        (("--cluster-id", CLUSTER, "--initial-controllers", "1@h:9093:AAAAAAAAAAAAAAAAAAAAAA"), "is reserved"),
        (("--cluster-id", CLUSTER, "--initial-controllers", f"1@a:1:{DIR_ID_1},1@b:2:{DIR_ID_2}"),
         "node id 1 is given more than once"),
        (("--cluster-id", CLUSTER, "--initial-controllers", f"1@a:1:{DIR_ID_1},2@b:2:{DIR_ID_1}"),
         f"directory id {DIR_ID_1} is given more than once"),
        (("--cluster-id", CLUSTER, "--initial-controllers", " "), "no voters given"),
        (("--cluster-id", CLUSTER, "--standalone"), "--standalone needs --controller-endpoint"),
        (("--cluster-id", CLUSTER, "--standalone", "--controller-endpoint", "h"), "expected HOST:PORT"),
        (("--cluster-id", CLUSTER, "--controller-endpoint", "h:1"), "only used with --standalone"),
    ],
)
def test_format_rejects_bad_arguments_with_a_clear_error(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], args: tuple[str, ...], reason: str
) -> None:
    argv = ["storage", "format", "--data-dir", str(tmp_path / "d"), *args]
    if "--node-id" not in args:
        argv += ["--node-id", "1"]
    code, out, err = run(capsys, *argv)
    assert code == 1 and out == ""
    assert err.startswith("kraftlog: error: ") and reason in err, err
    assert not (tmp_path / "d").exists()


def test_format_needs_a_directory(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "storage", "format", "--cluster-id", CLUSTER, "--node-id", "1")
    assert code == 1 and "at least one --data-dir" in err


@pytest.mark.parametrize(
    "argv",
    [
        ("storage", "format", "--cluster-id", CLUSTER, "--node-id", "one", "--data-dir", "x"),
        ("storage", "format", "--node-id", "1", "--data-dir", "x"),
        ("storage", "format", "--cluster-id", CLUSTER, "--node-id", "1", "--data-dir", "x",
         "--standalone", "--initial-controllers", f"1@h:1:{DIR_ID_1}"),
        ("storage",),
        ("log", "dump"),
    ],
)
def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(list(argv))
    assert info.value.code == 2
    assert "usage:" in capsys.readouterr().err


def test_format_with_initial_controllers_records_the_bootstrap_voters(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    meta = tmp_path / "meta"
    voters = f"1@controller-0:9093:{DIR_ID_1},2@[::1]:9094:{DIR_ID_2}"
    code, out, _ = run(capsys, "storage", "format", "--cluster-id", CLUSTER, "--node-id", "2",
                       "--metadata-dir", str(meta), "--initial-controllers", voters)
    assert code == 0 and f"Initial controllers: {voters}" in out
    props = meta_properties.read(meta)
    assert props is not None and str(props.directory_id) == DIR_ID_2  # KIP-853: the voter's dir id
    history = _bootstrap_history(meta)
    assert history.kraft_version() == 1 and history.latest_offset() == -1
    assert [(v.voter_id, str(v.directory_id), v.endpoint) for v in history.latest().nodes()] == [
        (1, DIR_ID_1, "controller-0:9093"), (2, DIR_ID_2, "[::1]:9094")]
    # Re-running is idempotent; a different voter directory id for this node is refused.
    assert run(capsys, "storage", "format", "--cluster-id", CLUSTER, "--node-id", "2",
               "--metadata-dir", str(meta), "--initial-controllers", voters)[0] == 0
    code, _, err = run(capsys, "storage", "format", "--cluster-id", CLUSTER, "--node-id", "2",
                       "--metadata-dir", str(meta), "--initial-controllers", f"2@h:1:{DIR_ID_1}")
    assert code == 1 and f"has directory.id {DIR_ID_2}" in err


def test_format_standalone(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    meta = tmp_path / "meta"
    code, _, _ = run(capsys, "storage", "format", "--cluster-id", CLUSTER, "--node-id", "5",
                     "--metadata-dir", str(meta), "--standalone", "--controller-endpoint", "localhost:9093")
    assert code == 0
    props = meta_properties.read(meta)
    assert props is not None
    voters = _bootstrap_history(meta).latest()
    assert [(v.voter_id, v.directory_id, v.endpoint) for v in voters.nodes()] == [
        (5, props.directory_id, "localhost:9093")]


def test_format_no_initial_controllers_writes_no_voter_set(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    meta = tmp_path / "meta"
    code, out, _ = run(capsys, "storage", "format", "--cluster-id", CLUSTER, "--node-id", "4",
                       "--metadata-dir", str(meta), "--no-initial-controllers")
    assert code == 0 and "joins an existing dynamic quorum" in out
    assert not (meta / "__cluster_metadata-0" / BOOTSTRAP_CHECKPOINT).exists()


def _bootstrap_history(meta: pathlib.Path) -> voter_set.VoterSetHistory:
    """What the raft core reads from the bootstrap checkpoint `format` wrote."""
    data = (meta / "__cluster_metadata-0" / BOOTSTRAP_CHECKPOINT).read_bytes()
    raft_snapshot.read_snapshot_records(messages.OffsetAndEpoch(offset=0, epoch=0), data)
    history = voter_set.VoterSetHistory(voter_set.VoterSet([]))
    history.load_snapshot(0, data)
    return history


def test_format_refuses_a_file_and_a_corrupt_meta_properties(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "file").write_text("x")
    code, _, err = run(capsys, "storage", "format", "--cluster-id", CLUSTER, "--node-id", "1",
                       "--data-dir", str(tmp_path / "file"))
    assert code == 1 and "exists and is not a directory" in err
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "meta.properties").write_text("version=7\n")
    code, _, err = run(capsys, "storage", "format", "--cluster-id", CLUSTER, "--node-id", "1",
                       "--data-dir", str(bad))
    assert code == 1 and f"{bad / 'meta.properties'}: line 1: unknown meta.properties version '7'" in err


# --- info --------------------------------------------------------------------------------


def test_info_prints_metadata_and_contents(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = tmp_path / "d"
    run(capsys, "storage", "format", "--cluster-id", CLUSTER, "--node-id", "4", "--data-dir", str(d))
    checkpoint.OffsetCheckpointFile(d / checkpoint.REPLICATION_OFFSET_CHECKPOINT).write({})
    code, out, _ = run(capsys, "storage", "info", "--data-dir", str(d))
    assert code == 0
    assert f"cluster.id={CLUSTER}, node.id=4, directory.id=" in out
    assert "__cluster_metadata-0/ (0 files" in out
    assert "replication-offset-checkpoint (0 entries)" in out


def test_info_reports_problems(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty, missing, bad = tmp_path / "empty", tmp_path / "missing", tmp_path / "bad"
    empty.mkdir()
    bad.mkdir()
    (bad / "meta.properties").write_bytes(b"\xff\n")
    code, out, _ = run(capsys, "storage", "info", "--data-dir", str(empty), "--data-dir", str(missing),
                       "--data-dir", str(bad))
    assert code == 1
    assert f"Found problem: {empty} is not formatted" in out
    assert f"Found problem: {missing} does not exist" in out
    assert "line 1: not UTF-8 text" in out


def test_info_as_json(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    d, missing = tmp_path / "d", tmp_path / "missing"
    run(capsys, "storage", "format", "--cluster-id", CLUSTER, "--node-id", "4", "--data-dir", str(d))
    checkpoint.OffsetCheckpointFile(d / checkpoint.REPLICATION_OFFSET_CHECKPOINT).write({})
    code, out, _ = run(capsys, "storage", "info", "--data-dir", str(d), "--output", "json")
    assert code == 0
    [found] = json.loads(out)["logDirs"]
    assert found["path"] == str(d) and found["problems"] == []
    props = found["metaProperties"]
    assert (props["version"], props["clusterId"], props["nodeId"]) == (1, CLUSTER, 4)
    assert props["directoryId"]
    contents = {entry["name"]: entry for entry in found["contents"]}
    assert contents["__cluster_metadata-0"]["type"] == "directory"
    assert contents["replication-offset-checkpoint"] == {
        "name": "replication-offset-checkpoint", "type": "checkpoint", "entries": 0}
    code, out, _ = run(capsys, "storage", "info", "--data-dir", str(missing), "--output", "json")
    assert code == 1
    [found] = json.loads(out)["logDirs"]
    assert found["metaProperties"] is None and "does not exist" in found["problems"][0]


# --- log dump ----------------------------------------------------------------------------


def write_segment(directory: pathlib.Path, *batches: bytes, base: int = 0) -> pathlib.Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{base:020d}.log"
    path.write_bytes(b"".join(batches))
    return path


def two_batches() -> tuple[bytes, bytes]:
    first = rb.build_batch(
        [rb.RecordInput(key=b"k", value=b"hello", timestamp_ms=1000),
         rb.RecordInput(value=b"line\nbreak", headers=(rb.Header(key="h1", value=b"v"),
                                                       rb.Header(key="h2", value=None)), timestamp_ms=1001)],
        base_offset=0, partition_leader_epoch=3,
    )
    second = rb.build_batch(
        [rb.RecordInput(value=b"z" * 50, timestamp_ms=2000)], base_offset=2, partition_leader_epoch=4,
        compression=rb.CompressionType.GZIP, producer_id=9, producer_epoch=1, base_sequence=5,
    )
    return first, second


def test_dump_prints_batches_and_records(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    first, second = two_batches()
    path = write_segment(tmp_path / "orders-0", first, second)
    code, out, _ = run(capsys, "log", "dump", str(path), "--print-data-log")
    assert code == 0
    lines = out.splitlines()
    assert lines[:2] == [f"Dumping {path}", "Log starting offset: 0"]
    assert lines[2] == (
        "baseOffset: 0 lastOffset: 1 count: 2 baseSequence: -1 lastSequence: -1 producerId: -1 "
        "producerEpoch: -1 partitionLeaderEpoch: 3 isTransactional: false isControl: false "
        f"position: 0 CreateTime: 1001 size: {len(first)} magic: 2 compresscodec: none "
        f"crc: {bh.BatchHeader(first).crc} isvalid: true"
    )
    assert lines[3] == ("| offset: 0 CreateTime: 1000 keySize: 1 valueSize: 5 sequence: -1 "
                        "headerKeys: [] key: k payload: hello")
    assert lines[4] == ("| offset: 1 CreateTime: 1001 keySize: -1 valueSize: 10 sequence: -1 "
                        "headerKeys: [h1,h2] key: null payload: line\\nbreak")
    assert lines[5].startswith("baseOffset: 2 lastOffset: 2 count: 1 baseSequence: 5 lastSequence: 5 "
                               "producerId: 9 producerEpoch: 1 partitionLeaderEpoch: 4")
    assert f"position: {len(first)} " in lines[5] and "compresscodec: gzip" in lines[5]
    assert lines[6] == ("| offset: 2 CreateTime: 2000 keySize: -1 valueSize: 50 sequence: 5 "
                        f"headerKeys: [] key: null payload: {'z' * 50}")
    assert len(lines) == 7


def test_dump_levels_of_detail(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_segment(tmp_path / "t-0", *two_batches())
    _, batches_only, _ = run(capsys, "log", "dump", str(path))
    assert [line[:11] for line in batches_only.splitlines()[2:]] == ["baseOffset:", "baseOffset:"]
    _, deep, _ = run(capsys, "log", "dump", str(path), "--deep-iteration")
    record_lines = [line for line in deep.splitlines() if line.startswith("| ")]
    assert len(record_lines) == 3 and all("payload" not in line for line in record_lines)


def test_dump_of_a_corrupt_crc_prints_the_valid_prefix_then_where_and_why(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = two_batches()
    damaged = bytearray(second)
    damaged[-1] ^= 0xFF
    path = write_segment(tmp_path / "t-0", first, bytes(damaged), rb.build_batch([rb.RecordInput(value=b"a")], base_offset=3))
    code, out, _ = run(capsys, "log", "dump", str(path), "--print-data-log")
    assert code == 1
    lines = out.splitlines()
    assert "payload: hello" in out and "zzzz" not in out and "baseOffset: 3" not in out
    assert lines[-2].startswith("baseOffset: 2 ") and lines[-2].endswith("isvalid: false")
    assert lines[-1].startswith(f"Error: {path}: ") and "fails its CRC" in lines[-1]
    assert lines[-1].endswith(f"bytes from position {len(first)} not dumped")


def test_dump_of_a_torn_tail_and_of_garbage(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    first, second = two_batches()
    torn = write_segment(tmp_path / "a-0", first, second[:30])
    code, out, _ = run(capsys, "log", "dump", str(torn))
    assert code == 1
    assert out.splitlines()[-1] == (
        f"Error: {torn}: at position {len(first)}: incomplete batch header: 30 bytes remain, a v2 "
        f"header needs 61 (a torn write?); 30 bytes from position {len(first)} not dumped"
    )
    cut = write_segment(tmp_path / "b-0", first, second[:-5])
    code, out, _ = run(capsys, "log", "dump", str(cut))
    assert code == 1 and f"needs {len(second)} bytes but only {len(second) - 5} remain" in out
    garbage = write_segment(tmp_path / "c-0", first, struct.pack(">qi", 7, 3) + b"junk")
    code, out, _ = run(capsys, "log", "dump", str(garbage))
    assert code == 1 and "invalid batch length 3" in out.splitlines()[-1]
    tiny = write_segment(tmp_path / "d-0", b"\x00\x01")
    code, out, _ = run(capsys, "log", "dump", str(tiny))
    assert code == 1 and "2 trailing bytes are too few for a batch header" in out


def test_dump_rejects_offsets_that_go_backwards(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    first, _ = two_batches()
    path = write_segment(tmp_path / "t-0", first, first)
    code, out, _ = run(capsys, "log", "dump", str(path))
    assert code == 1 and "has baseOffset 0 below the previous batch's next offset 2" in out


def test_dump_max_bytes_stops_early_without_error(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    first, second = two_batches()
    path = write_segment(tmp_path / "t-0", first, second)
    code, out, _ = run(capsys, "log", "dump", str(path), "--max-bytes", str(len(first) + 10))
    assert code == 0
    assert out.count("baseOffset:") == 1
    assert f"--max-bytes {len(first) + 10} reached (the file has {len(first) + len(second)} bytes)" in out
    assert run(capsys, "log", "dump", str(path), "--max-bytes", "0")[0] == 1


def test_dump_of_control_records_names_their_type(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    key = rb.encode_control_record_key(rb.ControlRecordType.LEADER_CHANGE)
    batch = rb.build_batch([rb.RecordInput(key=key, value=b"\x00\x01")], is_control=True, partition_leader_epoch=1)
    path = write_segment(tmp_path / "t-0", batch)
    code, out, _ = run(capsys, "log", "dump", str(path), "--print-data-log")
    assert code == 0 and "isControl: true" in out
    assert "controlType: LEADER_CHANGE" in out and "payload: 0x0001" in out


def test_dump_of_the_metadata_log_decodes_protobuf_records_and_raft_control_records(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from kraftlog.raft import control_records
    from kraftlog.v1 import metadata_pb2

    record = metadata_pb2.MetadataRecord(topic_record=metadata_pb2.TopicRecord(name="orders"))
    leader_change = control_records.encode_leader_change(control_records.LeaderChangeMessage(
        leader_id=2, voters=(1, 2, 3), granting_voters=(2, 3)))
    data = rb.build_batch([rb.RecordInput(value=record.SerializeToString()),
                           rb.RecordInput(value=b"\x0a\x03abc"),
                           rb.RecordInput(value=b"")], partition_leader_epoch=1)
    control = rb.build_batch(
        [rb.RecordInput(key=rb.encode_control_record_key(rb.ControlRecordType.LEADER_CHANGE),
                        value=leader_change)],
        base_offset=3, is_control=True, partition_leader_epoch=2,
    )
    path = write_segment(tmp_path / "__cluster_metadata-0", data, control)
    code, out, _ = run(capsys, "log", "dump", str(path), "--print-data-log")
    assert code == 0
    payloads = [line.split(" payload: ", 1)[1] for line in out.splitlines() if " payload: " in line]
    assert payloads[0] == '{"topicRecord": {"name": "orders"}}'
    assert payloads[1].startswith("0x0a03616263 (not a MetadataRecord: DecodeError")
    assert payloads[2] == "{} (corrupt: no record type set)"
    assert payloads[3] == '{"leader_id":2,"voters":[1,2,3],"granting_voters":[2,3]}'
    assert "controlType: LEADER_CHANGE" in out


def test_dump_reports_a_corrupt_raft_control_record_and_goes_on(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    control = rb.build_batch(
        [rb.RecordInput(key=rb.encode_control_record_key(rb.ControlRecordType.LEADER_CHANGE),
                        value=b"\x00\x00\x00")], is_control=True)
    path = write_segment(tmp_path / "__cluster_metadata-0", control)
    code, out, _ = run(capsys, "log", "dump", str(path), "--print-data-log")
    assert code == 0
    assert "0x000000 (corrupt LEADER_CHANGE:" in out


def test_dump_escapes_payloads_onto_one_line(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    value = b"a\\b\xffc\td\x01"
    path = write_segment(tmp_path / "t-0", rb.build_batch([rb.RecordInput(key=b"\xfe", value=value)]))
    code, out, _ = run(capsys, "log", "dump", str(path), "--print-data-log")
    assert code == 0
    assert out.splitlines()[-1].endswith("key: \\xfe payload: a\\\\b\\xffc\\td\\x01")


def test_dump_of_a_partition_directory_and_its_other_files(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    part = tmp_path / "t-0"
    write_segment(part, *two_batches(), base=100)
    (part / f"{100:020d}.index").write_bytes(struct.pack(">iiii", 1, 0, 2, 89))
    (part / f"{100:020d}.timeindex").write_bytes(struct.pack(">qiqi", 1001, 1, 2000, 2) + bytes(12))
    (part / "leader-epoch-checkpoint").write_text("0\n2\n3 100\n4 102\n")
    (part / "unrelated.txt").write_text("skip me")
    code, out, _ = run(capsys, "log", "dump", str(part))
    assert code == 0
    assert "offset: 101 position: 0\noffset: 102 position: 89\n" in out
    assert "timestamp: 1001 offset: 101\ntimestamp: 2000 offset: 102\n(entries from 2 on are zero-filled" in out
    assert "epoch: 3 startOffset: 100\nepoch: 4 startOffset: 102\n" in out
    assert "Log starting offset: 100" in out and "unrelated" not in out


def test_dump_of_a_kafka_txnindex_says_kraftlog_writes_none_and_prints_its_aborted_transactions(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / f"{100:020d}.txnindex"
    path.write_bytes(struct.pack(">hqqqq", 0, 4001, 120, 130, 125) + struct.pack(">hqqqq", 0, 4002, 131, 140, 131))
    code, out, _ = run(capsys, "log", "dump", str(path))
    assert code == 0
    assert "Note: kraftlog writes no .txnindex" in out
    assert ("version: 0 producerId: 4001 firstOffset: 120 lastOffset: 130 lastStableOffset: 125\n"
            "version: 0 producerId: 4002 firstOffset: 131 lastOffset: 140 lastStableOffset: 131\n") in out
    path.write_bytes(struct.pack(">hqqqq", 0, 1, 2, 3, 4) + b"\x00" * 5)
    code, out, _ = run(capsys, "log", "dump", str(path))
    assert code == 1 and "5 trailing bytes after 1 entries" in out


def test_dump_of_checkpoints_and_meta_properties(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    run(capsys, "storage", "format", "--cluster-id", CLUSTER, "--node-id", "7", "--data-dir", str(tmp_path))
    (tmp_path / "replication-offset-checkpoint").write_text("0\n1\norders 0 42\n")
    code, out, _ = run(capsys, "log", "dump", str(tmp_path / "meta.properties"),
                       str(tmp_path / "replication-offset-checkpoint"))
    assert code == 0
    assert f"cluster.id: {CLUSTER}\nnode.id: 7\n" in out
    assert "topic: orders partition: 0 offset: 42" in out


@pytest.mark.parametrize(
    ("name", "content", "reason"),
    [
        ("replication-offset-checkpoint", b"0\n2\norders 0 42\n", "line 4: file ends after 1 entries"),
        ("leader-epoch-checkpoint", b"1\n0\n", "line 1: unrecognised checkpoint version 1"),
        ("meta.properties", b"garbage\n", "line 1: expected key=value"),
        ("00000000000000000000.index", struct.pack(">ii", 1, 0) + b"\x00\x00", "2 trailing bytes after 1 entries"),
        ("00000000000000000000.index", struct.pack(">iiii", 5, 100, 3, 200), "entry 1 at byte 8"),
        ("00000000000000000000.timeindex", struct.pack(">qiqi", 9, 1, 5, 2), "entry 1 at byte 12"),
        ("00000000000000000000.timeindex", b"\x01", "1 trailing bytes after 0 entries"),
        ("bogus.index", b"", "file name is not <20-digit base offset>.index"),
        ("notes.txt", b"", "unknown file type"),
    ],
)
def test_dump_of_corrupt_small_files_names_file_and_place(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], name: str, content: bytes, reason: str
) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    code, out, _ = run(capsys, "log", "dump", str(path))
    assert code == 1
    assert out.splitlines()[-1].startswith(f"Error: {path}") and reason in out, out


def test_dump_of_a_missing_file_continues_with_the_others(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_segment(tmp_path / "t-0", two_batches()[0])
    code, out, _ = run(capsys, "log", "dump", str(tmp_path / "nope.log"), str(path))
    assert code == 1
    assert f"Error: {tmp_path / 'nope.log'}: no such file" in out and "baseOffset: 0" in out


def test_format_writes_the_bootstrap_checkpoint_the_controller_reads(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    from kraftlog.metadata import bootstrap, record_convert
    from kraftlog.metadata import records as r

    code, _, err = run(capsys, "storage", "format", "--cluster-id", CLUSTER, "--node-id", "1",
                       "--data-dir", str(tmp_path / "d"), "--feature", "metadata.version=1")
    assert code == 0, err
    records = bootstrap.read_bootstrap(
        tmp_path / "d", decode=lambda v, o: record_convert.decode(v, offset=o))
    assert records == (r.FeatureLevelRecord(name="metadata.version", feature_level=1),)
    code, out, _ = run(capsys, "log", "dump", str(tmp_path / "d" / "bootstrap.checkpoint"),
                       "--print-data-log")
    assert code == 0 and '"featureLevelRecord"' in out


@pytest.mark.parametrize(("feature", "reason"), [
    ("metadata.version=9", "supports metadata.version levels 1..1"),
    ("metadata.version", "expected NAME=LEVEL"),
    ("group.version=1", "unknown feature 'group.version'"),
])
def test_format_refuses_features_this_release_cannot_run(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], feature: str,
        reason: str) -> None:
    code, out, err = run(capsys, "storage", "format", "--cluster-id", CLUSTER, "--node-id", "1",
                         "--data-dir", str(tmp_path / "d"), "--feature", feature)
    assert code == 1 and out == "" and reason in err, err
    assert not (tmp_path / "d").exists()


# --- log dump --output json --------------------------------------------------------------


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[dict[str, Any]]]:
    """``kraftlog log dump ... --output json``: every stdout line must be one JSON object."""
    code, out, err = run(capsys, "log", "dump", *argv, "--output", "json")
    assert err == ""
    return code, [json.loads(line) for line in out.splitlines()]


BATCH_KEYS = ["type", "baseOffset", "lastOffset", "count", "baseSequence", "lastSequence",
              "producerId", "producerEpoch", "partitionLeaderEpoch", "isTransactional",
              "isControl", "position", "CreateTime", "size", "magic", "compresscodec", "crc",
              "isvalid"]


def test_dump_json_is_one_object_per_batch_and_record_with_kafkas_names(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = two_batches()
    path = write_segment(tmp_path / "orders-0", first, second)
    code, objects = run_json(capsys, str(path), "--print-data-log")
    assert code == 0
    assert [o["type"] for o in objects] == ["file", "batch", "record", "record", "batch", "record"]
    assert objects[0] == {"type": "file", "path": str(path), "kind": "log", "baseOffset": 0}
    batch = objects[1]
    assert list(batch) == BATCH_KEYS
    assert batch == {"type": "batch", "baseOffset": 0, "lastOffset": 1, "count": 2,
                     "baseSequence": -1, "lastSequence": -1, "producerId": -1,
                     "producerEpoch": -1, "partitionLeaderEpoch": 3, "isTransactional": False,
                     "isControl": False, "position": 0, "CreateTime": 1001, "size": len(first),
                     "magic": 2, "compresscodec": "none", "crc": bh.BatchHeader(first).crc,
                     "isvalid": True}
    assert objects[2] == {"type": "record", "offset": 0, "CreateTime": 1000, "keySize": 1,
                          "valueSize": 5, "sequence": -1, "headerKeys": [], "key": "k",
                          "payload": "hello"}
    assert objects[3]["headerKeys"] == ["h1", "h2"] and objects[3]["key"] is None
    assert objects[3]["payload"] == "line\nbreak"          # JSON escapes it, not the dump
    assert objects[4]["position"] == len(first) and objects[4]["compresscodec"] == "gzip"
    assert (objects[4]["producerId"], objects[4]["baseSequence"], objects[5]["sequence"]) == (9, 5, 5)
    # Without --print-data-log a record has no key or payload; without --deep-iteration no records.
    _, deep = run_json(capsys, str(path), "--deep-iteration")
    assert [o["type"] for o in deep].count("record") == 3
    assert all("payload" not in o and "key" not in o for o in deep)
    _, shallow = run_json(capsys, str(path))
    assert [o["type"] for o in shallow] == ["file", "batch", "batch"]


def test_dump_json_and_text_agree_field_for_field(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_segment(tmp_path / "t-0", *two_batches())
    _, text, _ = run(capsys, "log", "dump", str(path), "--deep-iteration")
    _, objects = run_json(capsys, str(path), "--deep-iteration")

    def line(o: dict[str, Any]) -> str:
        fields = [(k, v) for k, v in o.items() if k not in ("type", "headerKeys")]
        text = " ".join(f"{k}: {str(v).lower() if isinstance(v, bool) else v}" for k, v in fields)
        if o["type"] == "record":
            return f"| {text} headerKeys: [{','.join(o['headerKeys'])}]"
        return text
    assert [line(o) for o in objects if o["type"] != "file"] == text.splitlines()[2:]


def test_dump_json_bytes_that_are_not_utf8_are_base64(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    value = b"a\xffb"
    path = write_segment(tmp_path / "t-0", rb.build_batch([rb.RecordInput(key=b"\xfe", value=value)]))
    code, objects = run_json(capsys, str(path), "--print-data-log")
    assert code == 0
    record = objects[-1]
    assert (record["key"], record["keyEncoding"]) == ("/g==", "base64")
    assert base64.b64decode(record["payload"]) == value and record["payloadEncoding"] == "base64"


def test_dump_json_of_the_metadata_log_holds_decoded_messages(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from kraftlog.raft import control_records
    from kraftlog.v1 import metadata_pb2

    record = metadata_pb2.MetadataRecord(topic_record=metadata_pb2.TopicRecord(name="orders"))
    leader_change = control_records.encode_leader_change(control_records.LeaderChangeMessage(
        leader_id=2, voters=(1, 2, 3), granting_voters=(2, 3)))
    data = rb.build_batch([rb.RecordInput(value=record.SerializeToString()),
                           rb.RecordInput(value=b"\x0a\x03abc")], partition_leader_epoch=1)
    control = rb.build_batch(
        [rb.RecordInput(key=rb.encode_control_record_key(rb.ControlRecordType.LEADER_CHANGE),
                        value=leader_change)],
        base_offset=2, is_control=True, partition_leader_epoch=2)
    path = write_segment(tmp_path / "__cluster_metadata-0", data, control)
    code, objects = run_json(capsys, str(path), "--print-data-log")
    assert code == 0
    records = [o for o in objects if o["type"] == "record"]
    assert records[0]["payload"] == {"topicRecord": {"name": "orders"}}
    assert base64.b64decode(records[1]["payload"]) == b"\x0a\x03abc"
    assert records[1]["payloadError"].startswith("not a MetadataRecord: DecodeError")
    assert records[2]["controlType"] == "LEADER_CHANGE"
    assert records[2]["payload"] == {"leader_id": 2, "voters": [1, 2, 3], "granting_voters": [2, 3]}


def test_dump_json_of_indexes_checkpoints_and_meta_properties(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run(capsys, "storage", "format", "--cluster-id", CLUSTER, "--node-id", "7",
        "--data-dir", str(tmp_path))
    part = tmp_path / "t-0"
    write_segment(part, *two_batches(), base=100)
    (part / f"{100:020d}.index").write_bytes(struct.pack(">iiii", 1, 0, 2, 89))
    (part / f"{100:020d}.timeindex").write_bytes(struct.pack(">qiqi", 1001, 1, 2000, 2) + bytes(12))
    (part / "leader-epoch-checkpoint").write_text("0\n2\n3 100\n4 102\n")
    (tmp_path / "replication-offset-checkpoint").write_text("0\n1\norders 0 42\n")
    txn = tmp_path / f"{100:020d}.txnindex"
    txn.write_bytes(struct.pack(">hqqqq", 0, 4001, 120, 130, 125))
    code, objects = run_json(capsys, str(part), str(tmp_path / "meta.properties"),
                             str(tmp_path / "replication-offset-checkpoint"), str(txn))
    assert code == 0
    by_type: dict[str, list[dict[str, Any]]] = {}
    for o in objects:
        by_type.setdefault(o.pop("type"), []).append(o)
    assert [f["kind"] for f in by_type["file"]] == [
        "index", "log", "timeindex", "leader-epoch-checkpoint", "meta.properties",
        "offset-checkpoint", "txnindex"]
    assert by_type["offsetIndexEntry"] == [{"offset": 101, "position": 0},
                                           {"offset": 102, "position": 89}]
    assert by_type["timeIndexEntry"] == [{"timestamp": 1001, "offset": 101},
                                         {"timestamp": 2000, "offset": 102}]
    assert by_type["preallocated"] == [{"fromEntry": 2}]
    assert by_type["checkpoint"] == [{"version": 0, "entries": 2}, {"version": 0, "entries": 1}]
    assert by_type["leaderEpochEntry"] == [{"epoch": 3, "startOffset": 100},
                                           {"epoch": 4, "startOffset": 102}]
    assert by_type["offsetCheckpointEntry"] == [{"topic": "orders", "partition": 0, "offset": 42}]
    (props,) = by_type["metaProperties"]
    assert (props["version"], props["cluster.id"], props["node.id"]) == (1, CLUSTER, 7)
    assert isinstance(props["directory.id"], str)
    assert by_type["abortedTxn"] == [{"version": 0, "producerId": 4001, "firstOffset": 120,
                                      "lastOffset": 130, "lastStableOffset": 125}]
    assert "kraftlog writes no .txnindex" in by_type["note"][0]["note"]


def test_dump_json_errors_are_objects_and_the_exit_code_is_1(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = two_batches()
    damaged = bytearray(second)
    damaged[-1] ^= 0xFF
    path = write_segment(tmp_path / "t-0", first, bytes(damaged))
    (tmp_path / "notes.txt").write_text("")
    (tmp_path / "empty").mkdir()
    code, objects = run_json(capsys, str(path), str(tmp_path / "nope.log"),
                             str(tmp_path / "notes.txt"), str(tmp_path / "empty"))
    assert code == 1
    errors = [o for o in objects if o["type"] == "error"]
    assert len(errors) == 4
    assert "fails its CRC" in errors[0]["error"]
    assert (errors[0]["position"], errors[0]["notDumpedBytes"]) == (len(first), len(second))
    assert objects[objects.index(errors[0]) - 1]["isvalid"] is False
    assert errors[1] == {"type": "error", "error": f"{tmp_path / 'nope.log'}: no such file"}
    assert "unknown file type" in errors[2]["error"]
    assert errors[3]["error"] == f"{tmp_path / 'empty'}: directory holds no file to dump"


def test_dump_json_max_bytes_says_where_it_stopped(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = two_batches()
    path = write_segment(tmp_path / "t-0", first, second)
    code, objects = run_json(capsys, str(path), "--max-bytes", str(len(first) + 10))
    assert code == 0
    assert objects[-1] == {"type": "stopped", "position": len(first), "maxBytes": len(first) + 10,
                           "fileSize": len(first) + len(second)}


def test_dump_rejects_an_unknown_output_format(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_segment(tmp_path / "t-0", two_batches()[0])
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["log", "dump", str(path), "--output", "yaml"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'yaml'" in capsys.readouterr().err
