"""iptables: the restore files' rules, executed symbolically on one IP packet.

IPv4 frames meet the ``iptables-restore`` file's rules, IPv6 frames the
``ip6tables-restore`` file's, from pfc's chain (``meta["chain"]``, jumped to first in
the base chain). A rule's matches are read as the kernel's matches read them, on the
packet from its network header (``skb->len`` its length, the frame behind IP input):

- ``-p`` (IPv4 protocol byte; IPv6: the protocol behind the extension headers, left
  free behind any, a superset of ``ipv6_find_hdr``), ``-f`` (IPv4 fragment offset not
  0), ``-s``/``-d`` (address and mask), ``-i`` (the device the artifact was built for);
- ``-m u32``: ``xt_u32``'s walk, word by word (a word past the packet fails the test,
  semantics.md fact 7), ``@`` moves the base;
- ``-m set``: ``hash:net``/``hash:ip`` membership, the sets built by replaying the
  artifact's ``ipset restore`` script (create, add, flush, swap, rename, destroy);
- ``-m bpf --bytecode``: the classic BPF program run on the packet from its network
  header (:mod:`pfc.prove.targets.cbpf`); ``-m length`` (IPv4 total length, IPv6 40 + payload
  length); ``-m comment`` is ignored.

Targets: ``DROP``, ``ACCEPT``, ``RETURN`` (back to the base chain, whose policy
accepts), a user chain (jump and come back; ``-g``: go, and its return is the
caller's), ``CT`` (goes on). ``-m iprange --src-range/--dst-range`` (a large policy's
tree of chains, backends/iptables/ipt_tree.py). A rule without a target
counts: the ``# rule N`` comment above it names the count rule whose counter it is.
"""

from __future__ import annotations

import ipaddress
import re
import shlex
from dataclasses import dataclass, field, replace
from pathlib import Path

import z3

from pfc.backends.base import Artifact
from pfc.prove.formula import prefixes_hold
from pfc.prove.frame import Behaviour, Frame, bv, u32
from pfc.prove.targets import cbpf
from pfc.prove.targets.cbpf import Unsupported
from pfc.prove.targets.nft_vm import EXT_HEADERS

ETH = 14
PROTOCOLS = {"tcp": 6, "udp": 17, "icmp": 1, "icmpv6": 58, "ipv6-icmp": 58, "all": 0,
             "sctp": 132, "udplite": 136, "gre": 47, "esp": 50, "ah": 51}


@dataclass
class Rule:
    args: list[str]
    counts: int | None = None  # the count rule this counter-only line belongs to


@dataclass
class Table:
    chains: dict[str, list[Rule]] = field(default_factory=dict)


def parse_restore(text: str) -> Table:
    """The ``-A`` lines of a restore file, per chain, in order; ``# rule N`` comments
    mark which policy rule the lines below them belong to."""
    table, owner = Table(), None
    for line in text.splitlines():
        line = line.strip()
        if m := re.match(r"#\s*rule (\d+)\b", line):
            owner = int(m.group(1))
        elif line.startswith("-A "):
            words = shlex.split(line)
            table.chains.setdefault(words[1], []).append(Rule(words[2:], owner))
        elif line.startswith(":"):
            table.chains.setdefault(line[1:].split()[0], [])
    return table


def parse_ipset(text: str) -> dict[str, tuple[str, list[ir_net]]]:
    """Replay an ``ipset restore`` script: set name -> (type, prefixes)."""
    sets: dict[str, tuple[str, list]] = {}
    for line in text.splitlines():
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        op, args = words[0], words[1:]
        if op == "create":
            sets.setdefault(args[0], (args[1], []))
        elif op == "add":
            sets[args[0]][1].append(ipaddress.ip_network(args[1], strict=False))
        elif op == "flush":
            sets[args[0]][1].clear()
        elif op == "swap":
            sets[args[0]], sets[args[1]] = sets[args[1]], sets[args[0]]
        elif op in ("destroy", "rename"):
            item = sets.pop(args[0])
            if op == "rename":
                sets[args[1]] = item
        else:
            raise Unsupported(f"ipset command `{op}` is not modelled")
    return sets


ir_net = ipaddress.IPv4Network | ipaddress.IPv6Network


