"""``kraftlog quorum describe``: the --status and --replication renderings of a leader's
DescribeQuorum answer (kafka-metadata-quorum's names and arithmetic), and bad arguments."""

from __future__ import annotations

import json

import pytest

from kraftlog import errors
from kraftlog.tools import cli
from kraftlog.tools import quorum_commands as qc
from kraftlog.v1 import raft_pb2

Replica = raft_pb2.DescribeQuorumResponse.ReplicaState


def _description(cluster_id: str = "MkU3OEVBNTcwNTJENDM2Qg") -> qc.QuorumDescription:
    answer = raft_pb2.DescribeQuorumResponse(
        leader_id=2, leader_epoch=7, high_watermark=120,
        current_voters=[
            Replica(replica_id=1, log_end_offset=100, last_fetch_timestamp=5_000,
                    last_caught_up_timestamp=4_000),
            Replica(replica_id=2, log_end_offset=130, last_fetch_timestamp=-1,
                    last_caught_up_timestamp=6_000),
            Replica(replica_id=3, log_end_offset=130, last_fetch_timestamp=5_900,
                    last_caught_up_timestamp=5_900)],
        observers=[Replica(replica_id=9, log_end_offset=90, last_fetch_timestamp=5_500,
                           last_caught_up_timestamp=-1)])
    return qc.QuorumDescription(cluster_id=cluster_id, answer=answer,
                                leader_endpoint="127.0.0.1:9093")


def test_status_reports_the_laggiest_voter_as_kafka_does() -> None:
    fields = qc.status_fields(_description())
    assert fields == {
        "ClusterId": "MkU3OEVBNTcwNTJENDM2Qg", "LeaderId": 2, "LeaderEpoch": 7,
        "HighWatermark": 120,
        "MaxFollowerLag": 30,             # leader 130 - voter 1 at 100
        "MaxFollowerLagTimeMs": 2_000,    # leader caught up at 6000, voter 1 at 4000
        "CurrentVoters": [1, 2, 3], "CurrentObservers": [9], "KRaftVersion": 0}
    lines = qc.format_status(_description())
    assert lines[0] == "ClusterId:              MkU3OEVBNTcwNTJENDM2Qg"
    assert lines[6] == "CurrentVoters:          [1,2,3]"
    assert lines[7] == "CurrentObservers:       [9]"


def test_status_with_followers_caught_up_has_no_lag_and_unknown_cluster_id_is_said() -> None:
    description = _description(cluster_id="")
    for voter in description.answer.current_voters:
        voter.log_end_offset = 130
    fields = qc.status_fields(description)
    assert fields["MaxFollowerLag"] == 0
    assert fields["ClusterId"] == "unknown"


def test_lag_is_measured_from_the_longest_log_when_the_leaders_own_entry_is_stale() -> None:
    description = _description()
    leader, = [v for v in description.answer.current_voters if v.replica_id == 2]
    leader.log_end_offset = 1  # its own entry not refreshed; followers fetched up to 130
    fields = qc.status_fields(description)
    assert fields["MaxFollowerLag"] == 30  # voter 3 at 130, voter 1 at 100
    assert [r["Lag"] for r in qc.replication_rows(description)][:3] == [0, 30, 0]


def test_replication_table_lists_leader_then_followers_then_observers() -> None:
    rows = qc.replication_rows(_description())
    assert [(r["NodeId"], r["Lag"], r["Status"]) for r in rows] == [
        (2, 0, "Leader"), (1, 30, "Follower"), (3, 0, "Follower"), (9, 40, "Observer")]
    lines = qc.format_replication(_description())
    assert lines[0].split() == list(qc.REPLICATION_COLUMNS)
    zero = "AAAAAAAAAAAAAAAAAAAAAA"  # static voters carry no directory id
    assert lines[1].split() == ["2", zero, "130", "0", "-1", "6000", "Leader"]
    assert lines[4].split() == ["9", zero, "90", "40", "5500", "-1", "Observer"]
    # Columns line up: every row starts its Status column at the same place.
    assert len({line.index(line.split()[-1]) for line in lines}) == 1


def test_human_readable_timestamps_say_how_long_ago() -> None:
    lines = qc.format_replication(_description(), now_ms=6_500)
    assert lines[1].split()[:1] + lines[1].split()[2:] == [
        "2", "130", "0", "-", "500", "ms", "ago", "Leader"]
    assert lines[2].split()[4:] == ["1500", "ms", "ago", "2500", "ms", "ago", "Follower"]


def test_status_and_replication_show_kraft_version_and_directory_ids() -> None:
    description = _description()
    description.answer.kraft_version = 1
    voter = description.answer.current_voters[0]
    voter.replica_directory_id.most_significant_bits = 0x0123456789ABCDEF
    voter.replica_directory_id.least_significant_bits = 0xFEDCBA9876543210
    assert qc.status_fields(description)["KRaftVersion"] == 1
    rows = {r["NodeId"]: r for r in qc.replication_rows(description)}
    assert rows[1]["DirectoryId"] == "ASNFZ4mrze_-3LqYdlQyEA"


@pytest.mark.parametrize("value", ["127.0.0.1:9093", "a:1,b:2", "[::1]:9093"])
def test_bootstrap_accepts_host_port_lists(value: str) -> None:
    assert len(qc.parse_bootstrap(value)) == value.count(",") + 1


@pytest.mark.parametrize("value", ["", "host", "host:0", "host:70000", "a:1,b", ":9093"])
def test_bootstrap_rejects_what_is_not_host_port(value: str) -> None:
    with pytest.raises(errors.ConfigError):
        qc.parse_bootstrap(value)


@pytest.mark.parametrize("argv, message", [
    (["--bootstrap-controller", "nohost", "--status"], "is not HOST:PORT"),
    (["--bootstrap-controller", "127.0.0.1:1", "--status", "--replication"], "exactly one"),
    (["--bootstrap-controller", "127.0.0.1:1"], "exactly one"),
    (["--bootstrap-controller", "127.0.0.1:1", "--status", "--timeout-ms", "0"], "positive"),
])
def test_bad_arguments_exit_1_with_one_line(argv: list[str], message: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["quorum", "describe", *argv]) == cli.EXIT_ERROR
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and err.startswith("kraftlog: error:")


def test_an_unreachable_controller_is_one_clear_line(capsys: pytest.CaptureFixture[str]) -> None:
    # Port 1 on loopback: nothing listens, the connection is refused at once.
    code = cli.main(["quorum", "describe", "--bootstrap-controller", "127.0.0.1:1", "--status",
                     "--timeout-ms", "3000"])
    assert code == cli.EXIT_ERROR
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot reach any controller" in err
    assert "127.0.0.1:1 (UNAVAILABLE)" in err


def test_json_output_has_the_same_fields_under_lower_camel_case_names() -> None:
    status = json.loads(json.dumps(qc.status_json(_description())))
    assert status["maxFollowerLag"] == 30 and list(status) == [
        "clusterId", "leaderId", "leaderEpoch", "highWatermark", "maxFollowerLag",
        "maxFollowerLagTimeMs", "currentVoters", "currentObservers", "kraftVersion"]
    rows = qc.replication_json(_description())["replicas"]
    assert [r["lag"] for r in rows][:3] == [0, 30, 0]
    assert list(rows[0]) == ["nodeId", "directoryId", "logEndOffset", "lag", "lastFetchTimestamp",
                             "lastCaughtUpTimestamp", "status"]
