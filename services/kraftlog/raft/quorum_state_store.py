"""The durable election state: Kafka's ``quorum-state`` file (KIP-595).

Owns :class:`ElectionState` (epoch, elected leader, granted vote, voters), the
:class:`QuorumStateStore` protocol through which :class:`~.quorum_state.QuorumState`
persists it *before* switching roles in memory, the file-backed store used by
real nodes, and an in-memory store for tests and the simulator.

The file is byte-compatible with Kafka's ``QuorumStateData`` JSON:

* ``data_version`` 0 (written here, static ``controller.quorum.voters``)::

      {"clusterId":"","leaderId":1,"leaderEpoch":2,"votedId":-1,"appliedOffset":0,
       "currentVoters":[{"voterId":1}],"data_version":0}

* ``data_version`` 1 (KIP-853, read only): drops ``clusterId``, ``appliedOffset``
  and ``currentVoters`` and adds ``votedDirectoryId`` (a UUID string, the
  all-zero UUID meaning none).

Reading never guesses: a truncated, unparsable, wrong-typed or unknown-version
file is a :class:`kraftlog.errors.CorruptFileError` naming the path and the
reason. Resetting silently could let a node vote twice in one epoch. A missing
file means a freshly formatted node.

Callers: ``QuorumState`` (persist on every durable transition), the driver
(constructs ``FileQuorumStateStore``), ``kraftlog storage format``. This module
must not hold any role logic and must not import an I/O framework or clock.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from kraftlog.errors import ConfigError, CorruptFileError
from kraftlog.ids import Epoch, NodeId
from kraftlog.storage import atomic_file

QUORUM_STATE_FILE_NAME = "quorum-state"
DATA_VERSION_STATIC_VOTERS = 0
DATA_VERSION_KIP_853 = 1
SUPPORTED_DATA_VERSIONS = (DATA_VERSION_STATIC_VOTERS, DATA_VERSION_KIP_853)
_NO_ID = -1
_ZERO_UUID = "AAAAAAAAAAAAAAAAAAAAAA"
_UUID_RE = re.compile(r"^[A-Za-z0-9_-]{22}$")


@dataclass(frozen=True, slots=True, kw_only=True)
class ElectionState:
    """What a node must remember across a crash to stay safe.

    Invariant: at most one of ``leader_id`` / ``voted_id`` names a node, except
    that a leader is never recorded together with a vote for somebody else (a
    node that learns the leader of the epoch it voted in stops granting votes in
    that epoch anyway). ``epoch`` never decreases across writes.
    """

    epoch: Epoch
    leader_id: NodeId | None = None
    voted_id: NodeId | None = None
    voters: frozenset[int] = frozenset()

    def __post_init__(self) -> None:
        if self.epoch < 0:
            raise ValueError(f"ElectionState epoch must be >= 0, got {self.epoch}")
        if self.leader_id is not None and self.voted_id is not None \
                and self.leader_id != self.voted_id:
            raise ValueError(
                f"ElectionState cannot name leader {self.leader_id} and a vote for "
                f"{self.voted_id} in epoch {self.epoch}")

    def describe(self) -> str:
        return (f"ElectionState(epoch={self.epoch}, leader={_fmt(self.leader_id)}, "
                f"voted={_fmt(self.voted_id)}, voters={sorted(self.voters)})")


def _fmt(node: int | None) -> str:
    return "none" if node is None else str(node)


class QuorumStateStore(Protocol):
    """Durable storage of one :class:`ElectionState`.

    ``write`` must be durable when it returns (the caller answers a Vote only
    afterwards); ``read`` returns ``None`` for a never-written store and raises
    :class:`CorruptFileError` for anything unreadable.
    """

    def read(self) -> ElectionState | None: ...

    def write(self, state: ElectionState) -> None: ...

    def describe(self) -> str: ...


def encode_quorum_state(state: ElectionState, *, cluster_id: str = "") -> str:
    """Kafka's ``data_version`` 0 JSON for ``state`` (compact, Kafka's key order)."""
    document = {
        "clusterId": cluster_id,
        "leaderId": _NO_ID if state.leader_id is None else int(state.leader_id),
        "leaderEpoch": int(state.epoch),
        "votedId": _NO_ID if state.voted_id is None else int(state.voted_id),
        "appliedOffset": 0,
        "currentVoters": [{"voterId": v} for v in sorted(state.voters)],
        "data_version": DATA_VERSION_STATIC_VOTERS,
    }
    return json.dumps(document, separators=(",", ":"))


def decode_quorum_state(text: str, *, source: str) -> ElectionState:
    """Parse a ``quorum-state`` document; ``source`` names it in every error."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CorruptFileError(source, f"not valid JSON ({exc.msg} at char {exc.pos}); "
                               "the file may be truncated") from exc
    if not isinstance(document, dict):
        raise CorruptFileError(source, f"expected a JSON object, found {type(document).__name__}")
    version = _int_field(document, "data_version", source)
    if version not in SUPPORTED_DATA_VERSIONS:
        raise CorruptFileError(source, f"unknown data_version {version}; "
                               f"this build reads {list(SUPPORTED_DATA_VERSIONS)}")
    epoch = _int_field(document, "leaderEpoch", source)
    leader = _int_field(document, "leaderId", source)
    voted = _int_field(document, "votedId", source)
    if epoch < 0:
        raise CorruptFileError(source, f"leaderEpoch {epoch} is negative")
    for name, value in (("leaderId", leader), ("votedId", voted)):
        if value < _NO_ID:
            raise CorruptFileError(source, f"{name} {value} is below -1")
    voters: frozenset[int] = frozenset()
    if version == DATA_VERSION_STATIC_VOTERS:
        if not isinstance(document.get("clusterId"), str):
            raise CorruptFileError(source, "field clusterId is missing or not a string")
        _int_field(document, "appliedOffset", source)
        voters = _voters_field(document, source)
    else:
        directory = document.get("votedDirectoryId", _ZERO_UUID)
        if not isinstance(directory, str) or not _UUID_RE.match(directory):
            raise CorruptFileError(source, f"votedDirectoryId {directory!r} is not a base64 UUID")
    if leader != _NO_ID and voted != _NO_ID and leader != voted:
        raise CorruptFileError(source, f"names both leader {leader} and a vote for {voted} "
                               f"in epoch {epoch}")
    return ElectionState(
        epoch=Epoch(epoch),
        leader_id=None if leader == _NO_ID else NodeId(leader),
        voted_id=None if voted == _NO_ID else NodeId(voted),
        voters=voters,
    )


