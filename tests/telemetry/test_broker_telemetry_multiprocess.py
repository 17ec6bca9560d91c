"""Linked leader-election traces and every metrics endpoint, from real processes.

Three ``kraftlog controller`` and three ``kraftlog broker`` processes export spans to the
test's OTLP receiver and serve Prometheus metrics. A topic with replication factor 3 is
created and produced to; its leader broker is killed with SIGKILL. The active controller
fences it and elects a new leader: its ``controller.partition_leader_election`` span and
the new leader's ``broker.become_leader`` span for that partition must both arrive, and
the broker span must carry a link to exactly the controller span (trace and span id).
Every endpoint is then scraped and parsed: the controller's and the brokers' metric names
must be there with values that fit the scenario; when the killed broker comes back, the
new leader counts the ISR expansion. Every wait is bounded; every child is
killed in a ``finally``.
"""

from __future__ import annotations

import pathlib
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kraftlog.storage import record_batch as rb
from kraftlog.v1 import broker_pb2, common_pb2
from tests.quorum_cluster import (
    BROKERS,
    NODES,
    Brokers,
    Topic,
    free_ports,
    running_cluster,
    wait_for,
)
from tests.telemetry.otlp_receiver import OtlpReceiver, ReceivedSpan

TOPIC = "traced"
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(port: int) -> Samples | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as answer:
            text = answer.read().decode()
    except OSError:
        return None
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def produce(brokers: Brokers, broker: int, count: int) -> int:
    batch = rb.build_batch([rb.RecordInput(value=f"v{i}".encode(), timestamp_ms=None)
                            for i in range(count)], now_ms=int(time.time() * 1000))
    answer = brokers.stub(broker).Produce(broker_pb2.ProduceRequest(
        acks=-1, timeout_ms=5000, topic_data=[broker_pb2.ProduceRequest.TopicProduceData(
            name=TOPIC, partition_data=[broker_pb2.ProduceRequest.PartitionProduceData(
                index=0, records=batch)])]), timeout=10)
    code: int = answer.responses[0].partition_responses[0].error.code
    return code


