"""Make the shared harness importable as ``controller_harness`` (pytest runs with
``--import-mode=importlib``, so sibling modules are not on sys.path)."""

from __future__ import annotations

import importlib.util
import pathlib
import sys

if "controller_harness" not in sys.modules:
    _spec = importlib.util.spec_from_file_location(
        "controller_harness", pathlib.Path(__file__).with_name("harness.py")
    )
    assert _spec is not None and _spec.loader is not None
    _module = importlib.util.module_from_spec(_spec)
    sys.modules["controller_harness"] = _module
    _spec.loader.exec_module(_module)

# The controller simulator builds on the raft simulator (tests/raft/sim.py).
for _name, _file in (("raft_sim", "../raft/sim.py"), ("ctl_sim", "ctl_sim.py")):
    if _name not in sys.modules:
        _spec = importlib.util.spec_from_file_location(
            _name, (pathlib.Path(__file__).parent / _file).resolve()
        )
        assert _spec is not None and _spec.loader is not None
        _module = importlib.util.module_from_spec(_spec)
        sys.modules[_name] = _module
        _spec.loader.exec_module(_module)
