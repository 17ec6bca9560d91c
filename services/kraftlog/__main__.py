"""``python -m kraftlog`` runs the CLI."""

import sys

from kraftlog.cli import main

sys.exit(main())
