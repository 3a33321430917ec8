"""Where the tests find the repository's files, from any test folder."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
GOLDEN = TESTS / "golden"
BAD = TESTS / "bad"
EXAMPLES = sorted((ROOT / "examples").glob("*.pf"))
EDITORS = ROOT / "editors"
