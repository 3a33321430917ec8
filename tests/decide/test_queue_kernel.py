"""`queue` end to end (docs/queue.md): iptables' NFQUEUE and its verdict cache in the
connection's mark, `pfc decide` with seed 002's pattern decider, real TCP connections
between two namespaces, judged against the interpreter run on the frames that arrived
with the same decider. Fail closed without a decider, open with `bypass`; cached
verdicts outlive the decider. About 10 s on the 2-core VM."""

from __future__ import annotations

import socket
import struct
import time

import pytest

from pfc.decide.analyse import PatternDecider
from pfc.decide.pair import pair
from pfc.frontend.ir import Verdict
from pfc.frontend.pipeline import compile_text
from pfc.kernel import netns
from pfc.oracle import interp
from tests.decide.queue_lab import Server, connect, counters, decider, echo, load_iptables, stats

ROOT_REASON = netns.missing_privileges()
pytestmark = pytest.mark.skipif(ROOT_REASON is not None, reason=ROOT_REASON or "")
CACHED = "queue tcp dport 5201 first 6\npass all\n"
NEGATIVE = 1.0  # seconds a client waits for an echo that must not come


def reset(s: socket.socket) -> None:
    """Close with a RST: the client sends nothing more (no FIN, no retransmissions)."""
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()


def settled(p, server: Server, frames: list[bytes], tries: int = 50) -> list[tuple[int, str]]:
    """The counters once every frame captured so far has been counted by chain PFC."""
    for _ in range(tries):
        frames += server.arrived()
        found = counters(p)
        ours = sum(n for n, rule in found if "5201" in rule)
        if ours >= sum(1 for f in frames if _to_port(f)):
            return found
        time.sleep(0.05)
    return counters(p)


def _to_port(frame: bytes) -> bool:
    return frame[12:14] == b"\x08\x00" and frame[23] == 6 and \
        frame[14 + (frame[14] & 0xF) * 4 + 2:][:2] == (5201).to_bytes(2, "big")


def test_first_packets_go_to_user_space_the_rest_are_cached(tmp_path) -> None:
    policy = tmp_path / "q.pf"
    policy.write_text(CACHED)
    with pair() as p:
        load_iptables(p, CACHED)
        server = Server(p)
        with decider(p, policy, "pattern:abc") as proc:
            clean = connect(p, NEGATIVE)
            assert all(echo(clean, b"hello %d" % i) for i in range(8))
            bad = connect(p, NEGATIVE)
            assert echo(bad, b"hi")
            assert not echo(bad, b"xxabcxx")  # dropped by the decider: no echo
            reset(clean)
            reset(bad)
            frames: list[bytes] = []
            found = settled(p, server, frames)
            got = stats(proc)
        server.close()
    assert b"xxabcxx" not in b"".join(server.received)
    outs, _ = interp.run(compile_text(CACHED).require(), frames,
                         decider=PatternDecider(b"abc"))
    queued = sum(o.queued for o in outs)
    cached = {v: sum(1 for o in outs if o.rule == 0 and not o.queued and o.verdict is v)
              for v in Verdict}
    print("kernel", [n for n, _ in found[:3]], "oracle", cached, queued, "decider", got)
    assert [n for n, _ in found[:3]] == [cached[Verdict.PASS], cached[Verdict.DROP], queued]
    assert got["packets"] == queued and got["marks"] == 2  # one pass flow, one drop flow
    assert queued <= 2 * 6 and cached[Verdict.PASS] > 0 and cached[Verdict.DROP] > 0


@pytest.mark.parametrize("bypass", [False, True])
def test_no_decider_fails_closed_or_open_with_bypass(bypass: bool) -> None:
    text = f"queue tcp dport 5201{' bypass' if bypass else ''}\npass all\n"
    with pair() as p:
        load_iptables(p, text)
        server = Server(p)
        try:
            s = connect(p, NEGATIVE)
            assert bypass and echo(s, b"x")
            reset(s)
        except TimeoutError:
            assert not bypass
        finally:
            server.close()


def test_cached_verdicts_outlive_the_decider(tmp_path) -> None:
    policy = tmp_path / "q.pf"
    text = "queue tcp dport 5201 first 3\npass all\n"
    policy.write_text(text)
    with pair() as p:
        load_iptables(p, text)
        server = Server(p)
        with decider(p, policy, "pattern:abc") as proc:
            old = connect(p, NEGATIVE)
            assert echo(old, b"one") and echo(old, b"two")  # SYN, ACK, one: decided
            stats(proc)  # the decider is gone
        assert echo(old, b"three abc")  # cached pass: the decider never sees it
        with pytest.raises(TimeoutError):
            connect(p, NEGATIVE)  # a new flow: fail closed
        reset(old)
        server.close()
