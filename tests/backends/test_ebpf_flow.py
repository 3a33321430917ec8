"""``log``, ``limit`` and audit on the eBPF hooks against the interpreter, in the kernel.

Timed frame sequences: each frame's time is written to the program's clock map
(``pfc_clock``) before its ``BPF_PROG_TEST_RUN`` (``ebpf_run.run_timed``), and the
interpreter judges the same frames at the same times (``interp.run(times=...)``), so
the token buckets must agree exactly: verdicts, the bytes left, every counter and every
event (line, verdict, audit, prefix, the first ``snap`` bytes) in order.
"""

from __future__ import annotations

import json
import random
import select
import subprocess
import sys
import time

import pytest

from pfc import backends
from pfc.backends.base import capability_errors
from pfc.backends.ebpf import events as ebpf_events
from pfc.backends.ebpf import maps as ebpf_maps
from pfc.backends.ebpf import run as ebpf_run
from pfc.backends.ebpf.backend import HOOKS, render
from pfc.build import build_artifact
from pfc.deploy.tc import TC_HANDLE, TC_PRIORITY
from pfc.frontend.pipeline import compile_text
from pfc.kernel import bpf_attach, netns
from pfc.oracle import framebuild as fb
from pfc.oracle import gen
from pfc.oracle.interp import evaluate, new_flow, run
from pfc.passes.audit import audited
from pfc.verifier.equiv import decided_counters, expected_counters
from tests.backends.test_ebpf import kernel
from tests.paths import GOLDEN

MAC = b"\x02\0\0\0\0\x01"
POLICY = """\
log tcp dport 80 prefix "web: in" rate 5/second snap 64
log udp dport 53 snap 0
drop udp dport 7000 limit rate 2/second burst 1 per src
drop tcp dport 23 audit
drop ip6 proto udp limit rate 3/second burst 2
count tcp
log prefix "all" snap 200
pass tcp dport { 22, 80 }
drop udp dport 9 limit rate 1/second burst 1 per dst
default drop
"""
SOURCES4 = [bytes((10, 0, 0, i)) for i in range(1, 5)]
SOURCES6 = [bytes(15) + bytes((i,)) for i in range(1, 4)]
DST4, DST6 = bytes((192, 168, 0, 79)), bytes(15) + b"\x99"


def compiled(text: str, hook: str, audit: bool = False):
    artifact, diags = build_artifact(compile_text(text, "flow.pf"), hook, "o", audit=audit)
    assert artifact is not None, diags
    return artifact


def frame(rng: random.Random) -> bytes:
    """A frame the rules above care about: TCP/UDP, IPv4/IPv6, a few sources."""
    v6 = rng.random() < 0.3
    src, dst = (rng.choice(SOURCES6), DST6) if v6 else (rng.choice(SOURCES4), DST4)
    dport = rng.choice((80, 53, 7000, 23, 22, 9, 1234))
    payload = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 120)))
    if rng.random() < 0.5:
        l4, proto = fb.tcp(src, dst, 40000, dport, 0x02, payload), 6
    else:
        l4, proto = fb.udp(src, dst, 5353, dport, payload), 17
    if v6:
        return fb.ethernet(MAC, MAC, 0x86DD, fb.ipv6(src, dst, proto, l4))
    return fb.ethernet(MAC, MAC, 0x0800, fb.ipv4(src, dst, proto, l4))


