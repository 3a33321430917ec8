"""``python -m pfc``: the command line, as ``pfc``."""

import sys

from pfc.cli.main import main

sys.exit(main())
