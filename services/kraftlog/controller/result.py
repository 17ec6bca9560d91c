"""ControllerResult: what a write operation generates, before anything changes.

Owns the value the managers return (Kafka's ``ControllerResult``): the records
to append and a response to send once they commit. The QuorumController
appends ``records`` (as one batch when ``is_atomic``, so the operation applies
whole or not at all), replays them, and answers after commit; an empty
``records`` means nothing to append (answer at once, after the committed
offset catches up with the replayed one). Pure value; no logic.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from kraftlog.metadata.records import MetadataRecord

R = TypeVar("R")


@dataclass(frozen=True, slots=True, kw_only=True)
class ControllerResult(Generic[R]):
    """Records to append plus the response to send when they commit."""

    records: tuple[MetadataRecord, ...]
    response: R
    is_atomic: bool = False
