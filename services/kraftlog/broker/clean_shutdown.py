"""The clean-shutdown marker of a broker's log dirs (KIP-966's previous broker epoch).

After a controlled shutdown that completed and closed every log, the broker writes
``.kafka_cleanshutdown`` (Kafka's file name and JSON, ``{"version":0,"brokerEpoch":N}``)
into each log dir. At the next start it takes the markers (reads, then deletes them,
so a crash later counts as unclean) and presents that epoch as
``previous_broker_epoch`` when it registers: the controller then knows the replicas'
logs are complete, keeps the broker eligible (ELR) and lets the new incarnation
register at once. A missing, unreadable or disagreeing marker means unclean (-1);
that is always the safe answer.
"""

from __future__ import annotations

import json
import logging
import pathlib
from collections.abc import Sequence

from kraftlog.storage import atomic_file

logger = logging.getLogger(__name__)

FILE_NAME = ".kafka_cleanshutdown"
VERSION = 0
UNCLEAN = -1


def write(log_dirs: Sequence[pathlib.Path], broker_epoch: int) -> None:
    """Mark every log dir as cleanly shut down at ``broker_epoch`` (atomic writes)."""
    data = json.dumps({"version": VERSION, "brokerEpoch": broker_epoch}).encode()
    for directory in log_dirs:
        atomic_file.write_atomically(directory / FILE_NAME, data)


def _read_one(path: pathlib.Path) -> int:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return UNCLEAN
    except (OSError, ValueError) as exc:
        logger.warning("event=clean_shutdown_marker_unreadable path=%s error=%s", path, exc)
        return UNCLEAN
    epoch = data.get("brokerEpoch") if isinstance(data, dict) else None
    if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 0 \
            or data.get("version") != VERSION:
        logger.warning("event=clean_shutdown_marker_invalid path=%s content=%r", path, data)
        return UNCLEAN
    return epoch


def take(log_dirs: Sequence[pathlib.Path]) -> int:
    """The epoch every log dir agrees it shut down cleanly at, else -1; removes the
    markers either way."""
    epochs = {_read_one(directory / FILE_NAME) for directory in log_dirs}
    for directory in log_dirs:
        (directory / FILE_NAME).unlink(missing_ok=True)
    if len(epochs) == 1:
        return epochs.pop()
    return UNCLEAN
