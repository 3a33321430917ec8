"""The nf_tables rule engine, executed symbolically on one frame.

Rules are the kernel's expressions as ``nft --debug=netlink`` lists them
(:mod:`pfc.prove.targets.nft`). A rule runs its expressions in order; one that fails
(``cmp`` false, a ``lookup`` miss, a load past the packet, a meta key the packet
lacks) ends the rule (``NFT_BREAK``) and the chain goes on with the next; writes
made before stay made. ``accept``/``drop`` end the base chain, ``jump`` runs a chain
and comes back, ``goto`` does not, ``return`` or the chain's end goes back; the base
chain's end is its policy (pfc's chains accept).

Packet information, as ``nft_do_chain_netdev`` / ``nft_do_chain_inet`` compute it on
entry (Linux 6.x, ``nf_tables_ipv4.h``, ``nf_tables_ipv6.h``): IPv4 ``l4proto``,
transport offset and fragment offset when version 4, IHL >= 5 and IHL*4 <= total
length <= the bytes after the Ethernet header; IPv6 when version 6 and 40 + payload
length <= those bytes, the transport header after the fixed header when its Next
Header is not an extension header. Behind extension headers (``ipv6_find_hdr``) the
protocol and offset are left free: a superset of what the kernel finds.

Loads (``nft_payload_eval``): link layer from the frame's first byte (below the
EtherType only: nft puts a removed VLAN tag back into loads above), network header
at 14, transport header at the transport offset when known (also on later fragments:
semantics.md fact 3), inner header after the TCP header (data offset * 4, the TCP
header present) or 8 bytes into UDP, first fragments only. Writes
(``nft_payload_set_eval``): ``csum_type 1`` updates the checksum ``csum_off`` bytes
into the header, ``csum_flags 1`` the TCP/UDP checksum for an address change (a UDP
checksum of 0 or cut off is left alone; a TCP checksum past the packet ends the rule
after the IPv4 header checksum was stored); an updated checksum that sums to 0 is
stored 0xffff.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import z3

from pfc.prove.frame import Behaviour, Frame, bv, u32
from pfc.prove.rewrite import mod_ffff
from pfc.prove.rewrite import words as word_sum
from pfc.prove.targets import nft_maps as maps
from pfc.prove.targets.cbpf import Unsupported
from pfc.prove.targets.nft_maps import Element, Reg, slot, words


@dataclass
class Listing:
    """A table as the kernel holds it: set elements (key bytes, flags) and, per chain,
    its rules' expressions (as ``nft --debug=netlink`` prints them)."""

    sets: dict[str, list[Element]] = field(default_factory=dict)
    chains: dict[str, list[list[str]]] = field(default_factory=dict)
    policies: dict[str, str] = field(default_factory=dict)  # base chain -> policy


EXT_HEADERS = (0, 43, 44, 51, 59, 60, 135, 139, 140)  # ipv6_ext_hdr, and HIP, shim6
ETH = 14


@dataclass
class Info:
    """``struct nft_pktinfo`` on entry to the hook."""

    l4: z3.BoolRef
    tprot: z3.BitVecRef  # 8 bits
    thoff: z3.BitVecRef  # 32 bits, from the frame's first byte
    fragoff: z3.BitVecRef  # 32 bits
    protocol: z3.BitVecRef  # skb->protocol, 16 bits as it lies
    nfproto: z3.BitVecRef  # 8 bits


