"""The time- and flow-aware interpreter: token buckets (nft ``limit`` semantics),
connection states (netfilter conntrack, docs/language.md "Connection state"), log
events and audit verdicts, on ordered, timed frame sequences. No timing here: the
times are numbers the tests give."""

from __future__ import annotations

from pfc.frontend.ir import Verdict
from pfc.frontend.pipeline import compile_text
from pfc.oracle import framebuild as fb
from pfc.oracle.events import LogEvent, describe, nflog_prefix, parse_prefix, to_json
from pfc.oracle.flow import NSEC, Bucket
from pfc.oracle.interp import evaluate, new_flow, run

MAC = b"\x02\0\0\0\0\x01"
C4, S4 = bytes((10, 0, 0, 1)), bytes((192, 168, 0, 79))
C4B = bytes((10, 0, 0, 2))
C6, S6 = bytes(15) + b"\x01", bytes(15) + b"\x02"
SYN, ACK, FIN, RST, PSH = 0x02, 0x10, 0x01, 0x04, 0x08


def policy(text: str):
    return compile_text(text, "t.pf").require()


def eth4(packet: bytes) -> bytes:
    return fb.ethernet(MAC, MAC, 0x0800, packet)


def udp4(src=C4, dst=S4, sport=5353, dport=7000, payload=b"x") -> bytes:
    return eth4(fb.ipv4(src, dst, 17, fb.udp(src, dst, sport, dport, payload)))


def tcp4(flags: int, src=C4, dst=S4, sport=40000, dport=22, bad=0) -> bytes:
    return eth4(fb.ipv4(src, dst, 6, fb.tcp(src, dst, sport, dport, flags, b"", flip=bad)))


def tcp6(flags: int, src=C6, dst=S6, sport=40000, dport=22) -> bytes:
    return fb.ethernet(MAC, MAC, 0x86DD,
                       fb.ipv6(src, dst, 6, fb.tcp(src, dst, sport, dport, flags, b"")))


# ------------------------------------------------------------------------ token buckets