def _int_field(document: Mapping[str, object], name: str, source: str) -> int:
    if name not in document:
        raise CorruptFileError(source, f"field {name} is missing")
    value = document[name]
    # bool is an int subclass in Python; a JSON true is not a valid id or epoch.
    if not isinstance(value, int) or isinstance(value, bool):
        raise CorruptFileError(source, f"field {name} must be an integer, found {value!r}")
    return value


def _voters_field(document: Mapping[str, object], source: str) -> frozenset[int]:
    raw = document.get("currentVoters")
    if raw is None:
        return frozenset()
    if not isinstance(raw, list):
        raise CorruptFileError(source, f"field currentVoters must be a list, found {raw!r}")
    found: set[int] = set()
    for i, entry in enumerate(raw):
        if not isinstance(entry, dict):
            raise CorruptFileError(source, f"currentVoters[{i}] must be an object, found {entry!r}")
        voter = _int_field(entry, "voterId", f"{source} currentVoters[{i}]")
        if voter < 0:
            raise CorruptFileError(source, f"currentVoters[{i}].voterId {voter} is negative")
        found.add(voter)
    return frozenset(found)


def check_configured_voters(stored: ElectionState, configured: Iterable[int], *,
                            source: str) -> None:
    """Refuse to start when the file's voter set differs from ``controller.quorum.voters``.

    Kafka does the same: a changed static voter set with an old quorum-state
    could make two majorities that do not intersect.
    """
    configured_set = frozenset(configured)
    if stored.voters and stored.voters != configured_set:
        raise ConfigError(
            f"controller.quorum.voters {sorted(configured_set)} differs from the voter set "
            f"{sorted(stored.voters)} recorded in {source}; fix the configuration or, if the "
            "quorum really changed, remove the quorum-state file deliberately")


class FileQuorumStateStore:
    """``quorum-state`` inside the metadata log directory, replaced atomically."""

    def __init__(self, path: str | os.PathLike[str], *, cluster_id: str = "") -> None:
        self._path = pathlib.Path(path)
        self._cluster_id = cluster_id

    @property
    def path(self) -> pathlib.Path:
        return self._path

    def read(self) -> ElectionState | None:
        try:
            raw = self._path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise CorruptFileError(str(self._path), f"cannot be read: {exc.strerror}") from exc
        if not raw:
            raise CorruptFileError(str(self._path), "is empty (a torn write?)")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptFileError(str(self._path), f"is not UTF-8 at byte {exc.start}") from exc
        return decode_quorum_state(text, source=str(self._path))

    def write(self, state: ElectionState) -> None:
        atomic_file.write_text_atomically(
            self._path, encode_quorum_state(state, cluster_id=self._cluster_id))

    def describe(self) -> str:
        return f"FileQuorumStateStore({self._path})"


class MemoryQuorumStateStore:
    """A store whose writes are durable at once: it outlives a simulated crash.

    The simulator keeps one per node and hands the same object to the restarted
    client, which models ``fsync`` before ``write`` returns. ``writes`` counts
    persisted transitions so tests can assert that a reply followed a persist.
    Every write round-trips through the JSON codec (so the simulator exercises the
    real format); reads return the decoded value kept from that write.
    """

    def __init__(self) -> None:
        self._state: ElectionState | None = None
        self.document: str | None = None
        self.writes = 0

    def read(self) -> ElectionState | None:
        return self._state

    def write(self, state: ElectionState) -> None:
        document = encode_quorum_state(state)
        decoded = decode_quorum_state(document, source="memory quorum-state")
        if decoded != state:
            raise CorruptFileError("memory quorum-state", f"{state.describe()} does not "
                                   f"survive its own encoding: {document}")
        self.document = document
        self._state = decoded
        self.writes += 1

    def describe(self) -> str:
        return "MemoryQuorumStateStore"
