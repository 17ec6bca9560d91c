"""``kraftlog storage ...`` and ``kraftlog log dump``: the storage room's CLI commands.

Owns the argument parsing and the I/O of four commands, after Kafka's
``kafka-storage.sh`` (StorageTool) and ``kafka-dump-log.sh`` (DumpLogSegments):

* ``kraftlog storage format --cluster-id ID --node-id N --data-dir DIR ...
  [--metadata-dir DIR] [--initial-controllers ... | --standalone --controller-endpoint H:P
  | --no-initial-controllers]``
  writes ``meta.properties`` into every directory and creates
  ``__cluster_metadata-0/`` in the metadata directory. Idempotent: a directory
  already formatted for the same cluster and node is left untouched. A
  directory formatted for another cluster or node is refused before anything
  is written anywhere. ``--ignore-formatted`` (``-g``) is Kafka's flag: every
  already formatted directory is skipped without that check, as
  kafka-storage.sh does (which, without the flag, refuses any formatted
  directory; kraftlog only refuses foreign ones, so that re-running a set-up
  script is safe). With ``--standalone`` or ``--initial-controllers`` the quorum is
  dynamic (KIP-853, ``kraft.version`` 1): the bootstrap voter set is written as Kafka's
  bootstrap snapshot ``__cluster_metadata-0/00000000000000000000-0000000000.checkpoint``
  (a KRaftVersionRecord and a VotersRecord), which the first leader copies into the log;
  ``--no-initial-controllers`` formats a controller that joins an existing dynamic quorum
  later (no voter set of its own: it learns it from the leader). None of the three:
  static voters (``controller.quorum.voters``, kraft.version 0). A directory
  a running node holds (its ``.lock``, :mod:`kraftlog.storage.log_dir_lock`) is
  refused before anything is read.
* ``kraftlog storage random-uuid`` prints a new cluster id.
* ``kraftlog storage info --data-dir DIR ... [--output table|json]`` prints each
  directory's ``meta.properties`` and contents (exit 1 when it found a problem).
* ``kraftlog log dump PATH ... [--output table|json]`` prints segments, indexes,
  checkpoints and ``meta.properties``, as kafka-dump-log's lines (``table``; ``text``
  is its older name) or as JSON Lines with DumpLogSegments' names (formatting lives
  in :mod:`kraftlog.storage.dump`).

Called by :mod:`kraftlog.tools.cli` through :func:`register`. An edge module: it may
use the clock (the date comment of ``meta.properties``) and the generated
protobuf code. Expected failures raise ``KraftlogError`` subclasses, which
the CLI prints as one line with exit code 1; usage errors exit 2 (argparse).
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import importlib
import json
import pathlib
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

from kraftlog import cli_conventions as conventions
from kraftlog import errors
from kraftlog import ids as uuid
from kraftlog.ids import METADATA_PARTITION_DIR, NodeId
from kraftlog.raft import control_records
from kraftlog.raft import snapshot as raft_snapshot
from kraftlog.raft import voter_set as voter_set_mod
from kraftlog.raft.messages import OffsetAndEpoch
from kraftlog.storage import (
    atomic_file,
    checkpoint,
    dump,
    log_dir_lock,
    meta_properties,
)
from kraftlog.storage import record_batch as rb

BOOTSTRAP_SNAPSHOT_ID = OffsetAndEpoch(offset=0, epoch=0)
"""Kafka's bootstrap checkpoint of a dynamic quorum: ``00000000000000000000-0000000000.checkpoint``."""

METADATA_VERSION_LATEST = 1
"""The ``metadata.version`` level this release writes and understands (KIP-778)."""
SUPPORTED_FEATURES = {"metadata.version": (1, METADATA_VERSION_LATEST)}

CONTROLLER_LISTENER_NAME = "CONTROLLER"
MAX_PORT = 65535
EXIT_OK = 0
EXIT_ERROR = 1


# --- --initial-controllers (KIP-853 DynamicVoters) --------------------------------------


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class DynamicVoter:
    """One ``<node id>@<host>:<port>:<directory id>`` of ``--initial-controllers``."""

    node_id: NodeId
    host: str
    port: int
    directory_id: uuid.Uuid

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.node_id}@{host}:{self.port}:{self.directory_id}"


