"""The classic BPF assembler lays out any test graph (fuzz-and-faults.md defect 10).

Two properties, no kernel needed:

- **any graph**: random DAGs of tests (absolute and X-relative loads, ALU steps, every
  jump op, every X state) with jumps far beyond 255 instructions assemble to a program
  whose jump offsets fit their 8-bit fields and which returns what the graph itself
  says, on random frames (the graph walked here in Python: ``graph_verdict``; the
  program run by libpcap's ``bpf_filter``);
- **any policy**: generated policies (``tests.strategies``) with large address and port
  lists mixed in, shaped like the fuzzer's crash, either compile or are refused with
  the size diagnostic, and a compiled program agrees with the interpreter.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import zlib

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pfc import backends
from pfc.backends.cbpf import asm as cbpf_asm
from pfc.backends.cbpf import backend as cbpf
from pfc.backends.cbpf import cfg as cbpf_cfg
from pfc.backends.cbpf import graph as cbpf_graph
from pfc.backends.cbpf import pcaplib
from pfc.backends.cbpf.graph import (
    DROP_RET,
    ETHER,
    LEN,
    PASS_RET,
    RAW_IP,
    Graph,
    Node,
    Step,
    Value,
    XState,
    leaves,
    load,
    load_x,
)
from pfc.frontend.diagnostics import CompileError
from pfc.frontend.pipeline import compile_text
from pfc.oracle import gen
from pfc.verifier.equiv import compare
from tests.strategies import policies

LIBPCAP = dataclasses.replace(backends.get("cbpf"), run=cbpf.run_libpcap)
# fuzz-and-faults.md defect 10 (b1_cbpf_trampolines_min.pf): all five lines are needed.
REPRO_ADDRESSES = """\
4be0:3db0:dc25:74bd:b940:67ed:fe17:5330 e544:6dd4:552b:82f6:be3e:dc0a:1ef2:a4f0
8034:68b6:b610:a9f7:f927:f4e:b8b3:33a8 81f9:c1f6:6c0f:3459:f79b:17ae:efba:91fc
3099:fdf5:ab99:254a:e901:e35c:d47d:380d f934:1c68:966b:aea1:48be:ab13:4da9:8f1d
f0df:b4a5:d8a0:64df:7fd6:3116:e1ea:24c4 da71:1448:96c8:da19:64b2:d2bc:815a:47c5
be65:21cc:3e24:34e3:7af0:27bc:8d6:af57 aa2c:a1af:6a10:7b75:677f:6cbd:cc22:af58
e1fa:b9d7:8c7e:134f:5dfb:d3d1:2c4a:3698 bcfb:b050:acab:1a6b:c69d:4bd8:b3fa:7aa7
a9ec:806:705f:ca16:1622:bd79:5fec:898f 29e8:21a4:c748:3e3:1ba1:6215:8228:3d15
5eda:92d8:64ac:5db9:d707:107e:855c:3844 7825:5d68:792:3986:bb96:8a43:7d5c:8dfc
d92a:4aa2:b410:d93c:4efb:c8d6:b21:fbac 9403:560d:97da:e38d:9d64:3c25:fbb2:30bb
2b28:fef0:2b9c:14e:a5ac:6d8:64c2:f2e3 326:324d:fb69:5ffb:3a18:90c7:8092:b4d4
eb8a:c8ce:8a24:5e6b:3313:8131:c541:13d 678a:5aa3:3b6f:e507:8c5f:e8f8:dc3b:f364
d8f3:3418:f3d4:e711:5804:f922:8386:8a29 e8e5:b461:7589:a82b:5a70:2cfa:93ea:5c4e
9be3:cecb:8c49:7c68:a8c2:4d42:44ef:7feb 6239:7bc7:176:2741:bab9:f87f:f505:9285
f463:b337:d20b:5d59:db61:487:c89d:a11b 8333:3218:bd91:a1b7:f03e:dca7:e2dc:aa37
c703:8069:84c8:1999:2116:7d8f:cf23:cae8 f320:cd57:6d14:475b:349a:ae90:8fb5:262c
5d5f:576c:deb8:fc4c:7b29:7d0b:e5e:18ba f0e6:42f4:3328:ad08:8ded:3c96:91eb:79fa
d037:cdff:7c24:d49:69d4:95dd:8135:5c53 67:dba8:5898:9008:6a17:b9af:5b56:9643
c954:6b43:9f9d:129:8a44:9ebe:89d9:bf02 9990:1c04:7549:1bc3:54c5:6c9a:9cc9:af4e
a2a7:ae1f:3ac7:652c:cdf8:4404:729:5e42 2e47:dc0e:959f:3a51:8cfe:5cd1:2d5d:b79b
8d10:3ed3:cc66:7e97:1773:308c:dc6b:13ab ee52:bdb6:d102:a15:d9ed:17e3:cc0e:95ee
""".split()
REPRO = ("default drop\npass udp !ttl 1-10\ndrop icmp6 !dst 2001:db8::/54 dst { "
         + ", ".join(REPRO_ADDRESSES) + " }\naccept icmp6\npass udp\n")
SETTINGS = settings(derandomize=True, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


class OutOfFrame(Exception):
    """A load beyond the frame: the program ends with 0."""


# ------------------------------------------------------------------ the graph, walked

def _read(frame: bytes, at: int, size: int) -> int:
    if at < 0 or at + size > len(frame):
        raise OutOfFrame
    return int.from_bytes(frame[at:at + size], "big")


def _x_value(state: XState, frame: bytes, l3: int) -> int:
    if state is XState.LEN:
        return len(frame)
    if state is XState.TCP6:
        return (_read(frame, l3 + 52, 1) & 0xF0) >> 2
    ihl = 4 * (_read(frame, l3, 1) & 0xF)
    if state is XState.IHL:
        return ihl
    return ihl + ((_read(frame, ihl + l3 + 12, 1) & 0xF0) >> 2)


def _value(value: Value, x: int, frame: bytes) -> int:
    a = 0
    for s in value:
        if s.op == "ld":
            a = _read(frame, s.k, s.size)
        elif s.op == "ldx":
            a = _read(frame, x + s.k, s.size)
        elif s.op == "len":
            a = len(frame)
        else:
            operand = x if s.op in ("addx", "subx") else s.k
            a = {"add": a + operand, "addx": a + operand, "sub": a - operand,
                 "subx": a - operand, "and": a & operand, "lsh": a << operand,
                 "rsh": a >> operand}[s.op] & 0xFFFFFFFF
    return a


def _outcome(test: cbpf_graph.Test, frame: bytes, l3: int) -> bool:
    x = _x_value(test.x, frame, l3) if test.x is not None else 0
    a = _value(test.value, x, frame)
    k = x if test.k is None else test.k
    return {"jeq": a == k, "jgt": a > k, "jge": a >= k, "jset": a & k != 0}[test.op]


def graph_verdict(graph: Graph, frame: bytes) -> int:
    """What the graph returns for ``frame``: every node loads what its test reads."""
    node = graph.root
    try:
        while not node.is_leaf:
            node = node.succ(_outcome(node.test, frame, graph.link.l3))
    except OutOfFrame:
        return DROP_RET
    return node.ret


# ------------------------------------------------------------------ random graphs

VALUES: tuple[tuple[Value, XState | None], ...] = (
    (load(2, 12), None), (load(1, 23), None), (load(4, 26), None), (load(4, 30), None),
    (load(2, 20) + (Step("and", 0x1FFF),), None), (LEN, None),
    (load(2, 16) + (Step("add", 14),), None), (load_x(2, 16), XState.IHL),
    (load_x(1, 27), XState.IHL), (LEN + (Step("subx"),), XState.IHL),
    (load_x(1, 14), XState.TCP4), (load_x(2, 56), XState.TCP6),
    (load(1, 14) + (Step("rsh", 4),), None), (load(1, 14) + (Step("lsh", 2),), None),
    (load(2, 16) + (Step("sub", 20),), None),
)
OPS = ("jeq", "jgt", "jge", "jset")


@st.composite
def graphs(draw, min_nodes: int = 50, max_nodes: int = 700) -> Graph:
    """A DAG of tests built from the last node to the first; each edge goes to a later
    node (often far) or a leaf, so most layouts need trampolines. X states are set up
    for either link (the IP header at 14 or at 0)."""
    passed, dropped = leaves()
    count = draw(st.integers(min_nodes, max_nodes))
    nodes: list[Node] = [passed, dropped]
    for _ in range(count):
        value, x = draw(st.sampled_from(VALUES))
        by_x = draw(st.integers(0, 9)) == 0 and x is None
        test = cbpf_graph.Test(value, draw(st.sampled_from(OPS)),
                    None if by_x else draw(st.sampled_from((0, 1, 0x45, 0x800, 34, 255))),
                    XState.LEN if by_x else x)
        far = draw(st.integers(0, 3)) == 0
        pick = st.integers(0, len(nodes) - 1) if far else \
            st.integers(max(0, len(nodes) - 4), len(nodes) - 1)
        jt, jf = nodes[draw(pick)], nodes[draw(pick)]
        if jt is jf:
            jf = nodes[(nodes.index(jt) + 1) % len(nodes)]
        nodes.append(Node(test, jt, jf))
    return Graph(nodes[-1], passed, dropped, draw(st.sampled_from((ETHER, RAW_IP))))


def _frames(seed: int, count: int = 120) -> list[bytes]:
    import random

    rng = random.Random(seed)
    out = []
    for _ in range(count):
        frame = bytearray(rng.randbytes(rng.randint(14, 90)))
        if rng.random() < 0.7:
            frame[12:14] = b"\x08\x00"
            if len(frame) > 14:
                frame[14] = rng.choice((0x45, 0x46, 0x4F, 0x44, 0x65))
        out.append(bytes(frame))
    return out


def _offsets_fit(insns: list[cbpf_asm.Insn]) -> bool:
    return all(0 <= jt <= 255 and 0 <= jf <= 255 for code, jt, jf, _ in insns
               if code & 0x07 == 0x05 and code != cbpf_asm.JA)


@settings(SETTINGS, max_examples=60)
@given(graph=graphs())
def test_any_graph_assembles_to_what_it_means(graph: Graph) -> None:
    frames = _frames(graph.root.nid)
    want = [graph_verdict(graph, f) for f in frames]
    insns = cbpf_asm.assemble(graph)
    assert _offsets_fit(insns) and pcaplib.validate(insns)
    assert pcaplib.Program(insns).run_all(frames) == want


def test_jumps_that_break_each_others_trampolines_converge() -> None:
    """The fuzzer's crash, reduced: 174 nodes (303 instructions) whose far jumps overlap.
    The old layout added trampolines to trampolines without end."""
    policy = compile_text(REPRO, "b1.pf").require()
    graph = cbpf_cfg.build(policy)
    cbpf.cbpf_opt.optimise(graph, cbpf_cfg.IMPLICATIONS)
    insns = cbpf_asm.assemble(graph)
    assert _offsets_fit(insns) and len(insns) < 330
    artifact = cbpf.emit(policy, cbpf.Options("cbpf"))
    report = compare(artifact, LIBPCAP, gen.sample(policy, 3000, seed=17))
    assert report.ok, report.summary()


def test_trampolines_are_shared_and_ret_copies_reach_far_returns() -> None:
    """A chain of 400 tests all failing to one far node: one trampoline serves every
    jump within 255 instructions of it; far ``ret`` targets get ``ret`` copies."""
    passed, dropped = leaves()
    far = Node(cbpf_graph.Test(load(1, 23), "jeq", 6), passed, dropped)
    node = far
    for i in range(400):
        node = Node(cbpf_graph.Test(load(2, 12 + 2 * (i % 3)), "jeq", i), node,
                    far if i % 2 else dropped)
    insns = cbpf_asm.assemble(Graph(node, passed, dropped))
    jas = [i for i, (code, *_) in enumerate(insns) if code == cbpf_asm.JA]
    rets = [i for i, (code, *_) in enumerate(insns) if code == cbpf_asm.RET]
    assert _offsets_fit(insns) and 0 < len(jas) <= 4 and 2 < len(rets) <= 8
    frames = _frames(5, 300) + [bytes(12) + i.to_bytes(2, "big") + bytes(20)
                                for i in range(400)]
    assert pcaplib.Program(insns).run_all(frames) == \
        [graph_verdict(Graph(node, passed, dropped), f) for f in frames]


# ------------------------------------------------------------------ random policies

def _address(rng_bytes: bytes, version: int) -> str:
    if version == 4:
        return str(ipaddress.IPv4Address(rng_bytes[:4]))
    return str(ipaddress.IPv6Address(rng_bytes[:16]))


@st.composite
def big_rules(draw) -> str:
    """A rule with a long address or port list, as in the fuzzer's crash."""
    version = draw(st.sampled_from((4, 6)))
    size = draw(st.integers(20, 160) | st.integers(1200, 1600))
    seed = draw(st.integers(0, 2**32 - 1))
    raw = [zlib.crc32(bytes([i % 256, i // 256]), seed).to_bytes(4, "big") * 4
           for i in range(size)]
    field = draw(st.sampled_from(("src", "dst")))
    neg = draw(st.sampled_from(("", "!")))
    proto = draw(st.sampled_from(("icmp6", "udp", "tcp", "ip6")) if version == 6 else
                 st.sampled_from(("icmp", "udp", "tcp", "ip")))
    action = draw(st.sampled_from(("drop", "pass", "accept")))
    items = ", ".join(_address(r, version) for r in raw)
    ports = ""
    if proto in ("udp", "tcp") and draw(st.booleans()):
        ports = " dport { " + ", ".join(str(p) for p in range(1, size * 3, 3)) + " }"
    return f"{action} {proto} {neg}{field} {{ {items} }}{ports}"


@st.composite
def big_policies(draw) -> str:
    text = draw(policies(count=False, redirect=False, max_rules=6))
    lines = text.splitlines()
    for _ in range(draw(st.integers(1, 3))):
        lines.insert(draw(st.integers(0, len(lines))), draw(big_rules()))
    return "\n".join(lines) + "\n"


@settings(SETTINGS, max_examples=40)
@given(text=big_policies())
def test_large_generated_policies_compile_or_are_refused_cleanly(text: str) -> None:
    compiled = compile_text(text, "gen.pf")
    policy = compiled.require()
    try:
        artifact = cbpf.emit(policy, cbpf.Options("cbpf"))
    except CompileError as exc:
        [diag] = exc.diagnostics
        assert diag.code == "too-large" and "classic BPF allows 4096" in diag.message
        return
    assert _offsets_fit(artifact.meta["insns"])
    frames = gen.sample(policy, 400, seed=zlib.crc32(text.encode()))
    report = compare(artifact, LIBPCAP, frames)
    assert report.ok, f"{report.summary()}\n{text}"


def test_a_pass_program_returns_the_snap_length() -> None:
    assert cbpf.compile_policy(compile_text("pass\n").require()) == \
        [(cbpf_asm.RET, 0, 0, PASS_RET)]
