"""The data source's pure parts: option parsing, offset ranges, rate limits, Arrow columns.

No cluster and no Spark: every bad option must fail with a message that starts
with the option's name; ranges split and limit the way Spark's Kafka source does.
"""

from __future__ import annotations

import pytest

from kraftlog import client
from kraftlog.ids import TopicPartition
from kraftlog.pipeline import planning
from kraftlog.pipeline.options import (
    DataLossError,
    OffsetKind,
    OptionError,
    SubscriptionKind,
    parse_read_options,
    parse_write_options,
)

B = {"bootstrap": "127.0.0.1:19101,127.0.0.1:19102"}


def tp(topic: str, partition: int) -> TopicPartition:
    return TopicPartition(topic=topic, partition=partition)


def test_defaults_follow_sparks_kafka_source() -> None:
    batch = parse_read_options({**B, "topic": "t"}, streaming=False)
    assert batch.bootstrap_servers == ("127.0.0.1:19101", "127.0.0.1:19102")
    assert batch.subscription.kind is SubscriptionKind.TOPIC
    assert batch.starting.kind is OffsetKind.EARLIEST and batch.ending.kind is OffsetKind.LATEST
    assert batch.fail_on_data_loss and batch.max_records_per_partition is None
    stream = parse_read_options({**B, "TOPICS": "a, b,a", "MaxOffsetsPerTrigger": "7"},
                                streaming=True)
    assert stream.subscription.topics == ("a", "b")
    assert stream.starting.kind is OffsetKind.LATEST and stream.max_offsets_per_trigger == 7


def test_offsets_json_and_timestamps() -> None:
    opts = parse_read_options({**B, "topic": "t", "startingOffsets": '{"t":{"0":23,"1":-2}}',
                               "endingOffsets": '{"t":{"0":50,"1":-1}}'}, streaming=False)
    assert opts.starting.offsets == {tp("t", 0): 23, tp("t", 1): -2}
    assert opts.ending.offsets == {tp("t", 0): 50, tp("t", 1): -1}
    timed = parse_read_options({**B, "topicPattern": "ev.*", "startingTimestamp": "1000",
                                "endingOffsetsByTimestamp": '{"t":{"0":2000}}'},
                               streaming=False)
    assert timed.starting.kind is OffsetKind.TIMESTAMP and timed.starting.timestamp_ms == 1000
    assert timed.ending.kind is OffsetKind.TIMESTAMPS
    assert timed.subscription.matches("events") and not timed.subscription.matches("xevents")


@pytest.mark.parametrize(("options", "message"), [
    ({"topic": "t", "topics": "u"}, "topic/topics/topicPattern: give exactly one"),
    ({}, "topic/topics/topicPattern: give exactly one of them (given: none)"),
    ({"topicPattern": "("}, "topicPattern: '(' is not a valid regex"),
    ({"topic": "bad name"}, "topic: topic name 'bad name' is illegal"),
    ({"topic": "t", "startingOffsets": "{"}, "startingOffsets: malformed JSON"),
    ({"topic": "t", "startingOffsets": "first"}, "startingOffsets: 'first' is not earliest"),
    ({"topic": "t", "startingOffsets": '{"t":{"x":1}}'}, "startingOffsets: partition 'x'"),
    ({"topic": "t", "startingOffsets": '{"t":{"0":-3}}'}, "startingOffsets: value -3"),
    ({"topic": "t", "endingOffsets": '{"t":{"0":-2}}'}, "endingOffsets: value -2"),
    ({"topic": "t", "endingOffsets": "earliest"}, "endingOffsets: 'earliest' is not allowed"),
    ({"topic": "t", "startingTimestamp": "soon"}, "startingTimestamp: 'soon' is not"),
    ({"topic": "t", "maxRecordsPerPartition": "-1"}, "maxRecordsPerPartition: must be"),
    ({"topic": "t", "failOnDataLoss": "maybe"}, "failOnDataLoss: 'maybe' is not true"),
    ({"topic": "t", "maxOffsetsPerTrigger": "5"}, "maxOffsetsPerTrigger: only for streaming"),
    ({"topic": "t", "colour": "red"}, "colour: unknown option"),
])
def test_bad_batch_options_name_the_option(options: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError) as failure:
        parse_read_options({**B, **options}, streaming=False)
    assert str(failure.value).startswith(message.split(":")[0]), str(failure.value)
    assert message in str(failure.value)


