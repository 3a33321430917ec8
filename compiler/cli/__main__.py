"""``python -m pfc.cli``: the command line."""

import sys

from pfc.cli.main import main

sys.exit(main())