def sequence(policy, n: int, seed: int) -> tuple[list[bytes], list[int]]:
    """``n`` frames (some from the generator: odd ones, non-IP) at increasing times
    whose gaps straddle the rules' token costs (0 to 30 ms, runs of equal times)."""
    rng = random.Random(seed)
    odd = [f for f in gen.sample(policy, n // 5, seed=seed)
           if f[12:14] not in (b"\x81\x00", b"\x88\xa8") and not ebpf_run.tc_refuses(f)]
    frames = [frame(rng) for _ in range(n - len(odd))] + odd
    rng.shuffle(frames)
    times, now = [], 0
    for _ in frames:
        now += 0 if rng.random() < 0.6 else rng.randrange(30_000_000)
        times.append(now)
    return frames, times


def check_timed(artifact, frames: list[bytes], times: list[int]) -> ebpf_run.TimedRun:
    policy = artifact.policy
    outcomes, _ = run(policy, frames, times=times)
    got = ebpf_run.run_timed(artifact, frames, times)
    obs = got.observation
    verdicts = [o.verdict for o in outcomes]
    differ = [i for i, (a, b) in enumerate(zip(obs.verdicts, verdicts, strict=True))
              if a != b]
    assert not differ, differ[:10]
    for i, (out, o) in enumerate(zip(obs.frames_out, outcomes, strict=True)):
        assert out is None or out == o.frame, i
    assert obs.counters == {**expected_counters(policy, outcomes),
                            **decided_counters(policy, outcomes)}
    assert got.lost == 0
    for i, (events, o) in enumerate(zip(got.events, outcomes, strict=True)):
        assert [e.ifindex for e in events] == [1] * len(events)  # test runs: lo
        mine = [(e.line, e.verdict, e.audit, e.prefix, e.data) for e in events]
        assert mine == [(e.line, e.verdict, e.audit, e.prefix, e.data) for e in o.events], i
    return got


@kernel
@pytest.mark.parametrize("hook", HOOKS)
def test_timed_sequences_agree_with_the_interpreter(hook: str) -> None:
    artifact = compiled(POLICY, hook)
    frames, times = sequence(artifact.policy, 400, seed=20)
    got = check_timed(artifact, frames, times)
    verdicts = {v.value for v in got.observation.verdicts}
    assert verdicts == {"pass", "drop"}
    counters = got.observation.counters
    assert counters[2][0] > 0 and counters[8][0] > 0  # the per-address limits dropped
    assert sum(len(e) for e in got.events) > 100


@kernel
@pytest.mark.parametrize("hook", ("xdp", "socket"))
def test_audit_mode_passes_everything_and_logs_each_would_be_drop(hook: str) -> None:
    artifact = compiled(POLICY, hook, audit=True)
    assert artifact.policy.default_audit
    frames, times = sequence(artifact.policy, 150, seed=21)
    got = check_timed(artifact, frames, times)
    assert {v.value for v in got.observation.verdicts} == {"pass"}
    audits = [e for events in got.events for e in events if e.audit]
    assert audits and {e.line for e in audits} >= {0, 4}


@kernel
@pytest.mark.parametrize("hook", HOOKS)
def test_the_runner_judges_a_sequence_at_one_instant(hook: str) -> None:
    """``Backend.run`` (what ``pfc verify`` uses): the frames as the hook sees them, as
    one ordered sequence at one instant from empty buckets, against the interpreter
    judging them so (one flow, every time 0); malformed frames, bursts from one source,
    and on tc the frames test runs refuse, through the real hook in their turn."""
    artifact = compiled(POLICY, hook)
    assert artifact.meta["clock"] == "pfc_clock"
    rng = random.Random(3)
    frames = gen.sample(artifact.policy, 120, seed=22) + [frame(rng) for _ in range(60)]
    frames += [fb.ethernet(MAC, MAC, 0x0800, fb.ipv4(SOURCES4[0], DST4, 17, b""))[:30]] * 3
    rng.shuffle(frames)
    views = [(f, v) for f in frames if (v := backends.get(hook).view(hook, f)) is not None]
    flow = new_flow(artifact.policy)
    expected = [evaluate(artifact.policy, v, skip_tag=v == f, flow=flow, now=0)
                for f, v in views]
    got = ebpf_run.run(artifact, [v for _, v in views])
    assert got.verdicts == [o.verdict for o in expected]
    assert got.counters == {**expected_counters(artifact.policy, expected),
                            **decided_counters(artifact.policy, expected)}
    assert any(v.value == "drop" for v in got.verdicts)


@kernel
def test_a_flood_within_one_instant_gets_one_bucket_of_events() -> None:
    """All frames at one time: a log rate of 10/second sends as many events as its
    bucket holds (``Rate.capacity``: docs/language.md says how big it is)."""
    artifact = compiled('log udp prefix "flood" rate 10/second\npass\n', "xdp")
    frames = [frame(random.Random(1)) for _ in range(40)]
    frames = [f for f in frames if f[23] == 17 or f[20] == 17][:30]
    got = check_timed(artifact, frames, [5] * len(frames))
    rate = artifact.policy.rules[0].action.rate
    assert sum(len(e) for e in got.events) == rate.capacity < len(frames)


# ------------------------------------------------------------------- pfc log --dev

def _attach(artifact, lab, hook: str, obj) -> None:
    fd = obj.programs[artifact.meta["program"]].fd
    if hook == "xdp":
        bpf_attach.xdp_attach(lab.dut_index, fd, "generic")
    else:
        bpf_attach.tc_hook_create(lab.dut_index)
        bpf_attach.tc_attach(lab.dut_index, fd, TC_HANDLE, TC_PRIORITY, False)


@kernel
@pytest.mark.parametrize("hook", ("xdp", "tc"))
def test_pfc_log_shows_an_event_within_a_second_of_its_packet(hook: str) -> None:
    """``pfc log --dev`` (a process of its own, in the lab's namespace) prints the
    events of packets sent on the veth pair, each carrying a sequence number: sent every
    50 ms until the first event shows (the reader is up), then one more, timed from its
    send to its line."""
    artifact = compiled('log udp dport 5000 prefix "lab" snap 80\npass\n', hook)
    with netns.lab() as lab, ebpf_maps.open_filled(artifact) as obj:
        _attach(artifact, lab, hook, obj)
        cmd = [sys.executable, "-m", "pfc.cli", "log", "--dev", lab.dut, "--netns", lab.name,
               "--format", "json", "--timeout", "30"]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        inject = netns.Injector(lab.inj)
        try:
            seq = 0
            while proc.poll() is None and seq < 600 and \
                    not select.select([proc.stdout], [], [], 0.05)[0]:
                inject.send(_udp(lab, seq))
                seq += 1
            first = json.loads(proc.stdout.readline())
            sent = time.monotonic()
            inject.send(_udp(lab, 1000))
            while _seq(second := json.loads(proc.stdout.readline())) != 1000:
                pass  # the events of the packets sent before the reader was up
            latency = time.monotonic() - sent
        finally:
            inject.close()
            proc.kill()
            proc.wait()
    assert (first["line"], first["prefix"], first["verdict"]) == (1, "lab", "pass")
    assert first["dst"] == "192.168.0.79:5000" and first["ifindex"] == lab.dut_index
    assert second["prefix"] == "lab"
    assert latency < 1.0, latency


def _seq(event: dict) -> int:
    return int(event["bytes"][-8:], 16)


def _udp(lab, seq: int) -> bytes:
    src, dst = bytes((10, 0, 0, 1)), bytes((192, 168, 0, 79))
    packet = fb.ipv4(src, dst, 17, fb.udp(src, dst, 4000, 5000, seq.to_bytes(4, "big")))
    return fb.ethernet(lab.dut_mac, lab.inj_mac, 0x0800, packet)


# ------------------------------------------------------------------------ no kernel

@pytest.mark.parametrize("hook", HOOKS)
def test_golden_program(hook: str, golden) -> None:
    """The C of the policy above (``--update-golden`` rewrites it)."""
    text = render(compile_text(POLICY, "ebpf-flow.pf").require(), hook)
    golden(GOLDEN / "ebpf-flow" / f"{hook}.c", text)


def test_event_records_decode_to_the_oracle_shape() -> None:
    head = ebpf_events.HEAD.pack(7, 3, 60, 4, 1, 1, b"web".ljust(32, b"\0"))
    event = ebpf_events.decode(head + b"\x01\x02\x03\x04")
    assert (event.line, event.verdict, event.audit, event.prefix, event.data,
            event.ifindex, event.link) == (7, "drop", True, "web", b"\x01\x02\x03\x04", 3,
                                           True)
    with pytest.raises(ebpf_events.BadEvent):
        ebpf_events.decode(head[:40])


def test_the_prefix_reaches_the_c_as_integers_only() -> None:
    text = render(compile_text('log prefix "web: in/1" rate 3/minute\npass\n', "p.pf")
                  .require(), "xdp")
    assert "web" not in text and "0x2f6e69203a626577ULL" in text  # "web: in/" as a u64
    assert "pfc_events" in text and "pfc_buckets" in text and "pfc_per" not in text


def test_ct_state_stays_a_capability_error_on_every_ebpf_hook() -> None:
    policy = compile_text("pass tcp ct state established\ndefault drop\n", "c.pf").require()
    for hook in HOOKS:
        errors = capability_errors(policy, backends.get(hook), backends.registry())
        assert errors and "`ct state`" in errors[0].message, hook


def test_policies_without_the_features_keep_their_program() -> None:
    """No log, limit or audit: no flow maps, counter slots as before."""
    text = render(compile_text("count tcp\ndrop udp\n", "p.pf").require(), "tc")
    assert "pfc_events" not in text and "pfc_clock" not in text
    assert "pfc_event(" not in render(audited(compile_text("pass\n", "p.pf").require()),
                                      "tc")


def test_pfc_log_without_such_a_device_exits_2(capsys) -> None:
    from pfc.cli.main import main

    assert main(["log", "--dev", "pfc-no-such0", "--timeout", "0"]) == 2
    assert "no device pfc-no-such0" in capsys.readouterr().err