def test_bad_bootstrap_and_streaming_only_rules() -> None:
    with pytest.raises(OptionError, match=r"^bootstrap: option is required"):
        parse_read_options({"topic": "t"}, streaming=False)
    with pytest.raises(OptionError, match=r"^bootstrap entry 'nope' is not HOST:PORT"):
        parse_read_options({"bootstrap": "nope", "topic": "t"}, streaming=False)
    with pytest.raises(OptionError, match=r"^endingOffsets: not allowed in a streaming read"):
        parse_read_options({**B, "topic": "t", "endingOffsets": "latest"}, streaming=True)


def test_write_options() -> None:
    opts = parse_write_options({**B, "topic": "t", "kafka.linger.ms": "20"})
    assert opts.topic == "t" and opts.producer_properties == {"linger.ms": "20"}
    with pytest.raises(OptionError, match=r"^kafka.acks: the kraftlog sink always produces"):
        parse_write_options({**B, "kafka.acks": "1"})
    with pytest.raises(OptionError, match=r"^kafka.foo: unknown option"):
        parse_write_options({**B, "kafka.foo": "1"})
    # A streaming write also gets Spark's checkpointLocation; a batch write may not.
    streaming = parse_write_options({**B, "topic": "t", "checkpointLocation": "/tmp/cp"},
                                    streaming=True)
    assert streaming.topic == "t" and streaming.producer_properties == {}
    with pytest.raises(OptionError, match=r"^checkpointlocation: unknown option"):
        parse_write_options({**B, "checkpointLocation": "/tmp/cp"})


def test_security_options_reach_the_clients_and_are_checked_first() -> None:
    ssl = {"kafka.security.protocol": "SSL", "kafka.ssl.truststore.location": "/ca.pem",
           "kafka.ssl.keystore.location": "/me.pem"}
    read = parse_read_options({**B, "topic": "t", **ssl}, streaming=False)
    assert dict(read.security) == {"security.protocol": "SSL",
                                   "ssl.truststore.location": "/ca.pem",
                                   "ssl.keystore.location": "/me.pem"}
    write = parse_write_options({**B, "topic": "t", **ssl})
    assert write.producer_properties["security.protocol"] == "SSL"
    for parse in (lambda o: parse_read_options(o, streaming=False), parse_write_options):
        with pytest.raises(OptionError, match=r"^kafka\.security\.protocol is SSL but no "
                                              r"truststore"):
            parse({**B, "topic": "t", "kafka.security.protocol": "SSL"})
        with pytest.raises(OptionError, match=r"^kafka\.security\.protocol=SASL_SSL"):
            parse({**B, "topic": "t", "kafka.security.protocol": "SASL_SSL"})


def test_plan_ranges_splits_by_max_records() -> None:
    start = {tp("t", 0): 0, tp("t", 1): 5, tp("t", 2): 9}
    end = {tp("t", 0): 25, tp("t", 1): 5, tp("t", 2): 10}
    ranges = planning.plan_ranges(start, end, 10)
    assert [(r.partition, r.from_offset, r.until_offset) for r in ranges] == [
        (0, 0, 10), (0, 10, 20), (0, 20, 25), (2, 9, 10)]
    assert [r.size for r in planning.plan_ranges(start, end)] == [25, 1]


def test_rate_limit_shares_in_proportion_and_always_progresses() -> None:
    start = {tp("t", 0): 0, tp("t", 1): 100, tp("t", 2): 7}
    latest = {tp("t", 0): 300, tp("t", 1): 200, tp("t", 2): 8}
    limited = planning.rate_limit(start, latest, 100)
    # 300, 100 and 1 waiting of 401: 74, 24 and (ceil of 0.25) 1.
    assert limited == {tp("t", 0): 74, tp("t", 1): 124, tp("t", 2): 8}
    assert planning.rate_limit(start, latest, 1000) == latest


