"""Errors raised by the timeline (MVCC) package.

Owns the two ways a caller can misuse a :class:`~kraftlog.timeline.snapshot_registry.SnapshotRegistry`:
naming an epoch that has no in-memory snapshot, and creating a snapshot at an
epoch that is not newer than the latest one. Both sit under
``kraftlog.errors.KraftlogError`` and under the matching builtin
(``LookupError`` / ``ValueError``) so generic code can catch either.

Raised by the registry and the timeline structures; must not import anything
but ``kraftlog.errors``.
"""

from __future__ import annotations

from collections.abc import Sequence

from kraftlog import errors

_SHOWN_EPOCHS = 8
"""How many kept epochs an error message lists at each end before eliding."""


def describe_epochs(epochs: Sequence[int]) -> str:
    """Render kept snapshot epochs for an error message, eliding the middle of long lists.

    The controller may keep thousands of uncommitted snapshots; a message that
    prints all of them would drown the one number that matters.
    """
    if not epochs:
        return "none"
    if len(epochs) <= 2 * _SHOWN_EPOCHS:
        return ", ".join(str(e) for e in epochs)
    head = ", ".join(str(e) for e in epochs[:_SHOWN_EPOCHS])
    tail = ", ".join(str(e) for e in epochs[-_SHOWN_EPOCHS:])
    hidden = len(epochs) - 2 * _SHOWN_EPOCHS
    return f"{head}, ... ({hidden} more) ..., {tail}"


class SnapshotNotFoundError(errors.KraftlogError, LookupError):
    """No in-memory snapshot exists at ``epoch`` (never created, deleted, or reverted past).

    A ``LookupError`` but deliberately not a ``KeyError``: code that catches
    ``KeyError`` around ``timeline_map[key]`` must not swallow a read at a
    vanished epoch, which is a caller bug, not a missing key.
    """

    def __init__(self, epoch: int, kept_epochs: Sequence[int], *, action: str = "read"):
        super().__init__(
            f"cannot {action} at epoch {epoch}: no in-memory snapshot for that epoch; "
            f"snapshot epochs are: {describe_epochs(kept_epochs)}"
        )
        self.epoch = epoch
        self.kept_epochs = tuple(kept_epochs)


class SnapshotEpochError(errors.KraftlogError, ValueError):
    """A snapshot was requested at an epoch older than the latest one, or at the LATEST sentinel."""

    def __init__(self, message: str, *, epoch: int):
        super().__init__(message)
        self.epoch = epoch