def test_broker_kill_links_election_to_become_leader_and_metrics_fit(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with OtlpReceiver() as receiver:
        for key, value in receiver.env().items():
            monkeypatch.setenv(key, value)  # every child inherits them
        monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "200")
        metrics_port = dict(zip([*NODES, *BROKERS], free_ports(len(NODES) + len(BROKERS)),
                                strict=True))
        with running_cluster(tmp_path, topics=[Topic(name=TOPIC)], serving_timeout_s=25,
                             node_config=lambda node: {
                                 "kraftlog.metrics.port": metrics_port[node],
                                 "kraftlog.metrics.host": "127.0.0.1"}) as running:
            cluster, brokers = running.controllers, running.brokers
            def leader_span(spans: list[ReceivedSpan]) -> ReceivedSpan | None:
                return next((s for s in spans if s.name == "broker.become_leader"
                             and s.attributes.get("topic") == TOPIC), None)

            first = receiver.wait_for(leader_span, timeout_s=15)
            leader = int(first.attributes["kraftlog.node.id"])
            assert first.instance == f"broker-{leader}"
            assert not first.links  # epoch 0: the partition's creation, no election
            produced = 0
            deadline = time.monotonic() + 10
            while produced < 30:
                # acks=all waits for the followers to join the ISR; retry until they did.
                assert time.monotonic() < deadline, "acks=all produce kept failing"
                if produce(brokers, leader, 10) == common_pb2.NONE:
                    produced += 10
                else:
                    time.sleep(0.1)

            before = wait_for(lambda: scrape(metrics_port[leader]), timeout_s=5,
                              what="the leader's metrics")
            assert before[("kraftlog_broker_requests_total",
                           (("outcome", "ok"), ("request", "Produce")))] >= 3
            assert before[("kraftlog_broker_request_latency_seconds_count",
                           (("request", "Produce"),))] >= 3
            brokers.kill(leader)

            def linked(spans: list[ReceivedSpan]
                       ) -> tuple[ReceivedSpan, ReceivedSpan] | None:
                elections = {(s.trace_id, s.span_id): s for s in spans
                             if s.name == "controller.partition_leader_election"
                             and s.attributes.get("topic") == TOPIC
                             and s.attributes.get("old_leader") == leader}
                for span in spans:
                    if span.name != "broker.become_leader" or span is first \
                            or span.attributes.get("topic") != TOPIC:
                        continue
                    for link in span.links:
                        if link in elections:
                            return elections[link], span
                return None

            election, became = receiver.wait_for(linked, timeout_s=15)
            new_leader = int(election.attributes["new_leader"])
            assert new_leader in BROKERS and new_leader != leader
            assert election.attributes["reason"] == "fenced_broker"
            assert election.instance.startswith("controller-")
            assert became.instance == f"broker-{new_leader}"
            assert became.attributes["partition"] == 0
            assert became.attributes["partition.leader_epoch"] \
                == election.attributes["leader_epoch"] > 0
            assert became.attributes["metadata.offset"] >= election.attributes["metadata.offset"]
            # The new leader's followers (the survivor) are told by become_follower, linked too.
            followers = [s for s in receiver.spans if s.name == "broker.become_follower"
                         and s.attributes.get("topic") == TOPIC
                         and (election.trace_id, election.span_id) in s.links]
            assert {s.instance for s in followers} \
                <= {f"broker-{b}" for b in BROKERS if b != leader}

            deadline = time.monotonic() + 10
            while produce(brokers, new_leader, 10) != common_pb2.NONE:
                assert time.monotonic() < deadline, "the new leader kept refusing produce"
                time.sleep(0.1)

            # -- metrics ---------------------------------------------------------------------
            def controllers_settled() -> list[Samples] | None:
                samples = [scrape(metrics_port[node]) for node in cluster.ports]
                if any(s is None for s in samples):
                    return None
                got = [s for s in samples if s is not None]
                active = [s for s in got
                          if s[("kraftlog_controller_active_controller_count", ())] == 1]
                if len(active) != 1 or any(
                        s[("kraftlog_controller_fenced_broker_count", ())] != 1 for s in got):
                    return None
                return got

            controllers = wait_for(controllers_settled, timeout_s=10,
                                   what="controller metrics: one active, one fenced broker")
            assert sum(s[("kraftlog_controller_active_controller_count", ())]
                       for s in controllers) == 1
            for got in controllers:
                assert got[("kraftlog_controller_active_broker_count", ())] == 2
                assert got[("kraftlog_controller_global_topic_count", ())] == 1
                assert got[("kraftlog_controller_global_partition_count", ())] == 1
                assert got[("kraftlog_controller_offline_partitions_count", ())] == 0
                # Replicas are placed round-robin, so the killed leader may or may not have
                # been the preferred one; either way one partition, at most one imbalance.
                assert got[("kraftlog_controller_preferred_replica_imbalance_count", ())] in (0, 1)
                assert got[("kraftlog_controller_last_committed_record_offset", ())] > 0
                assert got[("kraftlog_controller_last_applied_record_offset", ())] \
                    >= got[("kraftlog_controller_last_committed_record_offset", ())]
                assert got[("kraftlog_raft_current_epoch", ())] >= 1
            active = next(s for s in controllers
                          if s[("kraftlog_controller_active_controller_count", ())] == 1)
            assert active[("kraftlog_controller_event_queue_time_seconds_count", ())] > 0
            assert active[("kraftlog_controller_event_queue_processing_time_seconds_count",
                           ())] > 0

            def new_leader_settled() -> Samples | None:
                got = scrape(metrics_port[new_leader])
                return got if got is not None and got.get(
                    ("kraftlog_broker_leader_count", ())) == 1 else None

            led = wait_for(new_leader_settled, timeout_s=10, what="new leader's metrics")
            # The killed broker left the ISR (2 of 3): under-replicated, at min ISR? The
            # topic's min.insync.replicas is the default 1, so neither under nor at min.
            assert led[("kraftlog_broker_partition_count", ())] == 1
            assert led[("kraftlog_broker_under_replicated_partitions", ())] == 1
            assert led[("kraftlog_broker_under_min_isr_partition_count", ())] == 0
            assert led[("kraftlog_broker_offline_replica_count", ())] == 0
            assert led[("kraftlog_broker_log_size_bytes",
                        (("partition", "0"), ("topic", TOPIC)))] > 0
            assert led[("kraftlog_broker_log_size_bytes_total", ())] > 0
            assert led[("kraftlog_broker_replica_max_lag", ())] >= 0
            assert led[("kraftlog_broker_replication_throttle_bytes_per_second",
                        (("quota", "leader"),))] == -1
            assert ("kraftlog_broker_replication_throttled_byte_rate",
                    (("quota", "follower"),)) in led
            assert ("kraftlog_broker_isr_shrinks_total", ()) in led
            assert ("kraftlog_broker_isr_expands_total", ()) in led
            # The followers fetched from it since it leads: Fetch requests were timed.
            assert led[("kraftlog_broker_requests_total",
                        (("outcome", "ok"), ("request", "Produce")))] >= 1
            assert led[("kraftlog_broker_requests_total",
                        (("outcome", "ok"), ("request", "Fetch")))] > 0
            assert led[("kraftlog_broker_request_latency_seconds_count",
                        (("request", "Fetch"),))] > 0
            survivor = next(b for b in BROKERS if b not in (leader, new_leader))
            follower = wait_for(lambda: scrape(metrics_port[survivor]), timeout_s=5,
                                what="the follower's metrics")
            assert follower[("kraftlog_broker_leader_count", ())] == 0
            assert follower[("kraftlog_broker_partition_count", ())] == 1
            assert follower[("kraftlog_broker_log_size_bytes_total", ())] > 0

            # The killed broker comes back and catches up: the new leader expands the ISR
            # through AlterPartition, and counts it.
            brokers.start(leader)

            def rejoined() -> Samples | None:
                got = scrape(metrics_port[new_leader])
                return got if got is not None and got[(
                    "kraftlog_broker_isr_expands_total", ())] >= 1 and got[(
                    "kraftlog_broker_under_replicated_partitions", ())] == 0 else None

            wait_for(rejoined, timeout_s=20, what="the old leader back in the ISR")
