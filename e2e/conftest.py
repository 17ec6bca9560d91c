"""End-to-end tests share the ``dev_cluster`` helper of tests/ (registered here the way
tests/conftest.py does, since pytest runs with ``--import-mode=importlib``)."""

from __future__ import annotations

import importlib.util
import pathlib
import sys

if "dev_cluster" not in sys.modules:
    _spec = importlib.util.spec_from_file_location(
        "dev_cluster", pathlib.Path(__file__).parent.parent / "tests" / "dev_cluster.py")
    assert _spec is not None and _spec.loader is not None
    _module = importlib.util.module_from_spec(_spec)
    sys.modules["dev_cluster"] = _module
    _spec.loader.exec_module(_module)
