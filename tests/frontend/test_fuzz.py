"""Fuzzing the front end (issue 17): 10,000 generated inputs, none may make
``compile_source`` or ``format_source`` raise; fmt is idempotent and keeps the meaning;
every clean policy builds (or is refused with diagnostics) for every target; a sample
is accepted by the kernel's own checkers. The harness is ``tests/frontend/fuzzing.py``;
``benchmarks/fuzz.py`` runs the same at scale.

Inputs are kept small (at most 16 kB), so a quadratic path shows as this test's
timeout, not as a timing assertion. Measured on the 2-core VM alone: about 60 s for the
10,000 front-end inputs, the build sample and the kernel sample together.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from pfc.frontend.parse import _parser
from pfc.frontend.pipeline import compile_text
from pfc.kernel import netns
from tests.frontend import fuzzing

FUZZ = settings(deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.filter_too_much])


def test_every_terminal_of_the_grammar_has_samples() -> None:
    assert set(fuzzing.SAMPLES) == {t.name for t in _parser().terminals}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind,batch", [("tokens", 3), ("mutations", 5)])
@settings(FUZZ, max_examples=1000)
@given(data=st.data())
def test_generated_inputs_never_raise(kind: str, batch: int, data: st.DataObject) -> None:
    """3,000 grammar token streams and 5,000 mutated policies (several inputs per
    example: generating one costs more than checking it)."""
    strategy = fuzzing.token_inputs() if kind == "tokens" else fuzzing.mutated_inputs()
    for inp in data.draw(st.lists(strategy, min_size=batch, max_size=batch)):
        fuzzing.front_end(inp)


@pytest.mark.timeout(300)
@settings(FUZZ, max_examples=1710 // 3 // 2)
@given(st.lists(fuzzing.valid_files(), min_size=2, max_size=2))
def test_valid_policies_check_clean_and_format_stably(texts: list[str]) -> None:
    """Each valid policy as written, with CRLF line ends, and with a byte-order mark,
    tabs and comments (generating a policy costs more than three checks of it)."""
    for text in texts:
        messy = "\ufeff" + "".join(line.replace(" ", " \t") + "  # c\n"
                                   for line in text.splitlines())
        for variant in (text, text.replace("\n", "\r\n"), messy):
            compiled = fuzzing.front_end(fuzzing.Input("v.pf", variant.encode()))
            assert compiled.ok, compiled.diagnostics


@pytest.mark.timeout(300)
@settings(FUZZ, max_examples=300)
@given(st.one_of(fuzzing.valid_files(), fuzzing.mutated_inputs()))
def test_clean_policies_build_or_are_refused_for_every_target(item) -> None:
    inp = item if isinstance(item, fuzzing.Input) else fuzzing.Input("b.pf", item.encode())
    compiled = fuzzing.front_end(inp)
    if compiled.ok:
        fuzzing.build_all(compiled)


@pytest.mark.kernel
@pytest.mark.timeout(600)
@settings(FUZZ, max_examples=1, phases=[Phase.generate])
@given(st.lists(fuzzing.valid_policies(), min_size=30, max_size=30))
def test_the_kernels_checkers_accept_clean_policies(texts: list[str]) -> None:
    """30 policies: clang + verifier (xdp), nft -c (text and JSON), ipset restore +
    iptables-restore --test per family, SO_ATTACH_FILTER (cbpf)."""
    with netns.lab() as lab:
        rejected = {}
        for i, text in enumerate(texts):
            compiled = compile_text(text, f"k{i}.pf")
            assert compiled.ok, compiled.diagnostics
            out = fuzzing.kernel_rejections(compiled, lab.dut)
            if out:
                rejected[text] = out
    assert rejected == {}
