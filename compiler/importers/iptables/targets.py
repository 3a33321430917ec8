"""An iptables rule's target (``-j``/``-g``) in pfc's words: the action, its options
(``with``, ``prefix``, ``limit``), its ``to``, and the rate a ``limit``/``hashlimit``
match puts on it. ``RETURN`` and user chains are the table reader's business
(``pfc.importers.iptables.tables``): here they become ``return`` and ``jump``/``goto``.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from pfc.importers.iptables import values
from pfc.importers.iptables.matches import Converted
from pfc.importers.iptables.words import Module, Opt
from pfc.importers.model import Refuse, Remark

REJECTS = {
    4: {"icmp-net-unreachable": "no-route", "net-unreach": "no-route",
        "icmp-host-unreachable": "host-unreachable", "host-unreach": "host-unreachable",
        "icmp-port-unreachable": "port-unreachable", "port-unreach": "port-unreachable",
        "icmp-admin-prohibited": "admin-prohibited", "admin-prohib": "admin-prohibited",
        "tcp-reset": "tcp-reset", "tcp-rst": "tcp-reset",
        "icmp-host-prohibited": "host-prohibited", "host-prohib": "host-prohibited",
        "icmp-net-prohibited": "net-prohibited", "net-prohib": "net-prohibited",
        "icmp-proto-unreachable": "proto-unreachable", "proto-unreach": "proto-unreachable"},
    6: {"icmp6-no-route": "no-route", "no-route": "no-route",
        "icmp6-adm-prohibited": "admin-prohibited", "adm-prohibited": "admin-prohibited",
        "icmp6-addr-unreachable": "host-unreachable", "addr-unreach": "host-unreachable",
        "icmp6-port-unreachable": "port-unreachable", "port-unreach": "port-unreachable",
        "tcp-reset": "tcp-reset", "tcp-rst": "tcp-reset",
        "icmp6-policy-fail": "policy-fail", "policy-fail": "policy-fail",
        "icmp6-reject-route": "reject-route", "reject-route": "reject-route"},
}
REFUSED = {
    "TCPMSS": "pfc does not rewrite TCP options (MSS clamping)",
    "CONNMARK": "pfc does not set a connection's mark",
    "CHECKSUM": "pfc does not fill in checksums on request",
    "TPROXY": "pfc has no transparent proxying", "TEE": "pfc does not clone packets",
    "NETMAP": "pfc translates to one address, not a prefix map",
    "CLASSIFY": "pfc does not set traffic classes", "DSCP": "pfc does not set DSCP",
    "TOS": "pfc does not set the TOS byte", "TTL": "pfc does not set the TTL",
    "HL": "pfc does not set the hop limit", "ECN": "pfc does not rewrite ECN bits",
    "SET": "pfc does not add to ipset lists", "AUDIT": "pfc has no audit records of "
    "this kind (its `audit` is a would-be drop)", "NFQUEUE": "pfc does not queue "
    "packets to user space", "QUEUE": "pfc does not queue packets to user space",
    "SECMARK": "pfc does not set security marks", "CONNSECMARK": "pfc does not set "
    "security marks", "TRACE": "pfc does not trace packets", "SYNPROXY": "pfc has no SYN "
    "proxy", "IDLETIMER": "pfc has no idle timers", "LED": "pfc does not blink LEDs",
    "HMARK": "pfc does not hash marks", "RATEEST": "pfc has no rate estimators",
    "ULOG": "ULOG is gone from the kernel", "DNPT": "pfc does not translate IPv6 "
    "prefixes", "SNPT": "pfc does not translate IPv6 prefixes", "TCPOPTSTRIP":
    "pfc does not rewrite TCP options", "CLUSTERIP": "pfc has no cluster IPs",
    "FLOWOFFLOAD": "pfc has no flow offload", "FULLCONENAT": "pfc has no full-cone NAT",
}
_PREFIX_BAD = re.compile(r"[^A-Za-z0-9 _.,:=/+-]")


@dataclass
class Action:
    action: str
    options: tuple[str, ...] = ()
    to: str | None = None
    chain: str | None = None
    goto: bool = False


def convert_target(target: Module | None, goto: bool, matched: Converted, family: int,
                   chains: set[str], remarks: list[Remark]) -> Action:
    """The action of a rule whose matches are ``matched``; ``chains``: the user chains
    of the rule's table."""
    if target is None:
        return _rated(Action("count"), matched)
    name = target.name
    handler = _SIMPLE.get(name)
    if handler is not None and not goto:
        return _rated(handler(target, matched, family, remarks), matched)
    if name in REFUSED and not goto:
        raise Refuse(f"-j {name}: {REFUSED[name]}", target.span)
    if name != "RETURN" and name not in chains:
        raise Refuse(f"-{'g' if goto else 'j'} {name}: neither a chain of this table nor "
                     "a target pfc knows", target.span)
    if target.opts:
        raise Refuse(f"`{target.opts[0].name}` after a chain name", target.opts[0].span)
    if name == "RETURN":
        return _rated(Action("return"), matched)
    return _rated(Action("goto" if goto else "jump", chain=name, goto=goto), matched)


