"""Three ``kraftlog controller`` and three ``kraftlog broker`` processes on loopback.

The scenario: brokers follow the metadata log as raft observers, register and are
unfenced (their BrokerService health turns SERVING); a topic with replication factor
3 and min.insync.replicas=2 is created through ControllerService; records produced
with acks=all to the partition leader are read back with a consumer Fetch; the
leader broker is killed with SIGKILL, the controller fences it after its short
session timeout and elects a new leader from the ISR, and every acknowledged record
is still readable from the new leader. The killed broker restarts, recovers its log
and rejoins the ISR through the leader's AlterPartition. A SIGTERM'd broker then shuts down cleanly
(controlled shutdown, exit 0). Every wait is bounded.
"""

from __future__ import annotations

import os
import pathlib
import signal
import time

from kraftlog.v1 import broker_pb2, common_pb2
from tests.quorum_cluster import (
    BROKERS,
    TOPIC,
    Topic,
    consume,
    partition_state,
    produce,
    running_cluster,
    wait_for,
)


def test_brokers_replicate_and_survive_a_leader_kill(tmp_path: pathlib.Path) -> None:
    started = time.monotonic()
    with running_cluster(tmp_path, topics=[Topic(name=TOPIC, min_insync_replicas=2)],
                         serving_timeout_s=15, topic_timeout_s=5) as running:
        brokers = running.brokers

        def full_isr_everywhere() -> tuple[int, int, tuple[int, ...]] | None:
            states = {partition_state(brokers, b) for b in BROKERS}
            state = states.pop() if len(states) == 1 else None
            return state if state is not None and state[2] == BROKERS else None

        leader, epoch, _isr = wait_for(full_isr_everywhere, timeout_s=10,
                                       what="events-0 led with ISR 4,5,6 on every broker")
        acked: list[bytes] = []
        for i in range(5):
            values = [f"record-{i}-{j}".encode() for j in range(10)]
            answer = produce(brokers, leader, values)
            part = answer.responses[0].partition_responses[0]
            assert part.error.code == common_pb2.NONE, part
            assert part.base_offset == len(acked)
            acked += values
        assert consume(brokers, leader) == acked
        # A follower refuses the produce and names the leader (KIP-951).
        follower = next(b for b in BROKERS if b != leader)
        refused = produce(brokers, follower, [b"x"]).responses[0].partition_responses[0]
        assert refused.error.code == common_pb2.NOT_LEADER_OR_FOLLOWER, refused
        assert refused.current_leader.leader_id == leader
        assert refused.current_leader.endpoint.port == brokers.ports[leader]

        brokers.kill(leader)
        survivors = [b for b in BROKERS if b != leader]

        def new_leader() -> int | None:
            state = partition_state(brokers, survivors[0])
            if state is None or state[0] in (leader, -1) or state[1] <= epoch:
                return None
            return state[0]

        elected = wait_for(new_leader, timeout_s=10, what="a new leader from the ISR")
        assert elected in survivors
        wait_for(lambda: consume(brokers, elected) == acked or None, timeout_s=10,
                 what="acknowledged records readable from the new leader")
        more = [b"after-failover"]
        part = produce(brokers, elected, more).responses[0].partition_responses[0]
        assert part.error.code == common_pb2.NONE, part
        assert part.base_offset == len(acked)

        # The killed broker restarts, recovers its log, follows the new leader and
        # rejoins the ISR (the leader's AlterPartition expansion).
        brokers.start(leader)

        def isr_restored() -> bool | None:
            state = partition_state(brokers, elected)
            return True if state is not None and state[2] == BROKERS else None

        wait_for(isr_restored, timeout_s=10, what="the restarted broker back in the ISR")
        dirs = brokers.stub(elected).DescribeLogDirs(broker_pb2.DescribeLogDirsRequest(),
                                                     timeout=5)
        [replica] = dirs.results[0].topics[0].partitions
        assert replica.is_leader and replica.log_end_offset == len(acked) + 1
        assert replica.replica_state == broker_pb2.REPLICA_STATE_ONLINE_REPLICA

        # Controlled shutdown of a follower: exit 0 within its bound.
        follower = next(b for b in survivors if b != elected)
        proc = brokers.procs.pop(follower)
        log_path = tmp_path / f"broker-{follower}.log"
        logged_before = log_path.stat().st_size
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        with log_path.open("rb") as log:  # a clean shutdown logs no error
            log.seek(logged_before)
            shutdown_log = log.read().decode(errors="replace")
        assert " ERROR " not in shutdown_log and "Traceback" not in shutdown_log, shutdown_log
        assert time.monotonic() - started < 60
