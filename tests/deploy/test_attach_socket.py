"""``pfc.deploy.socket.attach_socket``: a compiled ``socket``/``cbpf`` policy on the
application's own packet socket, judged against the interpreter in the kernel, and
``examples/attach_socket.py`` run as a user would."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from pfc.build import build_artifact
from pfc.deploy.socket import attach_socket
from pfc.frontend.pipeline import compile_path, compile_text
from pfc.kernel import netns
from pfc.oracle import framebuild as fb
from pfc.oracle.gen import sample
from pfc.oracle.interp import evaluate
from pfc.oracle.packets import l2_input_view
from pfc.verifier.equiv import expected_counters
from tests.paths import ROOT  # noqa: E402

ROOT_REASON = netns.missing_privileges()


def kernel(fn):
    """A kernel test: marked, and skipped (with the reason) only without root."""
    fn = pytest.mark.kernel(fn)
    return pytest.mark.skipif(ROOT_REASON is not None, reason=ROOT_REASON or "")(fn)


POLICY = """\
define nets = { 10.0.0.0/8, 2001:db8::/32 }
default pass
count udp dport 53
drop udp dst $nets dport 53
drop tcp flags syn,fin
count tcp
drop icmp icmp-type echo-request
"""
NO_COUNT = "\n".join(ln for ln in POLICY.splitlines() if not ln.startswith("count")) + "\n"


def artifact(text: str, target: str):
    art, diags = build_artifact(compile_text(text, "t.pf"), target)
    assert art is not None, diags
    return art


def received(lab, sock, frames: list[bytes], seq: int) -> list[bytes]:
    """Inject frames and a marker; what the socket got before the marker."""
    netns.drain(sock)
    inj = netns.Injector(lab.inj)
    try:
        for frame in frames:
            inj.send(frame)
        inj.send(netns.marker_frame(lab.dut_mac, lab.inj_mac, seq))
    finally:
        inj.close()
    return netns.recv_until_marker(sock, seq, timeout=5.0)


@kernel
@pytest.mark.parametrize("target", ["socket", "cbpf"])
def test_attached_filter_agrees_with_the_interpreter(target):
    art = artifact(POLICY if target == "socket" else NO_COUNT, target)
    policy = art.policy
    with netns.lab() as lab, socket.socket(socket.AF_PACKET, socket.SOCK_RAW,
                                           socket.htons(3)) as sock:
        sock.bind((lab.dut, 3))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        filt = attach_socket(sock, art)
        frames = [f for f in sample(policy, 800, seed=3) if 14 <= len(f) <= 1514]
        views = [v for v in map(l2_input_view, frames) if v is not None]
        outcomes = [evaluate(policy, v, skip_tag=False) for v in views]
        want = [v for v, o in zip(views, outcomes, strict=True) if o.verdict.value == "pass"]
        got = received(lab, sock, frames, 1)
        assert got == want
        assert len(want) < len(views), "some frames must be dropped"
        if target == "socket":
            assert filt.counters() == expected_counters(policy, outcomes)
            assert any(p for p, _ in filt.counters().values())
        else:
            assert filt.counters() is None
        filt.detach()
        assert len(received(lab, sock, frames, 2)) == len(views)  # nothing filtered now


def udp_frame(lab, dst: bytes, dport: int, size: int) -> bytes:
    src = bytes([10, 1, 0, 2])
    seg = fb.udp(src, dst, 9, dport, bytes(size))
    return fb.ethernet(lab.dut_mac, lab.inj_mac, fb.ETH_IP4, fb.ipv4(src, dst, 17, seg))


@kernel
@pytest.mark.parametrize("target", ["socket", "cbpf"])
def test_the_example_script(target):
    """examples/attach_socket.py drops edge-drop.pf's flood and prints the rest."""
    with netns.lab() as lab:
        proc = subprocess.Popen(
            [sys.executable, str(ROOT / "examples/attach_socket.py"), "--dev", lab.dut,
             "--target", target, "--count", "2", "--timeout", "5"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert "attached edge-drop.pf" in proc.stdout.readline()
            inj = netns.Injector(lab.inj)
            flood = udp_frame(lab, bytes([192, 168, 0, 79]), 12345, 100)
            other = udp_frame(lab, bytes([192, 168, 0, 79]), 12346, 7)
            for frame in (flood, other, flood, other):
                inj.send(frame)
            inj.close()
            proc.wait(timeout=10)
            # not communicate(): it would skip what readline() already buffered
            out, err = proc.stdout.read(), proc.stderr.read()
        finally:
            proc.kill()
        assert proc.returncode == 0, err
        lines = out.splitlines()
        assert lines[:2] == [f"{len(other)} bytes, EtherType 0x0800"] * 2
        assert ("count rules: {}" in out) == (target == "socket")


@kernel
def test_refusals():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        with pytest.raises(ValueError, match="AF_PACKET SOCK_RAW"):
            attach_socket(udp, artifact(NO_COUNT, "cbpf"))
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0) as raw:
        with pytest.raises(ValueError, match="`pfc load` attaches that one"):
            attach_socket(raw, artifact(NO_COUNT, "xdp"))
        c_only, _ = build_artifact(compile_path(ROOT / "examples/edge-drop.pf"), "socket",
                                   "c")
        with pytest.raises(ValueError, match="format `o`"):
            attach_socket(raw, c_only)


def test_lazy_export_from_the_package():
    """``pfc.attach_socket`` is the function, loaded on first use."""
    import pfc

    assert pfc.attach_socket is attach_socket
    with pytest.raises(AttributeError):
        pfc.no_such_name  # noqa: B018
