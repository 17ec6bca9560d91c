"""Reads a finished run's directory into :class:`~.evidence.Evidence`.

Owns :func:`collect`: ``history.json`` (the driver's record), every broker's segment files
of the test topic and its ``replication-offset-checkpoint``, every controller's
``__cluster_metadata-0`` segments and ``quorum-state``, and the leader claims in the
metadata logs and in each node's log (decoded by the pure functions of
:mod:`.checks`). Reading only: the files stay as the clean stop left them, so a failed
check can be looked at again with ``kraftlog log dump``.

Called by the CLI in the host namespace after the driver has exited. Edge module
(file I/O); everything it decodes is decoded by pure functions.
"""

from __future__ import annotations

import json
import pathlib

from e2e.faults import checks, cluster
from e2e.faults import evidence as ev
from kraftlog import errors
from kraftlog.storage import checkpoint

ISR_BOUND_S = 30.0
"""Every ISR must be whole this soon after the last fault healed (broker sessions are 3 s,
``replica.lag.time.max.ms`` 3 s; a restarted broker needs a few seconds to start)."""


def _segments(directory: pathlib.Path) -> tuple[tuple[ev.Batch, ...], tuple[str, ...]]:
    batches: list[ev.Batch] = []
    problems: list[str] = []
    for path in sorted(directory.glob("*.log")):
        found, error = checks.split_batches(path.read_bytes())
        batches.extend(found)
        if error is not None:
            problems.append(f"{path.name}: {error}")
    return tuple(batches), tuple(problems)


def _high_watermarks(log_dir: pathlib.Path) -> dict[tuple[str, int], int]:
    path = log_dir / checkpoint.REPLICATION_OFFSET_CHECKPOINT
    try:
        entries = checkpoint.OffsetCheckpointFile(path).read()
    except errors.KraftlogError:
        return {}
    return {(tp.topic, tp.partition): offset for tp, offset in entries.items()}


def collect(run_dir: pathlib.Path) -> ev.Evidence:
    """The evidence of the run in ``run_dir``; ValueError if ``history.json`` is missing or
    unreadable."""
    try:
        history = ev.History.from_json(json.loads((run_dir / "history.json").read_text()))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{run_dir}: no readable history.json ({exc})") from exc
    replicas: list[ev.ReplicaLog] = []
    metadata_logs: list[ev.MetadataLog] = []
    claims: list[ev.LeaderClaim] = []
    for node in cluster.NODES:
        data = cluster.data_dir(run_dir, node)
        log = cluster.log_path(run_dir, node)
        if log.exists():
            claims.extend(checks.claims_from_node_log(node.name, log.read_text(errors="replace")))
        if node.role == "broker":
            marks = _high_watermarks(data)
            for partition in range(history.partitions):
                directory = data / f"{history.topic}-{partition}"
                if not directory.is_dir():
                    continue
                batches, problems = _segments(directory)
                replicas.append(ev.ReplicaLog(
                    broker=node.node_id, partition=partition,
                    high_watermark=marks.get((history.topic, partition)), batches=batches,
                    problems=problems))
        else:
            metadata_dir = data / "__cluster_metadata-0"
            batches, problems = _segments(metadata_dir)
            metadata_log = ev.MetadataLog(node=node.node_id, batches=batches, problems=problems)
            metadata_logs.append(metadata_log)
            claims.extend(checks.claims_from_metadata_log(metadata_log))
            for state in data.rglob("quorum-state"):
                claims.extend(checks.claims_from_quorum_state(node.name, state.read_text()))
    return ev.Evidence(history=history, replicas=tuple(replicas),
                       metadata_logs=tuple(metadata_logs), claims=tuple(claims),
                       isr_bound_s=ISR_BOUND_S, expected_replicas=len(cluster.BROKERS))
