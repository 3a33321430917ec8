"""Target ``u32``: tc filters (seed 000 §5.8) as a ``tc -batch`` file: one ``u32``
filter per rule at tc ingress (clsact) of ``--dev``, each at its own preference, with
``action gact drop`` / ``pass`` (``continue`` for ``count``), then a ``matchall``
filter with the default. Preferences are ``PREF_BASE`` + the rule's position.

What u32 can and cannot say with the interpreter's meaning (fail closed):

- a key is a 4-byte word at an offset from the network header, aligned to 4 (tc's
  parser refuses other offsets), compared under a mask; a word beyond the packet ends
  the whole filter without a match (``cls_u32.c``: ``goto out``), which is why each
  rule is a filter of its own: that end means "this rule does not hold";
- ``src``/``dst`` (IPv4 and IPv6 prefixes) are whole words: exact. ``proto`` (and the
  protocol keyword), ``ttl``, ``len`` and ``frag`` share a word with other bytes, so
  they are exact only beside a ``src``/``dst`` match, which needs the whole header
  (a rule without one is refused: the word would need bytes the field does not);
- alternatives (lists, ranges as masked prefixes) are the filter's nodes, tried in
  order: a rule holds when one node holds. Negated lists are "abort" nodes that read
  beyond any packet first (the rule then does not hold), then a node with the rest;
- transport fields (``sport dport flags icmp-type payload``) are refused: u32 cannot
  check that the IPv4 header is one the kernel accepts (IHL×4 ≤ total length ≤ the
  packet), which the interpreter requires before it reads them;
- ``redirect`` (pedit), ``log``, ``limit``, audit and ``ct`` are refused.

- a filter is ``protocol all`` with the EtherType as its first key (the word at -4:
  the MAC header's last two bytes): tc compares a filter's protocol with
  ``skb_protocol(skb, false)``, which is the *VLAN* protocol for a frame whose outer
  tag the kernel removed, so ``protocol ip`` never sees a tagged frame; the interpreter
  (``l2_input_view``) judges it untagged, and so does the EtherType key, which reads the
  MAC header as ``skb_vlan_untag`` left it (measured in the 6.1 lab).

Counters: each filter's gact action statistics (``tc -s -j filter show``): packets,
and bytes from the network header, as the interpreter counts them.
"""

from __future__ import annotations

import itertools

from pfc.backends.base import Artifact, Backend, Options, artifact_name, check_dev, printable
from pfc.backends.describe import describe
from pfc.frontend import ir
from pfc.frontend.diagnostics import CompileError, Diagnostic, error

PREF_BASE = 0x4000
MAX_NODES = 256  # nodes (alternatives) per rule: a policy needing more is refused
ABORT_AT = 0x7FFFFFF0  # a key there is beyond every packet: the filter ends unmatched
# field -> {version: (offset of its byte in L3, size)}
IP_FIELDS = {"proto": {4: (9, 1), 6: (6, 1)}, "ttl": {4: (8, 1), 6: (7, 1)},
             "len": {4: (2, 2), 6: (4, 2)}}
PROTOCOL = {ir.Family.IP4: "ip", ir.Family.IP6: "ipv6", ir.Family.IP: "all",
            ir.Family.ANY: "all"}

Key = tuple[int, int, int]  # (value, mask, offset): one u32 word


def unsupported(rule: ir.Rule) -> str | None:
    """Why ``rule`` cannot be a u32 filter with its meaning, or None."""
    for m in rule.matches:
        if ir.FIELDS[m.field].layer is ir.Layer.TRANSPORT:
            return (f"`{m.field}` is a transport field: u32 cannot check that the IPv4 "
                    "header is one the kernel accepts (IHL×4 ≤ total length ≤ the "
                    "packet), which reading it needs")
        if not isinstance(m, ir.AddrMatch | ir.IntMatch | ir.FragMatch):
            return f"u32 has no key for `{m.field}`"
    needs_word = rule.proto is not None or _ip_ints(rule)
    if needs_word and not any(isinstance(m, ir.AddrMatch) for m in rule.matches):
        return ("u32 reads 4-byte words: `proto`, `ttl`, `len`, `frag` and the protocol "
                "keyword are exact only beside a `src` or `dst` match")
    return None


