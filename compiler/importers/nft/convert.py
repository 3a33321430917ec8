"""One nft rule in pfc's words: its matches in order, each statement a pfc rule on the
matches before it (``log prefix "x" drop`` is a ``log`` rule and a ``drop`` rule on
the same matches), a verdict map one rule per element. A ``counter`` is the counter
pfc keeps for every rule when a statement follows it directly, else a ``count`` rule.
``limit`` goes on the one statement after it. Refusals name the words (docs/import.md).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field

from pfc.importers.model import Match, Refuse, Remark, Rule, conjoin
from pfc.importers.nft import values as v
from pfc.importers.nft.ast import NftRule, Rel, Stmt, Val
from pfc.importers.nft.matches import (
    OVERLAP,
    PROTO_OF,
    Conj,
    element_alternatives,
    rel_alternatives,
)

REJECTS = {
    "icmpx": {"port-unreachable": "port-unreachable", "admin-prohibited": "admin-prohibited",
              "host-unreachable": "host-unreachable", "no-route": "no-route"},
    "icmp": {"port-unreachable": "port-unreachable", "admin-prohibited": "admin-prohibited",
             "host-unreachable": "host-unreachable", "net-unreachable": "no-route",
             "3": "port-unreachable", "13": "admin-prohibited", "1": "host-unreachable",
             "0": "no-route", "prot-unreachable": "proto-unreachable",
             "net-prohibited": "net-prohibited", "host-prohibited": "host-prohibited",
             "2": "proto-unreachable", "9": "net-prohibited", "10": "host-prohibited"},
    "icmpv6": {"port-unreachable": "port-unreachable", "admin-prohibited": "admin-prohibited",
               "addr-unreachable": "host-unreachable", "no-route": "no-route",
               "4": "port-unreachable", "1": "admin-prohibited", "3": "host-unreachable",
               "0": "no-route", "policy-fail": "policy-fail", "reject-route": "reject-route",
               "5": "policy-fail", "6": "reject-route"},
}
REJECTS["icmp6"] = REJECTS["icmpv6"]
REFUSED = {
    "queue": "pfc does not queue packets to user space",
    "dup": "pfc does not duplicate packets", "fwd": "pfc does not forward from ingress",
    "tproxy": "pfc has no transparent proxying", "synproxy": "pfc has no SYN proxy",
    "quota": "pfc has no quotas", "meter": "meters are per-key state pfc does not keep",
    "add": "adding to a set from the packet path is state pfc does not keep",
    "update": "updating a set from the packet path is state pfc does not keep",
    "delete": "deleting from a set from the packet path is state pfc does not keep",
    "xt": "an iptables extension inside nft (`xt`)", "last": "pfc has no `last`",
}
_PREFIX_BAD = re.compile(r"[^A-Za-z0-9 _.,:=/+-]")


@dataclass
class Context:
    """What converting one table's rules needs: its family (4, 6, None), its sets,
    where remarks go, and the defines made of named sets (name → pfc name)."""

    family: int | None
    sets: dict
    remarks: list[Remark]
    set_names: dict = field(default_factory=dict)


def convert_rule(rule: NftRule, ctx: Context) -> list[Rule]:
    """Every pfc rule ``rule`` becomes, in order; ``Refuse`` if pfc cannot say it."""
    state = _State(rule, ctx)
    nodes = rule.nodes
    for i, node in enumerate(nodes):
        if isinstance(node, Rel):
            if node.op == "vmap":
                if i != len(nodes) - 1:
                    raise Refuse("statements after a verdict map", nodes[i + 1].span)
                state.vmap(node)
                return state.out
            state.match(rel_alternatives(node, ctx.sets, ctx.family))
        else:
            state.statement(node, nodes[i + 1] if i + 1 < len(nodes) else None)
    state.finish()
    return state.out


class _State:
    def __init__(self, rule: NftRule, ctx: Context):
        self.rule, self.ctx = rule, ctx
        self.alts: list[Conj] = [(Match("family", (str(ctx.family),)),)] if ctx.family \
            else [()]
        self.out: list[Rule] = []
        self.limit: Stmt | None = None
        self.ended = False

    def match(self, alternatives: list[Conj]) -> None:
        joined = (conjoin(a, b) for a in self.alts for b in alternatives)
        self.alts = [j for j in joined if j is not None]

    def statement(self, stmt: Stmt, following) -> None:
        if self.ended:
            raise Refuse(f"`{stmt.name}` after the rule's verdict", stmt.span)
        name = stmt.name
        if name == "counter":
            if not (isinstance(following, Stmt) and following.name not in ("counter",
                                                                           "limit")):
                self.emit("count", stmt)
        elif name == "limit":
            if self.limit is not None:
                raise Refuse("two limits in one rule", stmt.span)
            self.limit = stmt
        elif name == "continue":
            self.ended = True
        elif name == "flow":
            self.ctx.remarks.append(Remark("`flow add` (flowtable offload) left out: "
                                           "offloaded packets skip the forward hook, "
                                           "which pfc does not model", stmt.span))
        elif name in REFUSED:
            raise Refuse(f"`{name}`: {REFUSED[name]}", stmt.span)
        elif name == "unreadable":
            raise Refuse(stmt.options["message"], stmt.span)
        else:
            self.action(stmt)

    def action(self, stmt: Stmt) -> None:
        handler = _ACTIONS.get(stmt.name)
        if handler is None:
            raise Refuse(f"`{stmt.name}`: a statement pfc has no word for", stmt.span)
        try:
            action, options, to, chain, extra = handler(stmt, self.ctx)
        except _Lookup as lookup:
            self.nat_map(lookup.stmt, lookup.target)
            self.ended = True
            return
        self.emit(action, stmt, options, to, chain, extra)
        if action not in ("log", "mark", "notrack", "count", "jump"):
            self.ended = True

    def nat_map(self, stmt: Stmt, target: Val) -> None:
        """``dnat to tcp dport map { 80 : 10.0.0.1 . 8080 }``: a rule per element."""
        sets = self.ctx.sets
        rel = Rel(target.sel, "", target, stmt.span)
        for key, to in lookup_targets(stmt, target, sets):
            conj = element_alternatives(target.sel, key, rel, sets, self.ctx.family)
            if conj is None:
                continue
            before = self.alts
            self.match([conj])
            family = (Match("family", ("6" if to.startswith("[") or to.count(":") > 1
                                       else "4",)),)
            self.emit(stmt.name, stmt, (), to, None, family)
            self.alts = before

    def vmap(self, rel: Rel) -> None:
        sets = self.ctx.sets
        for element in v.leaves(rel.value, sets):
            if element.kind != "map":
                raise Refuse("a verdict map element without its verdict", element.span)
            key, verdict = element.items
            conj = element_alternatives(rel.sel, key, rel, sets, self.ctx.family)
            if conj is None:
                continue
            before = self.alts
            self.match([conj])
            self.action(_verdict_stmt(verdict))
            self.alts, self.ended = before, False

    def emit(self, action: str, stmt: Stmt, options: tuple = (), to: str | None = None,
             chain: str | None = None, extra: Conj = ()) -> None:
        if self.limit is not None:
            options = options + (_limit_option(self.limit, action),)
            if len(self.alts) > 1:
                raise Refuse("a limit on a rule pfc splits in parts (each part would get "
                             "a bucket of its own)", self.limit.span)
            self.limit = None
        if action in ("count", "log", "mark", "notrack", "jump") and \
                any(OVERLAP in alt for alt in self.alts):
            raise Refuse(f"`{action}` on parts that may hold together (`ct status a,b`): "
                         "each packet would meet it more than once", stmt.span)
        for alt in self.alts:
            joined = conjoin(alt, extra)
            if joined is None:
                continue
            rule = assemble(action, joined, self.rule, options, to, chain)
            if rule is not None:
                self.out.append(rule)

    def finish(self) -> None:
        """A limit with nothing after it decides nothing and counts nothing: the rule
        does nothing pfc can see (its bucket's tokens are nobody's business)."""
        self.limit = None


def assemble(action: str, conj: Conj, rule: NftRule, options: tuple, to: str | None,
             chain: str | None) -> Rule | None:
    """A pfc rule from a conjunction: the ``family`` and ``proto`` pseudo matches made
    the rule's family and protocol keyword; None when they contradict."""
    families = [set(m.values) for m in conj if m.field == "family"]
    family_set = set.intersection(*families) if families else {"4", "6"}
    if not family_set:
        return None
    family = int(next(iter(family_set))) if len(family_set) == 1 else None
    protos = [m for m in conj if m.field == "proto" and not m.negated
              and len(m.values) == 1 and "-" not in m.values[0]]
    numbers = {m.values[0] for m in protos}
    if len(numbers) > 1:
        return None
    protocol = None
    rest = [m for m in conj if m.field not in ("family", "overlap") and m not in protos]
    if numbers:
        protocol = _keyword(numbers.pop(), family, rest)
        if protocol is None:
            rest.append(protos[0])
    ports = [m for m in rest if m.field in ("sport", "dport")]
    if ports and protocol not in ("tcp", "udp"):
        raise Refuse("a port match on a protocol other than TCP and UDP (`th`, `sctp` "
                     "...): pfc matches ports of TCP and UDP", rule.origin.span)
    return Rule(action, rule.origin, protocol, tuple(rest), options, to, chain, family,
                _comment(rule.comment))


