"""The interpreter's ICMP conntrack against the kernel's: the same frames judged by
the interpreter and by nft and iptables at their input hooks (after conntrack), in a
throw-away namespace whose conntrack table is flushed before each run."""

from __future__ import annotations

import pytest

from pfc import api, backends
from pfc.backends.iptables import run as iptrun
from pfc.backends.nft import run as nftrun
from pfc.build import build_artifact
from pfc.frontend.pipeline import compile_text
from pfc.kernel import netns
from pfc.oracle import framebuild as fb
from pfc.oracle import sequences
from pfc.oracle.pcap import write_pcap
from pfc.verifier.equiv import compare
from tests.oracle.test_conntrack_icmp import STATEFUL, echo

pytestmark = pytest.mark.kernel
TARGETS = {"nft": ("input", nftrun), "iptables": ("filter-input", iptrun)}
MAC = b"\x02\0\0\0\0\x01"


@pytest.fixture(scope="module", params=list(TARGETS))
def lab(request):
    reason = netns.missing_privileges()
    if reason:
        pytest.skip(reason)
    hook, runner = TARGETS[request.param]
    with runner.session():
        yield request.param, hook


def _judge(lab, text: str, frames: list[bytes]):
    target, hook = lab
    art, diags = build_artifact(compile_text(text, "t.pf"), target, hook=hook)
    assert art is not None, diags
    report = compare(art, backends.get(target), frames)
    assert report.seen == len(frames)
    return report


def test_the_findings_two_frame_capture(lab, tmp_path) -> None:
    """M4's pcap: an echo request 8.8.4.4 → 10.99.0.1 id 7, then an echo reply the
    same way. `pfc run` and the kernel both pass the request and drop the reply."""
    pcap = tmp_path / "echo.pcap"
    write_pcap(pcap, [echo(8), echo(0)])
    outcomes, _ = api.run(STATEFUL, pcap)
    assert [o.verdict.value for o in outcomes] == ["pass", "drop"]
    report = _judge(lab, STATEFUL, [echo(8), echo(0)])
    assert report.ok, report.summary()


@pytest.mark.parametrize("state", ["new", "established", "related", "invalid"])
def test_every_icmp_direction_has_the_kernels_state(lab, state: str) -> None:
    """One policy per state: each frame's verdict says whether the kernel put it in
    that state; the interpreter must say the same of every frame."""
    c, s = sequences.HOSTS[6]
    request = fb.ethernet(MAC, MAC, 0x86DD, fb.ipv6(c, s, 58, fb.icmp6(
        c, s, 128, 0, b"\x01\x2c\0\x01", b"p")))
    unassigned = fb.ethernet(MAC, MAC, 0x86DD, fb.ipv6(s, c, 58, fb.icmp6(
        s, c, 100, 0, bytes(4), request[14:14 + 48])))  # type 100 < 128: an error
    frames = sequences.icmp_mixes(4, 100) + sequences.icmp_mixes(6, 200) + [
        request, unassigned]
    report = _judge(lab, f"drop ct state {state}\n", frames)
    assert report.ok, report.summary()
    outcomes, _ = api.run(f"drop ct state {state}\n", frames)
    assert (outcomes[-1].verdict.value == "drop") == (state == "related")
