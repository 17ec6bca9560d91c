"""``meta.properties``: the identity of a log directory (cluster, node, directory).

Owns the file's format and validation. Written once by ``kraftlog storage
format``; read by every process at start-up to refuse a directory that belongs
to another cluster or node (it must never join the wrong one), and by ``kraftlog storage info`` and
``kraftlog log dump``.

Kafka writes it with ``java.util.Properties.store``: a ``#`` comment line, a
``#<date>`` line, then ``key=value`` lines. KRaft uses version 1 with
``cluster.id``, ``node.id`` and, since Kafka 3.7 (KIP-858), ``directory.id``::

    #
    #Tue Jun 04 10:00:00 UTC 2024
    node.id=1
    directory.id=J8aAPcfLQt2bqs1JT_rMgQ
    version=1
    cluster.id=4L6g3nShT-eMCtK--X86sw

Pure (no clock): the date comment is the caller's ``header`` argument. Writes are
atomic. Reads are strict: a malformed line, a duplicate or missing key, a bad
number or an unknown version is a ``CorruptFileError`` naming the file and line.
Unknown keys are kept in :attr:`MetaProperties.other` (Kafka keeps them too).
"""

from __future__ import annotations

import enum
import os
import pathlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from kraftlog import errors
from kraftlog import ids as uuid
from kraftlog.ids import NodeId
from kraftlog.storage import atomic_file

FILE_NAME = "meta.properties"

VERSION_KEY = "version"
CLUSTER_ID_KEY = "cluster.id"
NODE_ID_KEY = "node.id"
DIRECTORY_ID_KEY = "directory.id"

MAX_NODE_ID = 2**31 - 1

_KEY = re.compile(r"[A-Za-z0-9._-]+")
_NODE_ID = re.compile(r"[0-9]+")


class MetaPropertiesVersion(enum.IntEnum):
    """Kafka's ``MetaPropertiesVersion``. V0 was ZooKeeper mode (``broker.id``), not supported."""

    V1 = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class MetaProperties:
    """The validated content of one ``meta.properties``."""

    cluster_id: str
    node_id: NodeId
    directory_id: uuid.Uuid | None = None
    """None only in files written before KIP-858 (Kafka < 3.7); format always sets it."""
    version: MetaPropertiesVersion = MetaPropertiesVersion.V1
    other: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}), hash=False)
    """Keys this version does not define, kept verbatim so a rewrite does not drop them."""

    def __post_init__(self) -> None:
        if not self.cluster_id or any(c.isspace() or c in "=:#!\\" for c in self.cluster_id):
            raise ValueError(f"cluster.id {self.cluster_id!r} is empty or contains a space or one "
                             "of '=:#!\\'")
        if not 0 <= self.node_id <= MAX_NODE_ID:
            raise ValueError(f"node.id {self.node_id} is not in [0, {MAX_NODE_ID}]")
        for key in self.other:
            if key in (VERSION_KEY, CLUSTER_ID_KEY, NODE_ID_KEY, DIRECTORY_ID_KEY):
                raise ValueError(f"{key} is a defined key, not an extra one")


def format_properties(props: MetaProperties, *, header: str = "") -> str:
    """The file's text. ``header`` is Kafka's date comment line (the caller owns the clock)."""
    lines = ["#"]
    if header:
        lines.append("#" + " ".join(header.split()))
    lines.append(f"{VERSION_KEY}={int(props.version)}")
    lines.append(f"{CLUSTER_ID_KEY}={props.cluster_id}")
    lines.append(f"{NODE_ID_KEY}={props.node_id}")
    if props.directory_id is not None:
        lines.append(f"{DIRECTORY_ID_KEY}={props.directory_id}")
    lines.extend(f"{key}={value}" for key, value in sorted(props.other.items()))
    return "\n".join(lines) + "\n"


