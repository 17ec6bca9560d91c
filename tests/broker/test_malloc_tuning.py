"""Brokers and busy clients keep record-sized buffers on the heap (glibc mallopt), unless told not to."""

from __future__ import annotations

import os
import platform

import pytest

from kraftlog import malloc_tuning
from kraftlog.server import broker_server as process


def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name == "GLIBC_TUNABLES" or (name.startswith("MALLOC_") and name.endswith("_")):
            monkeypatch.delenv(name)


def test_the_default_threshold_is_glibcs_largest_mmap_threshold() -> None:
    key = process.BROKER_CONFIG.keys()["kraftlog.malloc.mmap.threshold.bytes"]
    assert key.default == process.DEFAULT_MALLOC_MMAP_THRESHOLD_BYTES == 32 * 1024 * 1024


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_glibc_takes_the_thresholds(monkeypatch: pytest.MonkeyPatch) -> None:
    _clean_env(monkeypatch)
    assert malloc_tuning.tune()


@pytest.mark.parametrize("variable", ["MALLOC_ARENA_MAX_", "MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES"])
def test_an_operators_malloc_settings_are_left_alone(monkeypatch: pytest.MonkeyPatch, variable: str) -> None:
    _clean_env(monkeypatch)
    monkeypatch.setenv(variable, "2")
    assert not malloc_tuning.tune()


def test_zero_keeps_glibcs_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    _clean_env(monkeypatch)
    assert not malloc_tuning.tune(0)