def pktinfo(frame: Frame, hook: str) -> Info:
    f = frame
    l3len = f.length - ETH
    first, total = f.byte(ETH), u32(f.u16(ETH + 2))
    ihl = u32(first & 0x0F) * 4
    ok4 = z3.And(f.u16(12) == 0x0800, f.has(ETH, 20), z3.LShR(first, 4) == 4,
                 z3.UGE(ihl, 20), z3.ULE(total, l3len), z3.ULE(ihl, total))
    nexthdr = f.byte(ETH + 6)
    v6 = z3.And(f.u16(12) == 0x86DD, f.has(ETH, 40), z3.LShR(first, 4) == 6,
                z3.ULE(40 + u32(f.u16(ETH + 4)), l3len))
    ext = z3.Or(*[nexthdr == e for e in EXT_HEADERS])
    free_l4, free_proto = z3.FreshBool("ext_l4"), z3.FreshConst(z3.BitVecSort(8), "ext_proto")
    free_off = z3.FreshConst(z3.BitVecSort(32), "ext_thoff")
    free_frag = z3.FreshConst(z3.BitVecSort(32), "ext_frag")
    l4 = z3.Or(ok4, z3.And(v6, z3.Or(z3.Not(ext), free_l4)))
    tprot = z3.If(ok4, f.byte(ETH + 9), z3.If(ext, free_proto, nexthdr))
    thoff = z3.If(ok4, ETH + ihl, z3.If(ext, ETH + 48 + free_off % 1024, bv(ETH + 40)))
    fragoff = z3.If(ok4, u32(f.u16(ETH + 6) & 0x1FFF), z3.If(ext, free_frag, bv(0)))
    if hook == "ingress":
        nfproto = bv(5, 8)  # NFPROTO_NETDEV
    else:
        nfproto = z3.If(f.u16(12) == 0x0800, bv(2, 8), bv(10, 8))
    return Info(l4, tprot, thoff, fragoff, f.u16(12), nfproto)


@dataclass
class State:
    """One path through a chain: its condition and the packet as written so far."""

    cond: z3.BoolRef
    data: z3.ArrayRef
    regs: dict[int, Reg] = field(default_factory=dict)  # by 32-bit slot (nft_maps)


@dataclass
class Outcome:
    passes: list[z3.BoolRef] = field(default_factory=list)
    outs: list[tuple[z3.BoolRef, z3.ArrayRef]] = field(default_factory=list)
    counted: dict[int, list[z3.BoolRef]] = field(default_factory=dict)


class Machine:
    def __init__(self, listing: Listing, hook: str, frame: Frame, counters: dict[str, int]):
        self.listing, self.frame, self.counters = listing, frame, counters
        self.info = pktinfo(frame, hook)
        self.out = Outcome()
        self.returns: list[list[State]] = []

    def chain(self, name: str, state: State) -> State | None:
        """Run chain ``name`` from ``state``: the state that comes back (its end or a
        ``return``), None when none does. Verdicts land in ``self.out``."""
        if name not in self.listing.chains:
            raise Unsupported(f"chain `{name}` is not loaded")
        if len(self.returns) > 16:
            raise Unsupported("chains nest deeper than 16 jumps")
        self.returns.append([])
        current: State | None = state
        for exprs in self.listing.chains[name]:
            if current is None:
                break
            current = self.rule(exprs, current)
        back = self.returns.pop() + ([current] if current is not None else [])
        return merge(back)

    def rule(self, exprs: list[str], state: State) -> State | None:
        """Run one rule; the state that goes on to the next rule."""
        nexts, current = [], State(state.cond, state.data, {})
        for text in exprs:
            current, broke = self.expr(text, current)
            if broke is not None:
                nexts.append(broke)
            if current is None:
                break
        if current is not None:
            nexts.append(current)  # no verdict: the next rule
        return merge(nexts)

    def verdict(self, word: str, target: str | None, s: State) -> State | None:
        """A verdict; the state going on in this chain (``continue``, after a jump)."""
        if word == "accept":
            self.out.passes.append(s.cond)
            self.out.outs.append((s.cond, s.data))
            return None
        if word == "drop":
            return None
        if word == "continue":
            return s
        if word == "jump":
            return self.chain(target, State(s.cond, s.data))
        if word == "goto":
            back = self.chain(target, State(s.cond, s.data))
            if back is not None:
                self.returns[-1].append(back)
            return None
        if word == "return":
            self.returns[-1].append(s)
            return None
        raise Unsupported(f"verdict `{word}`")

    def expr(self, text: str, s: State) -> tuple[State | None, State | None]:
        """(the state going on in the rule, the state the rule breaks with)."""
        for pattern, handler in HANDLERS:
            m = pattern.fullmatch(text)
            if m:
                return handler(self, m, s)
        raise Unsupported(f"nft expression not modelled: [ {text} ]")


def merge(states: list[State]) -> State | None:
    states = [s for s in states if not z3.is_false(s.cond)]
    if not states:
        return None
    out = states[-1]
    for s in reversed(states[:-1]):
        data = s.data if s.data.eq(out.data) else z3.If(s.cond, s.data, out.data)
        out = State(z3.Or(s.cond, out.cond), data)
    return out


