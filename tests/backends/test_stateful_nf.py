"""`ct state`, `limit`, `log` and audit on nft and iptables, in the kernel, against the
interpreter: ordered frame sequences through the existing runners (both directions of a
connection injected: the lab drops what its own stack sends before conntrack sees it),
token buckets whose refill cannot matter (`/minute` rates) or measured with a timed
gap, and the NFLOG events of group 20 decoded with the shared event shape."""

from __future__ import annotations

import itertools
import json
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pfc import backends
from pfc.backends.iptables import run as iptrun
from pfc.backends.nft import run as nftrun
from pfc.build import build_artifact
from pfc.frontend.pipeline import compile_text
from pfc.kernel import iplab, netns
from pfc.oracle import framebuild as fb
from pfc.oracle.events import parse_prefix
from pfc.oracle.interp import evaluate, new_flow
from pfc.verifier.equiv import compare

pytestmark = pytest.mark.kernel
C4, S4, B4 = bytes((10, 0, 0, 1)), bytes((192, 168, 0, 79)), bytes((10, 0, 0, 2))
C6, S6 = bytes.fromhex("20010db8000000000000000000000001"), \
    bytes.fromhex("20010db8000000000000000000000002")
MAC = b"\x02\0\0\0\0\x01"
SYN, ACK, FIN, RST, PSH = 0x02, 0x10, 0x01, 0x04, 0x08
TARGETS = {"nft": ("input", nftrun), "iptables": ("filter-input", iptrun)}
_tables = itertools.count()


@pytest.fixture(scope="module", params=list(TARGETS))
def lab(request):
    reason = netns.missing_privileges()
    if reason:
        pytest.skip(reason)
    hook, runner = TARGETS[request.param]
    with runner.session() as session:
        yield request.param, hook, session


def artifact(lab, text: str):
    target, hook, _ = lab
    art, diags = build_artifact(compile_text(text, "t.pf"), target, hook=hook,
                                table=f"t{next(_tables)}")
    assert art is not None, diags
    return art


def check(lab, text: str, frames: list[bytes], times=None):
    art = artifact(lab, text)
    report = compare(art, backends.get(lab[0]), frames, times)
    assert report.ok, report.summary()
    assert report.seen == len(frames)
    return report


def eth(packet: bytes, v6: bool = False) -> bytes:
    return fb.ethernet(MAC, MAC, 0x86DD if v6 else 0x0800, packet)


def tcp(flags: int, src=C4, dst=S4, sport=40000, dport=22, seq=1000, ack=0) -> bytes:
    v6 = len(src) == 16
    segment = fb.tcp(src, dst, sport, dport, flags, b"", seq=seq, ack=ack)
    return eth(fb.ipv6(src, dst, 6, segment) if v6 else fb.ipv4(src, dst, 6, segment), v6)


def udp(src=C4, dst=S4, sport=5353, dport=7000, payload=b"hello") -> bytes:
    return eth(fb.ipv4(src, dst, 17, fb.udp(src, dst, sport, dport, payload)))


def handshake(src, dst, sport: int, dport: int) -> list[bytes]:
    """SYN, SYN/ACK, ACK, data, FIN/ACK both ways, last ACK: in-window numbers."""
    c, s = 1000, 5000
    out = tcp(SYN, src, dst, sport, dport, c), \
        tcp(SYN | ACK, dst, src, dport, sport, s, c + 1), \
        tcp(ACK, src, dst, sport, dport, c + 1, s + 1), \
        tcp(PSH | ACK, src, dst, sport, dport, c + 1, s + 1), \
        tcp(FIN | ACK, src, dst, sport, dport, c + 1, s + 1), \
        tcp(FIN | ACK, dst, src, dport, sport, s + 1, c + 2), \
        tcp(ACK, src, dst, sport, dport, c + 2, s + 2)
    return list(out)


CT_POLICY = """\
pass tcp dport 22 ct state new
pass ct state established
pass icmp ct state related
count ct state invalid
drop ct state invalid
default drop
"""


def test_connection_states_agree(lab):
    frames = handshake(C4, S4, 40001, 22) + handshake(C6, S6, 40002, 22)
    frames += [
        tcp(SYN | FIN, sport=40003),  # flags conntrack refuses
        tcp(ACK, sport=40004, dport=80),  # picked up mid-stream, but dropped: opens nothing
        tcp(ACK, S4, C4, 80, 40004),  # so its "reply" is new, not established
        tcp(SYN, sport=40005, dport=25),  # new, not port 22: dropped
        udp(sport=40006, dport=53),  # new UDP: dropped, so the answer is not established
        udp(S4, C4, 53, 40006),
    ]
    check(lab, CT_POLICY, frames)