def _ip_ints(rule: ir.Rule) -> bool:
    return any(isinstance(m, ir.IntMatch | ir.FragMatch) for m in rule.matches)


def refused(policy: ir.Policy) -> list[Diagnostic]:
    out = []
    for rule in policy.rules:
        reason = unsupported(rule)
        if reason is None and len(nodes(rule)[1]) > MAX_NODES:
            reason = f"it needs more than {MAX_NODES} u32 nodes (lists × ranges)"
        if reason:
            out.append(error(f"target `u32` cannot express this rule (line {rule.line}): "
                             f"{reason}", rule.span, code="unsupported",
                             hint="targets that can: nfmod, tc, xdp, nft, iptables"))
    return out


def _word(value: int, mask: int, at: int, size: int) -> Key:
    """A field of ``size`` bytes at ``at`` as a key on its aligned word."""
    shift = 8 * (4 - size - at % 4)
    return (value << shift, mask << shift, at - at % 4)


def _prefix_keys(net: ir.IPNetwork, at: int) -> list[Key]:
    raw, bits = int(net.network_address), net.max_prefixlen
    mask = ((1 << net.prefixlen) - 1) << (bits - net.prefixlen)
    words = bits // 32
    out = []
    for i in range(words):
        shift = 32 * (words - 1 - i)
        m = (mask >> shift) & 0xFFFFFFFF
        if m:
            out.append(((raw >> shift) & m, m, at + 4 * i))
    return out


def _range_masks(lo: int, hi: int, bits: int) -> list[tuple[int, int]]:
    """[lo, hi] as (value, mask) prefixes of a ``bits``-bit field."""
    out = []
    while lo <= hi:
        size = 0
        while size < bits and lo % (2 << size) == 0 and lo + (2 << size) - 1 <= hi:
            size += 1
        out.append((lo, ((1 << bits) - 1) ^ ((1 << size) - 1)))
        lo += 1 << size
    return out


ADDR_AT = {("src", 4): 12, ("dst", 4): 16, ("src", 6): 8, ("dst", 6): 24}


def _alternatives(m: ir.Match, version: int) -> list[list[Key]]:
    """The match, negation aside, as alternatives, each a list of keys (all hold)."""
    if isinstance(m, ir.AddrMatch):
        at = ADDR_AT[(m.field, version)]
        return [_prefix_keys(n, at) for n in m.prefixes if n.version == version]
    if isinstance(m, ir.FragMatch):  # MF set, or a fragment offset other than 0
        return [[_word(0x2000, 0x2000, 6, 2)]] + [
            [_word(v, k, 6, 2)] for v, k in _range_masks(1, 0x1FFF, 16)
            if not v & ~0x1FFF]
    offset, size = IP_FIELDS[m.field][version]
    bias = 40 if m.field == "len" and version == 6 else 0
    out = []
    for lo, hi in m.ranges:
        if hi < bias:
            continue
        out += [[_word(v, k, offset, size)] for v, k in
                _range_masks(max(lo - bias, 0), hi - bias, 8 * size)]
    return out


def _presence(m: ir.Match, version: int) -> Key:
    """A key that only needs the match's word in the packet."""
    if isinstance(m, ir.AddrMatch):
        return (0, 0, ADDR_AT[(m.field, version)])
    if isinstance(m, ir.FragMatch):
        return (0, 0, 4)
    offset, _ = IP_FIELDS[m.field][version]
    return (0, 0, offset - offset % 4)


