"""``python -m e2e.faults ...`` (see :mod:`e2e.faults.commands`)."""

from __future__ import annotations

import sys

from e2e.faults import commands

if __name__ == "__main__":
    sys.exit(commands.main())
