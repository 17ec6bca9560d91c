"""``kraftlog quorum describe`` and ``quorum history`` against three real controller processes.

Asked of a follower, describe answers with the leader's view (it follows the leader hint);
after kill -9 of the leader, a bootstrap list whose first entry is dead still works and shows
the new epoch; and ``quorum history`` on a stopped node's directory lists both epochs with
their leaders and the leaderless gap between them. Every wait is bounded; every child is
killed in a ``finally``.
"""

from __future__ import annotations

import json
import pathlib

from kraftlog.v1 import raft_pb2
from tests.quorum_cluster import (
    CLUSTER_ID,
    FAILOVER_BOUND_S,
    NODES,
    Cluster,
    end_offsets,
    kraftlog,
    wait_for,
)


def _address(cluster: Cluster, node: int) -> str:
    return f"127.0.0.1:{cluster.ports[node]}"


def test_describe_follows_the_leader_and_history_shows_the_failover(
        tmp_path: pathlib.Path) -> None:
    cluster = Cluster(tmp_path)
    try:
        for node in NODES:
            cluster.start(node)

        def committed() -> raft_pb2.DescribeQuorumResponse | None:
            view = cluster.leader_view()
            # Its LeaderChange committed, and every voter has fetched at least that far (the
            # log keeps growing: the active controller appends a NoOpRecord every 500 ms).
            if view is None or view.high_watermark < 1 \
                    or min(end_offsets(view).values()) < 1:
                return None
            return view

        first = wait_for(committed, timeout_s=15, what="a leader with a committed epoch",
                         cluster=cluster)
        follower = next(n for n in NODES if n != first.leader_id)

        status = kraftlog("quorum", "describe", "--bootstrap-controller",
                          _address(cluster, follower), "--status", "--output", "json")
        assert status.returncode == 0, status.stderr
        fields = json.loads(status.stdout)
        assert fields["leaderId"] == first.leader_id
        assert fields["leaderEpoch"] == first.leader_epoch
        assert fields["clusterId"] == CLUSTER_ID
        assert fields["currentVoters"] == list(NODES)
        assert fields["highWatermark"] >= first.high_watermark

        replication = kraftlog("quorum", "describe", "--bootstrap-controller",
                               _address(cluster, follower), "--replication")
        assert replication.returncode == 0, replication.stderr
        rows = [line.split() for line in replication.stdout.splitlines()]
        assert rows[0] == ["NodeId", "DirectoryId", "LogEndOffset", "Lag",
                           "LastFetchTimestamp", "LastCaughtUpTimestamp", "Status"]
        assert rows[1][0] == str(first.leader_id) and rows[1][-1] == "Leader"
        assert sorted(int(r[0]) for r in rows[1:]) == list(NODES)
        assert [r[-1] for r in rows[2:]] == ["Follower", "Follower"]

        old_leader, old_epoch = first.leader_id, first.leader_epoch
        cluster.kill(old_leader)  # kill -9

        def new_leader_committed() -> raft_pb2.DescribeQuorumResponse | None:
            view = cluster.leader_view()
            if view is None or view.leader_epoch <= old_epoch \
                    or view.high_watermark <= first.high_watermark:
                return None
            return view

        second = wait_for(new_leader_committed, timeout_s=FAILOVER_BOUND_S + 10,
                          what="re-election after kill -9", cluster=cluster)
        # The dead node first in the list: the tool moves on to the live one.
        after = kraftlog("quorum", "describe", "--bootstrap-controller",
                         f"{_address(cluster, old_leader)},{_address(cluster, follower)}",
                         "--status", "--output", "json")
        assert after.returncode == 0, after.stderr
        after_fields = json.loads(after.stdout)
        assert after_fields["leaderId"] == second.leader_id != old_leader
        assert after_fields["leaderEpoch"] == second.leader_epoch

        survivor = second.leader_id
        cluster.kill_all()
        history = kraftlog("quorum", "history", "--metadata-dir",
                           str(cluster.data_dir(survivor)), "--json")
        assert history.returncode == 0, history.stderr
        epochs = {e["epoch"]: e for e in json.loads(history.stdout)["epochs"]}
        assert epochs[old_epoch]["leaderId"] == old_leader
        assert epochs[second.leader_epoch]["leaderId"] == second.leader_id
        assert epochs[second.leader_epoch]["voters"] == list(NODES)
        assert len(epochs[second.leader_epoch]["grantingVoters"]) >= 2
        gap = epochs[second.leader_epoch]["leaderlessMs"]
        assert gap is not None and 0 <= gap < 60_000
        text = kraftlog("quorum", "history", "--metadata-dir", str(cluster.data_dir(survivor)))
        assert text.returncode == 0, text.stderr
        print(text.stdout)
    finally:
        cluster.kill_all()
