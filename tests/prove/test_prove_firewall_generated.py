"""``pfc prove`` of generated whole firewalls on nft and iptables (side lane: ~1.5 s a
firewall). Random rules over every v2 match and action, three hooks and a chain each:
every hook proved or, for a rule a target cannot express, said so. This check found
three lowering bugs (a limited rule without a protocol lost its other matches on nft;
two v2 matches of one field joined into a `frag` match; `meta mark { }`)."""

from __future__ import annotations

import random

import pytest

from pfc.frontend.pipeline import compile_text
from pfc.prove.firewall.proof import prove_firewall
from tests.prove.firewall.gen import random_firewall


@pytest.mark.parametrize("seed", range(0, 40, 4))
def test_generated_firewalls_are_proved_on_nft_and_iptables(seed) -> None:
    for n in range(seed, seed + 4):
        text = random_firewall(random.Random(n))
        compiled = compile_text(text, f"gen{n}.pf")
        assert compiled.ok, text
        found = list(prove_firewall(compiled.ruleset, ["nft", "iptables"], explicit=False))
        assert {r.status for r in found} == {"proved"}, (text, [r.line() for r in found
                                                                 if r.status != "proved"])
