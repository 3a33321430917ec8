"""The classic BPF target against the reference interpreter: in user space through
libpcap's own ``bpf_filter()`` (many policies × many frames), and in the kernel
(``SO_ATTACH_FILTER`` on a packet socket in a throw-away namespace).

Everything is judged by ``pfc.verifier.equiv.compare`` on the frame as a packet socket sees it
(``cbpf.view``). Policies: every example, and generated ones (``tests.strategies``,
``count=False, redirect=False``) under ``default pass`` and ``default drop``; frames:
``pfc.oracle.gen`` (malformed headers, bad lengths, later fragments, runts, tags), drawn by
derandomized hypothesis plus fixed-seed samples, so CI sees the same frames every run.
A failing run writes its frames to a pcap (replay with ``pfc run``/tcpdump).
"""

from __future__ import annotations

import ctypes
import dataclasses
import ipaddress
import socket
import tempfile
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pfc import backends
from pfc.backends.cbpf import asm as cbpf_asm
from pfc.backends.cbpf import backend as cbpf
from pfc.backends.cbpf import pcaplib
from pfc.backends.cbpf import run as cbpf_run
from pfc.backends.cbpf.graph import MAX_INSNS, PASS_RET
from pfc.build import build_artifact
from pfc.frontend import ir
from pfc.frontend.diagnostics import CompileError
from pfc.frontend.pipeline import compile_path, compile_text
from pfc.kernel import netns
from pfc.oracle import framebuild as fb
from pfc.oracle import gen
from pfc.oracle.pcap import write_pcap
from pfc.verifier.equiv import compare
from tests.paths import EXAMPLES
from tests.strategies import policies

REASON = netns.missing_privileges()
CBPF = backends.get("cbpf")
LIBPCAP = dataclasses.replace(CBPF, run=cbpf.run_libpcap)
SUPPORTED = [e for e in EXAMPLES if build_artifact(compile_path(e), "cbpf")[0] is not None]
MACS = (bytes.fromhex("020000000002"), bytes.fromhex("020000000001"))
SETTINGS = settings(derandomize=True, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])


def kernel(fn):
    """A kernel test: marked, and skipped (with the reason) only without root."""
    fn = pytest.mark.kernel(fn)
    return pytest.mark.skipif(REASON is not None, reason=REASON or "")(fn)


def build(text: str, fmt: str = "asm"):
    artifact, diags = build_artifact(compile_text(text, "gen.pf"), "cbpf", fmt)
    assert artifact is not None, diags
    return artifact


def with_default(text: str, verdict: str) -> str:
    rules = [line for line in text.splitlines() if not line.startswith("default")]
    return "\n".join([f"default {verdict}"] + rules) + "\n"


def check(artifact, frames, backend=LIBPCAP):
    report = compare(artifact, backend, frames)
    if not report.ok:
        path = Path(tempfile.mkdtemp(prefix="pfc-cbpf-")) / "frames.pcap"
        write_pcap(path, frames)
        pytest.fail(f"{report.summary()}\npolicy:\n{artifact.policy.source}\n"
                    f"{artifact.text}\nframes: {path}")
    return report


def seed_of(text: str) -> int:
    return zlib.crc32(text.encode())


def udp4(dst: str, dport: int, payload: bytes = b"x", **ip) -> bytes:
    src, dst_b = bytes([10, 0, 0, 1]), ipaddress.ip_address(dst).packed
    segment = fb.udp(src, dst_b, 40000, dport, payload)
    return fb.ethernet(*MACS, 0x0800, fb.ipv4(src, dst_b, 17, segment, **ip))


# --------------------------------------------------------------------------- printing

def _bpf_image(insn, i: int) -> str:
    lib = pcaplib.library()
    lib.bpf_image.argtypes = [ctypes.POINTER(pcaplib.BpfInsn), ctypes.c_int]
    lib.bpf_image.restype = ctypes.c_char_p
    return lib.bpf_image(ctypes.byref(pcaplib.BpfInsn(*insn)), i).decode()


