"""The broker process's log directories (``LocalLogs``): recovery, checkpoints, deletion."""

from __future__ import annotations

import pathlib
from collections.abc import Callable
from typing import Any

import pytest

from kraftlog import config as kconfig
from kraftlog import errors
from kraftlog.broker import log_manager
from kraftlog.broker import partition as partition_mod
from kraftlog.error_codes import ErrorCode
from kraftlog.ids import TopicPartition
from kraftlog.metadata import image as im
from kraftlog.metadata import records as r
from kraftlog.server import broker_server as process
from kraftlog.storage import batch_header as bh
from kraftlog.storage import record_batch as rb
from kraftlog.storage.log_config import LogConfig
from tests.broker.harness import TOPIC_ID, TP, batch

INFO = im.PartitionInfo(topic_id=TOPIC_ID, topic_name=TP.topic, partition_id=0,
                        registration=im.PartitionRegistration(replicas=(1,), isr=(1,), leader=1))


def local_logs(dirs: list[pathlib.Path],
               image: Callable[[], im.MetadataImage] = lambda: im.EMPTY) -> log_manager.LocalLogs:
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)
    return log_manager.LocalLogs(broker_id=1, log_dirs=dirs,
                                 log_config=LogConfig(segment_index_bytes=64 * 1024),
                                 partition_config=partition_mod.PartitionConfig(),
                                 image=image, now_ms=process.wall_ms)


def image_with(topic_configs: dict[str, str]) -> im.MetadataImage:
    resource = im.ConfigResource(resource_type=r.ConfigResourceType.TOPIC, resource_name=TP.topic)
    return im.MetadataImage(configs=im.ConfigsImage(resources={resource: topic_configs}))


def test_restart_recovers_the_log_and_its_checkpointed_high_watermark(
        tmp_path: pathlib.Path) -> None:
    logs = local_logs([tmp_path])
    partition = logs.open_partition(INFO)
    partition.make_leader(leader_epoch=0, partition_epoch=0, replicas=(1,), isr=(1,), now_ms=1)
    assert partition.append_records_to_leader(batch(b"a", b"b"), required_acks=1,
                                              now_ms=1).error is ErrorCode.NONE
    assert partition.high_watermark == 2
    logs.write_checkpoints({TP: partition.high_watermark})
    logs.close([partition])

    again = local_logs([tmp_path])
    again.recover_all()
    reopened = again.open_partition(INFO)
    assert (reopened.log_end_offset, reopened.high_watermark) == (2, 2)
    again.close([reopened])