def test_udp_reply_is_established_and_icmp_errors_are_related(lab):
    text = "pass udp dport 53 ct state new\n" + CT_POLICY
    query, answer = udp(sport=40010, dport=53), udp(S4, C4, 53, 40010)
    quoted = fb.ipv4(S4, C4, 17, fb.udp(S4, C4, 53, 40010, b"x"))[:28]
    unreach = eth(fb.ipv4(C4, S4, 1, fb.icmp(3, 3, bytes(4), quoted)))
    stray = eth(fb.ipv4(C4, S4, 1, fb.icmp(3, 3, bytes(4),
                                             fb.ipv4(S4, C4, 17, fb.udp(S4, C4, 1, 2, b"x"))[:28])))
    check(lab, text, [query, answer, query, unreach, stray])


def test_limits_drop_only_what_exceeds_the_bucket(lab):
    text = ("drop udp dport 7000 limit rate 1/minute burst 3\n"
            "drop udp dport 7001 limit rate 1/minute burst 1 per src\n")
    frames = [udp(dport=7000)] * 6 + [udp(dport=7001), udp(B4, dport=7001)] * 3
    report = check(lab, text, frames)
    assert report.counters_got[0][0] == 3 and report.counters_got[1][0] == 4


def test_limit_refills_at_its_rate(lab):
    """30 frames at once, then 30 more after a measured gap: the second burst passes
    what the bucket refilled, as the interpreter computes it from the measured times
    (within 2 frames: the send times are taken in user space)."""
    art = artifact(lab, "drop udp dport 7002 limit rate 20/second burst 1\n")
    session = lab[2]
    session.load(art)
    frames = [udp(dport=7002)] * 30
    start = time.monotonic_ns()
    first = session.judge(frames)
    while time.monotonic_ns() - start < 400_000_000:  # a gap of at least 0.4 s
        time.sleep(0.05)
    gap = time.monotonic_ns() - start
    second = session.judge(frames)
    flow = new_flow(art.policy)
    expected = [evaluate(art.policy, f, flow=flow, now=t).verdict.value == "pass"
                for f, t in zip(frames * 2, [0] * 30 + [gap] * 30, strict=True)]
    got = [v is not None for v in first + second]
    assert got[:30] == expected[:30]
    assert abs(sum(got[30:]) - sum(expected[30:])) <= 2, (sum(got[30:]), sum(expected[30:]))


def test_log_events_and_audits_match_the_interpreter(lab):
    text = ('log udp dport 7000 prefix "seen it" rate 1/minute snap 40\n'
            "drop tcp dport 23 audit\ndrop udp dport 7001\ndefault drop\n")
    art = artifact(lab, text)
    events = iplab.Nflog(20)
    try:
        frames = [udp(dport=7000, payload=bytes([i]) * 30) for i in range(8)]
        frames += [tcp(SYN, dport=23), udp(dport=7001)]
        report = compare(art, backends.get(lab[0]), frames)
        assert report.ok, report.summary()
        flow = new_flow(art.policy)
        expected = [e for f in frames for e in evaluate(art.policy, f, flow=flow).events]
        got = _read(events, len(expected))
    finally:
        events.close()
    assert len(got) == len(expected) == 6  # the default burst of 5; one audit
    for (prefix, packet), event in zip(got, expected, strict=True):
        assert parse_prefix(prefix) == (event.line, event.verdict, event.audit, event.prefix)
        ip = event.network()
        assert packet[:len(ip)] == ip


def _read(log: iplab.Nflog, n: int) -> list[tuple[str, bytes]]:
    """The next ``n`` messages, then whatever else arrives within 0.3 s (none should)."""
    out: list[tuple[str, bytes]] = []
    deadline = time.monotonic() + 5
    while len(out) < n and time.monotonic() < deadline:
        try:
            out += log.packets(timeout=max(0.01, deadline - time.monotonic()))
        except TimeoutError:
            break
    try:
        out += log.packets(timeout=0.3)
    except TimeoutError:
        pass
    return out


