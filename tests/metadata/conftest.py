"""Make the shared record strategies and the reference model importable as ``metadata_model``
(pytest runs with ``--import-mode=importlib``, so siblings are not on sys.path)."""

from __future__ import annotations

import importlib.util
import pathlib
import sys

if "metadata_model" not in sys.modules:
    _spec = importlib.util.spec_from_file_location(
        "metadata_model", pathlib.Path(__file__).with_name("model.py"))
    assert _spec is not None and _spec.loader is not None
    _module = importlib.util.module_from_spec(_spec)
    sys.modules["metadata_model"] = _module
    _spec.loader.exec_module(_module)
