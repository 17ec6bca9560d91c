"""Make the shared helpers importable as ``quorum_cluster``, ``dev_cluster`` (multi-process)
and ``proto_fuzz`` (hostile requests); pytest runs with ``--import-mode=importlib``, so
sibling modules are not on sys.path."""

from __future__ import annotations

import importlib.util
import pathlib
import sys

for _name in ("quorum_cluster", "dev_cluster", "proto_fuzz"):
    if _name not in sys.modules:
        _spec = importlib.util.spec_from_file_location(
            _name, pathlib.Path(__file__).with_name(f"{_name}.py"))
        assert _spec is not None and _spec.loader is not None
        _module = importlib.util.module_from_spec(_spec)
        sys.modules[_name] = _module
        _spec.loader.exec_module(_module)