def _keyword(number: str, family: int | None, rest: list[Match]) -> str | None:
    names = {v_: k for k, v_ in PROTO_OF.items()}
    word = names.get(number)
    if word == "icmp" and family == 6 or word == "icmp6" and family == 4:
        return None
    if word in ("icmp", "icmp6") and family is None and not any(
            m.field in ("icmp-type", "icmp-code") for m in rest):
        return None  # `meta l4proto icmp` in an inet table: proto 1 in both families
    return word


def _comment(text: str) -> str:
    return " ".join("".join(ch if ch.isprintable() else " " for ch in text).split())


def _verdict_stmt(val: Val) -> Stmt:
    if val.kind in ("jump", "goto"):
        return Stmt(val.kind, val.span, value=Val("word", val.text, val.span))
    return Stmt(val.text, val.span)


def _limit_option(stmt: Stmt, action: str) -> str:
    rate = stmt.options.get("rate", "")
    words = rate.split()
    over = bool(words) and words[0] == "over"
    text = "".join(words[1:] if over else words)
    m = re.fullmatch(r"([0-9]+)/(second|minute|hour|day|week)", text)
    if not m:
        raise Refuse(f"limit `{rate}`: pfc's rates are packets per second or minute",
                     stmt.span)
    count, unit = int(m.group(1)), m.group(2)
    per_min = {"second": None, "minute": 1, "hour": 60, "day": 1440, "week": 10080}[unit]
    if per_min not in (None, 1):
        if count % per_min:
            raise Refuse(f"limit `{rate}`: not a whole number per minute", stmt.span)
        count, unit = count // per_min, "minute"
    burst = stmt.options.get("burst")
    if stmt.options.get("burst-unit") == "bytes" or "bytes" in rate:
        raise Refuse("a byte rate: pfc's rates count packets", stmt.span)
    tail = f" burst {burst}" if burst and burst != "5" else ""
    if action == "pass" and not over or action in ("drop", "reject") and over:
        return f"limit rate {count}/{unit}{tail}"
    if action == "log" and not over:
        if tail:
            raise Refuse("a log rate with a burst other than 5", stmt.span)
        return f"rate {count}/{unit}"
    raise Refuse(f"a limit {'over' if over else 'within'} the rate on `{action}`: pfc's "
                 "`limit` holds within the rate on `pass` and over it on `drop`/`reject`",
                 stmt.span)