def parse_dynamic_voter(text: str) -> DynamicVoter:
    """Parse one voter as Kafka's ``DynamicVoter.parse`` does; ``ConfigError`` says what is wrong."""
    where = f"--initial-controllers entry {text!r}"
    node_text, at, rest = text.partition("@")
    if not at:
        raise errors.ConfigError(f"{where}: no '@' found; expected id@host:port:directoryId")
    try:
        node_id = int(node_text)
    except ValueError:
        raise errors.ConfigError(f"{where}: node id {node_text!r} is not an integer") from None
    if node_id < 0:
        raise errors.ConfigError(f"{where}: node id {node_id} is negative")
    if rest.startswith("["):
        close = rest.find("]")
        if close < 0:
            raise errors.ConfigError(f"{where}: no closing ']' after the IPv6 host")
        host, rest = rest[1:close], rest[close + 1:]
        if not rest.startswith(":"):
            raise errors.ConfigError(f"{where}: expected ':' after the ']' of the host")
        rest = rest[1:]
    else:
        host, colon, rest = rest.partition(":")
        if not colon:
            raise errors.ConfigError(f"{where}: no ':' after the host")
    if not host:
        raise errors.ConfigError(f"{where}: the host is empty")
    port_text, colon, directory_text = rest.partition(":")
    if not colon:
        raise errors.ConfigError(f"{where}: no ':' after the port, expected ':directoryId'")
    try:
        port = int(port_text)
    except ValueError:
        raise errors.ConfigError(f"{where}: port {port_text!r} is not an integer") from None
    if not 1 <= port <= MAX_PORT:
        raise errors.ConfigError(f"{where}: port {port} is not in [1, {MAX_PORT}]")
    try:
        directory_id = uuid.parse_uuid(directory_text)
    except ValueError as exc:
        raise errors.ConfigError(f"{where}: directory id: {exc}") from None
    if directory_id in uuid.RESERVED_DIRECTORY_IDS:
        raise errors.ConfigError(f"{where}: directory id {directory_id} is reserved")
    return DynamicVoter(node_id=NodeId(node_id), host=host, port=port, directory_id=directory_id)


def parse_initial_controllers(text: str) -> tuple[DynamicVoter, ...]:
    """Parse ``--initial-controllers``: comma-separated voters, unique node and directory ids."""
    if not text.strip():
        raise errors.ConfigError("--initial-controllers: no voters given")
    voters = tuple(parse_dynamic_voter(item.strip()) for item in text.split(","))
    seen_nodes: set[int] = set()
    seen_dirs: set[uuid.Uuid] = set()
    for voter in voters:
        if voter.node_id in seen_nodes:
            raise errors.ConfigError(
                f"--initial-controllers: node id {voter.node_id} is given more than once"
            )
        if voter.directory_id in seen_dirs:
            raise errors.ConfigError(
                f"--initial-controllers: directory id {voter.directory_id} is given more than once"
            )
        seen_nodes.add(voter.node_id)
        seen_dirs.add(voter.directory_id)
    return voters


def parse_endpoint(text: str, *, flag: str) -> tuple[str, int]:
    host, colon, port_text = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not colon or not host:
        raise errors.ConfigError(f"{flag} {text!r}: expected HOST:PORT")
    try:
        port = int(port_text)
    except ValueError:
        raise errors.ConfigError(f"{flag} {text!r}: port {port_text!r} is not an integer") from None
    if not 1 <= port <= MAX_PORT:
        raise errors.ConfigError(f"{flag} {text!r}: port {port} is not in [1, {MAX_PORT}]")
    return host, port


def bootstrap_voters_snapshot(voters: Sequence[DynamicVoter], *, now_ms: int) -> bytes:
    """The bootstrap snapshot of a dynamic quorum (KIP-853): header, KRaftVersionRecord (1)
    and VotersRecord, footer."""
    voter_set = voter_set_mod.VoterSet(
        voter_set_mod.VoterNode(voter_id=v.node_id, directory_id=v.directory_id,
                                endpoint=voter_set_mod.join_endpoint(v.host, v.port))
        for v in voters)
    return raft_snapshot.SnapshotWriter(
        BOOTSTRAP_SNAPSHOT_ID, last_contained_log_timestamp=-1, now_ms=now_ms,
        control=voter_set_mod.control_batch_records(
            voter_set, voter_set_mod.KRAFT_VERSION_DYNAMIC)).build()


