"""Make the OTLP test receiver importable as ``otlp_receiver`` (pytest runs with
``--import-mode=importlib``, so siblings are not on sys.path). Other rooms can load
``tests/telemetry/otlp_receiver.py`` the same way."""

from __future__ import annotations

import importlib.util
import pathlib
import sys

if "otlp_receiver" not in sys.modules:
    _spec = importlib.util.spec_from_file_location(
        "otlp_receiver", pathlib.Path(__file__).with_name("otlp_receiver.py"))
    assert _spec is not None and _spec.loader is not None
    _module = importlib.util.module_from_spec(_spec)
    sys.modules["otlp_receiver"] = _module
    _spec.loader.exec_module(_module)
