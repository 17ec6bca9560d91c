"""meta.properties (Kafka's Java-properties form, version 1) and Kafka-style UUIDs."""

from __future__ import annotations

import base64
import pathlib
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftlog import errors
from kraftlog import ids as uuid
from kraftlog.ids import NodeId
from kraftlog.storage import meta_properties
from kraftlog.storage.meta_properties import MetaProperties

CLUSTER = "4L6g3nShT-eMCtK--X86sw"
DIRECTORY = "J8aAPcfLQt2bqs1JT_rMgQ"

# --- uuid --------------------------------------------------------------------------------


def test_uuid_text_is_kafkas_base64url_without_padding() -> None:
    value = uuid.Uuid.from_bits(0x0123456789ABCDEF, -1)
    assert str(value) == base64.urlsafe_b64encode(value.value).decode().rstrip("=")
    assert len(str(value)) == 22
    assert value.most_significant_bits == 0x0123456789ABCDEF
    assert value.least_significant_bits == -1
    assert uuid.parse_uuid(str(value)) == value
    assert str(uuid.ZERO_UUID) == "AAAAAAAAAAAAAAAAAAAAAA"
    assert str(uuid.ONE_UUID) == "AAAAAAAAAAAAAAAAAAAAAQ"


def test_parse_accepts_padding_like_javas_url_decoder() -> None:
    assert uuid.parse_uuid(DIRECTORY + "==") == uuid.parse_uuid(DIRECTORY)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "it has 0 characters, expected 22"),
        ("abc", "it has 3 characters"),
        ("A" * 23, "it has 23 characters"),
        ("A" * 30, "too long"),
        ("AAAAAAAAAAAAAAAAAAAA+/", r"characters '\+/' are not in the URL-safe base64 alphabet"),
        ("AAAAAAAAAAAAAAAAAAAA A", "are not in the URL-safe"),
        ("A" * 22 + "AB", "it has 24 characters"),
        ("AAAAAAAAAAAAAAAAAAAAAB", "not a canonical base64 UUID"),
    ],
)
def test_parse_uuid_rejects_bad_text_with_a_reason(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        uuid.parse_uuid(text)


def test_random_uuid_is_seedable_version_4_and_never_reserved() -> None:
    assert uuid.random_uuid(random.Random(7)) == uuid.random_uuid(random.Random(7))
    rng = random.Random(1)
    seen = {uuid.random_uuid(rng) for _ in range(500)}
    assert len(seen) == 500
    for value in seen:
        assert value not in uuid.RESERVED
        assert "-" not in str(value)
        assert value.value[6] >> 4 == 4 and value.value[8] >> 6 == 0b10
    assert uuid.random_uuid() != uuid.random_uuid()  # the OS source


def test_random_uuid_skips_reserved_and_dashed_draws() -> None:
    class Scripted(random.Random):
        """Yields two draws whose text has a '-' (one would read as a CLI flag), then a usable one."""

        def __init__(self) -> None:
            super().__init__(0)
            dashed = int.from_bytes(base64.urlsafe_b64decode("-" * 22 + "=="), "big")
            self.draws = [dashed, dashed, 2**127 + 5]

        def getrandbits(self, k: int) -> int:
            return self.draws.pop(0)

    scripted = Scripted()
    value = uuid.random_uuid(scripted)
    assert not scripted.draws
    assert value not in uuid.RESERVED and "-" not in str(value)


def test_random_directory_id_avoids_the_reserved_hundred() -> None:
    rng = random.Random(3)
    for _ in range(200):
        assert uuid.random_directory_id(rng) not in uuid.RESERVED_DIRECTORY_IDS
    assert uuid.Uuid.from_bits(0, 99) in uuid.RESERVED_DIRECTORY_IDS


def test_uuid_requires_16_bytes() -> None:
    with pytest.raises(ValueError, match="16 bytes"):
        uuid.Uuid(b"short")


@settings(max_examples=100, deadline=None)
@given(st.binary(min_size=16, max_size=16))
def test_any_uuid_round_trips_through_text(raw: bytes) -> None:
    value = uuid.Uuid(raw)
    assert uuid.parse_uuid(str(value)) == value


# --- meta.properties ---------------------------------------------------------------------


def props(**overrides: object) -> MetaProperties:
    fields: dict[str, object] = {
        "cluster_id": CLUSTER,
        "node_id": NodeId(1),
        "directory_id": uuid.parse_uuid(DIRECTORY),
    }
    fields.update(overrides)
    return MetaProperties(**fields)  # type: ignore[arg-type]


def test_write_then_read_round_trips(tmp_path: pathlib.Path) -> None:
    original = props()
    meta_properties.write(tmp_path, original, header="Tue Jun 04 10:00:00 UTC 2024")
    text = (tmp_path / "meta.properties").read_text()
    assert text == (
        "#\n#Tue Jun 04 10:00:00 UTC 2024\nversion=1\n"
        f"cluster.id={CLUSTER}\nnode.id=1\ndirectory.id={DIRECTORY}\n"
    )
    assert meta_properties.read(tmp_path) == original
    assert sorted(p.name for p in tmp_path.iterdir()) == ["meta.properties"]


def test_reads_a_file_as_kafka_writes_it(tmp_path: pathlib.Path) -> None:
    # Java's Properties.store: hash order, "#" + date comments.
    (tmp_path / "meta.properties").write_text(
        f"#\n#Thu Mar 07 12:00:00 UTC 2024\nnode.id=3\ndirectory.id={DIRECTORY}\nversion=1\n"
        f"cluster.id={CLUSTER}\n"
    )
    assert meta_properties.read(tmp_path) == props(node_id=NodeId(3))


def test_reads_a_pre_kip_858_file_without_directory_id_and_keeps_unknown_keys(tmp_path: pathlib.Path) -> None:
    (tmp_path / "meta.properties").write_text(
        f"version=1\ncluster.id={CLUSTER}\nnode.id = 2\n! comment\n\nfuture.key=abc\n"
    )
    read = meta_properties.read(tmp_path)
    assert read is not None
    assert read.directory_id is None and read.node_id == 2
    assert dict(read.other) == {"future.key": "abc"}
    meta_properties.write(tmp_path, read)
    assert "future.key=abc" in (tmp_path / "meta.properties").read_text()
    assert meta_properties.read(tmp_path) == read


def test_unformatted_directory_reads_none(tmp_path: pathlib.Path) -> None:
    assert meta_properties.read(tmp_path) is None


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"", "file is empty"),
        (b"\n\n", "file is empty"),
        (b"version=1\ncluster.id=c\nnode.id=1\nnot a property line\n", "line 4: expected key=value"),
        (b"version=1\ncluster.id=c\nnode.id=1\nbad key!=1\n", "line 4: malformed key"),
        (b"version=2\ncluster.id=c\nnode.id=1\n", "line 1: unknown meta.properties version '2'"),
        (b"version=x\ncluster.id=c\nnode.id=1\n", "line 1: unknown meta.properties version 'x'"),
        (b"version=0\nbroker.id=1\ncluster.id=c\n", "line 1: version 0 is the ZooKeeper-mode format"),
        (b"cluster.id=c\nnode.id=1\n", "missing required key version"),
        (b"version=1\nnode.id=1\n", "missing required key cluster.id"),
        (b"version=1\ncluster.id=c\n", "missing required key node.id"),
        (b"version=1\ncluster.id=\nnode.id=1\n", "line 2: cluster.id is empty"),
        (b"version=1\ncluster.id=c\nnode.id=-1\n", "line 3: node.id '-1' is not an integer"),
        (b"version=1\ncluster.id=c\nnode.id=one\n", "line 3: node.id 'one' is not an integer"),
        (b"version=1\ncluster.id=c\nnode.id=4294967296\n", "line 3: node.id '4294967296'"),
        (b"version=1\ncluster.id=c\nnode.id=1\nnode.id=2\n", "line 4: duplicate key node.id .first on line 3"),
        (b"version=1\ncluster.id=c\nnode.id=1\ndirectory.id=nope\n", "line 4: directory.id: 'nope' is not a base64 UUID"),
        (b"version=1\ncluster.id=c\\u0041\nnode.id=1\n", "line 2: unexpected escape"),
        (b"version=1\ncluster.id=c\xfe\nnode.id=1\n", r"line 2: not UTF-8 text \(byte 0xfe at file offset 22\)"),
    ],
)
def test_corrupt_meta_properties_names_file_and_line(
    tmp_path: pathlib.Path, content: bytes, reason: str
) -> None:
    path = tmp_path / "meta.properties"
    path.write_bytes(content)
    with pytest.raises(errors.CorruptFileError, match=reason) as info:
        meta_properties.read(tmp_path)
    assert info.value.path == str(path)


def test_meta_properties_validates_values() -> None:
    with pytest.raises(ValueError, match=r"node\.id -1"):
        props(node_id=NodeId(-1))
    with pytest.raises(ValueError, match=r"cluster\.id"):
        props(cluster_id="has space")
    with pytest.raises(ValueError, match="defined key"):
        props(other={"node.id": "3"})


def test_meta_properties_path_that_is_a_directory_is_a_clear_error(tmp_path: pathlib.Path) -> None:
    (tmp_path / "meta.properties").mkdir()
    with pytest.raises(errors.CorruptFileError, match="is a directory"):
        meta_properties.read(tmp_path)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=60))
def test_arbitrary_bytes_read_or_fail_with_a_corrupt_file_error(data: bytes) -> None:
    try:
        meta_properties.parse_properties(data, path="mp")
    except errors.CorruptFileError as exc:
        assert exc.path == "mp"
