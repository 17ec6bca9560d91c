"""The committed protobuf/gRPC code in services/kraftlog/v1 matches the .proto files and works.

Checks that the generated code is not stale (and that the staleness check
itself names stale, missing and extra files), that generation is
deterministic, that every service and every metadata record type imports,
serializes and crosses a real gRPC call, that ErrorCode carries Kafka's
numbers, and that the .pyi stubs give other modules real types under
``mypy --strict``.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import importlib.util
import pathlib
import re
import shutil
import subprocess
import sys
import types
import uuid
from collections.abc import Iterator

import grpc
import pytest
from google.protobuf import descriptor_pool, message_factory
from google.protobuf import message as protobuf_message

from kraftlog.v1 import (
    admin_pb2,
    admin_pb2_grpc,
    broker_pb2,
    broker_pb2_grpc,
    common_pb2,
    controller_pb2,
    controller_pb2_grpc,
    metadata_pb2,
    raft_pb2,
    raft_pb2_grpc,
)

ROOT = pathlib.Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "gen_protos.py"
GENERATED_DIR = ROOT / "services" / "kraftlog" / "v1"
PROTO_ROOT = ROOT / "protos"

# Kafka's protocol error codes, transcribed name -> number from
# org.apache.kafka.common.protocol.Errors (apache/kafka clients, verified for
# -1..116 against Errors.java and 117..127 against a faithful port of the 4.x
# table). ErrorCode must agree with every entry and hold nothing else.
KAFKA_ERROR_CODES: dict[str, int] = {
    "UNKNOWN_SERVER_ERROR": -1,
    "NONE": 0,
    "OFFSET_OUT_OF_RANGE": 1,
    "CORRUPT_MESSAGE": 2,
    "UNKNOWN_TOPIC_OR_PARTITION": 3,
    "INVALID_FETCH_SIZE": 4,
    "LEADER_NOT_AVAILABLE": 5,
    "NOT_LEADER_OR_FOLLOWER": 6,
    "REQUEST_TIMED_OUT": 7,
    "BROKER_NOT_AVAILABLE": 8,
    "REPLICA_NOT_AVAILABLE": 9,
    "MESSAGE_TOO_LARGE": 10,
    "STALE_CONTROLLER_EPOCH": 11,
    "OFFSET_METADATA_TOO_LARGE": 12,
    "NETWORK_EXCEPTION": 13,
    "COORDINATOR_LOAD_IN_PROGRESS": 14,
    "COORDINATOR_NOT_AVAILABLE": 15,
    "NOT_COORDINATOR": 16,
    "INVALID_TOPIC_EXCEPTION": 17,
    "RECORD_LIST_TOO_LARGE": 18,
    "NOT_ENOUGH_REPLICAS": 19,
    "NOT_ENOUGH_REPLICAS_AFTER_APPEND": 20,
    "INVALID_REQUIRED_ACKS": 21,
    "ILLEGAL_GENERATION": 22,
    "INCONSISTENT_GROUP_PROTOCOL": 23,
    "INVALID_GROUP_ID": 24,
    "UNKNOWN_MEMBER_ID": 25,
    "INVALID_SESSION_TIMEOUT": 26,
    "REBALANCE_IN_PROGRESS": 27,
    "INVALID_COMMIT_OFFSET_SIZE": 28,
    "TOPIC_AUTHORIZATION_FAILED": 29,
    "GROUP_AUTHORIZATION_FAILED": 30,
    "CLUSTER_AUTHORIZATION_FAILED": 31,
    "INVALID_TIMESTAMP": 32,
    "UNSUPPORTED_SASL_MECHANISM": 33,
    "ILLEGAL_SASL_STATE": 34,
    "UNSUPPORTED_VERSION": 35,
    "TOPIC_ALREADY_EXISTS": 36,
    "INVALID_PARTITIONS": 37,
    "INVALID_REPLICATION_FACTOR": 38,
    "INVALID_REPLICA_ASSIGNMENT": 39,
    "INVALID_CONFIG": 40,
    "NOT_CONTROLLER": 41,
    "INVALID_REQUEST": 42,
    "UNSUPPORTED_FOR_MESSAGE_FORMAT": 43,
    "POLICY_VIOLATION": 44,
    "OUT_OF_ORDER_SEQUENCE_NUMBER": 45,
    "DUPLICATE_SEQUENCE_NUMBER": 46,
    "INVALID_PRODUCER_EPOCH": 47,
    "INVALID_TXN_STATE": 48,
    "INVALID_PRODUCER_ID_MAPPING": 49,
    "INVALID_TRANSACTION_TIMEOUT": 50,
    "CONCURRENT_TRANSACTIONS": 51,
    "TRANSACTION_COORDINATOR_FENCED": 52,
    "TRANSACTIONAL_ID_AUTHORIZATION_FAILED": 53,
    "SECURITY_DISABLED": 54,
    "OPERATION_NOT_ATTEMPTED": 55,
    "KAFKA_STORAGE_ERROR": 56,
    "LOG_DIR_NOT_FOUND": 57,
    "SASL_AUTHENTICATION_FAILED": 58,
    "UNKNOWN_PRODUCER_ID": 59,
    "REASSIGNMENT_IN_PROGRESS": 60,
    "DELEGATION_TOKEN_AUTH_DISABLED": 61,
    "DELEGATION_TOKEN_NOT_FOUND": 62,
    "DELEGATION_TOKEN_OWNER_MISMATCH": 63,
    "DELEGATION_TOKEN_REQUEST_NOT_ALLOWED": 64,
    "DELEGATION_TOKEN_AUTHORIZATION_FAILED": 65,
    "DELEGATION_TOKEN_EXPIRED": 66,
    "INVALID_PRINCIPAL_TYPE": 67,
    "NON_EMPTY_GROUP": 68,
    "GROUP_ID_NOT_FOUND": 69,
    "FETCH_SESSION_ID_NOT_FOUND": 70,
    "INVALID_FETCH_SESSION_EPOCH": 71,
    "LISTENER_NOT_FOUND": 72,
    "TOPIC_DELETION_DISABLED": 73,
    "FENCED_LEADER_EPOCH": 74,
    "UNKNOWN_LEADER_EPOCH": 75,
    "UNSUPPORTED_COMPRESSION_TYPE": 76,
    "STALE_BROKER_EPOCH": 77,
    "OFFSET_NOT_AVAILABLE": 78,
    "MEMBER_ID_REQUIRED": 79,
    "PREFERRED_LEADER_NOT_AVAILABLE": 80,
    "GROUP_MAX_SIZE_REACHED": 81,
    "FENCED_INSTANCE_ID": 82,
    "ELIGIBLE_LEADERS_NOT_AVAILABLE": 83,
    "ELECTION_NOT_NEEDED": 84,
    "NO_REASSIGNMENT_IN_PROGRESS": 85,
    "GROUP_SUBSCRIBED_TO_TOPIC": 86,
    "INVALID_RECORD": 87,
    "UNSTABLE_OFFSET_COMMIT": 88,
    "THROTTLING_QUOTA_EXCEEDED": 89,
    "PRODUCER_FENCED": 90,
    "RESOURCE_NOT_FOUND": 91,
    "DUPLICATE_RESOURCE": 92,
    "UNACCEPTABLE_CREDENTIAL": 93,
    "INCONSISTENT_VOTER_SET": 94,
    "INVALID_UPDATE_VERSION": 95,
    "FEATURE_UPDATE_FAILED": 96,
    "PRINCIPAL_DESERIALIZATION_FAILURE": 97,
    "SNAPSHOT_NOT_FOUND": 98,
    "POSITION_OUT_OF_RANGE": 99,
    "UNKNOWN_TOPIC_ID": 100,
    "DUPLICATE_BROKER_REGISTRATION": 101,
    "BROKER_ID_NOT_REGISTERED": 102,
    "INCONSISTENT_TOPIC_ID": 103,
    "INCONSISTENT_CLUSTER_ID": 104,
    "TRANSACTIONAL_ID_NOT_FOUND": 105,
    "FETCH_SESSION_TOPIC_ID_ERROR": 106,
    "INELIGIBLE_REPLICA": 107,
    "NEW_LEADER_ELECTED": 108,
    "OFFSET_MOVED_TO_TIERED_STORAGE": 109,
    "FENCED_MEMBER_EPOCH": 110,
    "UNRELEASED_INSTANCE_ID": 111,
    "UNSUPPORTED_ASSIGNOR": 112,
    "STALE_MEMBER_EPOCH": 113,
    "MISMATCHED_ENDPOINT_TYPE": 114,
    "UNSUPPORTED_ENDPOINT_TYPE": 115,
    "UNKNOWN_CONTROLLER_ID": 116,
    "UNKNOWN_SUBSCRIPTION_ID": 117,
    "TELEMETRY_TOO_LARGE": 118,
    "INVALID_REGISTRATION": 119,
    "TRANSACTION_ABORTABLE": 120,
    "INVALID_RECORD_STATE": 121,
    "SHARE_SESSION_NOT_FOUND": 122,
    "INVALID_SHARE_SESSION_EPOCH": 123,
    "FENCED_STATE_EPOCH": 124,
    "INVALID_VOTER_KEY": 125,
    "DUPLICATE_VOTER": 126,
    "VOTER_NOT_FOUND": 127,
}

# (generated _pb2 module, _pb2_grpc module, service name) for every service.
SERVICES: list[tuple[types.ModuleType, types.ModuleType, str]] = [
    (raft_pb2, raft_pb2_grpc, "RaftService"),
    (controller_pb2, controller_pb2_grpc, "ControllerService"),
    (broker_pb2, broker_pb2_grpc, "BrokerService"),
    (admin_pb2, admin_pb2_grpc, "AdminService"),
]

# Metadata-file messages that are raft control records, not MetadataRecord values.
CONTROL_RECORD_MESSAGES = {
    "CONTROL_RECORD_TYPE_LEADER_CHANGE": "LeaderChangeMessage",
    "CONTROL_RECORD_TYPE_SNAPSHOT_HEADER": "SnapshotHeaderRecord",
    "CONTROL_RECORD_TYPE_SNAPSHOT_FOOTER": "SnapshotFooterRecord",
    "CONTROL_RECORD_TYPE_KRAFT_VERSION": "KRaftVersionRecord",
    "CONTROL_RECORD_TYPE_KRAFT_VOTERS": "VotersRecord",
}


def _load_script() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("gen_protos", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # dataclasses resolve the module through sys.modules while the class is built.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _run_script(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, check=False, cwd=ROOT
    )


# --- staleness and determinism -------------------------------------------------------------


def test_committed_generated_code_matches_the_protos() -> None:
    result = _run_script("--check")
    assert result.returncode == 0, (
        "services/kraftlog/v1 is stale; run .venv/bin/python scripts/gen_protos.py\n"
        + result.stdout + result.stderr
    )


def test_check_names_stale_missing_and_extra_files_then_regenerate_fixes_them(
    tmp_path: pathlib.Path,
) -> None:
    out_dir = tmp_path / "v1"
    shutil.copytree(GENERATED_DIR, out_dir, ignore=shutil.ignore_patterns("__pycache__"))
    with (out_dir / "raft_pb2.py").open("a") as handle:
        handle.write("# hand edit\n")
    (out_dir / "broker_pb2.pyi").unlink()
    (out_dir / "retired_pb2.py").write_text("# generated from a .proto that no longer exists\n")
    init_before = (out_dir / "__init__.py").read_bytes()

    stale = _run_script("--check", "--out-dir", str(out_dir))
    assert stale.returncode == 1
    lines = stale.stdout.splitlines()
    assert any("differs" in line and line.endswith("raft_pb2.py") for line in lines), stale.stdout
    assert any("missing" in line and line.endswith("broker_pb2.pyi") for line in lines), stale.stdout
    assert any("extra" in line and line.endswith("retired_pb2.py") for line in lines), stale.stdout
    assert "__init__.py" not in stale.stdout, "the hand-written __init__.py is not generated"
    assert len([line for line in lines if line.startswith("  ")]) == 3, stale.stdout

    fixed = _run_script("--out-dir", str(out_dir))
    assert fixed.returncode == 0, fixed.stderr
    assert not (out_dir / "retired_pb2.py").exists()
    assert (out_dir / "__init__.py").read_bytes() == init_before
    assert _run_script("--check", "--out-dir", str(out_dir)).returncode == 0


def test_generation_is_deterministic_and_independent_of_the_scratch_path(
    tmp_path: pathlib.Path,
) -> None:
    gen_protos = _load_script()
    first_dir = tmp_path / "a"
    second_dir = tmp_path / "some" / "deeper" / "b"
    first_dir.mkdir()
    second_dir.mkdir(parents=True)
    first = gen_protos.generate(PROTO_ROOT, first_dir)
    second = gen_protos.generate(PROTO_ROOT, second_dir)
    assert first == second
    for name, content in first.items():
        assert str(tmp_path).encode() not in content, f"{name} embeds the scratch path"


def test_a_broken_proto_fails_with_protocs_message_not_a_traceback(tmp_path: pathlib.Path) -> None:
    proto_root = tmp_path / "protos"
    shutil.copytree(PROTO_ROOT, proto_root)
    raft = proto_root / "kraftlog" / "v1" / "raft.proto"
    raft.write_text(raft.read_text().replace("bool pre_vote = 10;", "bool pre_vote = 9;"))
    result = _run_script("--check", "--proto-root", str(proto_root))
    assert result.returncode == 2
    assert "gen_protos: protoc failed" in result.stderr
    assert "raft.proto" in result.stderr
    assert "Traceback" not in result.stderr


# --- .proto hygiene -----------------------------------------------------------------------

_FIELD = re.compile(r"^\s*(?:optional |repeated )?(?P<type>[\w.]+) (?P<name>\w+) = \d+;")
_TIME_WORDS = re.compile(r"timeout|wait|time|interval")
_SIZE_WORDS = re.compile(r"bytes|size")


def _commented_fields() -> Iterator[tuple[str, str, str, str]]:
    """(file:line, type, name, the comment lines above) for every field outside oneofs."""
    for path in sorted((PROTO_ROOT / "kraftlog" / "v1").glob("*.proto")):
        lines = path.read_text().splitlines()
        in_oneof = in_enum = False
        for number, line in enumerate(lines, start=1):
            stripped = line.strip()
            if stripped.startswith(("oneof ", "enum ")):
                in_oneof, in_enum = stripped.startswith("oneof "), stripped.startswith("enum ")
                continue
            if stripped == "}" and (in_oneof or in_enum):
                in_oneof = in_enum = False
                continue
            match = _FIELD.match(line)
            if match is None or in_oneof or in_enum:
                continue
            comment: list[str] = []
            above = number - 2
            while above >= 0 and lines[above].strip().startswith("//"):
                comment.insert(0, lines[above].strip())
                above -= 1
            yield f"{path.name}:{number}", match["type"], match["name"], " ".join(comment)


def test_every_proto_field_has_a_comment_and_time_and_size_fields_state_units() -> None:
    uncommented = [where for where, _, _, comment in _commented_fields() if not comment]
    assert not uncommented, f"fields without a comment: {uncommented}"
    integer = ("int32", "int64", "fixed64", "uint32", "uint64")
    unitless = [
        f"{where} {name}"
        for where, type_name, name, comment in _commented_fields()
        if type_name in integer
        and (
            (_TIME_WORDS.search(name) and not name.endswith("_ms")
             and not re.search(r"\bms\b|millisecond", comment))
            or (_SIZE_WORDS.search(name) and "bytes" not in name
                and not re.search(r"\bbytes\b", comment, re.IGNORECASE))
        )
    ]
    assert not unitless, f"time/size fields whose name or comment gives no unit: {unitless}"


# --- error codes ---------------------------------------------------------------------------


def test_error_codes_carry_kafkas_names_and_numbers() -> None:
    ours = dict(common_pb2.ErrorCode.items())
    mismatched = {
        name: (ours.get(name), number)
        for name, number in KAFKA_ERROR_CODES.items()
        if ours.get(name) != number
    }
    assert not mismatched, f"name: (ours, Kafka's): {mismatched}"
    unverified = ours.keys() - KAFKA_ERROR_CODES.keys()
    assert not unverified, f"ErrorCode values not in Kafka's table: {sorted(unverified)}"
    assert len(set(ours.values())) == len(ours), "two ErrorCode names share a number"


def test_an_unset_error_means_none_and_negative_codes_survive_the_wire() -> None:
    assert raft_pb2.VoteResponse().error.code == common_pb2.NONE
    response = raft_pb2.VoteResponse(
        error=common_pb2.Error(code=common_pb2.UNKNOWN_SERVER_ERROR, message="disk on fire")
    )
    parsed = raft_pb2.VoteResponse.FromString(response.SerializeToString())
    assert parsed.error.code == -1
    assert common_pb2.ErrorCode.Name(parsed.error.code) == "UNKNOWN_SERVER_ERROR"
    assert parsed.error.message == "disk on fire"


# --- agreement with the pure cores' own copies ----------------------------------------------
# The pure cores may not import kraftlog.v1, so they keep plain copies of a few
# contract facts. These tests keep the copies and the contract in step.


def test_the_shared_error_codes_are_exactly_the_protos_error_codes() -> None:
    from kraftlog import error_codes

    ours = {member.name: int(member) for member in error_codes.ErrorCode}
    assert ours == dict(common_pb2.ErrorCode.items())


def test_the_storage_control_record_types_match_control_record_type() -> None:
    record_batch = pytest.importorskip("kraftlog.storage.record_batch")
    proto = dict(metadata_pb2.ControlRecordType.items())
    storage = {
        f"CONTROL_RECORD_TYPE_{member.name}": int(member)
        for member in record_batch.ControlRecordType
        if int(member) >= 0  # storage's UNKNOWN (-1) stands for ids it cannot name
    }
    assert storage == proto


def test_the_raft_control_record_codec_has_the_fields_of_the_proto_messages() -> None:
    control_records = pytest.importorskip("kraftlog.raft.control_records")
    pairs = {
        "LeaderChangeMessage": "LeaderChangeMessage",
        "SnapshotHeader": "SnapshotHeaderRecord",
        "SnapshotFooter": "SnapshotFooterRecord",
    }
    for core_name, proto_name in pairs.items():
        core_fields = {field.name for field in dataclasses.fields(getattr(control_records, core_name))}
        proto_fields = set(metadata_pb2.DESCRIPTOR.message_types_by_name[proto_name].fields_by_name)
        assert core_fields == proto_fields, f"{core_name} vs {proto_name}"


# --- messages ------------------------------------------------------------------------------


def test_uuid_halves_hold_every_128_bit_value() -> None:
    for value in (uuid.UUID(int=0), uuid.UUID(int=(1 << 128) - 1), uuid.UUID("01234567-89ab-cdef-fedc-ba9876543210")):
        message = common_pb2.Uuid(
            most_significant_bits=value.int >> 64, least_significant_bits=value.int & ((1 << 64) - 1)
        )
        parsed = common_pb2.Uuid.FromString(message.SerializeToString())
        assert uuid.UUID(int=(parsed.most_significant_bits << 64) | parsed.least_significant_bits) == value
        assert len(message.SerializeToString()) in (0, 9, 18)  # fixed width: no length to corrupt


def _metadata_record_oneof_fields() -> list[str]:
    oneof = metadata_pb2.MetadataRecord.DESCRIPTOR.oneofs_by_name["record"]
    return [field.name for field in oneof.fields]


@pytest.mark.parametrize("field_name", _metadata_record_oneof_fields())
def test_every_metadata_record_type_round_trips_through_the_oneof(field_name: str) -> None:
    field = metadata_pb2.MetadataRecord.DESCRIPTOR.fields_by_name[field_name]
    assert field.message_type is not None
    record = metadata_pb2.MetadataRecord()
    getattr(record, field_name).SetInParent()
    parsed = metadata_pb2.MetadataRecord.FromString(record.SerializeToString())
    assert parsed.WhichOneof("record") == field_name
    assert parsed == record
    assert field.message_type.name.endswith("Record")


def test_every_metadata_record_message_is_in_the_oneof_and_every_control_type_has_a_message() -> None:
    in_oneof: set[str] = set()
    for name in _metadata_record_oneof_fields():
        message_type = metadata_pb2.MetadataRecord.DESCRIPTOR.fields_by_name[name].message_type
        assert message_type is not None
        in_oneof.add(message_type.name)
    control = set(CONTROL_RECORD_MESSAGES.values())
    declared = set(metadata_pb2.DESCRIPTOR.message_types_by_name) - {"MetadataRecord"}
    assert declared - control == in_oneof, "a metadata record type is missing from MetadataRecord"
    for enum_name, message_name in CONTROL_RECORD_MESSAGES.items():
        assert metadata_pb2.ControlRecordType.Name(metadata_pb2.ControlRecordType.Value(enum_name))
        assert message_name in metadata_pb2.DESCRIPTOR.message_types_by_name
    # Kafka's control record type numbers.
    assert metadata_pb2.CONTROL_RECORD_TYPE_LEADER_CHANGE == 2
    assert metadata_pb2.CONTROL_RECORD_TYPE_SNAPSHOT_HEADER == 3
    assert metadata_pb2.CONTROL_RECORD_TYPE_SNAPSHOT_FOOTER == 4
    assert metadata_pb2.CONTROL_RECORD_TYPE_KRAFT_VERSION == 5
    assert metadata_pb2.CONTROL_RECORD_TYPE_KRAFT_VOTERS == 6


def test_partition_change_record_tells_unchanged_from_empty_and_no_leader() -> None:
    unchanged = metadata_pb2.PartitionChangeRecord(partition_id=3)
    emptied = metadata_pb2.PartitionChangeRecord(
        partition_id=3, adding_replicas=common_pb2.ReplicaList(), leader=-1
    )
    to_node_zero = metadata_pb2.PartitionChangeRecord(partition_id=3, leader=0)
    unchanged, emptied, to_node_zero = (
        metadata_pb2.PartitionChangeRecord.FromString(r.SerializeToString())
        for r in (unchanged, emptied, to_node_zero)
    )
    assert not unchanged.HasField("adding_replicas") and not unchanged.HasField("leader")
    assert emptied.HasField("adding_replicas") and list(emptied.adding_replicas.replicas) == []
    assert emptied.HasField("leader") and emptied.leader == -1
    assert to_node_zero.HasField("leader") and to_node_zero.leader == 0
    assert not to_node_zero.HasField("leader_recovery_state")


def test_broker_registration_change_record_tells_unchanged_from_false() -> None:
    unchanged = metadata_pb2.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=7)
    unfenced = metadata_pb2.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=7, fenced=False)
    assert not metadata_pb2.BrokerRegistrationChangeRecord.FromString(
        unchanged.SerializeToString()
    ).HasField("fenced")
    parsed = metadata_pb2.BrokerRegistrationChangeRecord.FromString(unfenced.SerializeToString())
    assert parsed.HasField("fenced") and parsed.fenced is False


def _method_types(
    pb2: types.ModuleType, service_name: str
) -> Iterator[tuple[str, type[protobuf_message.Message], type[protobuf_message.Message], bool, bool]]:
    service = pb2.DESCRIPTOR.services_by_name[service_name]
    for method in service.methods:
        yield (
            method.name,
            _message_class(method.input_type.full_name),
            _message_class(method.output_type.full_name),
            method.client_streaming,
            method.server_streaming,
        )


def _message_class(full_name: str) -> type[protobuf_message.Message]:
    descriptor = descriptor_pool.Default().FindMessageTypeByName(full_name)
    return message_factory.GetMessageClass(descriptor)


@pytest.mark.parametrize(("pb2", "pb2_grpc", "service_name"), SERVICES, ids=[s[2] for s in SERVICES])
def test_every_service_has_stub_servicer_and_round_trippable_messages(
    pb2: types.ModuleType, pb2_grpc: types.ModuleType, service_name: str
) -> None:
    stub_class = getattr(pb2_grpc, f"{service_name}Stub")
    servicer_class = getattr(pb2_grpc, f"{service_name}Servicer")
    assert callable(getattr(pb2_grpc, f"add_{service_name}Servicer_to_server"))
    methods = list(_method_types(pb2, service_name))
    assert methods
    with grpc.insecure_channel("127.0.0.1:1") as channel:  # never connected: stubs only
        stub = stub_class(channel)
        for name, request_class, response_class, _, _ in methods:
            assert hasattr(stub, name), f"{service_name}Stub lacks {name}"
            assert callable(getattr(servicer_class, name)), f"{service_name}Servicer lacks {name}"
            for cls in (request_class, response_class):
                instance = cls()
                assert cls.FromString(instance.SerializeToString()) == instance


def test_every_method_of_every_service_is_routed_over_a_real_grpc_server() -> None:
    """Default servicers answer UNIMPLEMENTED: the method paths of stubs and servers agree."""
    server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=2))
    for _, pb2_grpc, service_name in SERVICES:
        getattr(pb2_grpc, f"add_{service_name}Servicer_to_server")(
            getattr(pb2_grpc, f"{service_name}Servicer")(), server
        )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            for pb2, pb2_grpc, service_name in SERVICES:
                stub = getattr(pb2_grpc, f"{service_name}Stub")(channel)
                for name, request_class, _, client_streaming, server_streaming in _method_types(
                    pb2, service_name
                ):
                    call = getattr(stub, name)
                    with pytest.raises(grpc.RpcError) as raised:
                        if client_streaming:
                            list(call(iter([request_class()]), timeout=5))
                        elif server_streaming:
                            list(call(request_class(), timeout=5))
                        else:
                            call(request_class(), timeout=5)
                    assert raised.value.code() == grpc.StatusCode.UNIMPLEMENTED, (
                        f"{service_name}.{name}: {raised.value}"
                    )
    finally:
        server.stop(grace=None)


class _VotingRaft(raft_pb2_grpc.RaftServiceServicer):
    def Vote(self, request: raft_pb2.VoteRequest, context: grpc.ServicerContext) -> raft_pb2.VoteResponse:
        granted = request.last_offset >= 10 and request.pre_vote
        return raft_pb2.VoteResponse(
            vote_granted=granted,
            current_leader=common_pb2.LeaderHint(leader_id=-1, leader_epoch=request.candidate_epoch),
        )


def test_a_vote_crosses_a_real_grpc_call_with_its_fields_intact() -> None:
    server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=1))
    # The stubs mark every servicer method abstract; this one implements only Vote.
    raft_pb2_grpc.add_RaftServiceServicer_to_server(_VotingRaft(), server)  # type: ignore[abstract]
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = raft_pb2_grpc.RaftServiceStub(channel)
            request = raft_pb2.VoteRequest(
                cluster_id="MkU3OEVBNTcwNTJENDM2Qk",
                topic_partition=common_pb2.TopicPartition(topic="__cluster_metadata", partition=0),
                candidate_epoch=5, candidate_id=2, last_offset_epoch=4, last_offset=10, pre_vote=True,
            )
            response = stub.Vote(request, timeout=5)
            refused = stub.Vote(raft_pb2.VoteRequest(candidate_epoch=6, last_offset=9), timeout=5)
    finally:
        server.stop(grace=None)
    assert response.vote_granted and response.current_leader.leader_epoch == 5
    assert response.current_leader.leader_id == -1
    assert not refused.vote_granted and refused.current_leader.leader_epoch == 6


# --- typed stubs ---------------------------------------------------------------------------

_PROBE_OK = '''
from __future__ import annotations

from kraftlog.v1 import broker_pb2, common_pb2, controller_pb2, metadata_pb2, raft_pb2, raft_pb2_grpc


def leader_of(response: raft_pb2.VoteResponse) -> int:
    return response.current_leader.leader_id


def record_kind(record: metadata_pb2.MetadataRecord) -> str | None:
    return record.WhichOneof("record")


def isr_if_changed(change: metadata_pb2.PartitionChangeRecord) -> list[int] | None:
    return list(change.isr.replicas) if change.HasField("isr") else None


def first_error(response: controller_pb2.CreateTopicsResponse) -> common_pb2.ErrorCode.ValueType:
    return response.topics[0].error.code if response.topics else common_pb2.NONE


def records_of(response: broker_pb2.FetchResponse) -> bytes:
    return b"".join(p.records for t in response.responses for p in t.partitions)


class Raft(raft_pb2_grpc.RaftServiceServicer):
    async def Vote(self, request: raft_pb2.VoteRequest, context: object) -> raft_pb2.VoteResponse:
        return raft_pb2.VoteResponse(vote_granted=request.pre_vote)
'''

_PROBE_BAD = '''
from kraftlog.v1 import metadata_pb2, raft_pb2

epoch: str = raft_pb2.VoteRequest().candidate_epoch
metadata_pb2.PartitionRecord(leader="one")
'''


def _mypy(tmp_path: pathlib.Path, source: str) -> subprocess.CompletedProcess[str]:
    probe = tmp_path / "probe.py"
    probe.write_text(source)
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
         "--strict", "--cache-dir", str(tmp_path / "mypy-cache"), str(probe)],
        capture_output=True, text=True, check=False, cwd=ROOT,
    )


def test_stubs_type_check_a_probe_under_mypy_strict(tmp_path: pathlib.Path) -> None:
    result = _mypy(tmp_path, _PROBE_OK)
    assert result.returncode == 0, result.stdout + result.stderr


def test_stubs_give_real_types_so_mypy_rejects_misuse(tmp_path: pathlib.Path) -> None:
    result = _mypy(tmp_path, _PROBE_BAD)
    assert result.returncode == 1, result.stdout + result.stderr
    assert 'variable has type "str"' in result.stdout
    assert '"leader"' in result.stdout and "PartitionRecord" in result.stdout
