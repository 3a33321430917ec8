"""An iptables rule's matches in pfc's words.

``convert_matches`` reads the general options and every ``-m`` module of one rule and
gives the protocol keyword, the pfc matches as *alternatives* (pairwise disjoint
conjunctions: a rule whose match is a disjunction, ``--ctstate ESTABLISHED,DNAT`` or
``! --icmp-type 3/1``, becomes one pfc rule per alternative), the rate of a ``limit``
or ``hashlimit`` module, and the rule's ``--comment``. What pfc cannot say raises
``Refuse`` at the words that say it; the reasons are in docs/import.md.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from pfc.importers.iptables import values
from pfc.importers.iptables.words import Module, Opt, Words
from pfc.importers.model import Match, Refuse, conjoin

Conj = tuple[Match, ...]
PROTO_WORDS = {("tcp", 4): "tcp", ("tcp", 6): "tcp", ("udp", 4): "udp", ("udp", 6): "udp",
               ("icmp", 4): "icmp", ("icmpv6", 6): "icmp6", ("ipv6-icmp", 6): "icmp6"}
TCP_FLAGS = {"FIN": "fin", "SYN": "syn", "RST": "rst", "PSH": "psh", "ACK": "ack",
             "URG": "urg"}
STATES = {"NEW": "new", "ESTABLISHED": "established", "RELATED": "related",
          "INVALID": "invalid", "UNTRACKED": "untracked"}
STATUS = {"SNAT": "snat", "DNAT": "dnat", "EXPECTED": "expected",
          "SEEN_REPLY": "seen-reply", "CONFIRMED": "confirmed"}
ADDR_TYPES = {"UNICAST": "unicast", "LOCAL": "local", "BROADCAST": "broadcast",
              "MULTICAST": "multicast"}

# Modules pfc has no words for, with the reason a reader is told.
REFUSED = {
    "recent": "per-address recent lists (`-m recent`) are state pfc does not keep",
    "set": "ipset lists are not in an iptables-save dump (`ipset save` holds them) and "
           "pfc does not read them",
    "owner": "pfc does not match the sending socket's owner",
    "physdev": "pfc does not match bridge ports (`-m physdev`)",
    "policy": "pfc does not match IPsec policies",
    "string": "pfc matches payload bytes at fixed offsets, not a string anywhere",
    "u32": "pfc does not read `-m u32` programs",
    "time": "pfc rules do not depend on the time of day",
    "connlimit": "pfc does not count connections per address",
    "connbytes": "pfc does not count a connection's bytes",
    "helper": "pfc does not match conntrack helpers",
    "pkttype": "`-m pkttype` reads the link-layer packet type, which pfc does not "
               "(`dst-type` reads the address)",
    "socket": "pfc does not look up sockets", "rpfilter": "pfc has no reverse-path check",
    "statistic": "pfc does not sample packets", "quota": "pfc has no quotas",
    "dscp": "pfc does not match DSCP", "tos": "pfc does not match the TOS byte",
    "ecn": "pfc does not match ECN bits", "tcpmss": "pfc does not read TCP options",
    "sctp": "pfc matches ports of TCP and UDP only", "dccp": "pfc matches ports of TCP "
    "and UDP only", "udplite": "pfc matches ports of TCP and UDP only",
    "esp": "pfc does not read IPsec SPIs", "ah": "pfc does not read IPsec SPIs",
    "frag": "pfc does not read IPv6 fragment headers", "ipv6header": "pfc does not read "
    "IPv6 extension headers", "hbh": "pfc does not read IPv6 extension headers",
    "dst": "pfc does not read IPv6 extension headers", "rt": "pfc does not read IPv6 "
    "extension headers", "mh": "pfc does not read mobility headers",
    "devgroup": "pfc does not match device groups", "cgroup": "pfc does not match "
    "cgroups", "cpu": "pfc does not match the CPU", "nfacct": "pfc has no nfacct "
    "objects", "bpf": "pfc does not run `-m bpf` programs", "cluster": "pfc does not "
    "match cluster nodes", "realm": "pfc does not match routing realms", "osf":
    "pfc does not fingerprint operating systems", "ipvs": "pfc does not match IPVS "
    "state", "connlabel": "pfc does not match conntrack labels", "rateest": "pfc has no "
    "rate estimators", "condition": "pfc has no condition variables", "geoip": "pfc has "
    "no GeoIP tables (write the prefixes)", "mark_m": "pfc cannot read this mark match",
    "eui64": "pfc does not check EUI-64 addresses", "ipcomp": "pfc does not read IPComp "
    "headers", "srh": "pfc does not read segment routing headers", "l2tp": "pfc does not "
    "read L2TP headers", "ipp2p": "pfc does not classify peer-to-peer traffic",
}


@dataclass
class Converted:
    protocol: str | None = None
    alternatives: list[Conj] = field(default_factory=lambda: [()])
    rate: tuple[str, str, int, str | None, Opt] | None = None  # kind, rate, burst, per, at
    comment: str = ""
    proto_number: int | None = None


def convert_matches(words: Words, family: int) -> Converted:
    out = Converted()
    _protocol(out, words.general.get("-p"), family)
    for key, match in (("-s", "src"), ("-d", "dst")):
        opt = words.general.get(key)
        if opt is not None:
            conj = _addresses(opt, match, family)
            _and(out, [conj] if conj is not None else [])
    for key, match in (("-i", "iif"), ("-o", "oif")):
        opt = words.general.get(key)
        if opt is not None:
            name = values.interface(opt.value, opt.span)
            if name is not None:
                _and(out, [(Match(match, (name,), opt.negated),)])
    if "-f" in words.general:
        raise Refuse("`-f` matches second and later fragments; pfc's `frag` also holds "
                     "on first fragments", words.general["-f"].span)
    for module in words.matches:
        _module(out, module, family)
    return out


def _and(out: Converted, alternatives: list[Conj]) -> None:
    """The rule's alternatives and (cross product) ``alternatives``: disjoint stays
    disjoint."""
    joined = (conjoin(a, b) for a in out.alternatives for b in alternatives)
    out.alternatives = [j for j in joined if j is not None]


def _protocol(out: Converted, opt: Opt | None, family: int) -> None:
    if opt is None:
        return
    word = opt.value.lower()
    if word in ("all", "0"):
        if opt.negated:
            _never(out)
        return
    number = values.protocol_number(word, opt.span)
    out.proto_number = None if opt.negated else number
    name = {6: "tcp", 17: "udp", 1: "icmp" if family == 4 else None,
            58: "icmp6" if family == 6 else None}.get(number)
    if name is not None and not opt.negated:
        out.protocol = name
    else:
        _and(out, [(Match("proto", (str(number),), opt.negated),)])


def _addresses(opt: Opt, field_: str, family: int) -> Conj | None:
    items = []
    for part in opt.value.split(","):
        text = values.address(part.strip(), family, opt.span)
        if text is None:
            return None if opt.negated else ()
        items.append(text)
    return (Match(field_, tuple(items), opt.negated),)


def _module(out: Converted, module: Module, family: int) -> None:
    name = module.name
    if name in REFUSED:
        raise Refuse(f"-m {name}: {REFUSED[name]}", module.span)
    handler = _HANDLERS.get(name)
    if handler is None:
        raise Refuse(f"-m {name}: a match module pfc does not know", module.span)
    for opt in module.opts:
        handler(out, opt, family)


def _need(out: Converted, opt: Opt, *protocols: str) -> None:
    if out.protocol not in protocols:
        raise Refuse(f"`{opt.name}` on a rule that is not "
                     + " or ".join(f"`-p {p}`" for p in protocols)
                     + " (pfc matches ports of TCP and UDP only)", opt.span)


def _never(out: Converted) -> None:
    """The rule matches no packet (``! --dport 0:65535``): pfc leaves it out."""
    out.alternatives = []


def _ports(out: Converted, opt: Opt, family: int) -> None:
    if opt.name in ("--ports",):
        _either_port(out, opt)
        return
    field_ = "sport" if opt.name in ("--sport", "--source-port", "--sports",
                                       "--source-ports") else "dport"
    if opt.name not in ("--sport", "--source-port", "--dport", "--destination-port",
                        "--sports", "--source-ports", "--dports", "--destination-ports"):
        raise Refuse(f"`{opt.name}`: an option pfc does not know", opt.span)
    _need(out, opt, "tcp", "udp")
    ranges = tuple(values.port_range(p, opt.span) for p in opt.value.split(","))
    if ranges == ("0-65535",):
        if opt.negated:
            return _never(out)
        # every port: holds where the port is read (not on later fragments)
        _and(out, [(Match(field_, ranges),)])
        return
    _and(out, [(Match(field_, ranges, opt.negated),)])


def _either_port(out: Converted, opt: Opt) -> None:
    """``--ports P``: source or destination port; as two disjoint alternatives."""
    _need(out, opt, "tcp", "udp")
    ranges = tuple(values.port_range(p, opt.span) for p in opt.value.split(","))
    d, s = Match("dport", ranges), Match("sport", ranges)
    if opt.negated:
        _and(out, [(d.negate(), s.negate())])
    else:
        _and(out, [(d,), (s, d.negate())])


def _tcp(out: Converted, opt: Opt, family: int) -> None:
    if opt.name == "--syn":
        flags = ("syn", "!rst", "!ack", "!fin")
        _and(out, [(Match("flags", flags, opt.negated),)])
    elif opt.name == "--tcp-flags":
        if len(opt.args) != 2:
            raise Refuse("`--tcp-flags` takes a mask and the flags set", opt.span)
        _and(out, [(Match("flags", _flags(opt), opt.negated),)])
    elif opt.name in ("--tcp-option",):
        raise Refuse("`--tcp-option`: pfc does not read TCP options", opt.span)
    else:
        _ports(out, opt, family)


def _flags(opt: Opt) -> tuple[str, ...]:
    def bits(text: str) -> list[str]:
        out = []
        for word in text.upper().split(","):
            if word == "ALL":
                out += list(TCP_FLAGS)
            elif word == "NONE":
                continue
            elif word in TCP_FLAGS:
                out.append(word)
            else:
                raise Refuse(f"TCP flag `{word}`", opt.span)
        return out
    mask, comp = bits(opt.args[0].text), set(bits(opt.args[1].text))
    if not mask:
        raise Refuse("`--tcp-flags NONE ...` tests nothing (matches every TCP packet)",
                     opt.span)
    if comp - set(mask):
        raise Refuse("`--tcp-flags`: a flag set that is not in the mask never matches",
                     opt.span)
    return tuple(TCP_FLAGS[f] if f in comp else "!" + TCP_FLAGS[f]
                 for f in TCP_FLAGS if f in mask)


def _icmp(out: Converted, opt: Opt, family: int) -> None:
    if opt.name not in ("--icmp-type", "--icmpv6-type"):
        raise Refuse(f"`{opt.name}`: an option pfc does not know", opt.span)
    kind, lo, hi = values.icmp_type(opt.value, family, opt.span)
    if kind == 0xFF:
        if opt.negated:
            _never(out)
        return
    t = Match("icmp-type", (str(kind),))
    codes = () if (lo, hi) == (0, 0xFF) else (Match(
        "icmp-code", (str(lo) if lo == hi else f"{lo}-{hi}",)),)
    if not opt.negated:
        _and(out, [(t,) + codes])
    elif not codes:
        _and(out, [(t.negate(),)])
    else:
        _and(out, [(t.negate(),), (t, codes[0].negate())])


def _state(out: Converted, opt: Opt, family: int) -> None:
    if opt.name == "--ctstatus":
        _ctstatus(out, opt)
        return
    if opt.name not in ("--state", "--ctstate"):
        raise Refuse(f"`{opt.name}`: pfc matches the state and status of a connection, "
                     "not its tuple, direction or expiry", opt.span)
    words = [w.upper() for w in opt.value.split(",")]
    states = tuple(STATES[w] for w in words if w in STATES)
    status = tuple(STATUS[w] for w in words if w in ("SNAT", "DNAT"))
    unknown = [w for w in words if w not in STATES and w not in ("SNAT", "DNAT")]
    if unknown:
        raise Refuse(f"connection state `{unknown[0]}`", opt.span)
    parts = ([Match("ct", states)] if states else []) + [Match("ct-status", (s,))
                                                        for s in status]
    _and(out, _any_of(parts, opt.negated))


def _ctstatus(out: Converted, opt: Opt) -> None:
    words = [w.upper() for w in opt.value.split(",")]
    if "ASSURED" in words:
        raise Refuse("ct status ASSURED: pfc does not model the kernel's heuristics for "
                     "it", opt.span)
    unknown = [w for w in words if w not in STATUS]
    if unknown:
        raise Refuse(f"connection status `{unknown[0]}`", opt.span)
    _and(out, _any_of([Match("ct-status", (STATUS[w],)) for w in words], opt.negated))


def _any_of(parts: list[Match], negated: bool) -> list[Conj]:
    """``A or B or ...`` (each an always-present field) as disjoint alternatives, or
    its negation (one conjunction)."""
    if negated:
        return [tuple(p.negate() for p in parts)]
    return [tuple(q.negate() for q in parts[:i]) + (p,) for i, p in enumerate(parts)]


def _comment(out: Converted, opt: Opt, family: int) -> None:
    out.comment = " ".join(filter(None, (out.comment, opt.value)))


def _mark(field_: str):
    def handler(out: Converted, opt: Opt, family: int) -> None:
        if opt.name != "--mark":
            raise Refuse(f"`{opt.name}`: an option pfc does not know", opt.span)
        value = values.mark(opt.value, opt.span)
        _and(out, [(Match(field_, (value,), opt.negated),)])
    return handler


def _mac(out: Converted, opt: Opt, family: int) -> None:
    mac = opt.value.lower()
    if len(mac.split(":")) != 6:
        raise Refuse(f"`{opt.value}` is not a MAC address", opt.span)
    _and(out, [(Match("ether-src", (mac,), opt.negated),)])


def _addrtype(out: Converted, opt: Opt, family: int) -> None:
    if opt.name in ("--limit-iface-in", "--limit-iface-out"):
        raise Refuse(f"`{opt.name}`: pfc's address types are the host's, not one "
                     "interface's", opt.span)
    field_ = {"--src-type": "src-type", "--dst-type": "dst-type"}.get(opt.name)
    if field_ is None:
        raise Refuse(f"`{opt.name}`: an option pfc does not know", opt.span)
    kinds = []
    for word in opt.value.upper().split(","):
        if word not in ADDR_TYPES:
            raise Refuse(f"address type {word}: pfc knows LOCAL, UNICAST, BROADCAST and "
                         "MULTICAST", opt.span)
        kinds.append(ADDR_TYPES[word])
    _and(out, [(Match(field_, tuple(kinds), opt.negated),)])


def _iprange(out: Converted, opt: Opt, family: int) -> None:
    field_ = {"--src-range": "src", "--dst-range": "dst"}.get(opt.name)
    if field_ is None:
        raise Refuse(f"`{opt.name}`: an option pfc does not know", opt.span)
    lo, _, hi = opt.value.partition("-")
    try:
        first, last = ipaddress.ip_address(lo), ipaddress.ip_address(hi or lo)
        nets = list(ipaddress.summarize_address_range(first, last))
    except (ValueError, TypeError):
        raise Refuse(f"`{opt.value}` is not an address range", opt.span) from None
    if first.version != family:
        raise Refuse(f"`{opt.value}` is not an IPv{family} range", opt.span)
    texts = tuple(str(n.network_address) if n.prefixlen == n.max_prefixlen else str(n)
                  for n in nets)
    _and(out, [(Match(field_, texts, opt.negated),)])


def _length(out: Converted, opt: Opt, family: int) -> None:
    lo, _, hi = opt.value.partition(":")
    try:
        low, high = int(lo or 0), int(hi) if hi else int(lo or 0)
    except ValueError:
        raise Refuse(f"length `{opt.value}`", opt.span) from None
    if ":" in opt.value and not hi:
        high = 65535
    text = str(low) if low == high else f"{low}-{high}"
    _and(out, [(Match("len", (text,), opt.negated),)])


def _ttl(out: Converted, opt: Opt, family: int) -> None:
    kind = opt.name.rsplit("-", 1)[-1]
    try:
        n = int(opt.value)
    except ValueError:
        raise Refuse(f"`{opt.value}` is not a number", opt.span) from None
    ranges = {"eq": (n, n), "lt": (0, n - 1), "gt": (n + 1, 255)}.get(kind)
    if ranges is None or ranges[0] > ranges[1] or not opt.name.startswith(("--ttl",
                                                                           "--hl")):
        raise Refuse(f"`{opt.name} {opt.value}`", opt.span)
    lo, hi = ranges
    _and(out, [(Match("ttl", (str(lo) if lo == hi else f"{lo}-{hi}",), opt.negated),)])


def _limit(out: Converted, opt: Opt, family: int) -> None:
    if opt.negated:
        raise Refuse(f"`! {opt.name}`", opt.span)
    kind, rate, burst, per, at = out.rate or ("limit", "3/hour", 5, None, opt)
    if opt.name == "--limit":
        rate, at = values.rate(opt.value, opt.span), opt
    elif opt.name == "--limit-burst":
        burst = _number(opt)
    else:
        raise Refuse(f"`{opt.name}`: an option pfc does not know", opt.span)
    out.rate = (kind, rate, burst, per, at)


def _hashlimit(out: Converted, opt: Opt, family: int) -> None:
    kind, rate, burst, per, at = out.rate or ("upto", "", 5, None, opt)
    name = opt.name.removeprefix("--hashlimit-")
    if name in ("upto", "above"):
        kind, rate, at = name, values.rate(opt.value, opt.span), opt
    elif name == "burst":
        burst = _number(opt)
    elif name == "mode":
        modes = opt.value.split(",")
        if modes not in (["srcip"], ["dstip"]):
            raise Refuse(f"hashlimit mode `{opt.value}`: pfc keeps a bucket per source "
                         "or per destination address", opt.span)
        per = "src" if modes == ["srcip"] else "dst"
    elif name in ("srcmask", "dstmask") and opt.value != str(32 if family == 4 else 128):
        raise Refuse(f"`{opt.name} {opt.value}`: pfc keeps a bucket per address",
                     opt.span)
    elif name not in ("name", "htable-size", "htable-max", "htable-expire",
                      "htable-gcinterval", "srcmask", "dstmask"):
        raise Refuse(f"`{opt.name}`", opt.span)
    out.rate = (kind, rate, burst, per, at)


def _number(opt: Opt) -> int:
    try:
        return int(opt.value)
    except ValueError:
        raise Refuse(f"`{opt.value}` is not a number", opt.span) from None


def _multiport(out: Converted, opt: Opt, family: int) -> None:
    _ports(out, opt, family)


_HANDLERS = {
    "tcp": _tcp, "udp": _ports, "icmp": _icmp, "icmp6": _icmp, "icmpv6": _icmp,
    "multiport": _multiport, "state": _state, "conntrack": _state, "comment": _comment,
    "mark": _mark("mark"), "connmark": _mark("ct-mark"), "mac": _mac,
    "addrtype": _addrtype, "iprange": _iprange, "length": _length, "ttl": _ttl,
    "hl": _ttl, "limit": _limit, "hashlimit": _hashlimit,
}

