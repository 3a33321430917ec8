"""Raw Ethernet frames for the differential tests and ``pfc verify``, biased to a
policy's constants (semantics.md, "Packets for the equivalence tests").

One set of building functions draws every choice through a tiny ``Draw`` interface;
``frames()`` runs them on hypothesis (shrinkable examples), ``sample()`` on a seeded
``random.Random`` (deterministic, no pytest). This module extracts the constants and
holds the API; the recipes (what mix of frames) are ``pfc.oracle.genmix``, the bytes are
written by ``pfc.oracle.framebuild``.

Half the frames (roughly) are aimed at one rule: its family, its protocol, and values
from its own matches (each address, prefix edge and one outside, port and range edge
±1, flag combination that holds and just misses, payload bytes at its offset), so all
of a rule's matches hold, or just miss, at once.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import fields, replace
from ipaddress import IPv4Address, IPv6Address
from typing import Any, TypeVar

from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from pfc.frontend.ir import (
    AddrMatch,
    FlagsMatch,
    IntMatch,
    IPNetwork,
    Match,
    PayloadMatch,
    Policy,
    Redirect,
    Rule,
)
from pfc.oracle.draws import (
    BASE_PROTOS,
    DEFAULT_DST,
    DEFAULT_SRC,
    Aim,
    Constants,
    Draw,
    HypothesisDraw,
    Options,
    RandomDraw,
)
from pfc.oracle.genmix import build_frame

T = TypeVar("T")
MAX_ENTRIES = 64  # per match: a longer list (a 100k-entry set) is sampled evenly


_KINDS = tuple(f.name for f in fields(Constants) if f.name != "aims")
_INT_KINDS = {"sport": ("ports", 65535), "dport": ("ports", 65535),
              "proto": ("protos", 255), "ttl": ("ttls", 255), "len": ("lens", 65535),
              "icmp-type": ("icmp_types", 255)}


def constants(policy: Policy | None) -> Constants:
    """The constants of ``policy`` (all of them) with one ``Aim`` per rule."""
    rules = policy.rules if policy is not None else ()
    whole = _collect(rules)
    aims = tuple(Aim(tuple(sorted(r.family.versions)), r.proto, _fill(_collect((r,)), whole))
                 for r in rules if r.matches or r.proto is not None)
    return replace(whole, aims=aims)


def _collect(rules: Iterable[Rule]) -> Constants:
    acc: dict[str, set[Any]] = {kind: set() for kind in _KINDS}
    acc["protos"].update(BASE_PROTOS)
    for rule in rules:
        if rule.proto is not None:
            acc["protos"].add(rule.proto)
        if isinstance(rule.action, Redirect):
            acc["v4" if rule.action.address.version == 4 else "v6"].add(rule.action.address)
            if rule.action.port is not None:
                acc["ports"].add(rule.action.port)
        for match in rule.matches:
            _add_match(acc, match)
    return Constants(**{kind: tuple(sorted(values)) for kind, values in acc.items()})


def _add_match(acc: dict[str, set[Any]], match: Match) -> None:
    if isinstance(match, AddrMatch):
        for net in _spread(match.prefixes):
            for addr in _prefix_edges(net):
                acc["v4" if addr.version == 4 else "v6"].add(addr)
    elif isinstance(match, IntMatch) and match.field in _INT_KINDS:
        kind, top = _INT_KINDS[match.field]
        for lo, hi in _spread(match.ranges):
            acc[kind].update(v for v in (lo - 1, lo, hi, hi + 1) if 0 <= v <= top)
    elif isinstance(match, FlagsMatch):
        acc["flag_masks"].update(_flag_masks(match.set, match.clear))
    elif isinstance(match, PayloadMatch):
        acc["payloads"].add((match.offset, match.data))


def _spread(items: Sequence[T]) -> Sequence[T]:
    """At most MAX_ENTRIES items, evenly spaced, first and last kept."""
    if len(items) <= MAX_ENTRIES:
        return items
    return [items[i * (len(items) - 1) // (MAX_ENTRIES - 1)] for i in range(MAX_ENTRIES)]


def _prefix_edges(net: IPNetwork) -> list[IPv4Address | IPv6Address]:
    """First and last address, one outside each edge, and one in the middle."""
    first, last = net.network_address, net.broadcast_address
    edges = [first, last]
    if int(first) > 0:
        edges.append(first - 1)
    if int(last) < 2 ** net.max_prefixlen - 1:
        edges.append(last + 1)
    if net.num_addresses > 2:
        edges.append(first + net.num_addresses // 2)
    return edges


def _flag_masks(must_set: int, must_clear: int) -> set[int]:
    """Flag bytes that satisfy (fewest and most bits) and that miss by one bit."""
    free = 0xFF & ~must_clear & ~must_set
    masks = {must_set, must_set | free}
    for bit in (1 << i for i in range(8)):
        if bit & must_set:
            masks.update((must_set & ~bit, (must_set | free) & ~bit))
        if bit & must_clear:
            masks.add(must_set | bit)
    return masks


def _fill(own: Constants, whole: Constants) -> Constants:
    return replace(own, **{k: getattr(whole, k) for k in _KINDS if not getattr(own, k)})


# ------------------------------------------------------------------------- public API

def _options(malformed: bool, eth_dst: bytes | None, eth_src: bytes | None,
             fragments: bool) -> Options:
    for mac in (eth_dst, eth_src):
        if mac is not None and len(mac) != 6:
            raise ValueError(f"a MAC address is 6 bytes, got {mac!r}")
    return Options(malformed, eth_dst or DEFAULT_DST, eth_src or DEFAULT_SRC, fragments)


def _maker(policy: Policy | None, opts: Options) -> Callable[[Draw], bytes]:
    consts = constants(policy)
    whole = Aim((4, 6), None, consts)
    return lambda draw: build_frame(draw, consts.aims, whole, opts)


def frames(policy: Policy | None = None, *, malformed: bool = True,
           eth_dst: bytes | None = None, eth_src: bytes | None = None,
           fragments: bool = True) -> SearchStrategy[bytes]:
    """Ethernet frames (bytes) of every kind, biased to ``policy``'s constants (any
    policy, or none). ``eth_dst``/``eth_src`` fix the MAC addresses (6 bytes each)."""
    make = _maker(policy, _options(malformed, eth_dst, eth_src, fragments))
    return st.composite(lambda draw: make(HypothesisDraw(draw)))()


def well_formed_frames(policy: Policy | None = None, **kw: Any) -> SearchStrategy[bytes]:
    """IPv4/IPv6 frames as the kernel's IP input accepts them: valid version, IHL,
    lengths and checksums, no truncation, no VLAN tags, no IPv6 addresses ``ipv6_rcv``
    drops (Ethernet padding, IPv4 options, a Hop-by-Hop header and fragments may occur;
    ``fragments=False`` leaves fragments out)."""
    return frames(policy, malformed=False, **kw)


def sample(policy: Policy | None, n: int, seed: int = 0, *, malformed: bool = True,
           eth_dst: bytes | None = None, eth_src: bytes | None = None,
           fragments: bool = True) -> list[bytes]:
    """``n`` frames from the same recipes as ``frames()``; the same for the same seed."""
    make = _maker(policy, _options(malformed, eth_dst, eth_src, fragments))
    draw = RandomDraw(random.Random(seed))
    return [make(draw) for _ in range(n)]