class Shifted:
    """The packet from its network header, as a frame for the classic BPF model."""

    def __init__(self, frame: Frame) -> None:
        self.frame = frame
        self.length = frame.length - ETH

    def byte(self, at):
        return self.frame.byte(bv(ETH) + at if isinstance(at, int) else at + ETH)

    def bytes_(self, at, n):
        return self.frame.bytes_(bv(ETH) + at if isinstance(at, int) else at + ETH, n)

    def has(self, at, n):
        return z3.ULE((bv(at) if isinstance(at, int) else u32(at)) + n, self.length)


# -------------------------------------------------------------------------- matches

@dataclass
class Context:
    frame: Frame
    family: int
    sets: dict
    dev: str | None
    ext: dict = field(default_factory=dict)

    @property
    def length(self) -> z3.BitVecRef:
        return self.frame.length - ETH

    def word(self, at: z3.BitVecRef) -> z3.BitVecRef:
        return self.frame.bytes_(at + ETH, 4)

    def proto(self) -> z3.BitVecRef:
        f = self.frame
        if self.family == 4:
            return f.byte(ETH + 9)
        nexthdr = f.byte(ETH + 6)
        if "proto" not in self.ext:
            self.ext["proto"] = z3.FreshConst(z3.BitVecSort(8), "ext_proto")
        behind = z3.Or(*[nexthdr == e for e in EXT_HEADERS])
        return z3.If(behind, self.ext["proto"], nexthdr)


def _number(text: str) -> int:
    return int(text, 0)


def u32_test(ctx: Context, spec: str) -> z3.BoolRef:
    """``xt_u32``'s ``u32_match_it`` for one ``--u32`` argument."""
    terms = []
    for test in spec.replace(" ", "").split("&&"):
        location, _, values = test.partition("=")
        parts = re.findall(r"(^|&|<<|>>|@)(0x[0-9a-fA-F]+|\d+)", location)
        length = ctx.length
        pos = bv(_number(parts[0][1]))
        ok = [z3.UGE(length, 4), z3.ULE(pos, length - 4)]
        val, at = ctx.word(pos), bv(0)
        for op, num in parts[1:]:
            n = bv(_number(num))
            if op == "&":
                val = val & n
            elif op == "<<":
                val = val << n
            elif op == ">>":
                val = z3.LShR(val, n)
            else:
                ok.append(z3.UGE(at + val, at))
                at = at + val
                ok += [z3.UGE(at + 4, at), z3.UGE(length, at + 4), z3.ULE(n, length - at - 4)]
                val = z3.If(z3.And(*ok), ctx.word(at + n), bv(0))
        inside = []
        for item in values.split(","):
            lo, _, hi = item.partition(":")
            lo_n, hi_n = _number(lo), _number(hi or lo)
            inside.append(z3.And(z3.ULE(lo_n, val), z3.ULE(val, hi_n)))
        terms.append(z3.And(*ok, z3.Or(*inside)))
    return z3.And(*terms)


def _addr_bytes(ctx: Context, which: str) -> z3.BitVecRef:
    size = 4 if ctx.family == 4 else 16
    off = (12 if which == "src" else 16) if ctx.family == 4 else (8 if which == "src" else 24)
    return ctx.frame.bytes_(ETH + off, size)


def _address(ctx: Context, which: str, text: str) -> z3.BoolRef:
    net = ipaddress.ip_network(text, strict=False)
    if net.version != ctx.family:
        raise Unsupported(f"address {text} in an IPv{ctx.family} file")
    addr = _addr_bytes(ctx, which)
    mask = int(net.netmask)
    return addr & mask == int(net.network_address)


def _range(ctx: Context, which: str, text: str) -> z3.BoolRef:
    """``-m iprange --src-range LO-HI`` / ``--dst-range``: inclusive, as integers."""
    lo, hi = (ipaddress.ip_address(t) for t in text.split("-", 1))
    if lo.version != ctx.family or hi.version != ctx.family:
        raise Unsupported(f"address range {text} in an IPv{ctx.family} file")
    addr = _addr_bytes(ctx, which)
    return z3.And(z3.ULE(int(lo), addr), z3.ULE(addr, int(hi)))