def test_offsets_json_round_trip() -> None:
    offsets = {tp("b", 1): 3, tp("a", 0): 7, tp("b", 0): 0}
    document = planning.offsets_to_json(offsets)
    assert document == {"a": {"0": 7}, "b": {"0": 0, "1": 3}}
    assert planning.offsets_from_json(document) == offsets


def test_batch_offsets_checks_and_data_loss() -> None:
    from kraftlog.pipeline import client_io

    opts = parse_read_options({**B, "topic": "t"}, streaming=False)
    known = client_io.PartitionOffsets(log_start={tp("t", 0): 10},
                                       high_watermark={tp("t", 0): 50})
    check = client_io.check_batch_offsets
    kwargs = {"starting": opts.starting, "ending": opts.ending}
    assert check({tp("t", 0): 12}, {tp("t", 0): 50}, known, fail_on_data_loss=True,
                 **kwargs) == {tp("t", 0): 12}
    with pytest.raises(DataLossError, match=r"^failOnDataLoss: offsets 3..9 of t-0 were deleted"):
        check({tp("t", 0): 3}, {tp("t", 0): 50}, known, fail_on_data_loss=True, **kwargs)
    assert check({tp("t", 0): 3}, {tp("t", 0): 50}, known, fail_on_data_loss=False,
                 **kwargs) == {tp("t", 0): 10}
    with pytest.raises(OptionError, match=r"^endingOffsets: offset 51 of t-0 is past"):
        check({tp("t", 0): 12}, {tp("t", 0): 51}, known, fail_on_data_loss=True, **kwargs)
    with pytest.raises(OptionError, match=r"^endingOffsets: offset 11 of t-0 is before"):
        check({tp("t", 0): 12}, {tp("t", 0): 11}, known, fail_on_data_loss=True, **kwargs)


def _spark_extra() -> None:
    """Skip only without pyspark; with it, a missing pyarrow fails (tests/pipeline/conftest.py)."""
    pytest.importorskip("pyspark", reason="pyspark is not installed (pip install '.[spark]')")


def test_records_to_arrow_batch_has_sparks_kafka_columns() -> None:
    _spark_extra()
    import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]

    from kraftlog.pipeline import arrow_convert

    records = [client.ConsumerRecord(
        topic="t", partition=3, offset=o, timestamp_ms=1_700_000_000_000 + o,
        timestamp_type=client.TimestampType.CREATE_TIME, key=None if o else b"k",
        value=b"v%d" % o, headers=(client.Header(key="h", value=None),) if o == 1 else (),
        leader_epoch=0) for o in range(3)]
    batch = arrow_convert.records_to_batch(records)
    assert batch.schema == arrow_convert.arrow_schema()
    assert batch.column("key").to_pylist() == [b"k", None, None]
    assert batch.column("offset").to_pylist() == [0, 1, 2]
    assert batch.column("partition").to_pylist() == [3, 3, 3]
    assert batch.column("timestamp").cast(pa.int64()).to_pylist()[1] == (
        1_700_000_000_001 * 1000)
    assert batch.column("headers").to_pylist() == [[], [{"key": "h", "value": None}], []]
    plain = arrow_convert.records_to_batch(records[:1])
    assert plain.column("headers").to_pylist() == [[]]


def test_write_schema_rules() -> None:
    _spark_extra()
    from kraftlog.pipeline import arrow_convert

    columns = arrow_convert.check_write_schema(
        [("value", "string"), ("key", "binary"), ("topic", "string")], topic_option=None)
    assert columns.has_topic and columns.has_key and not columns.has_headers
    with pytest.raises(OptionError, match=r"^value: the DataFrame needs"):
        arrow_convert.check_write_schema([("key", "binary")], topic_option="t")
    with pytest.raises(OptionError, match=r"^partition: column type bigint"):
        arrow_convert.check_write_schema([("value", "binary"), ("partition", "bigint")],
                                         topic_option="t")
    with pytest.raises(OptionError, match=r"^topic: give the 'topic' option"):
        arrow_convert.check_write_schema([("value", "binary")], topic_option=None)
