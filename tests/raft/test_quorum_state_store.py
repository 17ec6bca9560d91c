"""The quorum-state file: Kafka's exact JSON, atomic replace, loud failure on corruption."""

from __future__ import annotations

import json
import pathlib

import pytest

from kraftlog.errors import ConfigError, CorruptFileError
from kraftlog.ids import Epoch, NodeId
from kraftlog.raft import quorum_state_store as qss


def test_writes_kafka_data_version_0_json_byte_for_byte(tmp_path: pathlib.Path) -> None:
    store = qss.FileQuorumStateStore(tmp_path / qss.QUORUM_STATE_FILE_NAME)
    store.write(qss.ElectionState(epoch=Epoch(2), leader_id=NodeId(1), voters=frozenset({1})))
    assert (tmp_path / "quorum-state").read_text() == (
        '{"clusterId":"","leaderId":1,"leaderEpoch":2,"votedId":-1,"appliedOffset":0,'
        '"currentVoters":[{"voterId":1}],"data_version":0}')
    assert not (tmp_path / "quorum-state.tmp").exists()


def test_round_trips_votes_and_sorted_voters(tmp_path: pathlib.Path) -> None:
    store = qss.FileQuorumStateStore(tmp_path / "quorum-state")
    state = qss.ElectionState(epoch=Epoch(7), voted_id=NodeId(3), voters=frozenset({3, 1, 2}))
    store.write(state)
    assert store.read() == state
    assert json.loads((tmp_path / "quorum-state").read_text())["currentVoters"] == [
        {"voterId": 1}, {"voterId": 2}, {"voterId": 3}]


def test_missing_file_is_a_fresh_node(tmp_path: pathlib.Path) -> None:
    assert qss.FileQuorumStateStore(tmp_path / "quorum-state").read() is None


def test_reads_kafka_data_version_1(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "quorum-state"
    path.write_text('{"leaderId":-1,"leaderEpoch":5,"votedId":2,'
                    '"votedDirectoryId":"AAAAAAAAAAAAAAAAAAAAAA","data_version":1}')
    assert qss.FileQuorumStateStore(path).read() == qss.ElectionState(
        epoch=Epoch(5), voted_id=NodeId(2))


@pytest.mark.parametrize(("content", "reason"), [
    ('{"clusterId":"","leaderId":1,"leaderEp', "not valid JSON"),
    ("", "is empty"),
    ("[1,2]", "expected a JSON object"),
    ('{"leaderId":1,"leaderEpoch":2,"votedId":-1,"data_version":7}', "unknown data_version 7"),
    ('{"clusterId":"","leaderId":1,"votedId":-1,"appliedOffset":0,"currentVoters":null,'
     '"data_version":0}', "field leaderEpoch is missing"),
    ('{"clusterId":"","leaderId":"1","leaderEpoch":2,"votedId":-1,"appliedOffset":0,'
     '"currentVoters":null,"data_version":0}', "leaderId must be an integer"),
    ('{"clusterId":"","leaderId":1,"leaderEpoch":-3,"votedId":-1,"appliedOffset":0,'
     '"currentVoters":null,"data_version":0}', "leaderEpoch -3 is negative"),
    ('{"clusterId":"","leaderId":1,"leaderEpoch":3,"votedId":2,"appliedOffset":0,'
     '"currentVoters":null,"data_version":0}', "names both leader 1 and a vote for 2"),
    ('{"clusterId":"","leaderId":1,"leaderEpoch":3,"votedId":-1,"appliedOffset":0,'
     '"currentVoters":[{"id":1}],"data_version":0}', "voterId is missing"),
    ('{"clusterId":"","leaderId":true,"leaderEpoch":3,"votedId":-1,"appliedOffset":0,'
     '"currentVoters":[],"data_version":0}', "leaderId must be an integer"),
])
def test_corrupt_file_names_path_and_reason(tmp_path: pathlib.Path, content: str,
                                            reason: str) -> None:
    path = tmp_path / "quorum-state"
    path.write_text(content)
    with pytest.raises(CorruptFileError) as info:
        qss.FileQuorumStateStore(path).read()
    assert str(path) in str(info.value)
    assert reason in str(info.value)


def test_non_utf8_file_is_corrupt(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "quorum-state"
    path.write_bytes(b"\xff\xfe{}")
    with pytest.raises(CorruptFileError, match="not UTF-8 at byte 0"):
        qss.FileQuorumStateStore(path).read()


def test_changed_voter_set_refuses_to_start() -> None:
    stored = qss.ElectionState(epoch=Epoch(1), voters=frozenset({1, 2, 3}))
    with pytest.raises(ConfigError, match=r"\[1, 2, 4\] differs from the voter set \[1, 2, 3\]"):
        qss.check_configured_voters(stored, [1, 2, 4], source="qs")
    qss.check_configured_voters(stored, [3, 2, 1], source="qs")
    qss.check_configured_voters(qss.ElectionState(epoch=Epoch(1)), [9], source="qs")


def test_memory_store_round_trips_through_the_json_codec() -> None:
    store = qss.MemoryQuorumStateStore()
    assert store.read() is None
    state = qss.ElectionState(epoch=Epoch(4), leader_id=NodeId(2), voters=frozenset({1, 2}))
    store.write(state)
    assert store.read() == state
    assert store.writes == 1


def test_election_state_rejects_leader_with_vote_for_another() -> None:
    with pytest.raises(ValueError, match="cannot name leader 1 and a vote for 2"):
        qss.ElectionState(epoch=Epoch(1), leader_id=NodeId(1), voted_id=NodeId(2))
