"""A short campaign of tests/importers/fuzzing.py: no mutated ruleset makes ``pfc
import`` fail (the long one, 10,000 inputs, is in docs/import.md)."""

from __future__ import annotations

from tests.importers.corpus import CORPUS, needs_corpus
from tests.importers.fuzzing import run


@needs_corpus
def test_mutated_rulesets_never_make_import_fail():
    seen = run(CORPUS, 600, seed=11)
    crashes = {k: v for k, v in seen.items() if k.startswith("crash")}
    assert crashes == {}
    assert seen["refused"] > 100 and seen["complete"] > 10