def _set(ctx: Context, name: str, flags: str) -> z3.BoolRef:
    if name not in ctx.sets:
        raise Unsupported(f"ipset `{name}` is not in the artifact's ipset file")
    kind, nets = ctx.sets[name]
    if kind not in ("hash:net", "hash:ip") or "," in flags:
        raise Unsupported(f"ipset `{name}` of type {kind} ({flags}) is not modelled")
    size = 4 if ctx.family == 4 else 16
    off = (12 if flags == "src" else 16) if ctx.family == 4 else (8 if flags == "src" else 24)
    addr = ctx.frame.bytes_(ETH + off, size)
    return prefixes_hold(addr, [n for n in nets if n.version == ctx.family])


def _bpf(ctx: Context, text: str) -> z3.BoolRef:
    numbers = [int(w) for w in text.replace(",", " ").split()]
    count, rest = numbers[0], numbers[1:]
    insns = [tuple(rest[i:i + 4]) for i in range(0, len(rest), 4)]
    if len(insns) != count:
        raise Unsupported(f"-m bpf program says {count} instructions, holds {len(insns)}")
    return cbpf.passes(insns, Shifted(ctx.frame), network=0)


def _length(ctx: Context, text: str) -> z3.BoolRef:
    lo, _, hi = text.partition(":")
    f = ctx.frame
    value = u32(f.u16(ETH + 2)) if ctx.family == 4 else u32(f.u16(ETH + 4)) + 40
    return z3.And(z3.ULE(int(lo or 0), value), z3.ULE(value, int(hi or lo or 65535)))


GOTO = "-g"  # a target word no chain can be named (iptables chain names start otherwise)
MAX_DEPTH = 64  # large policies' trees of chains (backends/iptables/ipt_tree.py: ≤ 20)
MODULE_OPTIONS = {"--u32": u32_test, "--bytecode": _bpf, "--length": _length}


def matches(ctx: Context, args: list[str]) -> tuple[z3.BoolRef, list[str]]:
    """The rule's matches as one condition, and its target words."""
    terms, i, negate = [], 0, False
    while i < len(args):
        word = args[i]
        if word == "!":
            negate, i = True, i + 1
            continue
        if word in ("-j", "--jump"):
            return z3.And(*terms), args[i + 1:]
        if word in ("-g", "--goto"):
            return z3.And(*terms), [GOTO, *args[i + 1:]]
        term, i = _option(ctx, args, i)
        if term is not None:
            terms.append(z3.Not(term) if negate else term)
        negate = False
    return z3.And(*terms), []


def _option(ctx: Context, args: list[str], i: int) -> tuple[z3.BoolRef | None, int]:
    word = args[i]
    f = ctx.frame
    if word in ("-p", "--protocol"):
        name = args[i + 1].lower()
        number = PROTOCOLS[name] if name in PROTOCOLS else int(name)
        return (z3.BoolVal(True) if number == 0 else ctx.proto() == number), i + 2
    if word in ("-f", "--fragment"):
        return f.u16(ETH + 6) & 0x1FFF != 0, i + 1
    if word in ("-s", "--source", "-d", "--destination"):
        return _address(ctx, "src" if word in ("-s", "--source") else "dst", args[i + 1]), i + 2
    if word in ("-i", "--in-interface"):
        return z3.BoolVal(args[i + 1] == ctx.dev), i + 2
    if word in ("-m", "--match"):
        if args[i + 1] not in ("u32", "set", "bpf", "length", "comment", "iprange"):
            raise Unsupported(f"match module `{args[i + 1]}` is not modelled")
        return None, i + 2
    if word == "--comment":
        return None, i + 2
    if word == "--match-set":
        return _set(ctx, args[i + 1], args[i + 2]), i + 3
    if word in ("--src-range", "--dst-range"):
        return _range(ctx, word[2:5], args[i + 1]), i + 2
    if word in MODULE_OPTIONS:
        return MODULE_OPTIONS[word](ctx, args[i + 1]), i + 2
    raise Unsupported(f"iptables option `{word}` is not modelled")


# --------------------------------------------------------------------------- chains

