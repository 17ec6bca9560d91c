"""Make the shared multi-process helper importable as ``quorum_cluster`` (pytest runs with
``--import-mode=importlib``, so sibling modules are not on sys.path)."""

from __future__ import annotations

import importlib.util
import pathlib
import sys

if "quorum_cluster" not in sys.modules:
    _spec = importlib.util.spec_from_file_location(
        "quorum_cluster", pathlib.Path(__file__).with_name("quorum_cluster.py"))
    assert _spec is not None and _spec.loader is not None
    _module = importlib.util.module_from_spec(_spec)
    sys.modules["quorum_cluster"] = _module
    _spec.loader.exec_module(_module)
