"""Delayed DeleteRecords (Kafka's DelayedDeleteRecords): wait until every replica followed.

A leader that moved a partition's log start offset for DeleteRecords answers only once
the partition's low watermark (the smallest log start offset among the leader and its
live followers, :meth:`~kraftlog.broker.partition.Partition.low_watermark_if_leader`)
reached the offset asked for: the followers learn the new log start offset from their
next Fetch answer, move theirs, and report it in the Fetch after. Until then the
operation waits in a :class:`~kraftlog.broker.purgatory.Purgatory` watched by partition;
the replica manager checks it when a follower's fetch arrives or the partition's role
changes, and expires it after the request's ``timeout_ms`` (REQUEST_TIMED_OUT for the
partitions still behind: their leader's records are deleted all the same, as in Kafka).

Must not: read a clock or call back into the network (the owner answers completed
operations). Pure and single-threaded, like the purgatory.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from kraftlog.broker import purgatory
from kraftlog.error_codes import ErrorCode
from kraftlog.ids import TopicPartition


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteRecordsPartitionResponse:
    """One partition's DeleteRecords outcome (DeleteRecordsPartitionResult)."""

    error: ErrorCode
    low_watermark: int = -1
    error_message: str = ""


class DeleteRecordsStatus:
    """A partition of a delayed DeleteRecords: the offset its low watermark must reach."""

    __slots__ = ("pending", "required_offset", "response")

    def __init__(self, *, required_offset: int, response: DeleteRecordsPartitionResponse) -> None:
        self.required_offset = required_offset
        self.response = response
        # Partitions that failed on the leader answer at once; only the others wait.
        self.pending = response.error is ErrorCode.NONE


class DelayedDeleteRecords:
    """A DeleteRecords waiting for the replicas' log start offsets."""

    __slots__ = ("_deadline_ms", "_op_id", "statuses")

    def __init__(self, *, op_id: int, deadline_ms: int,
                 statuses: Mapping[TopicPartition, DeleteRecordsStatus]) -> None:
        self._op_id = op_id
        self._deadline_ms = deadline_ms
        self.statuses = dict(statuses)

    @property
    def op_id(self) -> int:
        return self._op_id

    @property
    def deadline_ms(self) -> int:
        return self._deadline_ms

    @property
    def keys(self) -> Iterable[TopicPartition]:
        # Every partition of the request, fixed at creation: the purgatory unwatches an op
        # by the keys it watched it under.
        return self.statuses.keys()

    def responses(self) -> dict[TopicPartition, DeleteRecordsPartitionResponse]:
        return {tp: status.response for tp, status in self.statuses.items()}


LowWatermark = Callable[[TopicPartition], tuple[ErrorCode, int, str]]
"""A partition's (error, low watermark, message): NONE unless it is no longer led here."""


def _try_complete(low_watermark: LowWatermark, op: DelayedDeleteRecords) -> bool:
    for tp, status in op.statuses.items():
        if not status.pending:
            continue
        error, low, message = low_watermark(tp)
        if error is not ErrorCode.NONE:
            status.pending = False
            status.response = DeleteRecordsPartitionResponse(error=error, error_message=message)
        elif low >= status.required_offset:
            status.pending = False
            status.response = DeleteRecordsPartitionResponse(error=ErrorCode.NONE,
                                                             low_watermark=low)
    return not any(status.pending for status in op.statuses.values())


def _expire(op: DelayedDeleteRecords) -> None:
    for status in op.statuses.values():
        if status.pending:
            status.pending = False
            status.response = DeleteRecordsPartitionResponse(
                error=ErrorCode.REQUEST_TIMED_OUT,
                error_message=f"the leader's log start offset is {status.required_offset}, but "
                              "not every live replica had followed within the timeout")


def delete_records_purgatory(low_watermark: LowWatermark
                             ) -> purgatory.Purgatory[DelayedDeleteRecords]:
    """A purgatory for delayed DeleteRecords; ``low_watermark(tp)`` is the leader's
    :meth:`~kraftlog.broker.partition.Partition.low_watermark_if_leader` (or an error for a
    partition no longer served here)."""
    return purgatory.Purgatory(try_complete=lambda op, _changed: _try_complete(low_watermark, op),
                               on_expire=_expire)
