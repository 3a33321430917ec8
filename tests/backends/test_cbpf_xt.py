"""Classic BPF that reads from the IP header (``--link ip``, hook ``xt-bpf``) against
the reference interpreter: through libpcap's ``bpf_filter()`` on the packet from its IP
header, and in the kernel in ``iptables``/``ip6tables -m bpf --bytecode`` rules
(``backends/cbpf/xt.py``), frames sent over a veth in a throw-away namespace and judged
on what the netfilter hook sees of them (``iplab.hook_view``).

Also measured here: an Ethernet-link program (what ``--format ddd`` gave before
``--link ip`` existed) is wrong under xt_bpf (new-user-trial finding 6), and tc's
classic ``bpf bytecode`` filter, unlike xt_bpf, shows the program the Ethernet header.
"""

from __future__ import annotations

import dataclasses
import select
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from pfc import backends
from pfc.backends.base import Artifact
from pfc.backends.cbpf import asm as cbpf_asm
from pfc.backends.cbpf import backend as cbpf
from pfc.backends.cbpf import xt
from pfc.backends.cbpf.graph import RAW_IP
from pfc.build import build_artifact
from pfc.frontend.pipeline import compile_path, compile_text
from pfc.kernel import iplab, netns
from pfc.oracle import framebuild as fb
from pfc.oracle import gen
from pfc.verifier.equiv import compare
from tests.paths import EXAMPLES
from tests.strategies import policies

REASON = netns.missing_privileges()
CBPF = backends.get("cbpf")
LIBPCAP = dataclasses.replace(CBPF, run=cbpf.run_libpcap)
# the widest netfilter view: raw PREROUTING sees every packet ip_rcv accepts
PREROUTING = dataclasses.replace(CBPF, view=lambda hook, f: iplab.hook_view(False, f))
SUPPORTED = [e for e in EXAMPLES if build_artifact(compile_path(e), "cbpf")[0] is not None]
FITS = [e for e in SUPPORTED  # within xt_bpf's 64 instructions
        if build_artifact(compile_path(e), "cbpf", hook="xt-bpf")[0] is not None]
SETTINGS = settings(derandomize=True, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])
ROOT = Path(__file__).resolve().parents[2]


def kernel(fn):
    fn = pytest.mark.kernel(fn)
    return pytest.mark.skipif(REASON is not None, reason=REASON or "")(fn)


def build(text: str, hook: str = "xt-bpf"):
    artifact, diags = build_artifact(compile_text(text, "gen.pf"), "cbpf", hook=hook)
    assert artifact is not None, diags
    return artifact


def unlimited(source: str | Path) -> Artifact:
    """The ``--link ip`` program of a policy (text or file), however long: what it
    means does not depend on xt_bpf's 64-instruction limit; libpcap runs any length."""
    compiled = compile_path(source) if isinstance(source, Path) else \
        compile_text(source, "gen.pf")
    policy = compiled.require()
    insns = cbpf.compile_policy(policy, link=RAW_IP)
    return Artifact("cbpf", "xt-bpf", "asm", cbpf_asm.to_asm(insns), {}, policy,
                    {"insns": insns, "link": "ip"})


def check(artifact, frames, backend=LIBPCAP):
    report = compare(artifact, backend, frames)
    assert report.ok, f"{report.summary()}\n{artifact.policy.source}\n{artifact.text}"
    return report


def in_kernel(chain: str = "filter-input", flavour: str = "nft", view=None):
    """The backend with the xt runner on ``chain`` (and that hook's view)."""
    def run(artifact, frames):
        return xt.run(cbpf.program(artifact), frames, chain, flavour)
    if view is None and chain == "raw-prerouting":
        view = PREROUTING.view
    return dataclasses.replace(CBPF, run=run, view=view or CBPF.view)