# --- storage format ---------------------------------------------------------------------


def parse_cluster_id(text: str) -> uuid.Uuid:
    try:
        cluster = uuid.parse_uuid(text)
    except ValueError as exc:
        raise errors.ConfigError(f"--cluster-id: cluster id does not appear to be a valid UUID: {exc}") from None
    if cluster in uuid.RESERVED:
        raise errors.ConfigError(f"--cluster-id {text}: this id is reserved, use "
                                 "'kraftlog storage random-uuid' to make one")
    return cluster


def _java_date_now() -> str:
    # The date line java.util.Properties.store writes, e.g. "Tue Jun 04 10:00:00 UTC 2024".
    return time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime())


def _ordered_dirs(data_dirs: Sequence[str], metadata_dir: str | None) -> tuple[list[pathlib.Path], pathlib.Path]:
    dirs: list[pathlib.Path] = []
    seen: set[pathlib.Path] = set()
    for raw in data_dirs:
        path = pathlib.Path(raw)
        key = path.resolve()
        if key not in seen:
            seen.add(key)
            dirs.append(path)
    if metadata_dir is not None:
        meta = pathlib.Path(metadata_dir)
        if meta.resolve() not in seen:
            dirs.append(meta)
        else:
            meta = next(d for d in dirs if d.resolve() == meta.resolve())
    elif dirs:
        # Kafka: metadata.log.dir defaults to the first of log.dirs.
        meta = dirs[0]
    else:
        raise errors.ConfigError("storage format: give at least one --data-dir or a --metadata-dir")
    return dirs, meta


def parse_features(specs: Sequence[str] | None) -> dict[str, int]:
    """``--feature name=level`` flags -> {name: level}, checked against what this release
    supports; metadata.version defaults to the latest level."""
    levels = {"metadata.version": METADATA_VERSION_LATEST}
    for spec in specs or ():
        name, sep, level = spec.partition("=")
        name = name.strip()
        if not sep or not level.strip().lstrip("-").isdigit():
            raise errors.ConfigError(f"--feature {spec!r}: expected NAME=LEVEL, e.g. "
                                     f"metadata.version={METADATA_VERSION_LATEST}")
        if name not in SUPPORTED_FEATURES:
            raise errors.ConfigError(f"--feature {spec!r}: unknown feature {name!r} (known: "
                                     f"{', '.join(sorted(SUPPORTED_FEATURES))})")
        low, high = SUPPORTED_FEATURES[name]
        if not low <= int(level) <= high:
            raise errors.ConfigError(f"--feature {spec!r}: this release supports {name} "
                                     f"levels {low}..{high}")
        levels[name] = int(level)
    return levels