def test_asm_is_what_bpf_image_prints() -> None:
    """Every instruction pfc emits prints as libpcap's bpf_image (tcpdump -d) prints it,
    except ``ldx #pktlen``, which libpcap cannot print (``unimp 0x81``)."""
    texts = ["default drop\npass tcp dst 192.168.50.0/24 payload[1] == \"X\" flags syn\n"
             "pass udp src 2001:db8::/32 payload[3:5] == \"hello\"\n"
             "pass tcp src 2001:db8::1 payload[0] == 1\npass icmp ttl 1-10 len 100\n",
             "drop udp dport 53\ndrop ip6 len 60-100\ndrop tcp flags syn,!ack\n"
             "drop udp dst 10.0.0.0/8 payload[0:4] == \"abcd\"\n",
             "default drop\n" + "".join(f"pass udp dst 10.{i}.0.0/16 dport {i}\n"
                                        for i in range(90))]
    seen = set()
    for text in texts:
        insns = cbpf.compile_policy(compile_text(text).policy)
        for i, insn in enumerate(insns):
            seen.add(insn[0])
            if insn[0] != cbpf_asm.LDX_LEN:
                assert cbpf_asm.image(insn, i) == _bpf_image(insn, i)
    emitted = {0x20, 0x28, 0x30, 0x40, 0x48, 0x50, 0x80, 0x81, 0xB1, 0x04, 0x0C,
               0x1C, 0x54, 0x74, 0x07, 0x15, 0x25, 0x35, 0x45, 0x2D, 0x3D, 0x05, 0x06}
    assert seen == emitted


def test_formats_hold_the_same_program() -> None:
    text = Path(EXAMPLES[0].parent / "edge-drop.pf").read_text()
    asm = build(text, "asm")
    insns = asm.meta["insns"]
    ddd = build(text, "ddd").text.split("\n")
    assert int(ddd[0]) == len(insns)
    assert [tuple(map(int, line.split())) for line in ddd[1:-1]] == insns
    assert build(text, "c").text.splitlines()[0] == "{ 0x28, 0, 0, 0x0000000c },"
    binary = build(text, "bin")
    assert binary.text is None
    assert cbpf_asm.from_bin(next(iter(binary.files.values()))) == insns
    assert asm.text.splitlines()[0] == "(000) ldh      [12]"
    last = len(insns) - 1
    assert asm.text.splitlines()[-2:] == [f"({last - 1:03d}) ret      #0",
                                          f"({last:03d}) ret      #{PASS_RET}"]


def test_edge_drop_is_shorter_than_libpcap_for_the_same_meaning() -> None:
    """The seed's rule: libpcap needs 33 instructions for the spelled-out validity
    clauses, more with the length guards pfc's meaning needs (benchmarks/)."""
    insns = build(Path(EXAMPLES[0].parent / "edge-drop.pf").read_text()).meta["insns"]
    valid = ("(ip[0] & 0xf0 = 0x40) and (ip[0] & 0xf >= 5) and "
             "(ip[2:2] >= (ip[0] & 0xf) * 4) and (ip[2:2] + 14 <= len)")
    libpcap = pcaplib.compile_filter(
        f"not (udp and dst host 192.168.0.79 and {valid} and udp dst port 12345)")
    assert len(libpcap) == 33
    assert len(insns) <= 25 < len(libpcap)


# ----------------------------------------------------------------------- capabilities

@pytest.mark.parametrize("rule,feature", [
    ("count udp dport 53", "`count` rules"),
    ("redirect udp dst 192.168.64.2 dport 8080 to 10.0.1.2:8083", "`redirect` rules")])
def test_count_and_redirect_are_refused_by_name(rule: str, feature: str) -> None:
    artifact, diags = build_artifact(compile_text(f"drop tcp\n{rule}\n"), "cbpf")
    assert artifact is None and len(diags) == 1
    assert f"target `cbpf` cannot express {feature} (rule at line 2)" in diags[0].message
    assert "tc" in diags[0].hint and "xdp" in diags[0].hint


def test_a_policy_beyond_4096_instructions_names_its_rule_count() -> None:
    """fuzz-and-faults.md §6: the refusal says how many rules need how many
    instructions, and the limit; ``limits`` (the hook ``pfc check --target`` asks)
    gives the same diagnostic, and nothing for a policy that fits."""
    policy = compile_text(_many_rules(260)).policy
    with pytest.raises(CompileError) as info:
        cbpf.compile_policy(policy)
    [diag] = info.value.diagnostics
    graph = cbpf.cbpf_cfg.build(policy)
    cbpf.cbpf_opt.optimise(graph, cbpf.cbpf_cfg.IMPLICATIONS)
    size = len(cbpf_asm.assemble(graph))
    assert diag.message == (f"target `cbpf`: the policy's 260 rules need {size:,} "
                            "instructions; classic BPF allows 4096 (BPF_MAXINSNS)")
    assert diag.code == "too-large" and "eBPF target (socket, tc, xdp)" in diag.hint
    assert cbpf.limits(policy) == [diag]
    assert cbpf.limits(compile_text(_many_rules(100)).policy) == []