def udp(version: int, dport: int, payload: bytes = b"x") -> bytes:
    if version == 4:
        src, dst = bytes([10, 0, 0, 1]), bytes([192, 168, 0, 79])
        l3, ethertype = fb.ipv4(src, dst, 17, fb.udp(src, dst, 40000, dport, payload)), 0x0800
    else:
        src, dst = bytes(15) + b"\x01", bytes.fromhex("20010db8") + bytes(11) + b"\x02"
        l3, ethertype = fb.ipv6(src, dst, 17, fb.udp(src, dst, 40000, dport, payload)), 0x86DD
    return fb.ethernet(bytes.fromhex("020000000002"), bytes.fromhex("020000000001"),
                       ethertype, l3)


# ------------------------------------------------------------------- the program

def test_link_ip_reads_from_the_ip_header() -> None:
    """The family is the version nibble (no EtherType), every offset 14 less; on the
    packet from its IP header the program gives the verdicts the Ethernet program
    gives on the frame."""
    artifact = build("drop udp dport 53\n")
    asm = artifact.text.splitlines()
    assert asm[0] == "(000) ldb      [0]" and asm[1].startswith("(001) jge      #0x40")
    assert not any("[12]" in line for line in asm) and artifact.meta["link"] == "ip"
    ether = build("drop udp dport 53\n", "socket")
    frames = [udp(v, p) for v in (4, 6) for p in (53, 54)]
    assert cbpf.run_libpcap(artifact, frames).verdicts == \
        cbpf.run_libpcap(ether, frames).verdicts
    assert [v.value for v in cbpf.run_libpcap(artifact, frames).verdicts] == \
        ["drop", "pass", "drop", "pass"]


def test_rules_for_all_match_every_packet_the_hook_sees() -> None:
    """Every packet xt_bpf sees is IP: `drop` (protocol all) drops all of them."""
    artifact = build("pass udp dport 53\ndrop\n")
    report = check(artifact, gen.sample(artifact.policy, 500, seed=2))
    assert report.seen > 100


def test_examples_agree_on_what_netfilter_sees() -> None:
    for example in SUPPORTED:
        artifact = unlimited(example)
        frames = gen.sample(artifact.policy, 1500, seed=21)
        check(artifact, frames)
        check(artifact, frames, dataclasses.replace(PREROUTING, run=cbpf.run_libpcap))


@settings(SETTINGS, max_examples=150)
@given(data=st.data(), text=policies(count=False, redirect=False, max_rules=8))
def test_generated_policies_agree_on_what_netfilter_sees(data, text: str) -> None:
    artifact = unlimited(text)
    frames = data.draw(st.lists(gen.frames(artifact.policy), min_size=25, max_size=25))
    frames += gen.sample(artifact.policy, 300, seed=zlib.crc32(text.encode()))
    check(artifact, frames, dataclasses.replace(PREROUTING, run=cbpf.run_libpcap))


def test_xt_bpf_takes_64_instructions() -> None:
    """xt_bpf holds at most 64 instructions (XT_BPF_MAX_NUM_INSTR; iptables refuses
    65, measured in ``test_the_kernel_limit_is_64``): a longer program is refused, with
    the rule count, the size and the limit; the same policy fits a packet socket."""
    text = "".join(f"drop udp dport {p} sport {p + 1}\n" for p in range(12))
    artifact, diags = build_artifact(compile_text(text, "gen.pf"), "cbpf", hook="xt-bpf")
    size = len(unlimited(text).meta["insns"])
    assert artifact is None and size > 64
    assert diags[0].message == (f"target `cbpf`: the policy's 12 rules need {size} "
                                "instructions; iptables -m bpf (xt_bpf) allows 64 "
                                "(XT_BPF_MAX_NUM_INSTR)")
    assert "target iptables or nft" in diags[0].hint
    assert build_artifact(compile_text(text, "gen.pf"), "cbpf")[0] is not None


# ------------------------------------------------------------------------ the CLI

def _pfc(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pfc.cli.main", *args], capture_output=True,
                          text=True, cwd=ROOT)


