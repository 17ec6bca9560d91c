"""The clean-shutdown marker (``.kafka_cleanshutdown``) that carries the broker epoch."""

from __future__ import annotations

import pathlib

from kraftlog.broker import clean_shutdown


def dirs(tmp_path: pathlib.Path, count: int) -> list[pathlib.Path]:
    result = [tmp_path / f"d{i}" for i in range(count)]
    for d in result:
        d.mkdir()
    return result


def test_written_epoch_is_taken_once(tmp_path: pathlib.Path) -> None:
    log_dirs = dirs(tmp_path, 2)
    clean_shutdown.write(log_dirs, 42)
    assert (log_dirs[0] / ".kafka_cleanshutdown").read_text() == '{"version": 0, "brokerEpoch": 42}'
    assert clean_shutdown.take(log_dirs) == 42
    assert not any((d / ".kafka_cleanshutdown").exists() for d in log_dirs)
    assert clean_shutdown.take(log_dirs) == -1  # a crash after this start is unclean


def test_missing_disagreeing_or_corrupt_markers_mean_unclean(tmp_path: pathlib.Path) -> None:
    log_dirs = dirs(tmp_path, 2)
    clean_shutdown.write(log_dirs[:1], 7)
    assert clean_shutdown.take(log_dirs) == -1
    clean_shutdown.write(log_dirs[:1], 7)
    clean_shutdown.write(log_dirs[1:], 8)
    assert clean_shutdown.take(log_dirs) == -1
    for content in ("{", "[]", '{"version": 0, "brokerEpoch": -5}',
                    '{"version": 3, "brokerEpoch": 5}', '{"version": 0, "brokerEpoch": true}'):
        (log_dirs[0] / ".kafka_cleanshutdown").write_text(content)
        assert clean_shutdown.take(log_dirs[:1]) == -1
        assert not (log_dirs[0] / ".kafka_cleanshutdown").exists()