@dataclass
class Walk:
    ctx: Context
    table: Table
    passes: list[z3.BoolRef] = field(default_factory=list)
    counted: dict[int, list[z3.BoolRef]] = field(default_factory=dict)
    count_rules: frozenset[int] = frozenset()

    def chain(self, name: str, cond: z3.BoolRef, depth: int = 0) -> z3.BoolRef:
        """Run ``name`` from ``cond``: the condition of coming back (end or RETURN)."""
        if name not in self.table.chains:
            raise Unsupported(f"jump to chain `{name}`, which the file does not create")
        if depth > MAX_DEPTH:
            raise Unsupported(f"chains nest deeper than {MAX_DEPTH} jumps")
        back = []
        for rule in self.table.chains[name]:
            held, target = matches(self.ctx, rule.args)
            hit = z3.And(cond, held)
            cond = z3.And(cond, z3.Not(held))
            verb = target[0] if target else None
            if verb is None or verb in ("CT", "NFLOG", "LOG"):
                if verb is None and rule.counts in self.count_rules:
                    self.counted.setdefault(rule.counts, []).append(hit)
                cond = z3.Or(cond, hit)
            elif verb == "ACCEPT":
                self.passes.append(hit)
            elif verb == "RETURN":
                back.append(hit)
            elif verb == GOTO:  # the chain's return is this chain's return
                back.append(self.chain(target[1], hit, depth + 1))
            elif verb != "DROP":
                cond = z3.Or(cond, self.chain(verb, hit, depth + 1))
        return z3.Or(cond, *back)


def owned(table: Table, owners: dict[str, list]) -> None:
    """The policy rule of each line of ``owners``' chains, from the artifact's record
    of them (``meta["lines"]``, ``meta["chains"]``: what the runner and ``pfc status``
    read counters by); a large policy's lines carry no ``# rule N`` comments."""
    for chain, lines in owners.items():
        rules = table.chains.get(chain, [])
        if len(rules) != len(lines):
            raise Unsupported(f"chain {chain}: {len(rules)} lines, the artifact names "
                              f"{len(lines)}")
        for rule, owner in zip(rules, lines, strict=True):
            rule.counts = owner if isinstance(owner, int) else None


def family_behaviour(artifact: Artifact, frame: Frame, family: int,
                     sets: dict) -> tuple[z3.BoolRef, dict[int, z3.BoolRef]]:
    files = artifact.meta["files"]
    text = artifact.files[files["ipv4" if family == 4 else "ipv6"]].decode()
    ctx = Context(frame, family, sets, artifact.meta.get("dev"))
    counts = frozenset(r.index for r in artifact.policy.count_rules)
    table = parse_restore(text)
    name = "IPv4" if family == 4 else "IPv6"
    base = artifact.meta.get("lines", {}).get(name)
    if base is not None and len(base) == len(table.chains.get(artifact.meta["chain"], [])):
        owned(table, {artifact.meta["chain"]: base})
    owned(table, artifact.meta.get("chains", {}).get(name, {}))
    walk = Walk(ctx, table, count_rules=counts)
    back = walk.chain(artifact.meta["chain"], z3.BoolVal(True))
    passes = z3.Or(back, *walk.passes)  # back in the base chain, whose policy accepts
    return passes, {i: z3.Or(*c) for i, c in walk.counted.items()}


def behaviour(artifact: Artifact, frame: Frame) -> Behaviour:
    name = artifact.meta["files"].get("ipset")
    sets = parse_ipset(artifact.files[name].decode()) if name else {}
    p4, c4 = family_behaviour(artifact, frame, 4, sets)
    p6, c6 = family_behaviour(artifact, frame, 6, sets)
    v4 = frame.u16(12) == 0x0800
    counted = {i: z3.If(v4, c4.get(i, z3.BoolVal(False)), c6.get(i, z3.BoolVal(False)))
               for i in set(c4) | set(c6)}
    return Behaviour(z3.If(v4, p4, p6), None, counted)


def adopt(artifact: Artifact, path: Path, data: bytes) -> Artifact:
    """A restore file given by path replaces the artifact's file of its family
    (``ip6tables`` in its name or a ``*6tables`` header: IPv6), or its ipset script."""
    files = dict(artifact.files)
    names = artifact.meta["files"]
    text = data.decode(errors="replace")
    if path.suffix == ".ipset":
        key = "ipset"
    else:
        key = "ipv6" if "ip6tables" in path.name or "ip6tables" in text[:400] else "ipv4"
    if not names.get(key):
        raise ValueError(f"{path}: the policy's iptables artifact has no {key} file")
    files[names[key]] = data
    return replace(artifact, files=files)
