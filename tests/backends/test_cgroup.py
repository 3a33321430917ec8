"""Target ``cgroup`` (cgroup_skb ingress/egress programs for the sockets of one cgroup)
in the kernel, against the interpreter: every shape of ``input`` and ``output`` rule
(tests/backends/v2gen.py) judged by test runs with each frame's device and mark; the
v1 examples; capability errors; and the programs attached to a real cgroup (v2), with
a socket created in it inside a namespace and one created outside it.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import random
import socket
import uuid
from pathlib import Path

import pytest
from pyroute2 import IPRoute

from pfc import backends
from pfc.backends.ebpf import maps as ebpf_maps
from pfc.backends.ebpf import run as ebpf_run
from pfc.build import build_artifact, build_policy, build_ruleset
from pfc.frontend import ir
from pfc.frontend.pipeline import compile_path, compile_text
from pfc.kernel import bpf_attach, netns
from pfc.oracle import framebuild as fb
from pfc.oracle import gen
from pfc.oracle.context import Context
from pfc.oracle.interp import evaluate
from pfc.verifier.equiv import compare
from tests.backends import v2gen, v2judge
from tests.paths import GOLDEN, ROOT

REASON = netns.missing_privileges()
BACKEND = backends.get("cgroup")
A4, B4 = bytes([192, 0, 2, 1]), bytes([192, 0, 2, 2])
LISTS = (("dut",), ("du*",), ("eth0",), ("eth*", "dut"))


def kernel(fn):
    fn = pytest.mark.kernel(fn)
    return pytest.mark.skipif(REASON is not None, reason=REASON or "")(fn)


def run(artifact, views, metas):
    return ebpf_run.run(artifact, views, [ebpf_run.Meta(i, m) for i, m in metas])


# ------------------------------------------------------------------------ no kernel

def test_the_target_carries_input_and_output():
    assert BACKEND.carries == {"input": "cgroup-ingress", "output": "cgroup-egress"}
    text = "input {\n    drop udp dport 53\n}\noutput {\n    drop tcp dport 25\n}\n"
    arts, diags = build_ruleset(compile_text(text, "fw.pf").ruleset, ["cgroup"], "c")
    assert not diags and {a.meta["cgroup_attach"] for a in arts} == {"ingress", "egress"}
    assert all("SEC(\"cgroup_skb/" in a.text for a in arts)


@pytest.mark.parametrize("rule,what", [
    ("pass ct state established", "`ct state` matches"),
    ("reject", "`reject` rules"),
    ("drop ether-src 02:00:00:00:00:01", "`ether-src`/`ether-dst` matches"),
    ("log tcp", "`log` rules"),
])
def test_what_a_cgroup_program_cannot_do_is_a_capability_error(rule: str, what: str):
    compiled = compile_text(f"input {{\n    {rule}\n}}\n", "fw.pf")
    artifacts, diags = build_ruleset(compiled.ruleset, ["cgroup"], "c")
    assert artifacts == [] and len(diags) == 1, [d.message for d in diags]
    assert diags[0].message.startswith(
        f"target `cgroup` cannot express {what} (rule at line 2): ")


# ------------------------------------------------------------------ kernel: test runs

@kernel
@pytest.mark.parametrize("hook", ["cgroup-ingress", "cgroup-egress"])
@pytest.mark.parametrize("default", ["pass", "drop"])
def test_every_shape_of_rule(hook: str, default: str) -> None:
    """A count rule per subset of the hook's fields (``iif``/``oif``, ``mark``,
    ``icmp-code``; negations at random), ``mark ... to N`` rules, terminal rules with
    drop, pass and ``pass ... limit``; frames on every device of the namespace with
    marks: verdicts, the mark after the program, counters."""
    rng = random.Random(f"{hook}-{default}")
    policy = v2gen.shapes(hook, default, rng)
    art, diags = build_policy(policy, "cgroup", "o", hook=hook)
    assert art is not None, [d.message for d in diags]
    with v2judge.devices() as index:
        got = v2judge.judge(art, BACKEND, v2gen.shots(policy, 300, rng), index, run,
                            outward=hook == "cgroup-egress",
                            view=lambda f: BACKEND.view(hook, f))
    assert got.ok, "\n".join(got.problems[:10])
    assert got.seen > 150 and got.held > 0.6 and got.marked > 0


@kernel
def test_the_v1_examples() -> None:
    judged = 0
    for example in sorted((ROOT / "examples").glob("*.pf")):
        compiled = compile_path(example)
        if compiled.policy is None:
            continue  # a whole firewall
        art, _ = build_artifact(compiled, "cgroup")
        if art is None:
            continue  # log and redirect: capability errors (golden files)
        report = compare(art, BACKEND, gen.sample(art.policy, 200, seed=26))
        assert report.ok, f"{example.name}: {report.summary()}"
        judged += 1
    assert judged >= 8


# --------------------------------------------------------------- kernel: a real cgroup

def _cgroup2_root() -> Path:
    for line in Path("/proc/mounts").read_text().splitlines():
        _, where, kind = line.split()[:3]
        if kind == "cgroup2":
            return Path(where)
    pytest.fail("no cgroup2 file system is mounted (this machine has one)")


@contextlib.contextmanager
def cgroup() -> Path:
    """A fresh cgroup (v2), removed afterwards; and an fd on it."""
    path = _cgroup2_root() / f"pfc-test-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    path.mkdir()
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield path, fd
    finally:
        os.close(fd)
        path.rmdir()


@contextlib.contextmanager
def inside(path: Path):
    """This process in the cgroup while the block runs (a socket belongs to the cgroup
    of the process that creates it, for good), then back where it was."""
    home = next(line.split("::", 1)[1] for line in Path("/proc/self/cgroup").read_text()
                .splitlines() if line.startswith("0::"))
    (path / "cgroup.procs").write_text(str(os.getpid()))
    try:
        yield
    finally:
        (_cgroup2_root() / home.lstrip("/") / "cgroup.procs").write_text(str(os.getpid()))


def block(name: str, field: str) -> ir.Policy:
    """One drop rule per (list, negation) on its own port (``sport`` for input,
    ``dport`` for output); default pass."""
    number, family = ir.PROTOCOLS["udp"]
    port = "sport" if name == "input" else "dport"
    rules = tuple(
        ir.Rule(n, ir.Drop(), family, number,
                (ir.IntMatch(port, ((6000 + n, 6000 + n),)), ir.IfaceMatch(field, lst, neg)),
                proto_name="udp", line=n + 1)
        for n, (lst, neg) in enumerate(itertools.product(LISTS, (False, True))))
    return ir.Policy(rules, ir.Verdict.PASS, hook=ir.Hook(name), source="cg.pf")


def frame(lab: netns.Lab, sport: int, dport: int, out: bool = False) -> bytes:
    src, dst = (B4, A4) if out else (A4, B4)
    seg = fb.udp(src, dst, sport, dport, b"hello")
    macs = (lab.inj_mac, lab.dut_mac) if out else (lab.dut_mac, lab.inj_mac)
    return fb.ethernet(*macs, 0x0800, fb.ipv4(src, dst, 17, seg))


@kernel
def test_the_programs_on_a_real_cgroup() -> None:
    """input and output attached to a cgroup: a UDP socket created in it receives and
    sends what the interpreter passes (``iif``/``oif`` = the device); a socket created
    outside the cgroup receives everything (the policy is the cgroup's alone)."""
    ingress, egress = block("input", "iif"), block("output", "oif")
    arts = {}
    for hook, policy in (("cgroup-ingress", ingress), ("cgroup-egress", egress)):
        arts[hook], diags = build_policy(policy, "cgroup", "o", hook=hook)
        assert arts[hook] is not None, diags
    ports = [6000 + n for n in range(len(ingress.rules))]
    with netns.lab() as lab, netns.one_cpu(), cgroup() as (path, cg_fd), \
            contextlib.ExitStack() as stack:
        with IPRoute() as ipr:
            ipr.addr("add", index=lab.dut_index, address="192.0.2.2", prefixlen=24)
            ipr.neigh("add", dst="192.0.2.1", lladdr=lab.inj_mac.hex(":"),
                      ifindex=lab.dut_index, state=0x80)  # NUD_PERMANENT: no ARP
        with inside(path):
            mine = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
        other = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
        mine.bind(("192.0.2.2", 5000))
        other.bind(("192.0.2.2", 5001))
        for s in (mine, other):
            s.settimeout(30)  # a hang guard: the last datagram always passes
        for art in arts.values():
            obj = stack.enter_context(ebpf_maps.open_filled(art))  # pfc_ifaces: here
            fd = obj.programs[art.meta["program"]].fd
            bpf_attach.cgroup_attach(fd, cg_fd, art.meta["cgroup_attach"])
            stack.callback(bpf_attach.cgroup_detach, fd, cg_fd, art.meta["cgroup_attach"])
        received = _received(lab, ports, {5000: mine, 5001: other})
        sent = _sent(lab, mine, ports)
    want_in = {p for p in ports if evaluate(ingress, frame(lab, p, 5000),
                                            ctx=Context(iif="dut")).verdict.value == "pass"}
    want_out = {p for p in ports if evaluate(egress, frame(lab, 5000, p, out=True),
                                             ctx=Context(oif="dut")).verdict.value == "pass"}
    assert received[5000] == want_in and 0 < len(want_in) < len(ports)
    assert received[5001] == set(ports)
    assert sent == want_out and 0 < len(want_out) < len(ports)


def _received(lab, ports, socks) -> dict[int, set[int]]:
    """Frames from ``inj`` to each socket's port, from each source port, then one from
    port 5999 (no rule drops it): the source ports each socket got before it."""
    inj = netns.Injector(lab.inj)
    for dport in socks:
        for sport in [*ports, 5999]:
            inj.send(frame(lab, sport, dport))
    inj.close()
    out = {}
    for dport, sock in socks.items():
        got = set()
        while (sport := sock.recvfrom(64)[1][1]) != 5999:
            got.add(sport)
        out[dport] = got
    return out


def _sent(lab, sock, ports) -> set[int]:
    """Datagrams the cgroup's socket sends to each port, then to 5999: the ports seen
    on ``inj`` before that one. A datagram the egress program drops fails (EPERM)."""
    tap = netns.packet_socket(lab.inj, 0x0800)
    tap.settimeout(30)
    try:
        for dport in [*ports, 5999]:
            try:
                sock.sendto(b"hello", ("192.0.2.1", dport))
            except OSError as exc:
                assert exc.errno == errno.EPERM, exc
        got = set()
        while (dport := int.from_bytes(tap.recv(2048)[36:38], "big")) != 5999:
            got.add(dport)
        return got
    finally:
        tap.close()


GOLDEN_FW = """input {
    default drop
    pass tcp dport { 22, 443 } iif eth*
    drop udp mark 7-9
    pass udp dport 53 limit rate 10/second per src
}
output {
    drop tcp dport 25 !oif lo
    count icmp icmp-code 3
}
"""


def test_golden_programs(golden) -> None:
    """The C of both programs: ``--update-golden`` rewrites them."""
    arts, diags = build_ruleset(compile_text(GOLDEN_FW, "svc.pf").ruleset, ["cgroup"], "c")
    assert not diags and len(arts) == 2
    for art in arts:
        golden(GOLDEN / "cgroup-v2" / f"{art.hook}.c", art.text)
