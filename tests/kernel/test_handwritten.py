"""Tried as a new user would: a router's and a host's firewall written in pfc behave,
in namespaces, like the same rules written by hand for nft (tests/corpus/handwritten,
the shape of the nftables wiki's examples): the same traffic through both, what
arrives compared packet by packet (issue 25)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pfc.kernel.netns import missing_privileges
from pfc.verifier import firewall as fwv
from tests.kernel.test_verify_firewall import host_firewall
from tests.oracle.test_path import router

pytestmark = [pytest.mark.kernel,
              pytest.mark.skipif(missing_privileges() is not None,
                                 reason=missing_privileges() or "")]
HAND = Path(__file__).parent.parent / "corpus" / "handwritten"


@pytest.mark.parametrize("target", ["nft", "iptables"])
@pytest.mark.parametrize("name, build", [("home-router", router),
                                         ("host-firewall", host_firewall)])
def test_pfc_behaves_like_the_same_rules_written_by_hand(name, build, target):
    # rates at 1/minute on both sides, as verify runs pfc's (a run takes seconds)
    text = (HAND / f"{name}.nft").read_text().replace("10/second", "1/minute")
    report = fwv.against(build(), target, lambda: fwv._nft(text), n=300, seed=2)
    assert report.items > 250
    assert report.ok, "\n".join(d.describe() for d in report.differences[:5])


def test_a_different_hand_written_ruleset_is_told_apart():
    text = (HAND / "home-router.nft").read_text().replace("dnat to 10.0.0.2:80",
                                                           "dnat to 10.0.0.2:81")
    report = fwv.against(router(), "nft", lambda: fwv._nft(text), n=40, seed=2)
    assert not report.ok