def _set_policy(tmp_path: Path, entries: int) -> Path:
    """``drop src $block`` over ``entries`` IPv4 hosts (a set file)."""
    (tmp_path / "block.txt").write_text("".join(
        f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}\n" for i in range(1, 2 * entries, 2)))
    path = tmp_path / "big.pf"
    path.write_text('set block = file "block.txt"\ndefault pass\npass udp dport 53\n'
                    "drop src $block\n")
    return path


def test_a_set_far_beyond_the_limit_fails_before_any_graph_is_built(tmp_path, monkeypatch):
    """Classic BPF has no maps: 10k addresses are ~10k tests. The error comes from the
    size estimate, on the rule with the set, before cbpf_cfg/cbpf_opt/cbpf_asm run
    (which take minutes at 100k)."""
    compiled = compile_path(_set_policy(tmp_path, 10_000))
    monkeypatch.setattr(cbpf.cbpf_cfg, "build", lambda policy: pytest.fail("built"))
    artifact, diags = build_artifact(compiled, "cbpf")
    assert artifact is None and len(diags) == 1
    d = diags[0]
    assert d.code == "too-large" and d.span == compiled.policy.rules[1].span
    assert "this rule needs about 10,000 instructions (10,000 addresses and prefixes in " \
           "`src`), the whole policy about 10,001; classic BPF allows 4096 " \
           "(BPF_MAXINSNS), and has no maps" in d.message
    assert all(t in d.hint for t in ("socket", "tc", "xdp", "nft", "iptables"))


def test_many_small_rules_far_beyond_the_limit_name_the_rule_that_passes_it() -> None:
    text = "".join(f"drop src 10.{i >> 8}.{i & 255}.0/24\n" for i in range(4200))
    policy = compile_text(text).require()
    d = cbpf.too_large(policy)
    assert d is not None and d.code == "too-large"
    assert "the policy's 4,200 rules need about 8,400 instructions (this one passes " \
           "4096); classic BPF allows 4096" in d.message
    assert d.span == policy.rules[2048].span  # 2 tests each: rule 2049 passes 4096


def test_a_set_within_the_limit_compiles(tmp_path) -> None:
    compiled = compile_path(_set_policy(tmp_path, 2_000))
    assert cbpf.too_large(compiled.policy) is None
    insns = cbpf.compile_policy(compiled.policy)
    assert 2_000 < len(insns) <= MAX_INSNS


def _many_rules(count: int) -> str:
    """IPv6 rules that share nothing but the header checks: ~17 instructions each."""
    def address(head: str, i: int) -> str:
        return head + ":" + ":".join([f"{i:x}"] * 7)
    return "".join(f"drop tcp src {address('2001', i)} dst {address('3001', i)} dport {i}\n"
                   for i in range(1, count + 1))


def test_empty_sets_never_match_anything() -> None:
    """An empty address set: the match is false (present or not), its negation true
    exactly when the field is present."""
    base = compile_text("drop udp dst 10.0.0.0/8\n").policy
    rule = base.rules[0]
    empty = dataclasses.replace(rule.matches[0], prefixes=())
    frames = [udp4("10.1.2.3", 53), udp4("192.168.0.1", 53), udp4("10.1.2.3", 53)[:30]]
    drop, keep = 0, PASS_RET
    for negated, want in ((False, [keep, keep, keep]), (True, [drop, drop, keep])):
        policy = dataclasses.replace(base, rules=(dataclasses.replace(
            rule, matches=(dataclasses.replace(empty, negated=negated),)),),
            default=ir.Verdict.PASS)
        program = pcaplib.Program(cbpf.compile_policy(policy))
        assert [program.run(f) for f in frames] == want


def test_long_jumps_get_trampolines() -> None:
    """Jumps beyond 255 instructions go through `ja`/`ret` trampolines."""
    rules = [f"pass udp dst 10.{i}.0.0/16 dport {1000 + i} payload[{i % 9}:3] == \"abc\""
             for i in range(90)]
    text = "default drop\n" + "\n".join(rules) + "\n"
    artifact = build(text)
    insns = artifact.meta["insns"]
    assert len(insns) > 300 and any(code == cbpf_asm.JA for code, *_ in insns)
    assert pcaplib.validate(insns)
    check(artifact, gen.sample(artifact.policy, 3000, seed=7))


def test_view_is_what_a_packet_socket_sees() -> None:
    frame = udp4("192.168.0.79", 12345)
    tagged = frame[:12] + b"\x81\x00\x00\x05" + frame[12:]
    assert cbpf.view("socket", frame) == frame
    assert cbpf.view("socket", tagged) == frame
    assert cbpf.view("socket", frame[:13]) is None
    assert cbpf.view("socket", tagged[:19]) is None


# ---------------------------------------------------------- differential, libpcap

def test_examples_agree_in_libpcap() -> None:
    for example in SUPPORTED:
        artifact, _ = build_artifact(compile_path(example), "cbpf")
        check(artifact, gen.sample(artifact.policy, 2000, seed=11))


@pytest.mark.parametrize("default", ["pass", "drop"])
@settings(SETTINGS, max_examples=250)
@given(data=st.data(), text=policies(count=False, redirect=False, max_rules=8))
def test_generated_policies_agree_in_libpcap(default: str, data, text: str) -> None:
    """Hundreds of policies: hypothesis frames (shrinkable) plus a seeded sample."""
    text = with_default(text, default)
    artifact = build(text)
    frames = data.draw(st.lists(gen.frames(artifact.policy), min_size=25, max_size=25))
    frames += gen.sample(artifact.policy, 400, seed=seed_of(text))
    check(artifact, frames)


@settings(SETTINGS, max_examples=100)
@given(text=policies(count=False, redirect=False, max_rules=8))
def test_the_optimiser_keeps_the_meaning(text: str) -> None:
    """The unoptimised graph and the optimised one give the interpreter's verdicts."""
    policy = compile_text(text).policy
    plain = cbpf.compile_policy(policy, optimise=False)
    best = cbpf.compile_policy(policy)
    assert len(best) <= len(plain)
    frames = [v for f in gen.sample(policy, 300, seed=seed_of(text))
              if (v := cbpf.view("socket", f)) is not None]
    a, b = pcaplib.Program(plain).run_all(frames), pcaplib.Program(best).run_all(frames)
    assert [x == 0 for x in a] == [x == 0 for x in b]


def test_header_validity_edges() -> None:
    """One condition of "a header the kernel accepts" at a time, under default pass."""
    artifact = build("drop udp dst 192.168.0.79 dport 12345\n")
    good = udp4("192.168.0.79", 12345)
    cases = {
        "accepted": (good, 0),
        "version 5": (udp4("192.168.0.79", 12345, version=5), PASS_RET),
        "IHL 4": (udp4("192.168.0.79", 12345, ihl=4), PASS_RET),
        "total < 4*IHL": (udp4("192.168.0.79", 12345, total_length=19), PASS_RET),
        "total > frame": (udp4("192.168.0.79", 12345, total_length=100), PASS_RET),
        "later fragment": (udp4("192.168.0.79", 12345, frag_offset=1), PASS_RET),
        "first fragment, MF": (udp4("192.168.0.79", 12345, mf=True), 0),
        "port in padding": (udp4("192.168.0.79", 12345, b"", total_length=20 + 2)[:38],
                            0),
        "port cut off": (udp4("192.168.0.79", 12345, b"")[:37], PASS_RET),
        "options": (udp4("192.168.0.79", 12345, options=b"\x01" * 8), 0),
    }
    program = pcaplib.Program(artifact.meta["insns"])
    for name, (frame, want) in cases.items():
        assert program.run(frame) == want, name
    check(artifact, [frame for frame, _ in cases.values()])


# ------------------------------------------------------------------------------ kernel

@pytest.fixture(scope="module")
def kernel_session():
    if REASON:
        pytest.skip(REASON)
    with cbpf_run.session() as current:
        yield current


@kernel
@pytest.mark.parametrize("example", SUPPORTED, ids=[e.stem for e in SUPPORTED])
def test_examples_in_the_kernel(example: Path, kernel_session) -> None:
    """compile → asm → SO_ATTACH_FILTER accepts it → 2,000 frames judged right. What is
    attached is the emitted `bin` file, and the `asm` text is that program printed."""
    compiled = compile_path(example)
    asm, _ = build_artifact(compiled, "cbpf", "asm")
    binary, _ = build_artifact(compiled, "cbpf", "bin")
    program = cbpf_asm.from_bin(next(iter(binary.files.values())))
    assert cbpf_asm.to_asm(program) == asm.text
    binary.meta["insns"] = program
    report = check(binary, gen.sample(binary.policy, 2000, seed=5), CBPF)
    assert report.seen > 1800


@kernel
@settings(SETTINGS, max_examples=100)
@given(data=st.data(), text=policies(count=False, redirect=False, max_rules=6))
def test_generated_policies_in_the_kernel(data, text: str, kernel_session) -> None:
    default = "drop" if seed_of(text) % 2 else "pass"
    text = with_default(text, default)
    artifact = build(text)
    frames = data.draw(st.lists(gen.frames(artifact.policy), min_size=20, max_size=20))
    frames += gen.sample(artifact.policy, 200, seed=seed_of(text))
    check(artifact, frames, CBPF)
    seen = [v for f in frames if (v := cbpf.view("socket", f)) is not None]
    kernel_verdicts = cbpf.run_kernel(artifact, seen).verdicts
    assert kernel_verdicts == cbpf.run_libpcap(artifact, seen).verdicts


@kernel
def test_the_kernel_runner_can_fail(kernel_session) -> None:
    """A wrong program is caught: the drop-everything policy judged on a pass-all
    program disagrees on every frame."""
    artifact = build("drop\n")
    artifact.meta["insns"] = [(cbpf_asm.RET, 0, 0, PASS_RET)]
    report = compare(artifact, CBPF, gen.sample(artifact.policy, 50, seed=1))
    assert report.seen == len(report.mismatches) > 0


@kernel
def test_what_packet_sockets_see(kernel_session) -> None:
    """Measured: runts cannot be sent (EINVAL); 14 bytes arrive; the outer tag is gone;
    an inner one stays; a tagged frame under 20 bytes never arrives."""
    lab = kernel_session.lab
    with pytest.raises(OSError) as info:
        kernel_session.inj.send(bytes(13))
    assert info.value.errno == 22
    sock = netns.packet_socket(lab.dut)
    try:
        netns.attach_cbpf(sock, [(cbpf_asm.RET, 0, 0, PASS_RET)])
        netns.drain(sock)
        plain = lab.dut_mac + MACS[1] + b"\x08\x00"
        frame = udp4("192.168.0.79", 12345)
        frame = lab.dut_mac + frame[6:]
        tagged = frame[:12] + b"\x81\x00\x00\x07" + frame[12:]
        double = frame[:12] + b"\x88\xa8\x00\x07\x81\x00\x00\x08" + frame[12:]
        short_tagged = plain[:12] + b"\x81\x00\x00\x07\x08\x00"  # 18 bytes
        for sent in (plain, tagged, double, short_tagged):
            kernel_session.inj.send(sent)
        kernel_session.seq += 1
        kernel_session.inj.send(netns.marker_frame(lab.dut_mac, cbpf_run.MARK_MAC,
                                                   kernel_session.seq))
        netns.recv_until_marker(kernel_session.mark, kernel_session.seq)
        got = cbpf_run.received(sock)
    finally:
        sock.close()
    assert got == [plain, frame, frame[:12] + b"\x81\x00\x00\x08" + frame[12:]]
    assert [cbpf.view("socket", f) for f in (plain, tagged, double, short_tagged)] == \
        got + [None]


@kernel
def test_long_programs_in_the_kernel(kernel_session) -> None:
    """Trampolines and a program near the 4096-instruction limit load and judge right."""
    rules = [f"pass udp dst 10.{i}.0.0/16 dport {1000 + i} payload[{i % 9}:3] == \"abc\""
             for i in range(90)]
    trampolines = build("default drop\n" + "\n".join(rules) + "\n")
    big = build(_many_rules(230))
    assert any(code == cbpf_asm.JA for code, *_ in trampolines.meta["insns"])
    assert 3000 < len(big.meta["insns"]) <= MAX_INSNS
    for artifact in (trampolines, big):
        check(artifact, gen.sample(artifact.policy, 1500, seed=3), CBPF)


@kernel
def test_option_memory_bounds_what_attaches(kernel_session) -> None:
    """Measured: SO_ATTACH_FILTER charges the program converted to eBPF against
    net.core.optmem_max (per namespace; 131072 by default) and fails with ENOMEM past
    it — 1168 ``ldh [12]`` fit, 1169 do not; ``cbpf_asm.kernel_size`` predicts it."""
    def attaches(program) -> bool:
        sock = netns.packet_socket(kernel_session.lab.dut)
        try:
            netns.attach_cbpf(sock, program)
            return True
        except OSError as exc:
            assert exc.errno == 12
            return False
        finally:
            sock.close()
    fits = [(0x28, 0, 0, 12)] * 1168 + [(cbpf_asm.RET, 0, 0, PASS_RET)]
    too_big = [(0x28, 0, 0, 12)] + fits
    with open(cbpf_run.OPTMEM) as f:
        before = f.read()
    try:
        with open(cbpf_run.OPTMEM, "w") as f:
            f.write(str(cbpf_asm.OPTMEM_DEFAULT))
        assert attaches(fits) and not attaches(too_big)
        assert cbpf_asm.kernel_size(fits) <= cbpf_asm.OPTMEM_BUDGET < \
            cbpf_asm.kernel_size(too_big)
        cbpf_run.make_room(too_big)
        assert attaches(too_big)
    finally:
        with open(cbpf_run.OPTMEM, "w") as f:
            f.write(before)


def test_no_namespace_sysctl_is_no_crash(tmp_path, monkeypatch) -> None:
    """Linux 5.10 and 6.1 have net.core.optmem_max only in the initial namespace (the
    lab's runner found no /proc/sys/net/core/optmem_max there and crashed, exit 70):
    nothing to raise, nothing host-wide is changed, and an ENOMEM says where the limit
    is."""
    missing = tmp_path / "optmem_max"
    monkeypatch.setattr(cbpf_run, "OPTMEM", str(missing))
    program = [(0x28, 0, 0, 12)] * 5000 + [(cbpf_asm.RET, 0, 0, PASS_RET)]
    cbpf_run.make_room(program)
    assert not missing.exists()
    why = cbpf_run._refusal(program, OSError(12, "Cannot allocate memory"))
    assert "host-wide on this kernel" in why


@kernel
def test_a_load_beyond_the_frame_drops_in_the_kernel(kernel_session) -> None:
    """Kernel fact 9 on a packet socket: ``ld [100]`` on a 103-byte frame ends the
    program with 0 (dropped), on 104 bytes it runs on; the same for ``ldh [x + k]``."""
    lab = kernel_session.lab
    frame = lab.dut_mac + MACS[1] + b"\x88\xb6" + bytes(90)  # 104 bytes
    absolute = [(0x20, 0, 0, 100), (cbpf_asm.RET, 0, 0, PASS_RET)]
    relative = [(0x01, 0, 0, 50), (0x48, 0, 0, 52), (cbpf_asm.RET, 0, 0, PASS_RET)]
    for program in (absolute, relative):
        got = kernel_session.judge(program, [frame, frame[:103]])
        assert got == [frame, None]
        assert [pcaplib.run_filter(program, f) for f in (frame, frame[:103])] == [PASS_RET, 0]


@kernel
def test_the_kernel_refuses_a_broken_program(kernel_session) -> None:
    with pytest.raises(cbpf_run.KernelRejected):
        kernel_session.judge([(0x15, 9, 0, 1), (cbpf_asm.RET, 0, 0, 0)], [bytes(60)])


def test_socket_module_constants() -> None:
    assert socket.AF_PACKET == 17 and cbpf_run.PACKET_OUTGOING == socket.PACKET_OUTGOING


@kernel
def test_the_largest_sets_cbpf_takes_judge_right_in_the_kernel(kernel_session,
                                                                tmp_path) -> None:
    """3,000 hosts: ~3,000 tests, near BPF_MAXINSNS (docs/cbpf.md), in the kernel."""
    compiled = compile_path(_set_policy(tmp_path, 3_000))
    artifact, diags = build_artifact(compiled, "cbpf")
    assert artifact is not None, diags
    assert 3_000 < artifact.meta["length"] <= MAX_INSNS
    check(artifact, gen.sample(artifact.policy, 1500, seed=8), CBPF)
