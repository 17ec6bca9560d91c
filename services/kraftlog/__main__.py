"""``python -m kraftlog`` runs the CLI."""

import sys

from kraftlog.tools.cli import main

sys.exit(main())
