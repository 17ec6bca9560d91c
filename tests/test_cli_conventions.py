"""The ``kraftlog`` command as one tool (issue 18): every subcommand's ``--help`` lists its
exit codes, an unknown flag prints the subcommand's usage, every ``--output json`` payload
has lowerCamelCase keys, ``--output text`` still means table, and the endpoint variables
are every endpoint flag's default."""

from __future__ import annotations

import argparse
import io
import json
import pathlib
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from kraftlog import cli_conventions as conventions
from kraftlog import client, errors
from kraftlog import config as kconfig
from kraftlog.admin import quorum_history
from kraftlog.admin import reassign_plan as rp
from kraftlog.dev import process as dev_process
from kraftlog.raft.messages import OffsetAndEpoch
from kraftlog.storage import record_batch as rb
from kraftlog.tools import admin_commands, cli, client_commands, dev_commands
from kraftlog.tools import delete_records_commands as drc
from kraftlog.tools import quorum_commands as qc
from kraftlog.tools import reassign_commands as rc
from kraftlog.tools import topic_commands as tc
from kraftlog.v1 import admin_pb2, broker_pb2, common_pb2, controller_pb2, raft_pb2
from tests.quorum_cluster import free_ports

ENDPOINT_VARIABLES = (conventions.BOOTSTRAP_SERVER_ENV, conventions.BOOTSTRAP_CONTROLLER_ENV,
                      conventions.ADMIN_ENV)


def _every_parser() -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """(command words, parser) of ``kraftlog`` and every subcommand below it."""
    found: list[tuple[tuple[str, ...], argparse.ArgumentParser]] = []

    def walk(words: tuple[str, ...], parser: argparse.ArgumentParser) -> None:
        found.append((words, parser))
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                seen: set[int] = set()
                for name, child in action.choices.items():
                    if id(child) not in seen:
                        seen.add(id(child))
                        walk((*words, name), child)
    walk((), cli.build_parser(every_command=True))
    return found


PARSERS = _every_parser()
LEAVES = [(words, p) for words, p in PARSERS if p.get_default("func") is not None]
# The commands with an exit code of their own, and the code.
EXTRA_EXIT_CODES = {("dev", "status"): 3, ("reassign", "verify"): 3}


@pytest.fixture
def no_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for variable in ENDPOINT_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    return monkeypatch


def test_the_walk_finds_every_command() -> None:
    names = {" ".join(words) for words, _ in LEAVES}
    assert {"topics create", "cluster describe", "reassign verify", "quorum describe",
            "delete-records", "produce", "consume", "dev status", "log dump", "storage format",
            "controller", "broker", "server", "admin", "pipeline balance"} <= names
    assert len(LEAVES) >= 30


@pytest.mark.parametrize(("words", "parser"), PARSERS, ids=lambda v: " ".join(v) or "kraftlog"
                         if isinstance(v, tuple) else "")