# ------------------------------------------------------------------ statements

def _accept(stmt: Stmt, ctx: Context):
    return "pass", (), None, None, ()


def _drop(stmt: Stmt, ctx: Context):
    return "drop", (), None, None, ()


def _return(stmt: Stmt, ctx: Context):
    return "return", (), None, None, ()


def _jump(stmt: Stmt, ctx: Context):
    return stmt.name, (), None, stmt.value.text, ()


def _reject(stmt: Stmt, ctx: Context):
    words = stmt.options.get("with", ())
    if not words:
        return "reject", (), None, None, ()
    kind = words[0]
    if kind == "tcp":
        return "reject", ("with tcp-reset",), None, None, (Match("proto", ("6",)),)
    names = REJECTS.get(kind)
    code = words[-1] if len(words) > 1 else ""
    if names is None or code not in names:
        raise Refuse(f"reject with {' '.join(words)}: pfc's replies are tcp-reset, "
                     "port-unreachable, admin-prohibited, host-unreachable, no-route, "
                     "IPv4's host-prohibited, net-prohibited, proto-unreachable and IPv6's "
                     "policy-fail, reject-route", stmt.span)
    extra = () if kind == "icmpx" else (Match("family", ("4" if kind == "icmp" else "6",)),)
    reply = names[code]
    return "reject", () if reply == "port-unreachable" else (f"with {reply}",), None, \
        None, extra


