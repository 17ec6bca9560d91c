"""Atomic small-file writes leave either the old or the new content."""

from __future__ import annotations

import pathlib

from kraftlog.storage import atomic_file


def test_write_atomically_replaces_content_and_leaves_no_temp(tmp_path: pathlib.Path) -> None:
    target = tmp_path / "quorum-state"
    atomic_file.write_text_atomically(target, "old")
    atomic_file.write_text_atomically(target, "new")
    assert target.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["quorum-state"]


def test_stale_temp_file_from_a_crash_does_not_affect_the_target(tmp_path: pathlib.Path) -> None:
    target = tmp_path / "meta.properties"
    atomic_file.write_text_atomically(target, "version=1\n")
    (tmp_path / ("meta.properties" + atomic_file.TMP_SUFFIX)).write_text("torn")
    assert target.read_text() == "version=1\n"
    atomic_file.write_text_atomically(target, "version=1\nnode.id=3\n")
    assert target.read_text() == "version=1\nnode.id=3\n"
