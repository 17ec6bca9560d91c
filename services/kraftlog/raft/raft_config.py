"""Raft settings with Kafka's names and units, and the ``controller.quorum.voters`` parser.

``RaftConfig`` mirrors Kafka's ``QuorumConfig``: each field names the Kafka key
it comes from and carries its unit in its name. The process entry point builds
it from the typed :mod:`kraftlog.config`; the core only reads it. No I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kraftlog.errors import ConfigError

_VOTER = re.compile(r"^(\d+)@(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(\d+)$")


@dataclass(frozen=True, slots=True, kw_only=True)
class RaftConfig:
    election_timeout_ms: int = 1000
    """controller.quorum.election.timeout.ms: wait before a voter without a leader prospects
    (plus up to the same again at random)."""
    election_backoff_max_ms: int = 1000
    """controller.quorum.election.backoff.max.ms: cap of the binary exponential backoff."""
    fetch_timeout_ms: int = 2000
    """controller.quorum.fetch.timeout.ms: a follower that hears nothing from its leader this
    long prospects; a leader resigns if a majority has not fetched within 1.5x this."""
    append_linger_ms: int = 25
    """controller.quorum.append.linger.ms: how long proposals wait to share one batch/fsync."""
    request_timeout_ms: int = 2000
    """controller.quorum.request.timeout.ms: an unanswered request counts as failed after this."""
    retry_backoff_ms: int = 20
    """controller.quorum.retry.backoff.ms: pause before resending to a node after a failure."""
    fetch_max_wait_ms: int = 500
    """How long the leader parks an empty Fetch (Kafka's raft fetch max wait)."""
    fetch_max_bytes: int = 8 * 1024 * 1024
    """Bytes of batches one Fetch may return (at least one whole batch is always returned)."""
    snapshot_chunk_bytes: int = 1024 * 1024
    """Largest FetchSnapshot chunk."""
    max_batch_bytes: int = 8 * 1024 * 1024
    """An accumulated proposal batch is appended early once its values reach this size."""

    def __post_init__(self) -> None:
        for name in ("election_timeout_ms", "election_backoff_max_ms", "fetch_timeout_ms",
                     "request_timeout_ms", "retry_backoff_ms", "fetch_max_bytes",
                     "snapshot_chunk_bytes", "max_batch_bytes"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"raft config {name} must be > 0, got {getattr(self, name)}")
        for name in ("append_linger_ms", "fetch_max_wait_ms"):
            if getattr(self, name) < 0:
                raise ConfigError(f"raft config {name} must be >= 0, got {getattr(self, name)}")

    @property
    def check_quorum_timeout_ms(self) -> int:
        """KIP-595 check-quorum window: 1.5 x fetch timeout."""
        return self.fetch_timeout_ms * 3 // 2


def parse_voters(value: str) -> dict[int, str]:
    """``controller.quorum.voters`` (``1@host:9093,2@[::1]:9093``) -> {node id: "host:port"}."""
    voters: dict[int, str] = {}
    if not value.strip():
        raise ConfigError("controller.quorum.voters is empty; list the voters as id@host:port")
    for raw in value.split(","):
        entry = raw.strip()
        match = _VOTER.match(entry)
        if match is None:
            raise ConfigError(
                f"controller.quorum.voters entry {entry!r} is not id@host:port")
        node_id, host, port = int(match.group(1)), match.group(2), int(match.group(3))
        if not 0 < port < 65536:
            raise ConfigError(f"controller.quorum.voters entry {entry!r}: port {port} out of range")
        if node_id in voters:
            raise ConfigError(f"controller.quorum.voters lists node {node_id} twice")
        voters[node_id] = f"{host}:{port}"
    return voters