def _split(s: State, ok: z3.BoolRef) -> tuple[State, State]:
    return (State(z3.And(s.cond, ok), s.data, s.regs),
            State(z3.And(s.cond, z3.Not(ok)), s.data))


def _reg(s: State, n: str) -> z3.BitVecRef:
    reg = s.regs.get(slot(n))
    if reg is None:
        raise Unsupported(f"register {n} read before it is written")
    return reg.value


def _const(text: str, width: int) -> z3.BitVecRef:
    data = words(text)[:width]
    return bv(int.from_bytes(data, "big"), 8 * width)


def _with(s: State, n: str, value: z3.BitVecRef, padded: bool = False) -> State:
    return State(s.cond, s.data, maps.written(s.regs, n, Reg(value, padded)))


def _read(data: z3.ArrayRef, at: z3.BitVecRef, n: int) -> z3.BitVecRef:
    parts = [z3.Select(data, at + i) for i in range(n)]
    return parts[0] if n == 1 else z3.Concat(*parts)


def _write(data: z3.ArrayRef, at: z3.BitVecRef, value: z3.BitVecRef) -> z3.ArrayRef:
    n = value.size() // 8
    for i in range(n):
        data = z3.Store(data, at + i, z3.Extract(8 * (n - i) - 1, 8 * (n - i - 1), value))
    return data


def _host_u32(value: z3.BitVecRef) -> z3.BitVecRef:
    """A u32 as a register holds it on a little-endian host, in memory order."""
    return z3.Concat(*[z3.Extract(8 * i + 7, 8 * i, value) for i in range(4)])


# ------------------------------------------------------------------- expressions

def _meta(vm: Machine, m: re.Match, s: State):
    key, info = m.group(1), vm.info
    if key == "protocol":
        return _with(s, m.group(2), info.protocol, True), None
    if key == "nfproto":
        return _with(s, m.group(2), info.nfproto, True), None
    if key == "l4proto":
        ok, broke = _split(s, info.l4)
        return _with(ok, m.group(2), info.tprot, True), broke
    if key == "len":
        return _with(s, m.group(2), _host_u32(vm.frame.length - ETH), True), None
    raise Unsupported(f"meta key `{key}` is not modelled")


def _base(vm: Machine, where: str, s: State, write: bool = False):
    """(offset of the header from the frame's first byte, condition it exists)."""
    info, f = vm.info, vm.frame
    if where == "link":
        return bv(0), z3.BoolVal(True)
    if where == "network":
        return bv(ETH), z3.BoolVal(True)
    if where == "transport":
        return info.thoff, z3.And(info.l4, info.fragoff == 0) if write else info.l4
    if where == "inner":
        first = z3.And(info.l4, info.fragoff == 0)
        doff = u32(z3.LShR(z3.Select(s.data, info.thoff + 12), 4)) * 4
        tcp = z3.And(info.tprot == 6, f.has(info.thoff, 20))
        return (z3.If(info.tprot == 6, info.thoff + doff, info.thoff + 8),
                z3.And(first, z3.Or(tcp, info.tprot == 17)))
    raise Unsupported(f"payload base `{where}`")


def _load(vm: Machine, m: re.Match, s: State):
    size, where, off = int(m.group(1)), m.group(2), int(m.group(3))
    if where == "link" and off + size > 12:
        raise Unsupported("link-layer loads at the EtherType or beyond are not modelled "
                          "(nft puts a removed VLAN tag back into them)")
    base, exists = _base(vm, where, s)
    at = base + off
    ok, broke = _split(s, z3.And(exists, vm.frame.has(at, size)))
    return _with(ok, m.group(4), _read(s.data, at, size), True), broke


_CMP = {"eq": lambda a, b: a == b, "neq": lambda a, b: a != b, "lt": z3.ULT,
        "lte": z3.ULE, "gt": z3.UGT, "gte": z3.UGE}


