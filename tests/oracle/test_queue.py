"""The meaning of `queue` (oracle.queue): the decider is an input; the kernel's verdict
cache (`first K`) keeps a flow's verdict so that only its first packets reach user
space; fail closed without a decider, fail open with `bypass`; cached verdicts hold."""

from __future__ import annotations

from scapy.layers.inet import IP, TCP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether

from pfc.decide.analyse import PatternDecider, l4_payload
from pfc.frontend.ir import Verdict
from pfc.frontend.pipeline import compile_text
from pfc.oracle import interp
from pfc.oracle.packets import read_frame
from pfc.oracle.queue import flow_key, packet_key

PASS, DROP = Verdict.PASS, Verdict.DROP


def seg(data: bytes = b"", back: bool = False, sport: int = 40000, v6: bool = False) -> bytes:
    a, b = ("2001:db8::1", "2001:db8::2") if v6 else ("10.0.0.1", "10.0.0.2")
    ip = IPv6(src=b, dst=a) if back and v6 else IPv6(src=a, dst=b) if v6 else \
        IP(src=b, dst=a) if back else IP(src=a, dst=b)
    ports = dict(sport=5201, dport=sport) if back else dict(sport=sport, dport=5201)
    return bytes(Ether() / ip / TCP(flags="PA", **ports) / data)


def policy(options: str = ""):
    return compile_text(f"queue tcp {options}\ndefault drop\n").require()


def verdicts(outcomes) -> list[tuple[Verdict, bool]]:
    return [(o.verdict, o.queued) for o in outcomes]


def test_first_k_hands_only_the_first_packets_to_the_decider() -> None:
    frames = [seg(b"x"), seg(b"y", back=True), seg(b"z"), seg(b"abc"), seg(b"w")]
    outs, _ = interp.run(policy("first 3"), frames, decider=PatternDecider(b"abc"))
    # the third packet leaves the flow undecided: pass, cached; "abc" never seen
    assert verdicts(outs) == [(PASS, True), (PASS, True), (PASS, True), (PASS, False),
                              (PASS, False)]


def test_a_drop_is_cached_for_both_directions() -> None:
    frames = [seg(b"a"), seg(b"bc"), seg(b"hello", back=True), seg(b"x")]
    outs, _ = interp.run(policy("first 8"), frames, decider=PatternDecider(b"abc"))
    assert verdicts(outs) == [(PASS, True), (DROP, True), (DROP, False), (DROP, False)]


def test_without_first_every_packet_reaches_the_decider() -> None:
    frames = [seg(b"a"), seg(b"bc"), seg(b"x"), seg(b"y", sport=40001)]
    outs, _ = interp.run(policy(), frames, decider=PatternDecider(b"abc"))
    assert verdicts(outs) == [(PASS, True), (DROP, True), (DROP, True), (PASS, True)]


def test_no_decider_fails_closed_and_bypass_fails_open() -> None:
    assert verdicts(interp.run(policy(), [seg()])[0]) == [(DROP, False)]
    assert verdicts(interp.run(policy("bypass"), [seg()])[0]) == [(PASS, False)]


def test_cached_verdicts_hold_when_the_decider_is_gone() -> None:
    pol = policy("first 1")
    flow = interp.new_flow(pol, PatternDecider(b"abc"))
    first = interp.evaluate(pol, seg(b"abc"), flow=flow)
    flow.queue.decider = None  # killed
    assert (first.verdict, first.queued) == (DROP, True)
    later = [interp.evaluate(pol, f, flow=flow) for f in (seg(b"x"), seg(sport=1))]
    assert [(o.verdict, o.queued) for o in later] == [(DROP, False), (DROP, False)]


def test_the_key_is_the_connection_from_either_end() -> None:
    for v6 in (False, True):
        there, back = read_frame(seg(v6=v6)), read_frame(seg(back=True, v6=v6))
        assert flow_key(there) == flow_key(back) is not None
        assert packet_key(seg(v6=v6)[14:]) == flow_key(there)
    assert flow_key(read_frame(seg(sport=1))) != flow_key(read_frame(seg(sport=2)))


def test_the_pattern_is_found_across_segments_of_one_direction_only() -> None:
    d = PatternDecider(b"abc")
    key = packet_key(seg()[14:])
    assert d(0, key, seg(b"xa")[14:]) is None
    assert d(0, key, seg(b"b", back=True)[14:]) is None
    assert d(0, key, seg(b"bc")[14:]) is DROP
    assert l4_payload(seg(b"payload")[14:])[1] == b"payload"