def test_every_help_lists_the_exit_codes(words: tuple[str, ...],
                                         parser: argparse.ArgumentParser,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        cli.main([*words, "--help"])
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps the epilog
    assert "exit codes: 0 ok, 1 error (one line on stderr), 2 usage error" in text
    assert "130 interrupted" in text
    extra = EXTRA_EXIT_CODES.get(words)
    if extra is not None:
        assert f" {extra} " in text.split("exit codes:")[1]
    else:
        assert conventions.exit_codes(parser).keys() == {0, 1, 2, 130}


@pytest.mark.parametrize(("words", "parser"), LEAVES, ids=lambda v: " ".join(v)
                         if isinstance(v, tuple) else "")
def test_a_wrong_flag_prints_the_subcommands_usage(words: tuple[str, ...],
                                                   parser: argparse.ArgumentParser,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        cli.main([*words, "--bogus-flag"])
    assert done.value.code == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith(f"usage: kraftlog {' '.join(words)} "), err
    assert f"kraftlog {' '.join(words)}: error: " in err


@pytest.mark.parametrize("argv", [
    ["topics", "create", "--topic", "t"],
    ["quorum", "describe", "--status"],
    ["produce", "--topic", "t"],
    ["dev", "status"],
    ["log", "dump", "x.log"],
])
def test_an_unknown_flag_among_valid_ones_is_named_under_the_subcommands_usage(
        argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    # Without the subcommand-level check argparse prints the top-level usage
    # ("usage: kraftlog [-h] [--version] COMMAND ...").
    with pytest.raises(SystemExit) as done:
        cli.main([*argv, "--bogus", "x"])
    assert done.value.code == cli.EXIT_USAGE
    err = capsys.readouterr().err
    words = " ".join(a for a in argv if not a.startswith("-"))
    assert err.startswith("usage: kraftlog " + " ".join(argv[:2 if argv[0] in (
        "topics", "quorum", "dev", "log") else 1]))
    assert err.rstrip().endswith("error: unrecognized arguments: --bogus x"), (words, err)


# -- JSON keys ------------------------------------------------------------------------------------

MAP_FIELDS = {"configs", "otherProperties"}
"""Objects whose keys are data (Kafka's config names), not names of this format."""


def bad_keys(payload: Any, path: str = "$") -> Iterator[str]:
    if isinstance(payload, dict):
        for key, value in payload.items():
            if not conventions.JSON_KEY_STYLE.match(key):
                yield f"{path}.{key}"
            if key not in MAP_FIELDS:
                yield from bad_keys(value, f"{path}.{key}")
    elif isinstance(payload, list):
        for index, item in enumerate(payload):
            yield from bad_keys(item, f"{path}[{index}]")


def test_storage_info_json_keys(tmp_path: pathlib.Path,
                                capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "d"
    assert cli.main(["storage", "format", "--cluster-id", "MkU3OEVBNTcwNTJENDM2Qg",
                     "--node-id", "1", "--data-dir", str(data)]) == 0
    capsys.readouterr()
    assert cli.main(["storage", "info", "--data-dir", str(data), "--output", "json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["logDirs"][0]["metaProperties"]["nodeId"] == 1
    assert not list(bad_keys(payload))


def test_the_key_checker_catches_snake_and_pascal_case() -> None:
    assert list(bad_keys({"ok": 1, "topic_id": 2, "x": [{"LeaderId": 1}],
                          "configs": {"retention.ms": "1"}})) == ["$.topic_id", "$.x[0].LeaderId"]


def _described() -> admin_pb2.DescribeTopicsResponse:
    D = admin_pb2.DescribeTopicsResponse
    return D(topics=[D.TopicDescription(
        name="orders", topic_id=common_pb2.Uuid(most_significant_bits=1, least_significant_bits=2),
        partition_count=1, replication_factor=3, min_insync_replicas=2, is_internal=False,
        configs=[D.TopicConfig(name="retention.ms", value="1000")],
        partitions=[D.PartitionDescription(
            partition_index=0, leader_id=-1, leader_epoch=7, replicas=[5, 6, 4], isr=[5],
            offline_replicas=[6], adding_replicas=[4], removing_replicas=[7],
            eligible_leader_replicas=[6], last_known_elr=[4])])])


def _quorum() -> qc.QuorumDescription:
    R = raft_pb2.DescribeQuorumResponse.ReplicaState
    answer = raft_pb2.DescribeQuorumResponse(
        leader_id=1, leader_epoch=3, high_watermark=10,
        current_voters=[R(replica_id=1, log_end_offset=10, last_fetch_timestamp=5,
                          last_caught_up_timestamp=5),
                        R(replica_id=2, log_end_offset=8, last_fetch_timestamp=4,
                          last_caught_up_timestamp=3)],
        observers=[R(replica_id=101, log_end_offset=9)])
    return qc.QuorumDescription(cluster_id="c", answer=answer, leader_endpoint="h:1")


def _progress() -> admin_pb2.ListPartitionReassignmentsProgressResponse:
    P = admin_pb2.ListPartitionReassignmentsProgressResponse
    return P(topics=[P.TopicReassignmentProgress(name="t", partitions=[
        P.PartitionReassignmentProgress(
            partition_index=0, replicas=[1, 2, 3], adding_replicas=[3], removing_replicas=[1],
            progress=[P.AddingReplicaProgress(replica_id=3, size_bytes=300,
                                              leader_size_bytes=1000, bytes_behind=700)])])])


def _history() -> quorum_history.QuorumHistory:
    epoch = quorum_history.EpochEntry(
        epoch=2, leader_id=1, voters=(1, 2, 3), granting_voters=(1, 2),
        source=quorum_history.EpochSource.LEADER_CHANGE, start_offset=20,
        start_timestamp_ms=2000, last_offset=25, last_timestamp_ms=2500, previous_epoch=1,
        leaderless_ms=300)
    snapshot = quorum_history.SnapshotEntry(snapshot_id=OffsetAndEpoch(offset=10, epoch=1),
                                            last_contained_log_timestamp_ms=1000, error="bad")
    return quorum_history.QuorumHistory(epochs=(epoch,), snapshots=(snapshot,),
                                        warnings=("w",), log_start_offset=0, log_end_offset=26)


def _delete_records_answer() -> Any:
    D = broker_pb2.DeleteRecordsResponse
    return D(topics=[
        D.DeleteRecordsTopicResult(name="t", partitions=[
            D.DeleteRecordsPartitionResult(partition_index=0, low_watermark=5),
            D.DeleteRecordsPartitionResult(
                partition_index=1, error=common_pb2.Error(code=1, message="m"))])])


def _payloads() -> dict[str, Any]:
    cluster = controller_pb2.DescribeClusterResponse(
        cluster_id="c", controller_id=1, brokers=[
            controller_pb2.DescribeClusterResponse.DescribeClusterBroker(
                broker_id=4, endpoints=[common_pb2.Endpoint(host="h", port=9)], rack="r")])
    listing = admin_pb2.ListTopicsResponse(topics=[
        admin_pb2.ListTopicsResponse.TopicListing(name="a", partition_count=3)])
    move = rp.Plan(partitions=(rp.PartitionMove(topic="t", partition=0, replicas=(2, 3)),))
    statuses = rc.move_statuses(move, {("t", 0): (1, 2, 3)}, _progress())
    record = client.ConsumerRecord(
        topic="t", partition=0, offset=3, timestamp_ms=5,
        timestamp_type=rb.TimestampType.CREATE_TIME, key=b"\xff", value=b"v",
        headers=(rb.Header(key="h", value=b"x"),), leader_epoch=0)
    return {
        "topics list": tc.list_json(listing),
        "topics describe": tc.describe_json(_described()),
        "cluster describe": tc.cluster_json(cluster),
        "reassign verify": rc.statuses_json(statuses),
        "reassign list": rc.reassignments_json(_progress()),
        "leader-election": rc.election_json(["t-0"], ["t-1"], ["t-2: X"]),
        "quorum describe --status": qc.status_json(_quorum()),
        "quorum describe --replication": qc.replication_json(_quorum()),
        "quorum history": quorum_history.to_json(_history()),
        "consume": json.loads(client_commands.format_json(record)),
        "delete-records": drc.result_json(_delete_records_answer())[0],
    }


@pytest.mark.parametrize(("command", "payload"), list(_payloads().items()),
                         ids=list(_payloads()))
def test_every_json_payload_has_lower_camel_case_keys(command: str, payload: Any) -> None:
    assert payload and isinstance(payload, dict)
    assert list(bad_keys(json.loads(json.dumps(payload)))) == [], command


def test_reassign_generate_keeps_kafkas_plan_format() -> None:
    # The plan is Kafka's file format, read by kafka-reassign-partitions: its keys stay.
    plan = json.loads(rp.Plan(partitions=(
        rp.PartitionMove(topic="t", partition=0, replicas=(2, 3)),)).to_json())
    assert list(bad_keys(plan)) == ["$.partitions[0].log_dirs"]


def test_dev_status_json_keys(no_env: pytest.MonkeyPatch, tmp_path: pathlib.Path,
                              capsys: pytest.CaptureFixture[str]) -> None:
    # A cluster that was never started: every node stopped, exit 3.
    dev_process.create_or_load(tmp_path, controllers=3, brokers=1,
                               base_port=free_ports(1)[0], with_admin=True)
    code = cli.main(["dev", "status", "--dir", str(tmp_path), "--output", "json"])
    assert code == dev_commands.EXIT_NODE_STOPPED
    payload = json.loads(capsys.readouterr().out)
    assert [n["state"] for n in payload["nodes"]] == ["stopped"] * 5
    assert list(bad_keys(payload)) == []
    # 'text' is still accepted, as 'table'.
    assert cli.main(["dev", "status", "--dir", str(tmp_path), "--output", "text"]) == 3
    assert capsys.readouterr().out.splitlines()[1].split() == [
        "NODE", "ENDPOINT", "STATE", "PID", "DETAIL"]


# -- --output ---------------------------------------------------------------------------------

def test_every_output_option_is_table_or_json_and_text_means_table() -> None:
    with_output = []
    for words, parser in LEAVES:
        for action in parser._actions:
            if "--output" in action.option_strings and action.choices is not None:
                with_output.append(" ".join(words))
                assert tuple(action.choices) == conventions.OUTPUT_FORMATS, words
                assert action.default == "table", words
                parsed = parser.parse_args([*_required(parser), "--output", "text"])
                assert parsed.output == "table", words
    assert {"topics list", "topics describe", "cluster describe", "reassign generate",
            "reassign verify", "reassign list", "leader-election", "quorum describe",
            "quorum history", "consume", "dev status", "log dump",
            "delete-records", "storage info"} <= set(with_output)


def _required(parser: argparse.ArgumentParser) -> list[str]:
    argv: list[str] = []
    for action in parser._actions:
        if action.required and not isinstance(action, argparse._SubParsersAction):
            if action.option_strings:
                value = str(next(iter(action.choices))) if action.choices else "1"
                argv += [action.option_strings[0], value]
            else:
                argv.append("x")
    return argv


@pytest.mark.parametrize("argv", [["consume", "--topic", "t"], ["log", "dump", "x.log"],
                                  ["quorum", "history", "--metadata-dir", "d"]])
def test_an_unknown_output_format_is_a_usage_error(argv: list[str],
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        cli.main([*argv, "--output", "xml"])
    assert done.value.code == cli.EXIT_USAGE
    assert "invalid choice: 'xml'" in capsys.readouterr().err


# -- endpoint variables ---------------------------------------------------------------------------

def _closed() -> str:
    return f"127.0.0.1:{free_ports(1)[0]}"


def test_quorum_describe_reads_bootstrap_controller_from_the_environment(
        no_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["quorum", "describe", "--status"]) == cli.EXIT_ERROR
    assert f"set ${conventions.BOOTSTRAP_CONTROLLER_ENV}" in capsys.readouterr().err
    closed = _closed()
    no_env.setenv(conventions.BOOTSTRAP_CONTROLLER_ENV, closed)
    assert cli.main(["quorum", "describe", "--status", "--timeout-ms", "2000"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{closed} (UNAVAILABLE)" in err
    no_env.setenv(conventions.BOOTSTRAP_CONTROLLER_ENV, "nohost")
    assert cli.main(["quorum", "describe", "--status"]) == 1
    assert "$KRAFTLOG_BOOTSTRAP_CONTROLLER entry 'nohost'" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["produce", "consume"])
def test_produce_and_consume_read_bootstrap_server_from_the_environment(
        command: str, no_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    no_env.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"a\n")))
    assert cli.main([command, "--topic", "t"]) == cli.EXIT_ERROR
    assert f"set ${conventions.BOOTSTRAP_SERVER_ENV}" in capsys.readouterr().err
    closed = _closed()
    no_env.setenv(conventions.BOOTSTRAP_SERVER_ENV, closed)
    assert cli.main([command, "--topic", "t", "--timeout-ms", "100"] if command == "consume"
                    else [command, "--topic", "t"]) == cli.EXIT_ERROR
    err = capsys.readouterr().err
    assert "no broker reachable" in err and f"{closed} (UNAVAILABLE)" in err


def test_admin_commands_prefer_the_admin_variable_when_both_are_set(
        no_env: pytest.MonkeyPatch) -> None:
    no_env.setenv(conventions.BOOTSTRAP_SERVER_ENV, "broker:9092")
    assert tc.admin_targets(None, None) == ["broker:9092"]
    no_env.setenv(conventions.ADMIN_ENV, "admin:19090")
    assert tc.admin_targets(None, None) == ["admin:19090"]
    assert tc.admin_targets(None, "b:1") == ["b:1"]


def test_kraftlog_admin_takes_its_endpoints_from_the_variables_without_a_config_file(
        no_env: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> None:
    def settings(*argv: str) -> tuple[list[str], str]:
        args = cli.build_parser(["admin"]).parse_args(["admin", *argv])
        cfg = kconfig.load(admin_commands.ADMIN_CONFIG, args.config,
                           admin_commands.admin_overrides(args))
        return (cfg.get_list("controller.quorum.bootstrap.servers"),
                admin_commands.listen_address(cfg))

    assert settings("--bootstrap-controller", "c:1") == (["c:1"], "0.0.0.0:19090")
    no_env.setenv(conventions.BOOTSTRAP_CONTROLLER_ENV, "c:1,c:2")
    no_env.setenv(conventions.ADMIN_ENV, "127.0.0.1:19095")
    assert settings() == (["c:1", "c:2"], "127.0.0.1:19095")
    assert settings("--listen", "127.0.0.1:7", "--bootstrap-controller", "d:1") == (
        ["d:1"], "127.0.0.1:7")
    # A file names its own endpoints: the shell's variables do not move a dev or pod process.
    config = tmp_path / "admin.properties"
    config.write_text("controller.quorum.voters=1@v:1\nlisteners=ADMIN://127.0.0.1:8\n")
    assert settings("--config", str(config)) == ([], "127.0.0.1:8")
    no_env.setenv(conventions.ADMIN_ENV, "a:1,a:2")
    with pytest.raises(errors.ConfigError, match="names 2 addresses"):
        settings()


def test_dev_up_exports_every_endpoint_variable(tmp_path: pathlib.Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    layout = dev_process.create_or_load(tmp_path, controllers=3, brokers=2, base_port=20000,
                                        with_admin=True)
    dev_commands._print_next_steps(layout, dev_process.QuorumView(
        leader_id=1, epoch=1, high_watermark=0, voter_end_offsets={}))
    printed = capsys.readouterr().out.splitlines()
    assert [line.strip() for line in printed if "export " in line] == [
        "export KRAFTLOG_BOOTSTRAP_SERVER=127.0.0.1:20011,127.0.0.1:20012",
        "export KRAFTLOG_BOOTSTRAP_CONTROLLER=127.0.0.1:20001,127.0.0.1:20002,127.0.0.1:20003",
        "export KRAFTLOG_ADMIN=127.0.0.1:20000"]
    assert "  kraftlog quorum describe --status" in printed  # no flag needed after them
    for line in dev_commands.export_lines(layout):
        assert line.split("=")[0].split()[1] in ENDPOINT_VARIABLES