def nodes(rule: ir.Rule) -> tuple[list[tuple[str, int]], list[tuple[int, bool, list[Key]]]]:
    """The rule's filters, (protocol, version) each, and its nodes in order:
    (version, abort, keys). Abort nodes (a negated match's values) come first."""
    versions = sorted(rule.family.versions) if rule.family is not ir.Family.ANY else []
    filters = [("ip" if v == 4 else "ipv6", v) for v in versions]
    out = []
    for v in versions:
        proto = [[[_word(rule.proto, 0xFF, IP_FIELDS["proto"][v][0], 1)]]] \
            if rule.proto is not None else []
        negated = [m for m in rule.matches if m.negated]
        for m in negated:
            out += [(v, True, keys) for keys in _alternatives(m, v)]
        choices = proto + [_alternatives(m, v) for m in rule.matches if not m.negated]
        choices += [[[_presence(m, v)]] for m in negated]
        for combo in itertools.product(*choices):
            out.append((v, False, [k for keys in combo for k in keys]))
    return filters, out


def key_text(key: Key) -> str:
    value, mask, at = key
    return f"match u32 0x{value & mask:08x} 0x{mask:08x} at {at}"


ACTIONS = {"drop": "drop", "pass": "pass", "count": "continue"}
ETHERTYPE = {4: "match u32 0x00000800 0x0000ffff at -4",
             6: "match u32 0x000086dd 0x0000ffff at -4"}


def lines(policy: ir.Policy, dev: str, base: int = PREF_BASE) -> tuple[list[str], dict]:
    """The batch's lines and, per rule index (and ``default``), its preferences (from
    ``base`` + 1 up: ``pfc load`` alternates two ranges, pfc.deploy.modular.u32)."""
    out = [f"qdisc replace dev {dev} clsact"]
    prefs: dict[int | str, list[int]] = {}
    pref = base
    for rule in policy.rules:
        filters, found = nodes(rule)
        out.append(f"# rule {rule.index}, line {rule.line}: {printable(describe(rule))}")
        for _, version in filters:
            pref += 1
            head = f"filter add dev {dev} ingress pref {pref} protocol all u32"
            for v, abort, keys in found:
                if v != version:
                    continue
                words = [ETHERTYPE[version]] + [key_text(k) for k in keys]
                if abort:
                    words.append(f"match u32 0 0 at {ABORT_AT}")
                action = "drop" if abort else ACTIONS[rule.action.name]
                out.append(f"{head} {' '.join(words)} action gact {action}")
            prefs.setdefault(rule.index, []).append(pref)
        if not filters:  # every frame: no key to read, matchall
            pref += 1
            out.append(f"filter add dev {dev} ingress pref {pref} protocol all matchall "
                       f"action gact {ACTIONS[rule.action.name]}")
            prefs[rule.index] = [pref]
    pref += 1
    out.append("# default")
    out.append(f"filter add dev {dev} ingress pref {pref} protocol all matchall "
               f"action gact {policy.default.value}")
    prefs["default"] = [pref]
    return out, prefs


def emit(policy: ir.Policy, options: Options) -> Artifact:
    diags = refused(policy)
    if diags:
        raise CompileError(diags)
    dev = check_dev(options.dev or "eth0")
    body, prefs = lines(policy, dev)
    text = (f"# pfc: {printable(policy.source)} for tc u32 at ingress of {dev}\n"
            "# load: tc -batch FILE (cls_u32, act_gact, cls_matchall)\n"
            + "\n".join(body) + "\n")
    files = {artifact_name(policy, "u32", "tc"): text.encode()}
    meta = {"dev": dev, "prefs": prefs, "pref_base": PREF_BASE}
    return Artifact("u32", "ingress", "tc", text, files, policy, meta)


def view(hook: str, frame: bytes) -> bytes | None:
    """tc ingress: the frame with its outer VLAN tag removed (``l2_input_view``)."""
    from pfc.oracle import packets
    return packets.l2_input_view(frame)


def run(artifact: Artifact, frames: list[bytes]):
    from pfc.backends.u32 import run as u32run
    return u32run.run(artifact, frames)


BACKENDS = (Backend(
    name="u32",
    description="tc u32 filters with gact actions at clsact ingress (--dev), "
                "as a `tc -batch` file",
    supports=frozenset({"count", "ipv6", "non-ip"}), formats=("tc",), hooks=("ingress",),
    emit=emit, run=run, view=view, limits=refused,
    carries={"ingress": "ingress"}),)