def test_new_replicas_spread_over_log_dirs_and_deletion_removes_the_directory(
        tmp_path: pathlib.Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    logs = local_logs(dirs)
    first = logs.open_partition(INFO)
    second = logs.open_partition(im.PartitionInfo(
        topic_id=TOPIC_ID, topic_name=TP.topic, partition_id=1, registration=INFO.registration))
    parents = {pathlib.Path(p.log.directory).parent for p in (first, second)}
    assert parents == set(dirs)
    logs.delete_partition(first)
    assert not pathlib.Path(first.log.directory).exists()
    assert not any(p.name.endswith("-delete") for d in dirs for p in d.iterdir())
    logs.write_checkpoints({TopicPartition(topic=TP.topic, partition=1): 0})
    logs.close([second])


def test_recovery_points_and_log_start_offsets_survive_a_restart(tmp_path: pathlib.Path) -> None:
    logs = local_logs([tmp_path])
    partition = logs.open_partition(INFO)
    partition.make_leader(leader_epoch=0, partition_epoch=0, replicas=(1,), isr=(1,), now_ms=1)
    for value in (b"a", b"b", b"c"):
        assert partition.append_records_to_leader(batch(value), required_acks=1,
                                                  now_ms=1).error is ErrorCode.NONE
    # The log start moves inside the only segment (a follower following its leader's start).
    assert partition.maybe_increment_log_start_offset(1)
    logs.write_checkpoints({TP: partition.high_watermark})
    logs.close([partition])
    logs.write_log_checkpoints([partition])
    assert (tmp_path / log_manager.RECOVERY_POINT_CHECKPOINT).read_text().splitlines()[2:] == [
        f"{TP.topic} 0 3"]

    again = local_logs([tmp_path])
    again.recover_all()
    reopened = again.open_partition(INFO)
    assert reopened.log.log_start_offset == 1, "not the segment's base offset 0"
    assert reopened.log.recovery_point == 3, "everything was flushed: nothing to re-scan"
    again.close([reopened])

    # Without the files (a broker before this change) the log is recovered from scratch.
    (tmp_path / log_manager.RECOVERY_POINT_CHECKPOINT).unlink()
    (tmp_path / log_manager.LOG_START_CHECKPOINT).unlink()
    third = local_logs([tmp_path])
    third.recover_all()
    fresh = third.open_partition(INFO)
    assert (fresh.log.log_start_offset, fresh.log_end_offset) == (0, 3)
    third.close([fresh])


def test_a_topics_configs_govern_its_logs_and_changes_reach_hosted_ones(tmp_path: pathlib.Path) -> None:
    image = image_with({"segment.bytes": "1048576", "retention.ms": "60000",
                        "min.insync.replicas": "2", "max.message.bytes": "2048",
                        "cleanup.policy": "compact,delete"})
    logs = local_logs([tmp_path], image=lambda: image)
    partition = logs.open_partition(INFO)
    assert (partition.log.config.segment_bytes, partition.log.config.retention_ms) == (1048576, 60000)
    assert partition.log.config.segment_index_bytes == 64 * 1024, "the broker's value stays"
    assert (partition.config.min_insync_replicas, partition.config.max_message_bytes) == (2, 2048)
    assert partition.config.compacted, "keys required"

    image = image_with({"retention.ms": "-1"})  # an AlterConfigs removed the other overrides
    logs.apply_topic_configs([partition])
    assert partition.log.config.retention_ms == -1
    assert partition.log.config.segment_bytes == LogConfig().segment_bytes
    assert partition.config == partition_mod.PartitionConfig()
    logs.close([partition])

    # A bad value (the controller validates, but a record from an older version might not)
    # falls back to the broker's settings rather than failing the replica.
    image = image_with({"segment.bytes": "lots"})
    again = local_logs([tmp_path], image=lambda: image)
    again.recover_all()
    reopened = again.open_partition(INFO)
    assert reopened.log.config.segment_bytes == LogConfig().segment_bytes
    again.close([reopened])


def test_a_compacted_topics_active_segment_rolls_by_max_compaction_lag(
        tmp_path: pathlib.Path) -> None:
    """Kafka (KIP-354): min(segment.ms, max.compaction.lag.ms) for compacted topics, the
    topic's lag over the broker's log.cleaner.max.compaction.lag.ms; delete-only topics and
    lags longer than segment.ms leave segment.ms alone."""
    image = image_with({})
    logs = local_logs([tmp_path], image=lambda: image)
    logs.max_compaction_lag_ms = 90_000
    default_ms = LogConfig().segment_ms
    cases = [
        ({"cleanup.policy": "compact"}, 90_000),
        ({"cleanup.policy": "compact", "max.compaction.lag.ms": "5000"}, 5000),
        ({"cleanup.policy": "compact,delete", "max.compaction.lag.ms": "5000",
          "segment.ms": "3000"}, 3000),
        ({"cleanup.policy": "delete", "max.compaction.lag.ms": "5000"}, default_ms),
        ({"max.compaction.lag.ms": "5000"}, default_ms),  # the broker's default policy: delete
        ({"cleanup.policy": "compact", "max.compaction.lag.ms": "soon"}, 90_000),
    ]
    for configs, expected in cases:
        image = image_with(configs)
        assert logs.log_config_for(TP.topic).segment_ms == expected, configs
    # The roll itself: an append past the lag starts a new segment.
    image = image_with({"cleanup.policy": "compact", "max.compaction.lag.ms": "1000"})
    partition = logs.open_partition(INFO)
    now = 1_000_000

    def keyed(value: bytes, at_ms: int) -> bytes:
        return rb.build_batch([rb.RecordInput(key=b"k", value=value, timestamp_ms=at_ms)])

    partition.log.append_as_leader(keyed(b"a", now), leader_epoch=0, now_ms=now)
    partition.log.append_as_leader(keyed(b"b", now + 500), leader_epoch=0, now_ms=now + 500)
    assert len(partition.log.segments) == 1
    partition.log.append_as_leader(keyed(b"c", now + 1500), leader_epoch=0, now_ms=now + 1500)
    assert len(partition.log.segments) == 2
    logs.close([partition])


def test_checkpoints_are_read_when_planned_and_a_failing_dir_is_reported_once(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The periodic checkpoint reads its contents on the event loop and writes (fsyncs) them in
    # a worker thread: what it writes is what was planned, whatever the logs do meanwhile.
    dirs = [tmp_path / "a", tmp_path / "b"]
    logs = local_logs(dirs)
    first = logs.open_partition(INFO)
    other = TopicPartition(topic=TP.topic, partition=1)
    second = logs.open_partition(im.PartitionInfo(
        topic_id=TOPIC_ID, topic_name=TP.topic, partition_id=1, registration=INFO.registration))
    good, bad = (pathlib.Path(p.log.directory).parent for p in (first, second))
    first.make_leader(leader_epoch=0, partition_epoch=0, replicas=(1,), isr=(1,), now_ms=1)
    first.append_records_to_leader(batch(b"a", b"b"), required_acks=1, now_ms=1)
    first.log.flush()
    plan = logs.plan_checkpoints({TP: 2, other: 0}, [first, second])
    first.append_records_to_leader(batch(b"c"), required_acks=1, now_ms=1)
    first.log.flush()

    real_write = log_manager.checkpoint.OffsetCheckpointFile.write

    def failing_write(self: Any, offsets: Any) -> None:
        if self.path.parent == bad:
            raise OSError(5, "Input/output error")
        real_write(self, offsets)

    monkeypatch.setattr(log_manager.checkpoint.OffsetCheckpointFile, "write", failing_write)
    failures = log_manager.write_checkpoint_plan(plan)
    assert failures == [(log_manager.dir_key(bad),
                         "writing replication-offset-checkpoint: [Errno 5] Input/output error")]
    assert (good / log_manager.REPLICATION_CHECKPOINT).read_text().splitlines()[2:] == [f"{TP.topic} 0 2"]
    assert (good / log_manager.RECOVERY_POINT_CHECKPOINT).read_text().splitlines()[2:] == [f"{TP.topic} 0 2"]
    assert not (bad / log_manager.REPLICATION_CHECKPOINT).exists()
    logs.report_checkpoint_failures(failures)
    assert log_manager.dir_key(bad) in logs.offline()
    assert [d for d, *_ in logs.plan_checkpoints({TP: 3}, [first])] == [good, good, good]
    monkeypatch.undo()
    logs.close([first, second])


def test_the_broker_file_sets_every_logs_defaults_including_log_roll_ms() -> None:
    def parsed(props: dict[str, str]) -> LogConfig:
        raw, sources = kconfig.parse_properties("".join(f"{k}={v}\n" for k, v in props.items()))
        return process.broker_log_config(process.BROKER_CONFIG.parse(raw, sources=sources))

    base = {"node.id": "1", "process.roles": "broker", "log.dirs": "/tmp/x",
            "controller.quorum.voters": "1@127.0.0.1:9093",
            "listeners": "PLAINTEXT://127.0.0.1:9092"}
    assert parsed(base).segment_ms == LogConfig().segment_ms
    custom = parsed({**base, "log.roll.ms": "60000", "log.segment.bytes": "1048576",
                     "log.retention.ms": "-1", "log.retention.bytes": "4096"})
    assert (custom.segment_ms, custom.segment_bytes, custom.retention_ms,
            custom.retention_bytes) == (60000, 1048576, -1, 4096)
    with pytest.raises(errors.ConfigError, match=r"log\.roll\.ms"):
        parsed({**base, "log.roll.ms": "0"})


def test_timestamp_settings_reach_each_log_from_the_broker_file_and_the_topic() -> None:
    def parsed(props: dict[str, str]) -> LogConfig:
        raw, sources = kconfig.parse_properties("".join(f"{k}={v}\n" for k, v in props.items()))
        return process.broker_log_config(process.BROKER_CONFIG.parse(raw, sources=sources))

    base = {"node.id": "1", "process.roles": "broker", "log.dirs": "/tmp/x",
            "controller.quorum.voters": "1@127.0.0.1:9093",
            "listeners": "PLAINTEXT://127.0.0.1:9092"}
    defaults = parsed(base)
    assert defaults.message_timestamp_type is bh.TimestampType.CREATE_TIME
    assert defaults.message_timestamp_before_max_ms == defaults.message_timestamp_after_max_ms == 2**63 - 1
    broker = parsed({**base, "log.message.timestamp.type": "LogAppendTime",
                     "log.message.timestamp.before.max.ms": "5000",
                     "log.message.timestamp.after.max.ms": "100"})
    assert (broker.message_timestamp_type, broker.message_timestamp_before_max_ms,
            broker.message_timestamp_after_max_ms) == (bh.TimestampType.LOG_APPEND_TIME, 5000, 100)
    with pytest.raises(errors.ConfigError, match=r"log\.message\.timestamp\.type"):
        parsed({**base, "log.message.timestamp.type": "Now"})
    topic = broker.with_overrides({"message.timestamp.type": "CreateTime",
                                   "message.timestamp.after.max.ms": "7"})
    assert (topic.message_timestamp_type, topic.message_timestamp_before_max_ms,
            topic.message_timestamp_after_max_ms) == (bh.TimestampType.CREATE_TIME, 5000, 7)
