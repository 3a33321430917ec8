"""Where the tests find the repository's files, from any test folder."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
GOLDEN = TESTS / "golden"
BAD = TESTS / "bad"
ALL_EXAMPLES = sorted((ROOT / "examples").glob("*.pf"))
# A whole firewall (v2) has a line starting with a hook block, `chain` or `interface`;
# the commands and backends that take one rule list are tested on the others.
_V2 = re.compile(r"^[ \t]*(?:ingress|egress|raw|nat|prerouting|input|forward|output"
                 r"|postrouting|chain|interface)(?![A-Za-z0-9_-])", re.M)
FIREWALLS = [p for p in ALL_EXAMPLES if _V2.search(p.read_text())]
EXAMPLES = [p for p in ALL_EXAMPLES if p not in FIREWALLS]  # one rule list each (v1)
EDITORS = ROOT / "editors"