def test_cli_link_ip_is_hook_xt_bpf() -> None:
    edge = str(ROOT / "examples" / "edge-drop.pf")
    link = _pfc("compile", edge, "--target", "cbpf", "--link", "ip", "--format", "ddd")
    hook = _pfc("compile", edge, "--target", "cbpf", "--hook", "xt-bpf", "--format", "ddd")
    assert link.returncode == 0 and link.stdout == hook.stdout and not link.stderr
    assert link.stdout.splitlines()[1] == "48 0 0 0"  # ldb [0]: the version nibble
    program = build_artifact(compile_path(edge), "cbpf", hook="xt-bpf")[0].meta["insns"]
    # docs/cbpf.md's recipe: `tr '\n' ,` makes the ddd text what the runner loads
    assert link.stdout.replace("\n", ",") == xt.bytecode(program) + ","
    ether = _pfc("compile", edge, "--target", "cbpf", "--link", "ether", "--format", "ddd")
    assert ether.stdout.splitlines()[1] == "40 0 0 12"  # ldh [12]: the EtherType
    for bad, why in ((("--target", "nft", "--link", "ip"), "--link is for target cbpf"),
                     (("--target", "cbpf", "--link", "ip", "--hook", "socket"),
                      "--link ip is hook `xt-bpf`, not `socket`")):
        result = _pfc("compile", edge, *bad)
        assert result.returncode == 2 and why in result.stderr, result.stderr


# ------------------------------------------------------------------------ kernel

@pytest.fixture(scope="module")
def xt_session():
    if REASON:
        pytest.skip(REASON)
    with xt.session() as current:
        yield current


@kernel
@pytest.mark.parametrize("example", FITS, ids=[e.stem for e in FITS])
def test_examples_in_iptables_input(example: Path, xt_session) -> None:
    """`iptables -A INPUT -m bpf --bytecode` and ip6tables with the same program."""
    artifact, _ = build_artifact(compile_path(example), "cbpf", hook="xt-bpf")
    report = check(artifact, gen.sample(artifact.policy, 1500, seed=5), in_kernel())
    assert report.seen > 300


@kernel
@pytest.mark.parametrize("chain,flavour", [("raw-prerouting", "nft"),
                                           ("filter-input", "legacy")])
def test_other_chains_and_flavours(chain: str, flavour: str, xt_session) -> None:
    example = next(e for e in SUPPORTED if e.stem == "edge-drop")
    artifact, _ = build_artifact(compile_path(example), "cbpf", hook="xt-bpf")
    text = "default drop\npass udp dport 53\npass tcp dst 2001:db8::/32 flags syn,!ack\n" \
           "pass icmp6\npass icmp ttl 1-64\n"
    for art in (artifact, build(text)):
        report = check(art, gen.sample(art.policy, 1200, seed=6), in_kernel(chain, flavour))
        assert report.seen > 300


@kernel
@settings(SETTINGS, max_examples=40)
@given(data=st.data(), text=policies(count=False, redirect=False, max_rules=3))
def test_generated_policies_in_iptables(data, text: str, xt_session) -> None:
    """Policies of up to three rules (most fit in 64 instructions; the others are
    refused and left out)."""
    artifact, _ = build_artifact(compile_text(text, "gen.pf"), "cbpf", hook="xt-bpf")
    assume(artifact is not None)
    frames = data.draw(st.lists(gen.frames(artifact.policy), min_size=20, max_size=20))
    frames += gen.sample(artifact.policy, 200, seed=zlib.crc32(text.encode()))
    chain = "raw-prerouting" if zlib.crc32(text.encode()) % 2 else "filter-input"
    check(artifact, frames, in_kernel(chain))


@kernel
def test_the_kernel_limit_is_64(xt_session) -> None:
    """iptables (both flavours) loads a 64-instruction program and refuses 65."""
    program = [(0x28, 0, 0, 12)] * 63 + [(cbpf_asm.RET, 0, 0, 1)]
    for flavour in ("nft", "legacy"):
        xt_session.install(program, "filter-input", flavour)
        with pytest.raises(RuntimeError, match="number of instructions exceeds maximum"):
            xt.insert([(0x28, 0, 0, 12)] + program, "filter-input", 4, flavour)