def _rated(action: Action, matched: Converted) -> Action:
    """A ``limit``/``hashlimit`` match on the action (docs/import.md "Rates")."""
    if matched.rate is None:
        return action
    kind, rate, burst, per, opt = matched.rate
    if not rate:
        raise Refuse("a rate limit without `--limit`/`--hashlimit-upto` (iptables' "
                     "default 3/hour is not a whole number per minute)", opt.span)
    if len(matched.alternatives) > 1:
        raise Refuse("a rate limit on a rule pfc splits in two (each part would get a "
                     "bucket of its own)", opt.span)
    limit = f"limit rate {rate}" + (f" burst {burst}" if burst != 5 else "") + \
        (f" per {per}" if per else "")
    if action.action == "pass" and kind in ("limit", "upto"):
        return _with(action, limit)
    if action.action in ("drop", "reject") and kind == "above":
        return _with(action, limit)
    if action.action == "log" and kind == "limit" and per is None:
        if burst != 5:
            raise Refuse(f"a log rate with burst {burst}: pfc's log rates have bursts "
                         "of 5", opt.span)
        return _with(action, f"rate {rate}")
    what = {"limit": "within", "upto": "within", "above": "over"}[kind]
    raise Refuse(f"a rate limit on `{action.action}` that holds {what} the rate: pfc's "
                 "`limit` holds within the rate on `pass` and over it on `drop`/`reject`",
                 opt.span)


def _with(action: Action, option: str) -> Action:
    return Action(action.action, action.options + (option,), action.to, action.chain,
                  action.goto)


def _accept(t: Module, m: Converted, family: int, remarks: list[Remark]) -> Action:
    _no_options(t)
    return Action("pass")


def _drop(t: Module, m: Converted, family: int, remarks: list[Remark]) -> Action:
    _no_options(t)
    return Action("drop")


def _no_options(t: Module) -> None:
    if t.opts:
        raise Refuse(f"`{t.opts[0].name}`: {t.name} takes no options", t.opts[0].span)


def _reject(t: Module, m: Converted, family: int, remarks: list[Remark]) -> Action:
    opt = t.get("--reject-with")
    word = opt.value if opt is not None else "port-unreach"
    kind = REJECTS[family].get(word)
    if kind is None:
        raise Refuse(f"--reject-with {word}: not a reply of ip{'6' if family == 6 else ''}"
                     "tables' REJECT", opt.span if opt else t.span)
    if kind == "tcp-reset" and m.protocol != "tcp":
        raise Refuse("--reject-with tcp-reset on a rule that is not `-p tcp`",
                     opt.span if opt else t.span)
    return Action("reject", () if kind == "port-unreachable" else (f"with {kind}",))


def _log(t: Module, m: Converted, family: int, remarks: list[Remark]) -> Action:
    options = []
    for opt in t.opts:
        if opt.name in ("--log-prefix", "--nflog-prefix"):
            prefix = _prefix(opt, remarks)
            if prefix:
                options.append(f'prefix "{prefix}"')
        elif opt.name not in ("--log-level", "--log-tcp-sequence", "--log-tcp-options",
                              "--log-ip-options", "--log-uid", "--log-macdecode",
                              "--nflog-group", "--nflog-range", "--nflog-size",
                              "--nflog-threshold"):
            raise Refuse(f"`{opt.name}`", opt.span)
    remarks.append(Remark(f"-j {t.name}: pfc's `log` sends events to NFLOG group 20 "
                          "with its own prefix (`pfc L<line> ...`); the log level and "
                          "group of the original are not kept", t.span))
    return Action("log", tuple(options))


def _prefix(opt: Opt, remarks: list[Remark]) -> str:
    """A log prefix in pfc's allow-list (docs/language.md "Logging"): other
    characters and the part beyond 32 characters are left out, with a remark."""
    text = _PREFIX_BAD.sub(" ", opt.value)
    text = " ".join(text.split())[:32].strip()
    if text != opt.value:
        remarks.append(Remark(f"log prefix {opt.value!r} is written {text!r}: pfc takes "
                              "letters, digits, space and `_ . , : = / + -`, at most 32",
                              opt.span))
    return text


