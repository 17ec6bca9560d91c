"""``kraftlog topics|cluster``: input validation, health filters, error mapping and rendering.

Pure checks: the flag parsers refuse bad input with one clear ConfigError, the health
rules are Kafka's TopicCommand rules, AdminService errors become the AdminError
subclass of their Kafka code, and the table / JSON renderings show what they must.
"""

from __future__ import annotations

import json

import pytest

from kraftlog import config as kconfig
from kraftlog import errors
from kraftlog.admin import admin_client as ac
from kraftlog.admin import admin_service, quorum_history, topic_health
from kraftlog.error_codes import ErrorCode
from kraftlog.tools import admin_commands as server_commands
from kraftlog.tools import cli, topic_commands
from kraftlog.v1 import admin_pb2, common_pb2, controller_pb2

H = topic_health.PartitionHealth

# -- validation -----------------------------------------------------------------------------------


def test_config_pairs_parse_and_refuse_malformed_entries() -> None:
    assert topic_commands.parse_config_pairs(["retention.ms=1000", "cleanup.policy=compact"]) == {
        "retention.ms": "1000", "cleanup.policy": "compact"}
    assert topic_commands.parse_config_pairs(None) == {}
    for bad in ("retention.ms", "=5", "a b=1"):
        with pytest.raises(errors.ConfigError, match="is not key=value"):
            topic_commands.parse_config_pairs([bad])
    with pytest.raises(errors.ConfigError, match="given twice"):
        topic_commands.parse_config_pairs(["a=1", "a=2"])


def test_replica_assignment_is_kafka_syntax() -> None:
    assert topic_commands.parse_replica_assignment("4:5,5:6,6:4") == {
        0: [4, 5], 1: [5, 6], 2: [6, 4]}
    with pytest.raises(errors.ConfigError, match="names a broker twice"):
        topic_commands.parse_replica_assignment("4:4")
    with pytest.raises(errors.ConfigError, match="not broker ids"):
        topic_commands.parse_replica_assignment("4:x")
    with pytest.raises(errors.ConfigError, match="same number of replicas"):
        topic_commands.parse_replica_assignment("4:5,6")


def test_topic_lists_counts_and_admin_address() -> None:
    assert topic_commands.parse_topics("a, b,a", required=True) == ["a", "b"]
    with pytest.raises(errors.ConfigError, match="--topic is required"):
        topic_commands.parse_topics(" , ", required=True)
    with pytest.raises(errors.ConfigError, match="takes one --topic"):
        topic_commands.single_topic("a,b", "create")
    with pytest.raises(errors.ConfigError, match="at least 1, got 0"):
        topic_commands.check_positive("--partitions", 0)
    assert topic_commands.admin_address("h:1") == "h:1"
    with pytest.raises(errors.ConfigError, match="not HOST:PORT"):
        topic_commands.admin_address("nohost")


def test_admin_address_defaults_to_env_then_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(topic_commands.ADMIN_ENV, raising=False)
    assert topic_commands.admin_address(None) == "127.0.0.1:19090"
    monkeypatch.setenv(topic_commands.ADMIN_ENV, "10.0.0.1:9000")
    assert topic_commands.admin_address(None) == "10.0.0.1:9000"


def test_cli_refuses_bad_input_before_calling_anything(capsys: pytest.CaptureFixture[str],
                                                       ) -> None:
    # The admin address is a closed port: these must fail on validation, not on the call.
    admin = ["--admin", "127.0.0.1:1"]
    assert cli.main(["topics", "create", "--topic", "t", "--config", "oops", *admin]) == 1
    assert "--config 'oops' is not key=value" in capsys.readouterr().err
    assert cli.main(["topics", "create", "--topic", "t", "--partitions", "0", *admin]) == 1
    assert "--partitions must be at least 1" in capsys.readouterr().err
    assert cli.main(["topics", "alter", "--topic", "t", *admin]) == 1
    assert "needs --partitions and/or --config" in capsys.readouterr().err
    with pytest.raises(SystemExit) as usage:
        cli.main(["topics", "describe", "--under-replicated-partitions",
                  "--unavailable-partitions"])
    assert usage.value.code == 2