def parse_properties(data: bytes, *, path: str) -> MetaProperties:
    """Validate and parse the file's bytes; ``CorruptFileError(path, "line N: ...")`` on any defect."""
    if not data.strip():
        raise errors.CorruptFileError(path, "file is empty")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line_no = data.count(b"\n", 0, exc.start) + 1
        raise errors.CorruptFileError(
            path,
            f"line {line_no}: not UTF-8 text (byte 0x{data[exc.start]:02x} at file offset {exc.start})",
        ) from None

    values: dict[str, str] = {}
    lines_of: dict[str, int] = {}
    for line_no, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        key, sep, value = line.partition("=")
        key = key.strip()
        value = value.strip()
        if not sep:
            raise errors.CorruptFileError(path, f"line {line_no}: expected key=value, got {raw[:80]!r}")
        if not _KEY.fullmatch(key):
            raise errors.CorruptFileError(path, f"line {line_no}: malformed key {key[:80]!r}")
        if "\\" in value:
            # Kafka's values (ids, numbers) never need escapes; one here means the
            # file was not written by Kafka or kraftlog.
            raise errors.CorruptFileError(path, f"line {line_no}: unexpected escape in value of {key}")
        if key in values:
            raise errors.CorruptFileError(
                path, f"line {line_no}: duplicate key {key} (first on line {lines_of[key]})"
            )
        values[key] = value
        lines_of[key] = line_no

    def required(key: str) -> str:
        if key not in values:
            raise errors.CorruptFileError(path, f"missing required key {key}")
        return values.pop(key)

    def where(key: str) -> str:
        return f"line {lines_of[key]}"

    version_text = required(VERSION_KEY)
    if version_text == "0":
        raise errors.CorruptFileError(
            path, f"{where(VERSION_KEY)}: version 0 is the ZooKeeper-mode format; "
            "kraftlog needs a KRaft (version=1) directory"
        )
    if version_text != "1":
        raise errors.CorruptFileError(
            path, f"{where(VERSION_KEY)}: unknown meta.properties version {version_text!r} "
            "(supported: 1)"
        )
    cluster_id = required(CLUSTER_ID_KEY)
    if not cluster_id:
        raise errors.CorruptFileError(path, f"{where(CLUSTER_ID_KEY)}: cluster.id is empty")
    node_text = required(NODE_ID_KEY)
    if not _NODE_ID.fullmatch(node_text) or int(node_text) > MAX_NODE_ID:
        raise errors.CorruptFileError(
            path, f"{where(NODE_ID_KEY)}: node.id {node_text!r} is not an integer in "
            f"[0, {MAX_NODE_ID}]"
        )
    directory_id: uuid.Uuid | None = None
    if DIRECTORY_ID_KEY in values:
        directory_text = values.pop(DIRECTORY_ID_KEY)
        try:
            directory_id = uuid.parse_uuid(directory_text)
        except ValueError as exc:
            raise errors.CorruptFileError(
                path, f"{where(DIRECTORY_ID_KEY)}: directory.id: {exc}"
            ) from None
    try:
        return MetaProperties(
            cluster_id=cluster_id,
            node_id=NodeId(int(node_text)),
            directory_id=directory_id,
            other=MappingProxyType(dict(values)),
        )
    except ValueError as exc:
        raise errors.CorruptFileError(path, str(exc)) from None


def properties_path(directory: str | os.PathLike[str]) -> pathlib.Path:
    return pathlib.Path(directory) / FILE_NAME


def read(directory: str | os.PathLike[str]) -> MetaProperties | None:
    """The ``meta.properties`` of log directory ``directory``; None when the dir is unformatted."""
    path = properties_path(directory)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        raise errors.CorruptFileError(str(path), "is a directory, not a properties file") from None
    return parse_properties(data, path=str(path))


def write(directory: str | os.PathLike[str], props: MetaProperties, *, header: str = "") -> None:
    """Atomically write ``directory``'s ``meta.properties``."""
    atomic_file.write_text_atomically(properties_path(directory), format_properties(props, header=header))
