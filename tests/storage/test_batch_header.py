"""The v2 batch header layout is written down once, in kraftlog.storage.batch_header.

Every other module (the records codec, the validator, the cleaner, segments, dump, the
clients, the tests' own batch forgers) reads and writes a header through
``batch_header.HEADER`` / ``FRAME`` / ``HEADER_PREFIX``, its offsets, ``BatchHeader`` or
``encode_batch``. A struct format that spells the header's leading fields out again
(baseOffset int64, batchLength int32, partitionLeaderEpoch int32, magic int8:
``>qiib``) is a second copy of the layout, and this test names the file that holds it.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

from kraftlog.storage import batch_header as bh
from kraftlog.storage import record_batch as rb

ROOT = pathlib.Path(__file__).resolve().parents[2]
OWNER = ROOT / "services" / "kraftlog" / "storage" / "batch_header.py"
SCANNED = ("services/kraftlog", "tests", "bench", "e2e", "scripts")
HEADER_FORMAT_START = ">qiib"


def _header_formats(source: str, filename: str) -> list[int]:
    """Lines of string constants that begin with the header's leading fields."""
    tree = ast.parse(source, filename=filename)
    return sorted(node.lineno for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and isinstance(node.value, str)
                  and node.value.replace("!", ">").startswith(HEADER_FORMAT_START))


def _python_files() -> list[pathlib.Path]:
    found: list[pathlib.Path] = []
    for folder in SCANNED:
        found.extend(path for path in sorted((ROOT / folder).rglob("*.py"))
                     if "kraftlog/v1" not in path.as_posix())
    return found


def test_no_module_but_batch_header_spells_out_the_header_struct() -> None:
    offenders = {
        str(path.relative_to(ROOT)): lines
        for path in _python_files()
        if path not in (OWNER, pathlib.Path(__file__).resolve())
        and (lines := _header_formats(path.read_text(), str(path)))
    }
    assert not offenders, (
        f"{offenders}: unpack a batch header with kraftlog.storage.batch_header "
        "(HEADER, FRAME, HEADER_PREFIX, BatchHeader), not a struct of your own")


def test_the_checker_sees_a_hand_written_header_struct() -> None:
    source = 'import struct\n\n_H = struct.Struct(">qiibIhiqq")\nOTHER = struct.Struct(">qi")\n'
    assert _header_formats(source, "forged.py") == [3]
    assert _header_formats(OWNER.read_text(), str(OWNER)), "batch_header itself holds the layout"


def test_header_structs_agree_with_the_documented_offsets() -> None:
    assert bh.HEADER.size == bh.HEADER_SIZE == bh.RECORDS_OFFSET
    assert bh.FRAME.size == bh.LOG_OVERHEAD
    assert bh.HEADER_PREFIX.size == bh.PRODUCER_ID_OFFSET
    assert bh.HEADER.format.startswith(bh.HEADER_PREFIX.format)
    assert bh.HEADER_PREFIX.format.startswith(bh.FRAME.format)


@pytest.mark.parametrize("count", [0, 3])
def test_encode_batch_is_what_the_records_codec_builds(count: int) -> None:
    # encode_batch writes the header + CRC for both the encoder and the cleaner: a batch the
    # codec built, re-encoded from its own header fields and section, is the same bytes.
    if count:
        built = rb.build_batch([rb.RecordInput(key=b"k%d" % i, value=b"v", timestamp_ms=10 + i)
                                for i in range(count)], base_offset=5, producer_id=9,
                               producer_epoch=1, base_sequence=4)
        header = bh.BatchHeader(built)
        section = bytes(header.records_view)
    else:
        section = b""
        built = None
    fields = dict(base_offset=5, partition_leader_epoch=-1, attributes=0,
                  last_offset_delta=max(count - 1, 0), base_timestamp=10,
                  max_timestamp=10 + max(count - 1, 0), producer_id=9, producer_epoch=1,
                  base_sequence=4, record_count=count)
    encoded = bh.encode_batch(section, **fields)
    header = bh.BatchHeader(encoded)
    header.validate()
    assert (header.base_offset, header.last_offset, header.record_count) == (
        5, 5 + max(count - 1, 0), count)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (9, 1, 4)
    if built is not None:
        assert encoded == built


def test_encode_batch_refuses_a_section_too_long_for_int32() -> None:
    class Huge(bytes):
        def __len__(self) -> int:
            return 2**31

    with pytest.raises(ValueError, match="batch length"):
        bh.encode_batch(Huge(), base_offset=0, partition_leader_epoch=-1, attributes=0,
                        last_offset_delta=0, base_timestamp=0, max_timestamp=0, producer_id=-1,
                        producer_epoch=-1, base_sequence=-1, record_count=1)