def _log(stmt: Stmt, ctx: Context):
    options = ()
    prefix = stmt.options.get("prefix")
    if prefix:
        text = " ".join(_PREFIX_BAD.sub(" ", prefix).split())[:32].strip()
        if text != prefix:
            ctx.remarks.append(Remark(f"log prefix {prefix!r} is written {text!r}: pfc "
                                      "takes letters, digits, space and `_ . , : = / + -`, "
                                      "at most 32", stmt.span))
        if text:
            options = (f'prefix "{text}"',)
    ctx.remarks.append(Remark("`log`: pfc's log sends events to NFLOG group 20 with its "
                              "own prefix; level, group and flags are not kept", stmt.span))
    return "log", options, None, None, ()


def _set(stmt: Stmt, ctx: Context):
    if stmt.sel != ("meta mark",):
        raise Refuse(f"`{' '.join(stmt.sel)} set`: pfc sets only the packet's mark",
                     stmt.span)
    value = stmt.value
    if value is None or value.kind != "word":
        raise Refuse("`meta mark set` to a value pfc cannot compute", stmt.span)
    return "mark", (), str(v.number(value)), None, ()


def _notrack(stmt: Stmt, ctx: Context):
    return "notrack", (), None, None, ()


def _nat(stmt: Stmt, ctx: Context):
    flags = stmt.options.get("flags")
    if flags:
        raise Refuse(f"{stmt.name} {' '.join(flags)}: pfc keeps the source port and picks "
                     "no address at random", stmt.span)
    target = stmt.value
    if stmt.name == "masquerade":
        if target is not None:
            raise Refuse("masquerade to a port: pfc keeps the source port", stmt.span)
        return "masquerade", (), None, None, ()
    if target is None:
        raise Refuse(f"{stmt.name} without `to`", stmt.span)
    if target.kind == "lookup":
        raise _Lookup(stmt, target)
    text = target.text
    if stmt.name == "redirect":
        port = text.removeprefix(":") if text.startswith(":") else text
        return "redirect", (), f":{v.port_range(Val('word', port, target.span))}", None, \
            _port_dependency(stmt)
    return stmt.name, (), _address_port(text, target, stmt), None, _nat_family(text, stmt)


class _Lookup(Exception):  # noqa: N818  (a signal: the state expands the map)
    """``dnat to SELECTOR map { KEY : TARGET, ... }``: one rule per element."""

    def __init__(self, stmt: Stmt, target: Val):
        super().__init__(stmt.name)
        self.stmt, self.target = stmt, target


def lookup_targets(stmt: Stmt, target: Val, sets: dict) -> list[tuple[Val, str]]:
    """(key, pfc ``to``) per element of a NAT map (``addr . port`` values joined)."""
    from pfc.importers.nft import values as vals
    out = []
    for element in vals.leaves(target.items[0], sets):
        if element.kind != "map":
            raise Refuse(f"{stmt.name} map: an element without its target", element.span)
        key, value = element.items
        if value.kind == "concat" and len(value.items) == 2:
            text = _join_port(value.items[0].text, value.items[1].text)
        else:
            text = value.text
        out.append((key, _address_port(text, value, stmt)))
    return out


def _join_port(addr: str, port: str) -> str:
    return f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"


def _address_port(text: str, target: Val, stmt: Stmt) -> str:
    if text.startswith("["):
        addr, _, port = text[1:].partition("]")
        port = port.removeprefix(":")
    elif text.count(":") == 1:
        addr, port = text.split(":")
    else:
        addr, port = text, ""
    if "-" in addr or "-" in port or "/" in addr:
        raise Refuse(f"`{text}`: a range (pfc translates to one address and port)",
                     target.span)
    try:
        ip = ipaddress.ip_address(addr)
    except ValueError:
        raise Refuse(f"`{text}` is not an address", target.span) from None
    if not port:
        return str(ip)
    port = str(v.number(Val("word", port, target.span), None, "port"))
    return f"[{ip}]:{port}" if ip.version == 6 else f"{ip}:{port}"


def _nat_family(text: str, stmt: Stmt) -> Conj:
    family = stmt.options.get("family")
    if family is None:
        family = "ip6" if text.startswith("[") or text.count(":") > 1 else "ip"
    return (Match("family", ("4" if family == "ip" else "6",)),)


def _port_dependency(stmt: Stmt) -> Conj:
    return ()


_ACTIONS = {"accept": _accept, "drop": _drop, "return": _return, "jump": _jump,
            "goto": _jump, "reject": _reject, "log": _log, "set": _set,
            "notrack": _notrack, "dnat": _nat, "snat": _nat, "masquerade": _nat,
            "redirect": _nat}
