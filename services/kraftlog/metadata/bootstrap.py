"""The bootstrap metadata of a new cluster: ``<metadata.log.dir>/bootstrap.checkpoint``.

Kafka's ``kafka-storage format`` writes the metadata a cluster starts with
(``metadata.version`` and other finalized features) as a snapshot-format file,
``bootstrap.checkpoint``, in the metadata log directory; the first active
controller of the cluster appends those records when the metadata log holds
none (Kafka's ``BootstrapDirectory`` and ``ActivationRecordsGenerator``).

Owns :func:`write_bootstrap` (called by ``kraftlog storage format``) and
:func:`read_bootstrap` (called by the controller process on activation). The
file is a raft snapshot (header, records, footer; CRC-checked batches) with id
0-0. Record encoding is injected, so this module imports no protobuf. A damaged
file is an error naming it, never silently replaced by defaults.
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable, Sequence

from kraftlog import errors
from kraftlog.metadata import records as r
from kraftlog.raft import snapshot as raft_snapshot
from kraftlog.raft.messages import OffsetAndEpoch
from kraftlog.storage import atomic_file

BOOTSTRAP_FILE = "bootstrap.checkpoint"
_BOOTSTRAP_ID = OffsetAndEpoch(offset=0, epoch=0)


def write_bootstrap(directory: pathlib.Path, records: Sequence[r.MetadataRecord], *,
                    encode: Callable[[r.MetadataRecord], bytes], now_ms: int) -> pathlib.Path:
    """Write ``records`` as ``directory/bootstrap.checkpoint`` (atomically); returns the path."""
    writer = raft_snapshot.SnapshotWriter(_BOOTSTRAP_ID, last_contained_log_timestamp=now_ms,
                                          now_ms=now_ms)
    writer.append([encode(record) for record in records])
    path = directory / BOOTSTRAP_FILE
    atomic_file.write_atomically(path, writer.build())
    return path


def read_bootstrap(directory: pathlib.Path, *,
                   decode: Callable[[bytes, int], r.MetadataRecord]
                   ) -> tuple[r.MetadataRecord, ...] | None:
    """The records of ``directory/bootstrap.checkpoint``; None when there is no such file."""
    path = directory / BOOTSTRAP_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise errors.CorruptFileError(str(path), f"cannot read: {exc.strerror}") from None
    try:
        reader = raft_snapshot.read_snapshot_records(_BOOTSTRAP_ID, data)
        return tuple(decode(value, index) for index, value in enumerate(reader.records))
    except errors.CorruptRecordError as exc:
        raise errors.CorruptFileError(str(path), f"not a valid bootstrap checkpoint: {exc}"
                                      ) from None