def test_bucket_holds_burst_and_refills_at_the_rate() -> None:
    bucket = Bucket.full(_rate(10, burst=5), 0)
    assert [bucket.take(0) for _ in range(6)] == [True] * 5 + [False]
    assert bucket.take(NSEC // 10) and not bucket.take(NSEC // 10)
    # 0.9 s idle refilled the bucket (5, its size); 100 packets over the next 0.99 s
    # find 9.9 more
    assert sum(bucket.take(NSEC + i * NSEC // 100) for i in range(100)) == 14


def test_bucket_ignores_time_running_backwards() -> None:
    bucket = Bucket.full(_rate(1, burst=2), 5 * NSEC)
    assert bucket.take(5 * NSEC) and bucket.take(5 * NSEC) and not bucket.take(0)


def _rate(count: int, burst: int = 5, unit: str = "second"):
    from pfc.frontend.ir import Rate
    return Rate(count, unit, burst)


def test_limit_drops_only_the_packets_over_the_rate() -> None:
    p = policy("drop udp dport 7000 limit rate 10/second burst 2\n")
    frames = [udp4()] * 20
    outs, _ = run(p, frames, times=[0] * 20)
    assert [o.verdict for o in outs] == [Verdict.PASS] * 2 + [Verdict.DROP] * 18
    # one packet every 50 ms: 20/s offered against 10/s, over 4.95 s
    outs, _ = run(p, frames * 5, times=[i * NSEC // 20 for i in range(100)])
    passed = sum(o.verdict is Verdict.PASS for o in outs)
    assert passed == 2 + 49


def test_limit_per_source_keeps_one_bucket_per_address() -> None:
    p = policy("drop udp limit rate 1/minute burst 1 per src\n")
    frames = [udp4(src=C4), udp4(src=C4), udp4(src=C4), udp4(src=C4B), udp4(src=C4B)]
    outs, _ = run(p, frames, times=[0] * 5)
    assert [o.verdict.value for o in outs] == ["pass", "drop", "drop", "pass", "drop"]


def test_a_limited_rule_that_is_within_the_rate_lets_later_rules_decide() -> None:
    p = policy("drop udp limit rate 1/second burst 1\ndrop udp dport 7000\ndefault pass\n")
    outs, _ = run(p, [udp4(), udp4(dport=53)], times=[0, 0])
    assert [(o.verdict.value, o.rule) for o in outs] == [("drop", 1), ("drop", 0)]


def test_single_frame_judging_is_the_first_frame_of_a_sequence() -> None:
    p = policy("drop udp limit rate 1/second burst 1\n")
    assert evaluate(p, udp4()).verdict is Verdict.PASS
    assert not p.rules[0].action.audit


# ------------------------------------------------------------------------- connections

def test_tcp_handshake_new_then_established() -> None:
    p = policy("pass tcp ct state established\npass tcp dport 22 ct state new\n"
               "default drop\n")
    flow = new_flow(p)
    syn = evaluate(p, tcp4(SYN), flow=flow)
    assert (syn.verdict, syn.rule) == (Verdict.PASS, 1)
    flow.see(tcp4(SYN | ACK, src=S4, dst=C4, sport=22, dport=40000))  # the host's reply
    ack = evaluate(p, tcp4(ACK), flow=flow)
    assert (ack.verdict, ack.rule) == (Verdict.PASS, 0)


def test_established_needs_a_reply_and_a_dropped_opener_opens_nothing() -> None:
    p = policy("pass udp dport 53 ct state new\npass ct state established\ndefault drop\n")
    query, answer = udp4(dport=53), udp4(src=S4, dst=C4, sport=53, dport=5353)
    stray = udp4(dport=54)
    outs, _ = run(p, [query, query, answer, query, stray, udp4(src=S4, dst=C4, sport=54)])
    assert [o.rule for o in outs] == [0, 0, 1, 1, None, None]


def test_invalid_states() -> None:
    p = policy("drop ct state invalid\n")
    invalid = [tcp4(SYN | FIN), tcp4(ACK | FIN), tcp4(0), tcp4(SYN | ACK), tcp4(RST),
               tcp4(SYN, bad=1)]
    for frame in invalid:
        assert evaluate(p, frame).verdict is Verdict.DROP, frame.hex()
    assert evaluate(p, tcp4(SYN | PSH)).verdict is Verdict.PASS
    assert evaluate(p, tcp4(ACK)).verdict is Verdict.PASS  # picked up (tcp_loose)


def test_icmp_error_quoting_a_connection_is_related() -> None:
    p = policy("pass ct state related\npass ct state new\ndefault drop\n")
    sent = fb.ipv4(S4, C4, 17, fb.udp(S4, C4, 5353, 7000, b"x"))
    unreach = eth4(fb.ipv4(C4, S4, 1, fb.icmp(3, 3, bytes(4), sent[:28])))
    flow = new_flow(p)
    assert evaluate(p, unreach, flow=flow).verdict is Verdict.DROP  # nothing to relate to
    flow.see(eth4(sent))
    assert evaluate(p, unreach, flow=flow).rule == 0


def test_echo_reply_answers_its_request() -> None:
    p = policy("pass ct state established\ndefault drop\n")
    request = eth4(fb.ipv4(S4, C4, 1, fb.icmp(8, 0, b"\0\x07\0\x01", b"ping")))
    reply = eth4(fb.ipv4(C4, S4, 1, fb.icmp(0, 0, b"\0\x07\0\x01", b"ping")))
    flow = new_flow(p)
    assert evaluate(p, reply, flow=flow).verdict is Verdict.DROP
    flow.see(request)
    assert evaluate(p, reply, flow=flow).verdict is Verdict.PASS


def test_ipv6_handshake_and_negation() -> None:
    p = policy("pass !ct state new\ndefault drop\n")
    outs, _ = run(p, [tcp6(SYN), tcp6(SYN | ACK, src=S6, dst=C6, sport=22, dport=40000)])
    assert [o.verdict.value for o in outs] == ["drop", "pass"]


def test_a_syn_after_close_opens_anew() -> None:
    p = policy("pass ct state new\ndefault drop\n")
    flow = new_flow(p)
    assert evaluate(p, tcp4(SYN), flow=flow).verdict is Verdict.PASS
    flow.see(tcp4(SYN | ACK, src=S4, dst=C4, sport=22, dport=40000))
    assert evaluate(p, tcp4(ACK), flow=flow).verdict is Verdict.DROP  # established
    evaluate(p, tcp4(RST | ACK), flow=flow)
    assert evaluate(p, tcp4(SYN), flow=flow).verdict is Verdict.PASS


# ---------------------------------------------------------------------- logs and audit

def test_log_events_and_their_rate() -> None:
    p = policy('log udp dport 7000 prefix "web" rate 2/second snap 20\ndefault drop\n')
    outs, _ = run(p, [udp4()] * 10, times=[0] * 10)
    events = [e for o in outs for e in o.events]
    assert len(events) == 5  # the default burst: 5 at once
    event = events[0]
    assert (event.line, event.verdict, event.audit, event.prefix) == (1, "drop", False, "web")
    assert event.data == udp4()[:20]
    assert all(o.verdict is Verdict.DROP for o in outs)


def test_audit_passes_would_be_drops_and_logs_them() -> None:
    p = policy("pass tcp dport 22\ndrop udp dport 7000 audit\ndefault drop\n")
    out = evaluate(p, udp4())
    assert (out.verdict, out.rule, out.audited) == (Verdict.PASS, 1, True)
    assert [(e.line, e.verdict, e.audit) for e in out.events] == [(2, "drop", True)]


def test_audit_mode_covers_the_default() -> None:
    from pfc.passes.audit import audited
    p = audited(policy("drop udp dport 7000\ndefault drop\n"))
    for frame, rule in ((udp4(), 0), (udp4(dport=1), None)):
        out = evaluate(p, frame)
        assert (out.verdict, out.rule, out.audited) == (Verdict.PASS, rule, True)
    assert evaluate(p, udp4(dport=1)).events[0].line == 0


def test_event_text_json_and_prefix_round_trip() -> None:
    event = LogEvent(7, "drop", False, "web", udp4(dport=12345))
    assert describe(event) == "line 7 drop udp 10.0.0.1:5353 \u2192 192.168.0.79:12345 [web]"
    assert to_json(event)["dst"] == "192.168.0.79:12345"
    assert parse_prefix(nflog_prefix(7, "drop", True, "web")) == (7, "drop", True, "web")
    assert parse_prefix(nflog_prefix(0, "pass", False, "")) == (0, "pass", False, "")
    assert parse_prefix("someone else") is None
    snapped = LogEvent(1, "pass", False, "", eth4(fb.ipv4(C4, S4, 6, bytes(1400)))[:40])
    assert describe(snapped).startswith("line 1 pass tcp 10.0.0.1:0 ")


def test_the_flow_state_never_raises_on_any_bytes() -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from pfc.oracle import gen
    p = policy("log prefix \"x\" rate 1/second\ndrop udp limit rate 2/second per src\n"
               "pass ct state established,related\ndrop ct state invalid\n"
               "pass !ct state new\n")
    frames = gen.sample(p, 300, seed=3)

    @settings(max_examples=200, deadline=None, derandomize=True)
    @given(st.lists(st.sampled_from(frames) | st.binary(max_size=80), max_size=12),
           st.lists(st.integers(0, 10 * NSEC), min_size=12, max_size=12))
    def judged(batch, times):
        outs, _ = run(p, batch, times=times[:len(batch)])
        assert len(outs) == len(batch)

    judged()


def test_frames_the_host_sent_open_connections_whatever_the_verdict() -> None:
    p = policy("pass ct state established\ndefault drop\n")
    reply = tcp4(SYN | ACK, src=S4, dst=C4, sport=22, dport=40000)
    syn_out = tcp4(SYN, src=C4, dst=S4, sport=40000, dport=22)
    outs, _ = run(p, [syn_out, reply], outgoing={0})
    assert [o.verdict.value for o in outs] == ["drop", "pass"]  # judged, yet tracked
    outs, _ = run(p, [syn_out, reply])
    assert [o.verdict.value for o in outs] == ["drop", "drop"]


def test_a_pcaps_timestamps_drive_the_buckets(tmp_path) -> None:
    from pfc.oracle.pcap import read_capture, write_pcap
    path = tmp_path / "t.pcap"
    times = [0, 1000, 2 * NSEC, 2 * NSEC + 5000]
    write_pcap(path, [udp4()] * 4, times)
    capture = read_capture(path)
    assert capture.times == times  # written to the microsecond
    p = policy("drop udp limit rate 1/second burst 1\n")
    outs, _ = run(p, capture.frames, times=capture.times)
    assert [o.verdict.value for o in outs] == ["pass", "drop", "pass", "drop"]


def test_untracked_neighbour_discovery_is_in_no_state() -> None:
    solicit = fb.ethernet(MAC, MAC, 0x86DD, fb.ipv6(C6, S6, 58, fb.icmp6(
        C6, S6, 135, 0, bytes(4), S6)))
    assert evaluate(policy("drop !ct state new\n"), solicit).verdict is Verdict.DROP
    for state in ("new", "established", "related", "invalid"):
        assert evaluate(policy(f"drop ct state {state}\n"), solicit).verdict is Verdict.PASS
