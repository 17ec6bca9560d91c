"""ControllerConfig: the knobs of the controller's managers, named after Kafka's configs.

Owned here so the pure managers take plain values; the process that reads
``server.properties`` (``kraftlog.config``) builds one. Must not read files or
the environment.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_RECORDS_PER_USER_OP = 10_000
"""Kafka's ``QuorumController.MAX_RECORDS_PER_USER_OP``: one operation's records fit one batch."""

PRODUCER_ID_BLOCK_SIZE = 1000
"""Kafka's ``ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE`` (KIP-730)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ControllerConfig:
    """Static controller settings; dynamic cluster defaults override some of them."""

    cluster_id: str = ""
    """The cluster id from meta.properties; a broker registering with another one is rejected
    (INCONSISTENT_CLUSTER_ID). Empty disables the check (tests)."""

    default_replication_factor: int = 1
    """``default.replication.factor``: used when CreateTopics asks for -1."""

    num_partitions: int = 1
    """``num.partitions``: used when CreateTopics asks for -1."""

    min_insync_replicas: int = 1
    """``min.insync.replicas``: static default under topic and dynamic broker overrides."""

    unclean_leader_election_enable: bool = False
    """``unclean.leader.election.enable``: static default under topic and dynamic overrides."""

    broker_session_timeout_ms: int = 9000
    """``broker.session.timeout.ms``: a broker silent this long is fenced."""

    broker_heartbeat_interval_ms: int = 2000
    """``broker.heartbeat.interval.ms``: how often brokers heartbeat (for the driver)."""

    auto_leader_rebalance_enable: bool = True
    """``auto.leader.rebalance.enable``: periodic preferred-leader elections."""

    metadata_max_idle_interval_ms: int = 500
    """``metadata.max.idle.interval.ms``: an idle active controller appends a NoOpRecord."""

    eligible_leader_replicas_enable: bool = True
    """KIP-966 eligible leader replicas (Kafka's ``eligible.leader.replicas.version`` >= 1)."""

    max_records_per_user_op: int = MAX_RECORDS_PER_USER_OP
    """At most this many records per operation; periodic tasks stop there and go on next time."""

    max_elections_per_imbalance: int = 1000
    """Kafka's ``maxElectionsPerImbalance``: preferred elections per auto-rebalance round."""
