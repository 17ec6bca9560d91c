"""metadata/bootstrap.py: the bootstrap.checkpoint that `storage format` writes and the first
active controller reads."""

from __future__ import annotations

import pathlib

import pytest

from kraftlog import errors
from kraftlog.metadata import bootstrap, record_convert
from kraftlog.metadata import records as r


def decode(value: bytes, offset: int) -> r.MetadataRecord:
    return record_convert.decode(value, offset=offset)


def test_records_written_are_read_back_in_order(tmp_path: pathlib.Path) -> None:
    records = [r.FeatureLevelRecord(name="metadata.version", feature_level=1),
               r.ConfigRecord(resource_type=r.ConfigResourceType.BROKER, resource_name="",
                              name="min.insync.replicas", value="2")]
    path = bootstrap.write_bootstrap(tmp_path, records, encode=record_convert.encode, now_ms=7)
    assert path.name == "bootstrap.checkpoint"
    assert bootstrap.read_bootstrap(tmp_path, decode=decode) == tuple(records)


def test_no_file_means_no_bootstrap_records(tmp_path: pathlib.Path) -> None:
    assert bootstrap.read_bootstrap(tmp_path, decode=decode) is None


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage"])
def test_a_damaged_file_is_an_error_naming_it(tmp_path: pathlib.Path, damage: str) -> None:
    path = bootstrap.write_bootstrap(
        tmp_path, [r.FeatureLevelRecord(name="metadata.version", feature_level=1)],
        encode=record_convert.encode, now_ms=0)
    data = bytearray(path.read_bytes())
    if damage == "truncate":
        data = data[:-10]
    elif damage == "flip":
        data[len(data) // 2] ^= 0xFF
    else:
        data = bytearray(b"not a checkpoint at all")
    path.write_bytes(bytes(data))
    with pytest.raises(errors.CorruptFileError, match=r"bootstrap\.checkpoint"):
        bootstrap.read_bootstrap(tmp_path, decode=decode)
