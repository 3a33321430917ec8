"""A short campaign of tests/importers/fuzzing.py in the main lane: no mutated ruleset
makes ``pfc import`` fail (the long one, 10,000 inputs: benchmarks/import_fuzz.py;
docs/import.md "Corpus" cites it)."""

from __future__ import annotations

from tests.importers.corpus import CORPUS, needs_corpus
from tests.importers.fuzzing import run


@needs_corpus
def test_mutated_rulesets_never_make_import_fail():
    seen = run(CORPUS, 1000, seed=11)
    crashes = {k: v for k, v in seen.items() if k.startswith("crash")}
    assert crashes == {}
    assert seen["refused"] > 200 and seen["complete"] > 20