def _cmp(vm: Machine, m: re.Match, s: State):
    left = _reg(s, m.group(2))
    right = _const(m.group(3), left.size() // 8)
    return _split(s, _CMP[m.group(1)](left, right))


def _bitwise(vm: Machine, m: re.Match, s: State):
    value = _reg(s, m.group(2))
    width = value.size() // 8
    out = (value & _const(m.group(3), width)) ^ _const(m.group(4), width)
    return _with(s, m.group(1), out), None


def _found(vm: Machine, s: State, reg: str, name: str):
    """(found, [(condition, verdict)]) of a lookup of set ``name`` from ``reg``."""
    elements = vm.listing.sets.get(name)
    if elements is None:
        raise Unsupported(f"set `{name}` is not listed")
    if not elements:
        return z3.BoolVal(False), []
    return maps.lookup(maps.key_fields(s.regs, reg, len(elements[0].key)), elements)


def _lookup(vm: Machine, m: re.Match, s: State):
    hit, _ = _found(vm, s, m.group(1), m.group(2))
    inverted = int(m.group(3) or "0", 16) & 1
    return _split(s, z3.Not(hit) if inverted else hit)


def _vmap(vm: Machine, m: re.Match, s: State):
    """A verdict map: the element's verdict, the rule ends; a miss breaks."""
    if m.group(3) != "0" or int(m.group(4) or "0", 16) & 1:
        raise Unsupported(f"a lookup into register {m.group(3)} (a data map)")
    found, choices = _found(vm, s, m.group(1), m.group(2))
    ahead: list[State] = [State(z3.And(s.cond, z3.Not(found)), s.data)]
    going = None
    for verdict, cond in maps.by_verdict(choices).items():
        if verdict is None:
            raise Unsupported(f"set `{m.group(2)}` used as a verdict map")
        taken = State(z3.And(s.cond, cond), s.data, s.regs)
        if verdict[0] == "continue":  # NFT_CONTINUE: the rule's next expression
            going = taken
            continue
        back = vm.verdict(verdict[0], verdict[1], taken)
        if back is not None:
            ahead.append(back)  # back from a jump: the next rule
    return going, merge(ahead)


def _byteorder(vm: Machine, m: re.Match, s: State):
    """``nft_byteorder_eval``: ``len // size`` units of ``size`` bytes reversed (hton
    and ntoh are the same swap on a little-endian host); the rest left as it was."""
    dreg, sreg, size, length = m.group(1), m.group(3), int(m.group(4)), int(m.group(5))
    out = maps.swapped(_reg(s, sreg), size, length, dreg == sreg)
    return _with(s, dreg, out, dreg == sreg and s.regs[slot(sreg)].padded), None


def _range(vm: Machine, m: re.Match, s: State):
    value = _reg(s, m.group(2))
    width = value.size() // 8
    inside = z3.And(z3.UGE(value, _const(m.group(3), width)),
                    z3.ULE(value, _const(m.group(4), width)))
    return _split(s, inside if m.group(1) == "eq" else z3.Not(inside))


def _objref(vm: Machine, m: re.Match, s: State):
    if m.group(1) != "1":
        raise Unsupported(f"object reference of type {m.group(1)}")
    index = vm.counters.get(m.group(2))
    if index is not None:
        vm.out.counted.setdefault(index, []).append(s.cond)
    return s, None


def _immediate(vm: Machine, m: re.Match, s: State):
    if m.group(1) == "0":
        word, _, target = m.group(2).partition(" -> ")
        return vm.verdict(word, target or None, s), None
    data = words(m.group(2))
    return _with(s, m.group(1), bv(int.from_bytes(data, "big"), 8 * len(data))), None


def _noop(vm: Machine, m: re.Match, s: State):
    return s, None


def nft_csum(old: z3.BitVecRef, fsum: z3.BitVecRef, tsum: z3.BitVecRef) -> z3.BitVecRef:
    """``nft_csum_replace``: RFC 1624 in ones' complement, a zero stored as 0xffff."""
    spare = 16 * 0xFFFF
    value = z3.Extract(15, 0, mod_ffff(u32(old) + fsum + spare - tsum))
    return z3.If(value == 0, bv(0xFFFF, 16), value)


def _payload_write(vm: Machine, m: re.Match, s: State):
    size, where, off = int(m.group(2)), m.group(3), int(m.group(4))
    csum_type, csum_off, flags = int(m.group(5)), int(m.group(6)), int(m.group(7), 16)
    value = _reg(s, m.group(1))
    value = z3.Extract(value.size() - 1, value.size() - 8 * size, value)
    base, exists = _base(vm, where, s, write=True)
    at, f = base + off, vm.frame
    s, broke = _split(s, z3.And(exists, f.has(at, size)))
    data = s.data
    if csum_type or flags:
        padded = 8 * (size % 2)
        old = _read(data, at, size)
        fsum = word_sum(z3.Concat(old, bv(0, padded)) if padded else old)
        tsum = word_sum(z3.Concat(value, bv(0, padded)) if padded else value)
        if csum_type:
            where_sum = base + csum_off
            s, more = _split(State(s.cond, data, s.regs), f.has(where_sum, 2))
            broke = merge([broke, more])
            data = _write(data, where_sum, nft_csum(_read(data, where_sum, 2), fsum, tsum))
        if flags & 1:
            data, s, more = _l4csum(vm, State(s.cond, data, s.regs), fsum, tsum)
            broke = merge([b for b in (broke, more) if b is not None])
    return State(s.cond, _write(data, at, value), s.regs), broke


def _l4csum(vm: Machine, s: State, fsum, tsum):
    """``nft_payload_l4csum_update``: (packet, state going on, state that breaks)."""
    info, f, data = vm.info, vm.frame, s.data
    th = info.thoff
    udp = z3.And(info.tprot == 17, f.has(th, 8), _read(data, th + 6, 2) != 0)
    tcp, lite, icmp6 = info.tprot == 6, info.tprot == 136, info.tprot == 58
    update = z3.And(info.l4, info.fragoff == 0, z3.Or(tcp, udp, lite, icmp6))
    at = z3.If(tcp, th + 16, z3.If(icmp6, th + 2, th + 6))
    ok, broke = _split(s, z3.Or(z3.Not(update), f.has(at, 2)))
    broke = State(broke.cond, data)
    written = _write(data, at, nft_csum(_read(data, at, 2), fsum, tsum))
    return z3.If(update, written, data), ok, broke


_HEX = r"((?:0x[0-9a-f]{8} ?)+)"
HANDLERS = [
    (re.compile(r"meta load (\w+) => reg (\d+)"), _meta),
    (re.compile(r"payload load (\d+)b @ (\w+) header \+ (\d+) => reg (\d+)"), _load),
    (re.compile(r"cmp (eq|neq|lt|lte|gt|gte) reg (\d+) " + _HEX), _cmp),
    (re.compile(r"bitwise reg (\d+) = \( reg (\d+) & " + _HEX + r" \) \^ " + _HEX), _bitwise),
    (re.compile(r"lookup reg (\d+) set (\S+)(?: (0x[0-9a-f]+))?"), _lookup),
    (re.compile(r"lookup reg (\d+) set (\S+) dreg (\d+)(?: (0x[0-9a-f]+))?"), _vmap),
    (re.compile(r"byteorder reg (\d+) = (hton|ntoh)\(reg (\d+), (\d+), (\d+)\)"),
     _byteorder),
    (re.compile(r"range (eq|neq) reg (\d+) " + _HEX + " " + _HEX), _range),
    (re.compile(r"counter pkts \d+ bytes \d+"), _noop),
    (re.compile(r"log.*"), _noop),
    (re.compile(r"objref type (\d+) name (\S+)"), _objref),
    (re.compile(r"immediate reg (0) ((?:accept|drop|continue|return)|(?:jump|goto) -> \S+)"),
     _immediate),
    (re.compile(r"immediate reg (\d+) " + _HEX), _immediate),
    (re.compile(r"payload write reg (\d+) => (\d+)b @ (\w+) header \+ (\d+) csum_type (\d+) "
                r"csum_off (\d+) csum_flags 0x([0-9a-f]+)"), _payload_write),
]


def run(listing: Listing, chain: str, hook: str, frame: Frame,
        counters: dict[str, int]) -> Behaviour:
    """The base chain ``chain`` on ``frame`` (as the hook sees it)."""
    vm = Machine(listing, hook, frame, counters)
    back = vm.chain(chain, State(z3.BoolVal(True), frame.data))
    if back is not None:
        vm.verdict(listing.policies.get(chain, "accept"), None, back)
    passes = z3.Or(*vm.out.passes) if vm.out.passes else z3.BoolVal(False)
    out = frame.data
    for cond, data in reversed(vm.out.outs):
        out = out if data.eq(out) else z3.If(cond, data, out)
    counted = {i: z3.Or(*conds) for i, conds in vm.out.counted.items()}
    return Behaviour(passes, out, counted)