def _mark(t: Module, m: Converted, family: int, remarks: list[Remark]) -> Action:
    opt = t.get("--set-mark", "--set-xmark")
    if opt is None or len(t.opts) != 1:
        raise Refuse("MARK other than --set-mark/--set-xmark of the whole mark "
                     "(pfc sets the mark; it does not and/or/xor bits)", t.span)
    value, _, mask = opt.value.partition("/")
    try:
        v, k = int(value, 0), int(mask, 0) if mask else 0xFFFFFFFF
    except ValueError:
        raise Refuse(f"mark `{opt.value}`", opt.span) from None
    if k != 0xFFFFFFFF:
        raise Refuse(f"{opt.name} {opt.value}: a mask (pfc sets the whole mark)", opt.span)
    return Action("mark", to=str(v))


def _ct(t: Module, m: Converted, family: int, remarks: list[Remark]) -> Action:
    if t.name == "NOTRACK" or [o.name for o in t.opts] == ["--notrack"]:
        return Action("notrack")
    raise Refuse("-j CT other than --notrack: pfc does not set zones, helpers or "
                 "timeouts", t.span)


def _nat(t: Module, m: Converted, family: int, remarks: list[Remark]) -> Action:
    kind = {"DNAT": "dnat", "SNAT": "snat"}[t.name]
    opt = t.get("--to-destination", "--to-source", "--to")
    extra = [o for o in t.opts if o is not opt]
    if opt is None or extra or len(opt.value.split()) != 1:
        raise Refuse(f"-j {t.name}: pfc translates to one address (and port), without "
                     "--random or --persistent", (extra[0].span if extra else t.span))
    return Action(kind, to=_nat_to(opt, m, family))


def _nat_to(opt: Opt, m: Converted, family: int) -> str:
    text = opt.value
    if text.startswith("["):  # [addr]:port
        addr, _, port = text[1:].partition("]")
        port = port.removeprefix(":")
    elif family == 4:
        addr, _, port = text.partition(":")
    else:
        addr, port = text, ""
    if "-" in addr or "-" in port:
        raise Refuse(f"`{text}`: an address or port range (pfc translates to one)",
                     opt.span)
    try:
        ip = ipaddress.ip_address(addr)
    except ValueError:
        raise Refuse(f"`{text}` is not an address", opt.span) from None
    if port and m.protocol not in ("tcp", "udp"):
        raise Refuse(f"`{text}`: a port on a rule that is not -p tcp or -p udp", opt.span)
    if port:
        port = str(values.port(port, opt.span))
    if not port:
        return str(ip)
    return f"[{ip}]:{port}" if ip.version == 6 else f"{ip}:{port}"


def _masquerade(t: Module, m: Converted, family: int, remarks: list[Remark]) -> Action:
    if t.opts:
        raise Refuse(f"MASQUERADE {t.opts[0].name}: pfc keeps the source port",
                     t.opts[0].span)
    return Action("masquerade")


REDIRECT_OPTIONS = ("--to-ports", "--random")  # libxt_REDIRECT's long options


def _long(t: Module, full: str, options: tuple[str, ...]) -> Opt | None:
    """``full`` as getopt_long reads it: written whole or as a prefix no other option
    of the module has (``--to-port 8080`` is ``--to-ports 8080``)."""
    return next((o for o in t.opts if len(o.name) > 2 and full.startswith(o.name)
                 and sum(x.startswith(o.name) for x in options) == 1), None)


def _redirect(t: Module, m: Converted, family: int, remarks: list[Remark]) -> Action:
    opt = _long(t, "--to-ports", REDIRECT_OPTIONS)
    if opt is None or len(t.opts) != 1 or "-" in opt.value or not (
            opt.value.isascii() and opt.value.isdigit()):
        raise Refuse("REDIRECT without one --to-ports port (pfc redirects to a port)",
                     t.span)
    if m.protocol not in ("tcp", "udp"):
        raise Refuse("REDIRECT --to-ports on a rule that is not -p tcp or -p udp",
                     opt.span)
    return Action("redirect", to=":" + opt.value)


_SIMPLE = {"ACCEPT": _accept, "DROP": _drop, "REJECT": _reject, "LOG": _log,
           "NFLOG": _log, "MARK": _mark, "CT": _ct, "NOTRACK": _ct, "DNAT": _nat,
           "SNAT": _nat, "MASQUERADE": _masquerade, "REDIRECT": _redirect}