@kernel
def test_an_ethernet_program_is_wrong_under_xt_bpf(xt_session) -> None:
    """Finding 6: the socket program (`--format ddd` without `--link ip`) reads offset
    12 as an EtherType, but xt_bpf starts at the IP header: under `default pass` it
    matches the frames the policy drops. The runner tells."""
    artifact, _ = build_artifact(compile_path(ROOT / "examples" / "edge-drop.pf"), "cbpf")
    assert artifact.hook == "socket"
    wrong = dataclasses.replace(artifact, hook="xt-bpf")  # judged on what xt_bpf sees
    frames = [udp(4, 12345), udp(4, 53)] * 3
    report = compare(wrong, in_kernel(), frames)
    assert report.seen == 6 and len(report.mismatches) == 3
    right = build_artifact(compile_path(ROOT / "examples" / "edge-drop.pf"), "cbpf",
                           hook="xt-bpf")[0]
    assert compare(right, in_kernel(), frames).ok


@kernel
def test_tc_classic_bpf_sees_the_ethernet_header(xt_session) -> None:
    """Measured, for docs/cbpf.md: cls_bpf at ingress shows a classic program the frame
    from its Ethernet header (the outer VLAN tag removed), not from the IP header as
    xt_bpf does: tc takes `--link ether` programs. The program's filter (pref 1)
    mirrors what it matches to one veth pair, a catch-all u32 filter (pref 2) the rest
    to another (act_mirred; this kernel has no act_gact): each frame arrives once."""
    lab = xt_session.lab
    for pair in ("pfcmA", "pfcmC"):
        _sh(f"ip link add {pair} type veth peer name {pair[:-1]}{chr(ord(pair[-1]) + 1)}")
    _sh("for d in pfcmA pfcmB pfcmC pfcmD; do ip link set $d up; done")
    try:
        _sh(f"tc qdisc add dev {lab.dut} clsact && tc filter add dev {lab.dut} ingress "
            "pref 2 u32 match u32 0 0 action mirred egress mirror dev pfcmC")
        seen = {}
        for hook in ("socket", "xt-bpf"):
            art = build("default drop\npass udp dport 53\n", hook)
            subprocess.run(f"tc filter del dev {lab.dut} ingress pref 1", shell=True,
                           capture_output=True)  # none the first time
            _sh(f"tc filter add dev {lab.dut} ingress pref 1 bpf bytecode "
                f"'{xt.bytecode(art.meta['insns'])}' action mirred egress mirror dev pfcmA")
            frame = lab.dut_mac + udp(4, 53)[6:]
            seen[hook] = _mirrored(xt_session.inj, [frame, frame[:12] + b"\x81\x00\x00\x05"
                                                    + frame[12:]], frame[6:12])
        assert seen == {"socket": (2, 0), "xt-bpf": (0, 2)}
    finally:
        subprocess.run(f"tc qdisc del dev {lab.dut} clsact; ip link del pfcmA; "
                       "ip link del pfcmC", shell=True, capture_output=True)


def _sh(command: str) -> None:
    subprocess.run(command, shell=True, check=True, capture_output=True)


def _mirrored(inj, frames: list[bytes], source_mac: bytes) -> tuple[int, int]:
    """Send ``frames``; how many arrive mirrored by the program's filter and by the
    catch-all, awaited until all have arrived (10 s at most, then what came)."""
    socks = [netns.packet_socket(d) for d in ("pfcmB", "pfcmD")]
    try:
        for sock in socks:
            netns.drain(sock)
        for frame in frames:
            inj.send(frame)
        counts, deadline = [0, 0], time.monotonic() + 10
        while sum(counts) < len(frames) and time.monotonic() < deadline:
            ready, _, _ = select.select(socks, [], [], 0.5)
            for sock in ready:
                counts[socks.index(sock)] += sum(f[6:12] == source_mac
                                                 for f in netns.drain(sock))
        return counts[0], counts[1]
    finally:
        for sock in socks:
            sock.close()
