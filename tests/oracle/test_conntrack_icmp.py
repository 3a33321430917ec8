"""ICMP in the interpreter's conntrack, keyed as netfilter keys it (identifier, type and
code: ``icmp_pkt_to_tuple``; a reply tuple's type is its request's, inverted by
``invmap``), and the sequences `pfc verify` sends to check it (``sequences.icmp_mixes``).
The same frames go through nft and iptables in tests/oracle/test_conntrack_kernel.py."""

from __future__ import annotations

from pfc.frontend.pipeline import compile_text
from pfc.oracle import framebuild as fb
from pfc.oracle import sequences
from pfc.oracle.flow import Flow
from pfc.oracle.interp import run
from pfc.oracle.packets import read_frame

MAC = b"\x02\0\0\0\0\x01"
OUT, HOST = bytes((8, 8, 4, 4)), bytes((10, 99, 0, 1))
STATEFUL = "pass ct state established\ndrop ct state invalid\n"  # default pass


def echo(kind: int, src=OUT, dst=HOST, ident: int = 7, code: int = 0) -> bytes:
    rest = ident.to_bytes(2, "big") + b"\0\x01"
    return fb.ethernet(MAC, MAC, 0x0800, fb.ipv4(src, dst, 1, fb.icmp(kind, code, rest,
                                                                      b"ping")))


def states(frames: list[bytes]) -> list[str | None]:
    """Each frame's state, every frame let through (so openers open)."""
    flow, out = Flow(), []
    for frame in frames:
        view = read_frame(frame)
        out.append(flow.ct_state(view))
        flow.finish(view, True)
    return out


def test_an_echo_reply_in_its_requests_direction_is_invalid() -> None:
    """The finding (M4): an echo request 8.8.4.4 → 10.99.0.1 id 7, then an echo reply
    the same way with the same id. The reply's tuple (type 0) is neither the request's
    nor its inverse (10.99.0.1 → 8.8.4.4, type 0), and a reply cannot open a
    connection: nft and iptables drop it under `drop ct state invalid`."""
    frames = [echo(8), echo(0)]
    assert states(frames) == ["new", "invalid"]
    policy = compile_text(STATEFUL, "t.pf").require()
    outcomes, _ = run(policy, frames)
    assert [o.verdict.value for o in outcomes] == ["pass", "drop"]


def test_a_request_sent_back_is_a_connection_of_its_own() -> None:
    frames = [echo(8), echo(8, HOST, OUT), echo(0), echo(0, HOST, OUT)]
    assert states(frames) == ["new", "new", "established", "established"]


def test_a_reply_of_another_code_or_identifier_answers_nothing() -> None:
    assert states([echo(8), echo(0, HOST, OUT, code=1)]) == ["new", "invalid"]
    assert states([echo(8), echo(0, HOST, OUT, ident=8)]) == ["new", "invalid"]
    assert states([echo(0, HOST, OUT)]) == ["invalid"]  # no request at all


def test_an_error_must_go_to_the_quoted_packets_source() -> None:
    """nf_conntrack_inet_error: an error quoting a known connection is related only
    when sent to the quoted packet's source."""
    request = echo(8)
    quoted = request[14:14 + 28]
    error = fb.ethernet(MAC, MAC, 0x0800, fb.ipv4(HOST, OUT, 1, fb.icmp(3, 1, bytes(4), quoted)))
    stray = fb.ethernet(MAC, MAC, 0x0800, fb.ipv4(HOST, bytes((10, 99, 0, 2)), 1,
                                                  fb.icmp(3, 1, bytes(4), quoted)))
    assert states([request, error, stray]) == ["new", "related", "invalid"]


def test_icmpv6_errors_are_every_type_below_128() -> None:
    c, s = sequences.HOSTS[6]
    request = fb.ethernet(MAC, MAC, 0x86DD, fb.ipv6(c, s, 58, fb.icmp6(
        c, s, 128, 0, b"\0\x07\0\x01", b"p")))
    quoted = request[14:14 + 48]
    unassigned = fb.ethernet(MAC, MAC, 0x86DD, fb.ipv6(s, c, 58, fb.icmp6(
        s, c, 100, 0, bytes(4), quoted)))
    assert states([request, unassigned]) == ["new", "related"]


def test_icmp_mixes_cover_every_direction() -> None:
    common = ["new", "established", "established",  # request, reply, request again
              "new", "invalid",  # a reply in the request's direction
              "invalid",  # a reply without a request
              "new", "new", "established",  # a request sent back, and its reply
              "new", "invalid",  # a reply of another code
              "related", "invalid"]  # errors to the quoted source, and elsewhere
    assert states(sequences.icmp_mixes(4, 100)) == common + ["new", "established"]
    assert states(sequences.icmp_mixes(6, 100)) == common


def test_verify_sends_the_mixes_for_a_ct_policy_only() -> None:
    policy = compile_text(STATEFUL, "t.pf").require()
    sent = sequences.connections(policy)
    assert all(frame in sent for frame in sequences.icmp_mixes(4, 42000))
    assert sequences.connections(compile_text("drop udp\n", "t.pf").require()) == []
