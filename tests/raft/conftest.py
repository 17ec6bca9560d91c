"""Make the simulator and the golden-test harness importable as ``raft_sim`` and
``raft_harness`` (pytest runs with ``--import-mode=importlib``, so siblings are not on sys.path)."""

from __future__ import annotations

import importlib.util
import pathlib
import sys

for _name, _file in (("raft_sim", "sim.py"), ("raft_harness", "harness.py")):
    if _name not in sys.modules:
        _spec = importlib.util.spec_from_file_location(_name, pathlib.Path(__file__).with_name(_file))
        assert _spec is not None and _spec.loader is not None
        _module = importlib.util.module_from_spec(_spec)
        sys.modules[_name] = _module
        _spec.loader.exec_module(_module)