def test_unreachable_admin_is_one_line_naming_the_address(capsys: pytest.CaptureFixture[str],
                                                          ) -> None:
    assert cli.main(["topics", "list", "--admin", "127.0.0.1:1", "--timeout-ms", "2000"]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    assert "cannot reach the admin service at 127.0.0.1:1" in err


# -- health filters -------------------------------------------------------------------------------

def test_health_rules_follow_kafka_topic_command() -> None:
    full = H(leader_id=1, replicas=(1, 2, 3), isr=(1, 2, 3))
    two = H(leader_id=1, replicas=(1, 2, 3), isr=(1, 2))
    leaderless = H(leader_id=-1, replicas=(1, 2, 3), isr=(1,))
    live = {1, 2, 3}
    f = topic_health.HealthFilter

    def pick(flt: topic_health.HealthFilter, min_isr: int = 2) -> list[H]:
        return [p for p in (full, two, leaderless)
                if topic_health.matches(flt, p, min_isr=min_isr, live_brokers=live)]

    assert pick(f.ALL) == [full, two, leaderless]
    assert pick(f.UNDER_REPLICATED) == [two, leaderless]
    assert pick(f.AT_MIN_ISR) == [two]
    assert pick(f.UNDER_MIN_ISR) == [leaderless]
    assert pick(f.UNAVAILABLE) == [leaderless]
    # A leader on a broker that is not live makes the partition unavailable.
    assert topic_health.is_unavailable(full, live_brokers={2, 3})


def test_replicas_a_reassignment_removes_do_not_count_toward_the_factor() -> None:
    moving = H(leader_id=1, replicas=(1, 2, 3, 4), isr=(1, 2, 3), removing_replicas=(4,))
    assert topic_health.replication_factor(moving.replicas, moving.removing_replicas) == 3
    assert not topic_health.is_under_replicated(moving)


def test_health_filter_values_match_the_proto_enum() -> None:
    for flt in topic_health.HealthFilter:
        assert admin_pb2.PartitionHealthFilter.Name(flt.value).endswith(flt.name)  # type: ignore[arg-type]


# -- errors ---------------------------------------------------------------------------------------

def test_errors_map_to_subclasses_carrying_the_kafka_name() -> None:
    error = ac.error_for(ErrorCode.INVALID_REPLICATION_FACTOR, "too many replicas")
    assert isinstance(error, ac.InvalidReplicationFactorError)
    assert isinstance(error, ac.InvalidRequestError)
    assert isinstance(error, errors.KraftlogError)
    assert error.error_name == "INVALID_REPLICATION_FACTOR"
    assert str(error) == "too many replicas (INVALID_REPLICATION_FACTOR)"
    assert type(ac.error_for(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "x")) is ac.UnknownTopicError
    assert type(ac.error_for(ErrorCode.NOT_CONTROLLER, "x")) is ac.ClusterUnavailableError
    assert type(ac.error_for(ErrorCode.OFFSET_OUT_OF_RANGE, "x")) is ac.AdminError


def test_item_errors_lists_every_failed_item() -> None:
    response = controller_pb2.CreateTopicsResponse(topics=[
        controller_pb2.CreateTopicsResponse.CreatableTopicResult(name="ok"),
        controller_pb2.CreateTopicsResponse.CreatableTopicResult(
            name="dup", error=common_pb2.Error(code=common_pb2.TOPIC_ALREADY_EXISTS,
                                               message="Topic 'dup' already exists."))])
    failures = ac.item_errors(response)
    assert failures == [ac.ItemError(resource="topic 'dup'", code=ErrorCode.TOPIC_ALREADY_EXISTS,
                                     message="Topic 'dup' already exists.")]
    moves = controller_pb2.AlterPartitionReassignmentsResponse(responses=[
        controller_pb2.AlterPartitionReassignmentsResponse.ReassignableTopicResponse(
            name="t", partitions=[
                controller_pb2.AlterPartitionReassignmentsResponse.ReassignablePartitionResponse(
                    partition_index=3, error=common_pb2.Error(
                        code=common_pb2.NO_REASSIGNMENT_IN_PROGRESS, message="none"))])])
    assert [f.resource for f in ac.item_errors(moves)] == ["partition t-3"]


# -- rendering ------------------------------------------------------------------------------------

def _described() -> admin_pb2.DescribeTopicsResponse:
    D = admin_pb2.DescribeTopicsResponse
    return D(topics=[D.TopicDescription(
        name="orders", topic_id=common_pb2.Uuid(most_significant_bits=1,
                                                least_significant_bits=2),
        partition_count=2, replication_factor=3, min_insync_replicas=2,
        configs=[D.TopicConfig(name="retention.ms", value="1000")],
        partitions=[
            D.PartitionDescription(partition_index=0, leader_id=4, leader_epoch=3,
                                   replicas=[4, 5, 6], isr=[4, 5, 6]),
            D.PartitionDescription(partition_index=1, leader_id=-1, leader_epoch=7,
                                   replicas=[5, 6, 4], isr=[5], offline_replicas=[6, 4],
                                   adding_replicas=[4], removing_replicas=[7],
                                   eligible_leader_replicas=[6], last_known_elr=[4])])])


def test_describe_table_has_a_summary_line_and_aligned_partition_rows() -> None:
    lines = topic_commands.format_describe(_described())
    assert lines[0] == ("Topic: orders  TopicId: AAAAAAAAAAEAAAAAAAAAAg  PartitionCount: 2  "
                        "ReplicationFactor: 3  MinIsr: 2  Configs: retention.ms=1000")
    header, first, second = lines[1:]
    assert header.split() == list(topic_commands.PARTITION_COLUMNS)
    assert first.split() == ["0", "4", "3", "4,5,6", "4,5,6", "-", "-", "-", "-", "-"]
    assert second.split() == ["1", "none", "7", "5,6,4", "5", "4", "7", "6,4", "6", "4"]
    # Columns line up: each value starts where its header does.
    assert second.index("none") == header.index("LEADER")
    assert topic_commands.format_describe(admin_pb2.DescribeTopicsResponse()) == [
        "(no matching partitions)"]


def test_describe_json_is_machine_readable() -> None:
    payload = json.loads(json.dumps(topic_commands.describe_json(_described())))
    (topic,) = payload["topics"]
    assert topic["name"] == "orders" and topic["minInsyncReplicas"] == 2
    assert topic["configs"] == {"retention.ms": "1000"}
    assert topic["partitions"][1] == {
        "partition": 1, "leader": -1, "leaderEpoch": 7, "replicas": [5, 6, 4], "isr": [5],
        "addingReplicas": [4], "removingReplicas": [7], "offlineReplicas": [6, 4],
        "eligibleLeaderReplicas": [6], "lastKnownElr": [4]}


def test_list_and_cluster_renderings() -> None:
    listing = admin_pb2.ListTopicsResponse(topics=[
        admin_pb2.ListTopicsResponse.TopicListing(name="a", partition_count=3),
        admin_pb2.ListTopicsResponse.TopicListing(name="__consumer_offsets", partition_count=50,
                                                  is_internal=True)])
    lines = topic_commands.format_list(listing)
    assert lines[0].split() == ["TOPIC", "PARTITIONS", "TOPIC", "ID", "INTERNAL"]
    assert lines[2].split()[0::3] == ["__consumer_offsets", "yes"]
    assert topic_commands.list_json(listing)["topics"][0]["partitionCount"] == 3
    assert topic_commands.format_list(admin_pb2.ListTopicsResponse()) == ["(no topics)"]
    B = controller_pb2.DescribeClusterResponse.DescribeClusterBroker
    cluster = controller_pb2.DescribeClusterResponse(cluster_id="c1", controller_id=2, brokers=[
        B(broker_id=4, endpoints=[common_pb2.Endpoint(host="h", port=9)], broker_epoch=12),
        B(broker_id=5, is_fenced=True)])
    text = topic_commands.format_cluster(cluster)
    assert text[:3] == ["ClusterId:     c1", "ControllerId:  2", "Brokers:       2"]
    assert text[5].split() == ["4", "h:9", "-", "unfenced", "12"]
    assert text[6].split() == ["5", "-", "-", "fenced", "0"]
    assert topic_commands.cluster_json(cluster)["brokers"][1]["state"] == "fenced"


def test_quorum_history_answer_filters_epochs_and_keeps_the_newest() -> None:
    def entry(epoch: int, gap: int | None) -> quorum_history.EpochEntry:
        return quorum_history.EpochEntry(
            epoch=epoch, leader_id=epoch % 3 + 1, voters=(1, 2, 3), granting_voters=(1, 2),
            source=quorum_history.EpochSource.LEADER_CHANGE, start_offset=epoch * 10,
            start_timestamp_ms=epoch * 1000, last_offset=epoch * 10 + 5,
            last_timestamp_ms=epoch * 1000 + 500, previous_epoch=None, leaderless_ms=gap)
    history = quorum_history.QuorumHistory(
        epochs=(entry(1, None), entry(2, 500), entry(3, 700)), snapshots=(), warnings=(),
        log_start_offset=10, log_end_offset=36)
    answer = admin_service.history_response(history, from_epoch=2)
    assert [c.epoch for c in answer.changes] == [2, 3]
    assert answer.changes[0].leaderless_ms == 500 and answer.log_start_offset == 10
    newest = admin_service.history_response(history, max_entries=1)
    assert [(c.epoch, c.offset, c.timestamp_ms) for c in newest.changes] == [(3, 30, 3000)]
    assert admin_service.history_response(history).changes[0].leaderless_ms == -1


# -- kraftlog admin's settings --------------------------------------------------------------------

def _admin_config(*overrides: str) -> kconfig.Config:
    return kconfig.load(server_commands.ADMIN_CONFIG, None, overrides)


def test_admin_settings_take_bootstrap_servers_or_voters() -> None:
    settings = server_commands.admin_settings(_admin_config(
        "controller.quorum.bootstrap.servers=h1:1,h2:2", "request.timeout.ms=500"))
    assert settings.bootstrap_controllers == ("h1:1", "h2:2") and settings.voters == {}
    assert settings.request_timeout_ms == 500
    settings = server_commands.admin_settings(_admin_config(
        "controller.quorum.voters=1@h1:1,2@h2:2"))
    assert settings.bootstrap_controllers == ("h1:1", "h2:2")
    assert settings.voters == {1: "h1:1", 2: "h2:2"}
    with pytest.raises(errors.ConfigError, match=r"controller\.quorum\.bootstrap\.servers"):
        server_commands.admin_settings(_admin_config())
    with pytest.raises(errors.ConfigError, match="is not HOST:PORT"):
        server_commands.admin_settings(_admin_config(
            "controller.quorum.bootstrap.servers=nohost"))


def test_admin_listener_is_the_first_listeners_entry() -> None:
    assert server_commands.listen_address(_admin_config()) == "0.0.0.0:19090"
    assert server_commands.listen_address(_admin_config(
        "listeners=ADMIN://127.0.0.1:7000,OTHER://:1")) == "127.0.0.1:7000"
    with pytest.raises(errors.ConfigError, match="bad host:port"):
        server_commands.listen_address(_admin_config("listeners=ADMIN://127.0.0.1:0"))
    with pytest.raises(errors.ConfigError, match="not NAME://host:port"):
        server_commands.listen_address(_admin_config("listeners=127.0.0.1:7000"))