def _write_bootstrap(directory: pathlib.Path, features: dict[str, int]) -> None:
    # Imported here: the metadata codec pulls in protobuf, which the other storage
    # commands do not need.
    from kraftlog.metadata import bootstrap, record_convert
    from kraftlog.metadata import records as metadata_records

    bootstrap.write_bootstrap(
        directory, [metadata_records.FeatureLevelRecord(name=name, feature_level=level)
                    for name, level in sorted(features.items())],
        encode=record_convert.encode, now_ms=time.time_ns() // 1_000_000)


def run_format(args: argparse.Namespace) -> int:
    cluster_id = str(parse_cluster_id(args.cluster_id))
    features = parse_features(getattr(args, "feature", None))
    if args.node_id < 0:
        raise errors.ConfigError(f"--node-id {args.node_id}: a node id must be >= 0")
    node_id = NodeId(args.node_id)
    dirs, metadata_dir = _ordered_dirs(args.data_dir or [], args.metadata_dir)

    voters: tuple[DynamicVoter, ...] = ()
    if args.initial_controllers is not None:
        voters = parse_initial_controllers(args.initial_controllers)
    if args.standalone:
        if args.controller_endpoint is None:
            raise errors.ConfigError("--standalone needs --controller-endpoint HOST:PORT, the "
                                     "address the other nodes reach this controller at")
        host, port = parse_endpoint(args.controller_endpoint, flag="--controller-endpoint")
        voters = (DynamicVoter(node_id=node_id, host=host, port=port,
                               directory_id=uuid.random_directory_id()),)
    elif args.controller_endpoint is not None:
        raise errors.ConfigError("--controller-endpoint is only used with --standalone")
    own_voter = next((v for v in voters if v.node_id == node_id), None)

    # A directory a running node holds is refused before anything is read or written.
    with log_dir_lock.lock_dirs(dirs, create=False):
        return _format_dirs(args, dirs, metadata_dir, cluster_id=cluster_id, node_id=node_id,
                            voters=voters, own_voter=own_voter, features=features)


def _format_dirs(args: argparse.Namespace, dirs: list[pathlib.Path], metadata_dir: pathlib.Path, *,
                 cluster_id: str, node_id: NodeId, voters: tuple[DynamicVoter, ...],
                 own_voter: DynamicVoter | None, features: dict[str, int]) -> int:
    # Check every directory before writing any, so a refusal touches nothing.
    existing: dict[pathlib.Path, meta_properties.MetaProperties] = {}
    problems: list[str] = []
    for directory in dirs:
        if directory.exists() and not directory.is_dir():
            problems.append(f"{directory} exists and is not a directory")
            continue
        props = meta_properties.read(directory)
        if props is None:
            continue
        existing[directory] = props
        if args.ignore_formatted:
            continue
        if props.cluster_id != cluster_id:
            problems.append(f"{directory} is formatted for cluster {props.cluster_id}, not {cluster_id}")
        if props.node_id != node_id:
            problems.append(f"{directory} is formatted for node {props.node_id}, not {node_id}")
        if (directory == metadata_dir and own_voter is not None
                and props.directory_id != own_voter.directory_id):
            problems.append(f"{directory} has directory.id {props.directory_id}, but "
                            f"--initial-controllers gives node {node_id} the directory "
                            f"{own_voter.directory_id}")
    if problems:
        raise errors.InconsistentStorageError(
            "refusing to format, nothing was written: " + "; ".join(problems)
        )

    used_ids = {p.directory_id for p in existing.values() if p.directory_id is not None}
    used_ids.update(v.directory_id for v in voters)
    header = _java_date_now()
    for directory in dirs:
        if directory in existing:
            props = existing[directory]
            note = "left untouched"
            if args.ignore_formatted and (props.cluster_id != cluster_id or props.node_id != node_id):
                note = f"skipped (--ignore-formatted), although it is not cluster {cluster_id} node {node_id}"
            print(f"{directory}: already formatted (cluster.id={props.cluster_id}, "
                  f"node.id={props.node_id}); {note}")
            continue
        if directory == metadata_dir and own_voter is not None:
            # KIP-853: the voter's directory id is the metadata log dir's directory.id.
            directory_id = own_voter.directory_id
        else:
            directory_id = uuid.random_directory_id()
            while directory_id in used_ids:
                directory_id = uuid.random_directory_id()
        used_ids.add(directory_id)
        directory.mkdir(parents=True, exist_ok=True)
        if directory == metadata_dir:
            partition_dir = directory / METADATA_PARTITION_DIR
            partition_dir.mkdir(exist_ok=True)
            if voters:
                atomic_file.write_atomically(
                    partition_dir / raft_snapshot.snapshot_file_name(BOOTSTRAP_SNAPSHOT_ID),
                    bootstrap_voters_snapshot(voters, now_ms=time.time_ns() // 1_000_000))
            # Kafka's bootstrap.checkpoint: the metadata the first active controller
            # writes into a new cluster's log (metadata.version, ...).
            _write_bootstrap(directory, features)
            atomic_file.fsync_dir(directory)
        # meta.properties last: it is the "formatted" marker, so a crash before
        # this line leaves a directory the next format run simply redoes.
        props = meta_properties.MetaProperties(cluster_id=cluster_id, node_id=node_id,
                                               directory_id=directory_id)
        meta_properties.write(directory, props, header=header)
        role = "metadata directory" if directory == metadata_dir else "directory"
        print(f"Formatting {role} {directory} (cluster.id={cluster_id}, node.id={node_id}, "
              f"directory.id={directory_id})")
    if voters and metadata_dir not in existing:
        print("Initial controllers: " + ",".join(str(v) for v in voters)
              + " (kraft.version=1: dynamic quorum)")
    elif args.no_initial_controllers and metadata_dir not in existing:
        print("No initial controllers: this controller joins an existing dynamic quorum "
              "(kraftlog quorum add-controller, or controller.quorum.auto.join.enable)")
    if len(existing) == len(dirs):
        print("All of the log directories are already formatted.")
    return EXIT_OK


def run_random_uuid(args: argparse.Namespace) -> int:
    print(uuid.random_uuid())
    return EXIT_OK


# --- storage info -----------------------------------------------------------------------


def _describe_entry(path: pathlib.Path) -> tuple[str, dict[str, Any]]:
    """One entry of a data dir: its ``info`` line and its JSON object."""
    if path.is_dir():
        files = sorted(p.name for p in path.iterdir())
        line = f"{path.name}/ ({len(files)} files: {', '.join(files[:6])}{', ...' if len(files) > 6 else ''})"
        return line, {"name": path.name, "type": "directory", "files": files}
    name = path.name
    kind = dump.file_kind(name)
    if kind == dump.FileKind.OFFSET_CHECKPOINT:
        entries = len(checkpoint.OffsetCheckpointFile(path).read())
        return f"{name} ({entries} entries)", {"name": name, "type": "checkpoint",
                                                "entries": entries}
    size = path.stat().st_size
    return f"{name} ({size} bytes)", {"name": name, "type": "file", "sizeBytes": size}


def _info(directory: pathlib.Path) -> tuple[list[str], dict[str, Any], int]:
    """``info``'s lines for one data dir, its JSON object, and its count of problems."""
    lines = [f"Found log directory:\n  {directory}"]
    found: dict[str, Any] = {"path": str(directory), "metaProperties": None, "contents": [],
                             "problems": []}
    problems: list[str] = found["problems"]

    def problem(text: str) -> None:
        lines.append(f"Found problem: {text}")
        problems.append(text)

    if not directory.is_dir():
        problem(f"{directory} does not exist or is not a directory")
        return lines, found, len(problems)
    try:
        props = meta_properties.read(directory)
    except errors.CorruptFileError as exc:
        problem(str(exc))
        props = None
    else:
        if props is None:
            problem(f"{directory} is not formatted (no meta.properties)")
    if props is not None:
        fields = [f"version={int(props.version)}", f"cluster.id={props.cluster_id}",
                  f"node.id={props.node_id}"]
        if props.directory_id is not None:
            fields.append(f"directory.id={props.directory_id}")
        fields.extend(f"{k}={v}" for k, v in sorted(props.other.items()))
        lines.append("Found metadata: {" + ", ".join(fields) + "}")
        # The file's own keys are dotted (cluster.id); the JSON keys are the tools' style.
        found["metaProperties"] = {
            "version": int(props.version), "clusterId": props.cluster_id,
            "nodeId": props.node_id,
            "directoryId": None if props.directory_id is None else str(props.directory_id),
            "otherProperties": dict(sorted(props.other.items()))}
    lines.append("Contents:")
    for entry in sorted(directory.iterdir()):
        if entry.name == meta_properties.FILE_NAME:
            continue
        try:
            line, described = _describe_entry(entry)
        except errors.CorruptFileError as exc:
            lines.append(f"  {entry.name} (Found problem: {exc})")
            problems.append(f"{entry.name}: {exc}")
            found["contents"].append({"name": entry.name, "type": "file", "problem": str(exc)})
            continue
        lines.append(f"  {line}")
        found["contents"].append(described)
    lines.append("")  # a blank line after each directory that exists
    return lines, found, len(problems)


def run_info(args: argparse.Namespace) -> int:
    problems = 0
    found: list[dict[str, Any]] = []
    for raw in args.data_dir:
        lines, described, count = _info(pathlib.Path(raw))
        problems += count
        found.append(described)
        if args.output != "json":
            print("\n".join(lines))
    if args.output == "json":
        print(json.dumps({"logDirs": found}, indent=2))
    return EXIT_ERROR if problems else EXIT_OK


# --- log dump ---------------------------------------------------------------------------


# The message a control record's value holds in the metadata log, by its key's type
# (see protos/kraftlog/v1/metadata.proto).
_RAFT_CONTROL_DECODERS: dict[rb.ControlRecordType, Callable[[bytes], DataclassInstance]] = {
    rb.ControlRecordType.LEADER_CHANGE: control_records.decode_leader_change,
    rb.ControlRecordType.SNAPSHOT_HEADER: control_records.decode_snapshot_header,
    rb.ControlRecordType.SNAPSHOT_FOOTER: control_records.decode_snapshot_footer,
    rb.ControlRecordType.KRAFT_VERSION: control_records.decode_kraft_version,
    rb.ControlRecordType.KRAFT_VOTERS: control_records.decode_voters,
}
"""Control records whose value encoding the raft core owns (not protobuf)."""

def _plain(value: Any) -> Any:
    """A raft control record as JSON values (directory ids as Kafka's UUID strings)."""
    if isinstance(value, uuid.Uuid):
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


_CONTROL_MESSAGES = {
    rb.ControlRecordType.KRAFT_VERSION: "KRaftVersionRecord",
    rb.ControlRecordType.KRAFT_VOTERS: "VotersRecord",
}


def metadata_formatters() -> tuple[dump.PayloadFormatter, dump.ControlFormatter]:
    """Render ``__cluster_metadata`` values as one-line JSON of their protobuf messages.

    Data records hold a ``kraftlog.v1.MetadataRecord``; control records the
    message their type names. Falls back to hex when the generated module is
    missing or a value does not parse, saying why; never raises.
    """
    try:
        metadata_pb2: Any = importlib.import_module("kraftlog.v1.metadata_pb2")
        json_format: Any = importlib.import_module("google.protobuf.json_format")
    except ImportError:
        return dump.hex_payload, dump.hex_control

    def render(message_name: str, value: bytes) -> str:
        message_type = getattr(metadata_pb2, message_name, None)
        if message_type is None:
            return f"{dump.hex_payload(value)} (no message {message_name} in kraftlog.v1.metadata_pb2)"
        try:
            message = message_type()
            message.ParseFromString(value)
            text: str = json_format.MessageToJson(message, indent=None)
        except Exception as exc:  # a bad payload must not stop the dump
            return f"{dump.hex_payload(value)} (not a {message_name}: {type(exc).__name__}: {exc})"
        if message_name == "MetadataRecord" and message.WhichOneof("record") is None:
            return f"{text} (corrupt: no record type set)"
        return text

    def render_record(value: bytes) -> str:
        return render("MetadataRecord", value)

    def render_control(record_type: rb.ControlRecordType, value: bytes) -> str:
        # The raft layer owns the bytes of the control records it writes
        # (kraftlog.raft.control_records); decode those with its decoder so a
        # dump shows exactly what raft will read back.
        raft_decoder = _RAFT_CONTROL_DECODERS.get(record_type)
        if raft_decoder is not None:
            try:
                return json.dumps(_plain(raft_decoder(value)), separators=(",", ":"))
            except errors.CorruptRecordError as exc:
                return f"{dump.hex_payload(value)} (corrupt {record_type.name}: {exc})"
        name = _CONTROL_MESSAGES.get(record_type)
        return dump.hex_payload(value) if name is None else render(name, value)

    return render_record, render_control


def metadata_json_formatters() -> tuple[dump.JsonPayloadFormatter, dump.JsonControlFormatter]:
    """:func:`metadata_formatters` for ``--output json``: a decoded value is an object
    (protobuf's JSON mapping, or the raft dataclass); one that does not decode is its
    bytes in base64 with ``payloadError`` saying why. Never raises."""
    try:
        metadata_pb2: Any = importlib.import_module("kraftlog.v1.metadata_pb2")
        json_format: Any = importlib.import_module("google.protobuf.json_format")
    except ImportError:
        return dump.bytes_json_payload, dump.bytes_json_control

    def undecoded(value: bytes, why: str) -> dict[str, Any]:
        return {"payload": base64.b64encode(value).decode("ascii"), "payloadEncoding": "base64",
                "payloadError": why}

    def render(message_name: str, value: bytes) -> dict[str, Any]:
        message_type = getattr(metadata_pb2, message_name, None)
        if message_type is None:
            return undecoded(value, f"no message {message_name} in kraftlog.v1.metadata_pb2")
        try:
            message = message_type()
            message.ParseFromString(value)
            decoded: dict[str, Any] = json_format.MessageToDict(message)
        except Exception as exc:  # a bad payload must not stop the dump
            return undecoded(value, f"not a {message_name}: {type(exc).__name__}: {exc}")
        if message_name == "MetadataRecord" and message.WhichOneof("record") is None:
            return {"payload": decoded, "payloadError": "corrupt: no record type set"}
        return {"payload": decoded}

    def render_record(value: bytes) -> dict[str, Any]:
        return render("MetadataRecord", value)

    def render_control(record_type: rb.ControlRecordType, value: bytes) -> dict[str, Any]:
        raft_decoder = _RAFT_CONTROL_DECODERS.get(record_type)
        if raft_decoder is not None:
            try:
                return {"payload": _plain(raft_decoder(value))}
            except errors.CorruptRecordError as exc:
                return undecoded(value, f"corrupt {record_type.name}: {exc}")
        name = _CONTROL_MESSAGES.get(record_type)
        return dump.bytes_json_payload(value) if name is None else render(name, value)

    return render_record, render_control


def _is_metadata_log(path: pathlib.Path) -> bool:
    return path.parent.name.startswith("__cluster_metadata-") or path.name == "bootstrap.checkpoint"


def _dump_one(path: pathlib.Path, options: dump.DumpOptions) -> dump.DumpResult:
    kind = dump.file_kind(path.name)
    try:
        file_size = path.stat().st_size
        with path.open("rb") as file:
            if kind in (dump.FileKind.LOG, dump.FileKind.SNAPSHOT):
                data = file.read(options.max_bytes)
            else:
                data = file.read()
    except OSError as exc:
        return dump.failure(f"{path}: cannot read: {exc.strerror or exc}", options)
    if _is_metadata_log(path):
        payload_formatter, control_formatter = metadata_formatters()
        json_payload, json_control = metadata_json_formatters()
    else:
        payload_formatter, control_formatter = dump.utf8_payload, dump.hex_control
        json_payload, json_control = dump.bytes_json_payload, dump.bytes_json_control
    return dump.dump_file(path.name, data, path=str(path), options=options, file_size=file_size,
                          payload_formatter=payload_formatter, control_formatter=control_formatter,
                          json_payload_formatter=json_payload, json_control_formatter=json_control)


def run_dump(args: argparse.Namespace) -> int:
    if args.max_bytes <= 0:
        raise errors.ConfigError(f"--max-bytes {args.max_bytes}: must be positive")
    options = dump.DumpOptions(print_data_log=args.print_data_log,
                               deep_iteration=args.deep_iteration, max_bytes=args.max_bytes,
                               output="json" if args.output == "json" else "text")
    failed = False
    for raw in args.paths:
        path = pathlib.Path(raw)
        targets: list[pathlib.Path] = [path]
        if path.is_dir():
            # A partition directory: dump every file kafka-dump-log understands.
            try:
                targets = sorted(p for p in path.iterdir()
                                 if p.is_file() and dump.file_kind(p.name) != dump.FileKind.UNKNOWN)
                problem = None if targets else f"{path}: directory holds no file to dump"
            except OSError as exc:
                targets, problem = [], f"{path}: cannot list: {exc.strerror or exc}"
            if problem is not None:
                print(dump.failure(problem, options).lines[0])
                failed = True
        for target in targets:
            if not target.exists():
                result = dump.failure(f"{target}: no such file", options)
            else:
                result = _dump_one(target, options)
            for line in result.lines:
                print(line)
            sys.stdout.flush()
            failed = failed or result.error is not None
    return EXIT_ERROR if failed else EXIT_OK


# --- registration -----------------------------------------------------------------------


def register(subparsers: Any) -> None:
    """Add ``storage`` and ``log`` to the ``kraftlog`` command (see :mod:`kraftlog.tools.cli`)."""
    storage = subparsers.add_parser("storage", help="format and inspect data directories")
    storage_sub = storage.add_subparsers(dest="storage_command", metavar="SUBCOMMAND")
    storage_sub.required = True

    fmt = storage_sub.add_parser(
        "format", help="write meta.properties into data directories (idempotent)",
        description="Format data directories for a cluster and node, like kafka-storage.sh format.",
    )
    fmt.add_argument("--cluster-id", "-t", required=True,
                     help="the cluster id, a Kafka UUID (see 'kraftlog storage random-uuid')")
    fmt.add_argument("--node-id", type=int, required=True, help="this node's node.id (>= 0)")
    fmt.add_argument("--data-dir", action="append", metavar="DIR",
                     help="a log directory (log.dirs); repeat for several")
    fmt.add_argument("--metadata-dir", metavar="DIR",
                     help="the metadata log directory (metadata.log.dir); default: the first --data-dir")
    voters = fmt.add_mutually_exclusive_group()
    voters.add_argument("--initial-controllers", metavar="ID@HOST:PORT:DIRID,...",
                        help="the bootstrap controller voter set (KIP-853)")
    voters.add_argument("--standalone", action="store_true",
                        help="bootstrap a quorum of this controller alone (KIP-853)")
    voters.add_argument("--no-initial-controllers", "-N", action="store_true",
                        help="a controller of a dynamic quorum that joins later (KIP-853)")
    fmt.add_argument("--controller-endpoint", metavar="HOST:PORT",
                     help="with --standalone: this controller's advertised address")
    fmt.add_argument("--ignore-formatted", "-g", action="store_true",
                     help="skip every already formatted directory without checking its cluster.id and "
                          "node.id (kafka-storage.sh's flag); without it a directory formatted for this "
                          "cluster and node is left as it is and one formatted for another is refused")
    fmt.add_argument("--feature", "-f", action="append", metavar="NAME=LEVEL",
                     help="a finalized feature level for bootstrap.checkpoint (repeatable; "
                          f"default metadata.version={METADATA_VERSION_LATEST}, the only level "
                          "this release supports)")
    fmt.set_defaults(func=run_format)

    rnd = storage_sub.add_parser("random-uuid", help="print a new random cluster id")
    rnd.set_defaults(func=run_random_uuid)

    info = storage_sub.add_parser("info", help="print meta.properties and contents of data dirs")
    info.add_argument("--data-dir", action="append", required=True, metavar="DIR")
    conventions.add_output_option(
        info, help_text="table (default), or json: {\"logDirs\": [{\"path\", "
                        "\"metaProperties\", \"contents\", \"problems\"}]}")
    info.set_defaults(func=run_info)

    log = subparsers.add_parser("log", help="inspect log files")
    log_sub = log.add_subparsers(dest="log_command", metavar="SUBCOMMAND")
    log_sub.required = True
    dmp = log_sub.add_parser(
        "dump", help="print segments, indexes and checkpoints, like kafka-dump-log.sh",
        description="Dump .log/.index/.timeindex files, snapshots, checkpoint files and "
                    "meta.properties. Exits 1 if any file is corrupt (after dumping the rest).",
    )
    dmp.add_argument("paths", nargs="+", metavar="PATH", help="files, or partition directories")
    dmp.add_argument("--print-data-log", action="store_true",
                     help="print each record's key and payload (implies --deep-iteration)")
    dmp.add_argument("--deep-iteration", action="store_true", help="print one line per record")
    dmp.add_argument("--max-bytes", type=int, default=dump.MAX_BYTES_DEFAULT,
                     help="read at most this many bytes of each log file")
    conventions.add_output_option(
        dmp, help_text="table: kafka-dump-log's lines (default; 'text' also works); json: one "
                       "JSON object per line (per file, batch, record, index or checkpoint "
                       "entry), with DumpLogSegments' field names and a 'type'")
    dmp.set_defaults(func=run_dump)

