"""``python -m pfc.lsp``: the language server on stdin/stdout."""

import sys

from pfc.lsp.server import main

sys.exit(main())