def test_pfc_log_shows_an_event_within_a_second(lab):
    """`pfc log --dev DEV --netns NS`, a real process: the event of an injected packet
    arrives, decoded, within a second of the packet."""
    import select
    import subprocess
    import sys

    target, _, session = lab
    art = artifact(lab, 'log udp dport 7000 prefix "web" snap 64\ndrop udp dport 7000 audit\n')
    session.load(art)
    cmd = [sys.executable, "-m", "pfc.cli", "log", "--dev", session.lab.dut, "--netns",
           session.lab.name, "--count", "2", "--format", "json"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert "listening" in proc.stderr.readline()
        sent = time.monotonic()
        session.judge([udp(dport=7000)])
        lines = []
        while len(lines) < 2 and time.monotonic() - sent < 1.0:
            ready, _, _ = select.select([proc.stdout], [], [], 1.0 - (time.monotonic() - sent))
            if ready:
                lines.append(json.loads(proc.stdout.readline()))
        took = time.monotonic() - sent
    finally:
        proc.kill()
        proc.wait()
    assert len(lines) == 2, (target, lines, took)
    assert [(e["line"], e["verdict"], e["audit"], e["prefix"]) for e in lines] == \
        [(1, "pass", False, "web"), (2, "drop", True, "")]
    assert lines[0]["dst"] == "192.168.0.79:7000" and lines[0]["protocol"] == "udp"


def test_verify_runs_ordered_sequences_for_a_stateful_policy(lab):
    """`pfc verify`: generated frames, then connections and bursts, one sequence; the
    fast rates verified at 1/minute (bucket sizes kept), said in the result."""
    from pfc.oracle import sequences
    from pfc.verifier.run import Request, verify

    target, hook, _ = lab
    text = ('log udp dport 53 prefix "dns" rate 10/second\n'
            "drop udp dport 7000 limit rate 100/second burst 4 per src\n"
            "pass tcp dport 22 ct state new\npass ct state established,related\n"
            "drop tcp dport 23 audit\ncount ct state invalid\ndefault drop\n")
    compiled = compile_text(text, "v.pf")
    assert sequences.connections(compiled.policy) and sequences.fast(compiled.policy)
    (result,) = verify(Request(compiled, "v.pf", [f"{target}:{hook}"], True, frames=600))
    assert result.status == "agree", result.report.summary()
    assert "1/minute" in " ".join(result.notes) and result.report.counters_agree


def test_a_rule_for_every_frame_has_a_bucket_per_family(lab):
    v6 = [eth(fb.ipv6(C6, S6, 17, fb.udp(C6, S6, 5353, 7000, b"x")), True)] * 3
    report = check(lab, "drop limit rate 1/minute burst 2\n", [udp()] * 3 + v6)
    assert report.counters_got[0][0] == 2  # one of each family over the rate


@st.composite
def stateful_policies(draw) -> str:
    """Small policies of ct state, limits (1/minute: no refill during a run), logs with
    rates, audits, over a few ports, with either default."""
    lines = []
    for _ in range(draw(st.integers(1, 5))):
        action = draw(st.sampled_from(["pass", "drop", "log", "count"]))
        proto = draw(st.sampled_from(["", "tcp ", "udp "]))
        port = f"dport {draw(st.sampled_from([22, 53, 7000]))} " if proto else ""
        states = draw(st.lists(st.sampled_from(["new", "established", "related",
                                                 "invalid"]), max_size=2, unique=True))
        ct = f"{draw(st.sampled_from(['', '!']))}ct state {','.join(states)} " \
            if states else ""
        tail = ""
        if action == "drop" and draw(st.booleans()):
            per = draw(st.sampled_from(["", " per src", " per dst"]))
            tail = f"limit rate 1/minute burst {draw(st.integers(1, 4))}{per}"
        elif action == "drop" and draw(st.booleans()):
            tail = "audit"
        elif action == "log":
            tail = f"rate 1/minute snap {draw(st.sampled_from([0, 40]))}"
        lines.append(f"{action} {proto}{port}{ct}{tail}".strip())
    return "\n".join(lines + [f"default {draw(st.sampled_from(['pass', 'drop']))}"]) + "\n"


@settings(derandomize=True, max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(text=stateful_policies())
def test_generated_stateful_policies_agree(lab, text: str):
    from pfc.oracle import gen, sequences
    art = artifact(lab, text)
    frames = gen.sample(art.policy, 150, seed=len(text))
    frames += sequences.connections(art.policy) + sequences.bursts(art.policy, frames)
    report = compare(art, backends.get(lab[0]), frames)
    assert report.ok, text + report.summary()
