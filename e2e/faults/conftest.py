"""The suite's tests import it as ``e2e.faults`` (the repository root on ``sys.path``, as
``python -m pytest`` from the root has it; added here for a bare ``pytest`` too)."""

from __future__ import annotations

import pathlib
import sys

_ROOT = str(pathlib.Path(__file__).resolve().parent.parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)
