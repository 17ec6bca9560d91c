"""kraftlog delete-records: kafka-delete-records' offset JSON, Kafka's output lines, and one
clear line for a bad file (nothing sent)."""

from __future__ import annotations

import pathlib

import pytest

from kraftlog import errors
from kraftlog.error_codes import ErrorCode
from kraftlog.tools import cli
from kraftlog.tools import delete_records_commands as drc
from kraftlog.v1 import broker_pb2, common_pb2


def test_kafkas_offset_json_is_read_in_file_order() -> None:
    text = ('{"partitions":[{"topic":"t","partition":1,"offset":10},'
            '{"topic":"u","partition":0,"offset":-1}],"version":1}')
    assert list(drc.parse_offset_json(text, "f.json").items()) == [(("t", 1), 10), (("u", 0), -1)]
    # "version" may be left out, as kafka-delete-records allows.
    assert drc.parse_offset_json('{"partitions":[{"topic":"t","partition":0,"offset":0}]}',
                                 "f.json") == {("t", 0): 0}


@pytest.mark.parametrize(("text", "message"), [
    ("{not json", "f.json: not valid JSON: Expecting property name"),
    ("[]", "expected an object"),
    ('{"partitions":[]}', "non-empty \"partitions\" list"),
    ('{"partitions":[{"topic":"t","partition":0,"offset":1}],"version":2}',
     "unsupported version 2"),
    ('{"partitions":[{"topic":"t","partition":0}]}', "partitions[0] must be"),
    ('{"partitions":[{"topic":"t","partition":0,"offset":-2}]}', "\"offset\": N >= -1"),
    ('{"partitions":[{"topic":"t","partition":"0","offset":1}]}', "partitions[0] must be"),
    ('{"partitions":[{"topic":"t","partition":0,"offset":true}]}', "partitions[0] must be"),
    ('{"partitions":[{"topic":"a b","partition":0,"offset":1}]}', "partitions[0]:"),
    ('{"partitions":[{"topic":"t","partition":0,"offset":1},'
     '{"topic":"t","partition":0,"offset":2}]}', "t-0 more than once"),
])
def test_a_bad_offset_file_is_one_clear_error(text: str, message: str) -> None:
    with pytest.raises(errors.ConfigError, match=r"^f\.json: ") as caught:
        drc.parse_offset_json(text, "f.json")
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_the_command_prints_one_line_for_a_bad_file_and_sends_nothing(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "offsets.json"
    bad.write_text('{"partitions": [{"topic": "t", "partition": 0}]}')
    # Port 1: nothing listens there; the file is refused before any call is made.
    code = cli.main(["delete-records", "--offset-json-file", str(bad),
                     "--bootstrap-server", "127.0.0.1:1"])
    captured = capsys.readouterr()
    assert code == 1 and captured.out == ""
    [line] = captured.err.splitlines()
    assert line.startswith(f"kraftlog: error: {bad}: partitions[0] must be")
    code = cli.main(["delete-records", "--offset-json-file", str(tmp_path / "missing.json"),
                     "--bootstrap-server", "127.0.0.1:1"])
    [line] = capsys.readouterr().err.splitlines()
    assert code == 1 and "cannot read offset json file" in line


def test_result_lines_are_kafkas() -> None:
    Result = broker_pb2.DeleteRecordsResponse.DeleteRecordsPartitionResult
    answer = broker_pb2.DeleteRecordsResponse(topics=[
        broker_pb2.DeleteRecordsResponse.DeleteRecordsTopicResult(name="t", partitions=[
            Result(partition_index=0, low_watermark=10,
                   error=common_pb2.Error(code=common_pb2.NONE)),
            Result(partition_index=1, low_watermark=-1, error=common_pb2.Error(
                code=int(ErrorCode.OFFSET_OUT_OF_RANGE),  # type: ignore[arg-type]
                message="past the high watermark 4"))])])
    lines, failed = drc.result_lines(answer)
    assert lines == ["partition: t-0\tlow_watermark: 10",
                     "partition: t-1\terror: OFFSET_OUT_OF_RANGE: past the high watermark 4"]
    assert failed
