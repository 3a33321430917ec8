"""An nft whole-firewall artifact, read back from the kernel, executed symbolically per
hook chain with the hook's inputs (:mod:`.inputs`) as the formula has them.

The ruleset is loaded into a throw-away namespace (with a veth of each name an
``ingress``/``egress`` chain is bound to) and every table listed back with ``nft
--debug=netlink`` (:mod:`pfc.prove.targets.nft`). :mod:`pfc.prove.targets.nft_vm`
runs the expressions; here the ones whole firewalls add:

- ``meta load iifname/oifname``: the name of the input's class (16 bytes, zero
  padded); a ``cmp`` of fewer bytes than that is nft's wildcard (``iifname "eth*"``
  compares ``eth``); ``iiftype``: 772 (loopback) for ``lo``, 1 (Ethernet) otherwise;
  ``meta load mark`` / ``meta set mark``: the mark, as the formula's;
- ``ct load state`` (``NF_CT_STATE_*_BIT`` of the input state), ``status`` and
  ``mark`` (no connection: invalid and untracked packets break the rule);
  ``fib saddr/daddr type`` (``RTN_*`` of the address type input); ``limit`` (and a
  meter's, ``limit ... per src``): the input bit of the pfc rule it belongs to (its
  ``pfc rule N`` comment);
- ``notrack``; ``reject type T code C``, ``nat``, ``masq``, ``redir``: the outcome
  (the reply kind, the translation's kind, address and port), the rule ends.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

import z3

from pfc.frontend import ir
from pfc.prove.firewall.inputs import Inputs
from pfc.prove.firewall.meaning import OUTCOME_BITS, HookMeaning, Outcomes, outcome_word
from pfc.prove.frame import Frame, bv
from pfc.prove.targets import nft_vm
from pfc.prove.targets.cbpf import Unsupported
from pfc.prove.targets.nft import parse_listing
from pfc.prove.targets.nft_vm import State, _host_u32, _reg, _split, _with

CT_BITS = {"invalid": 1, "established": 2, "related": 4, "new": 8, "untracked": 64}
RTN = {"local": 2, "broadcast": 3, "multicast": 5, "unicast": 1}
ICMPX = {0: "no-route", 1: "port-unreachable", 2: "host-unreachable", 3: "admin-prohibited"}
_RULE = re.compile(r"pfc rule (\d+)")


def annotate(text: str) -> str:
    """Each rule's ``pfc rule N`` comment (its userdata, listed after its expressions)
    as a first expression ``[ pfcrule N ]``, so a ``limit`` knows its rule."""
    lines = text.splitlines()
    out, head = [], None
    for line in lines:
        if nft_vm_head(line):
            head = len(out)
        elif line.lstrip().startswith("userdata") and head is not None:
            m = _RULE.search(line)
            if m:
                out.insert(head + 1, f"  [ pfcrule {m.group(1)} ]")
            head = None
            continue
        out.append(line)
    return "\n".join(out)


def nft_vm_head(line: str) -> bool:
    from pfc.prove.targets.nft import _RULE_HEAD
    return bool(_RULE_HEAD.match(line))


@dataclass
class Env:
    """What the machine reads besides the frame."""

    inputs: Inputs
    outcomes: Outcomes
    rules: dict[int, ir.Rule]  # the file's rules by index (a limit's)
    is4: z3.BoolRef


class Machine(nft_vm.Machine):
    def __init__(self, listing, hook: str, frame: Frame, env: Env):
        super().__init__(listing, hook, frame, {})
        self.env = env
        self.mark = env.inputs.mark
        self.notrack = z3.BoolVal(False)
        self.decided: list[tuple[z3.BoolRef, z3.BitVecRef]] = []
        self.names: list[z3.BitVecRef] = []
        self.rule_index: int | None = None

    def code(self, word: str) -> z3.BitVecRef:
        return bv(self.env.outcomes.code(word), OUTCOME_BITS)

    def decide(self, cond: z3.BoolRef, code: z3.BitVecRef) -> None:
        self.decided.append((cond, code))

    def verdict(self, word: str, target: str | None, s: State) -> State | None:
        if word in ("accept", "drop"):
            self.decide(s.cond, self.code("pass" if word == "accept" else "drop"))
            if word == "accept":
                self.out.outs.append((s.cond, s.data))
            return None
        return super().verdict(word, target, s)

    def expr(self, text: str, s: State):
        for pattern, handler in HANDLERS:
            m = pattern.fullmatch(text)
            if m:
                return handler(self, m, s)
        return super().expr(text, s)


# ------------------------------------------------------------------- expressions

def _name(vm: Machine, field: str) -> z3.BitVecRef:
    ins = vm.env.inputs
    var = ins._var(field, lambda n: z3.BitVec(n, 8))
    value = bv(0, 128)
    for i, name in reversed(list(enumerate(ins.names))):
        raw = name.encode().ljust(16, b"\0")[:16]
        value = z3.If(var == i, bv(int.from_bytes(raw, "big"), 128), value)
    vm.names.append(value)
    return value


def _meta(vm: Machine, m: re.Match, s: State):
    key, reg = m.group(1), m.group(2)
    ins = vm.env.inputs
    if key in ("iifname", "oifname"):
        field = key[:3]
        if field not in _present_fields(ins):
            return None, s  # the hook has no such interface: the rule breaks
        return _with(s, reg, _name(vm, field)), None
    if key == "iiftype":
        lo = ins.names.index("lo") if "lo" in ins.names else None
        var = ins._var("iif", lambda n: z3.BitVec(n, 8))
        kind = bv(1) if lo is None else z3.If(var == lo, bv(772), bv(1))
        return _with(s, reg, _host_u32(kind), True), None
    if key == "mark":
        ins.read.add("mark")
        return _with(s, reg, _host_u32(vm.mark), True), None
    return nft_vm._meta(vm, m, s)


def _present_fields(ins: Inputs) -> set[str]:
    from pfc.frontend.firewall.hooks import BLOCKS, allows_field
    return {f for f in ("iif", "oif") if allows_field(BLOCKS[ins.block], f)}


def _meta_set(vm: Machine, m: re.Match, s: State):
    if m.group(1) != "mark":
        raise Unsupported(f"meta set {m.group(1)}")
    vm.env.inputs.read.add("mark")
    vm.mark = z3.If(s.cond, _host_u32(_reg(s, m.group(2))), vm.mark)
    return s, None


def _ct(vm: Machine, m: re.Match, s: State):
    key, reg = m.group(1), m.group(2)
    ins = vm.env.inputs
    ins.read.add("ct")
    state = ins.ct_state_var
    if key == "state":
        bits = bv(0)
        for name in reversed(ir.CT_STATES):
            bits = z3.If(state == ir.CT_STATES.index(name), bv(CT_BITS[name]), bits)
        return _with(s, reg, _host_u32(bits), True), None
    tracked = z3.Or(*[state == ir.CT_STATES.index(n) for n in ("established", "related",
                                                                  "new")])
    ok, broke = _split(s, tracked)
    if key == "status":
        ins.read.add("ct-status")
        value = ins._var("ct_status", lambda n: z3.BitVec(n, 32))
    elif key == "mark":
        value = ins.ct_mark()
    else:
        raise Unsupported(f"ct key `{key}` is not modelled")
    return _with(ok, reg, _host_u32(value), True), broke


def _fib(vm: Machine, m: re.Match, s: State):
    which, reg = m.group(1), m.group(2)
    field = "src-type" if which == "saddr" else "dst-type"
    ins = vm.env.inputs
    ins.read.add(field)
    var = ins._var(field, lambda n: z3.BitVec(n, 2))
    value = bv(0)
    for name in reversed(ir.ADDR_TYPES):
        value = z3.If(var == ir.ADDR_TYPES.index(name), bv(RTN[name]), value)
    return _with(s, reg, _host_u32(value), True), None


def _limit(vm: Machine, m: re.Match, s: State):
    rule = vm.env.rules.get(vm.rule_index) if vm.rule_index is not None else None
    if rule is None or rule.limit is None:
        raise Unsupported("a `limit` that is not a pfc rule's (no `pfc rule N` comment)")
    within = vm.env.inputs.within(rule)
    over = int(m.group(1), 16) & 1  # NFT_LIMIT_F_INV: `limit rate over`
    return _split(s, z3.Not(within) if over else within)


def _rule(vm: Machine, m: re.Match, s: State):
    vm.rule_index = int(m.group(1))
    return s, None


def _notrack(vm: Machine, m: re.Match, s: State):
    vm.notrack = z3.Or(vm.notrack, s.cond)
    return s, None


def _reject(vm: Machine, m: re.Match, s: State):
    kind, code = int(m.group(1)), int(m.group(2))
    if kind == 1:
        word = vm.code("reject with tcp-reset")
    elif kind == 2:
        word = vm.code(f"reject with {ICMPX.get(code, f'icmpx code {code}')}")
    else:
        four = next((k for k, (c4, _) in ir.REJECTS.items() if c4 == code), None)
        six = next((k for k, (_, c6) in ir.REJECTS.items() if c6 == code), None)
        word = z3.If(vm.env.is4, vm.code(f"reject with {four or f'icmp code {code}'}"),
                     vm.code(f"reject with {six or f'icmpv6 code {code}'}"))
    vm.decide(s.cond, word)
    return None, None


def _value(s: State, reg: str | None, size: int) -> bytes | None:
    if reg is None:
        return None
    value = z3.simplify(_reg(s, reg))
    if not z3.is_bv_value(value):
        raise Unsupported(f"a NAT target in register {reg} that is not a constant")
    raw = value.as_long().to_bytes(value.size() // 8, "big")
    return raw[:size]


def _nat(vm: Machine, m: re.Match, s: State):
    kind, family = m.group(1), m.group(2)
    size = 4 if family == "ip" else 16
    raw = _value(s, m.group(3), size)
    port = _value(s, m.group(4), 2)
    address = ipaddress.ip_address(raw) if raw is not None else None
    nat = ir.Nat(kind, address, int.from_bytes(port, "big") if port else None)
    vm.decide(s.cond, vm.code(outcome_word(nat)))
    return None, None


def _masq(vm: Machine, m: re.Match, s: State):
    if m.group(1):
        raise Unsupported(f"masquerade with ports: [ masq{m.group(1)} ]")
    vm.decide(s.cond, vm.code("masquerade"))
    return None, None


def _redir(vm: Machine, m: re.Match, s: State):
    port = _value(s, m.group(1), 2)
    nat = ir.Nat("redirect", None, int.from_bytes(port, "big") if port else None)
    vm.decide(s.cond, vm.code(outcome_word(nat)))
    return None, None


def _cmp(vm: Machine, m: re.Match, s: State):
    """A compare of a name register with fewer bytes than it holds: a prefix."""
    left = _reg(s, m.group(2))
    if not any(left.eq(n) for n in vm.names):
        return nft_vm._cmp(vm, m, s)
    data = nft_vm.words(m.group(3)).rstrip(b"\0")
    if len(m.group(3).split()) == 4:
        data = nft_vm.words(m.group(3))
    n = len(data)
    top = z3.Extract(127, 128 - 8 * n, left) if n < 16 else left
    held = top == int.from_bytes(data, "big")
    return _split(s, held if m.group(1) == "eq" else z3.Not(held))


_HEX = r"((?:0x[0-9a-f]{8} ?)+)"
HANDLERS = [
    (re.compile(r"pfcrule (\d+)"), _rule),
    (re.compile(r"meta load (\w+) => reg (\d+)"), _meta),
    (re.compile(r"meta set (\w+) with reg (\d+)"), _meta_set),
    (re.compile(r"ct load (\w+) => reg (\d+)"), _ct),
    (re.compile(r"fib (saddr|daddr) type => reg (\d+)"), _fib),
    (re.compile(r"limit rate \S+ burst \d+ type packets flags 0x([0-9a-f]+)"), _limit),
    # a meter (`limit ... per src`): one bucket per address, its answer the same input
    (re.compile(r"dynset update reg_key \d+ set \S+ timeout \d+ms expr \[ limit rate \S+ "
                r"burst \d+ type packets flags 0x([0-9a-f]+) \]"), _limit),
    (re.compile(r"notrack"), _notrack),
    (re.compile(r"reject type (\d+) code (\d+)"), _reject),
    (re.compile(r"nat (dnat|snat) (ip6?) addr_min reg (\d+) addr_max reg \d+"
                r"(?: proto_min reg (\d+) proto_max reg \d+)? flags 0x[0-9a-f]+"), _nat),
    (re.compile(r"masq( .*)?"), _masq),
    (re.compile(r"redir proto_min reg (\d+) proto_max reg \d+ flags 0x[0-9a-f]+"), _redir),
    (re.compile(r"cmp (eq|neq) reg (\d+) " + _HEX), _cmp),
]


def run(text: str, chain: str, hook: str, frame: Frame, env: Env) -> HookMeaning:
    """Base chain ``chain`` of the listing ``text`` on the frame, with the inputs."""
    listing = parse_listing(annotate(text))
    vm = Machine(listing, hook, frame, env)
    back = vm.chain(chain, State(z3.BoolVal(True), frame.data))
    if back is not None:
        vm.verdict(listing.policies.get(chain, "accept"), None, back)
    outcome = vm.code("drop")  # no path reaches here: every path decides
    for cond, code in reversed(vm.decided):
        outcome = z3.If(cond, code, outcome)
    out = frame.data
    for cond, data in reversed(vm.out.outs):
        out = out if data.eq(out) else z3.If(cond, data, out)
    return HookMeaning(outcome, bv(0), vm.mark, vm.notrack, out)
