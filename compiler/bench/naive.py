"""The naive baselines of ``pfc bench``: what a person writes by hand, one rule per
policy rule and no sets.

- ``nft-naive``: one nft rule per (rule × address × port) in a netdev ingress chain on
  the device (the hook pfc's nft output uses there);
- ``iptables-naive``: the same rules in raw PREROUTING, with ``-m udp``/``-m tcp``;
- ``xdp-filter`` (xdp-tools): its address and port lists, where the policy is a plain
  deny list (or allow list) of single-field rules.

Only simple rules are written: protocol, source/destination addresses and ports (each
a list or range), drop/pass/count. Anything else is refused with the rule named
(:class:`Refused`); a baseline is a comparison, not a second compiler.
"""

from __future__ import annotations

import itertools
import shutil
import subprocess
from dataclasses import dataclass

from pfc.frontend import ir

MAX_EXPANSION = 1_000_000
PROTO_NAMES = {6: "tcp", 17: "udp"}


class Refused(ValueError):
    """The baseline cannot express a rule of the policy; the message names it."""


@dataclass(frozen=True)
class Naive:
    """One hand-written rule: all fields optional, one value each."""

    version: int | None
    proto: int | None
    src: str | None
    dst: str | None
    sport: tuple[int, int] | None
    dport: tuple[int, int] | None
    action: str  # drop | accept | count


def _where(rule: ir.Rule) -> str:
    return f"rule {rule.index} (line {rule.line})"


def expand(policy: ir.Policy) -> list[Naive]:
    """The policy as naive rules, in order; Refused when a rule is not simple."""
    out: list[Naive] = []
    for rule in policy.rules:
        out += _expand_rule(rule)
        if len(out) > MAX_EXPANSION:
            raise Refused(f"{_where(rule)}: more than {MAX_EXPANSION} naive rules")
    return out


def _action(rule: ir.Rule) -> str:
    if isinstance(rule.action, ir.Drop):
        return "drop"
    if isinstance(rule.action, ir.Pass):
        return "accept"
    if isinstance(rule.action, ir.Count):
        return "count"
    raise Refused(f"{_where(rule)}: action `{rule.action.name}` has no naive form")


def _expand_rule(rule: ir.Rule) -> list[Naive]:
    fields: dict[str, list] = {"src": [None], "dst": [None], "sport": [None], "dport": [None]}
    for m in rule.matches:
        if m.negated or m.field not in fields:
            raise Refused(f"{_where(rule)}: `{'not ' if m.negated else ''}{m.field}` is not "
                          "a naive match (only proto, src, dst, sport, dport)")
        fields[m.field] = list(m.prefixes) if isinstance(m, ir.AddrMatch) else list(m.ranges)
    action = _action(rule)
    out = []
    for src, dst, sport, dport in itertools.product(
            fields["src"], fields["dst"], fields["sport"], fields["dport"]):
        versions = {a.version for a in (src, dst) if a is not None}
        if len(versions) > 1:
            continue  # an IPv4 source and an IPv6 destination never match together
        version = versions.pop() if versions else _family_version(rule)
        if version:
            vs: tuple[int | None, ...] = (version,)
        elif rule.family is ir.Family.ANY and rule.proto is None:
            vs = (None,)
        else:
            vs = (4, 6)
        out += [Naive(v, rule.proto, src and str(src), dst and str(dst), sport, dport, action)
                for v in vs]
    return out


def _family_version(rule: ir.Rule) -> int | None:
    return {ir.Family.IP4: 4, ir.Family.IP6: 6}.get(rule.family)


def _default(policy: ir.Policy) -> str:
    return "drop" if policy.default is ir.Verdict.DROP else "accept"


# -------------------------------------------------------------------------------- nft

def nft_text(policy: ir.Policy, dev: str) -> str:
    """A netdev table with one ingress chain on ``dev``: one rule per naive rule."""
    lines = ["table netdev pfcnaive {", "  chain ingress {",
             f'    type filter hook ingress device "{dev}" priority 0; '
             f"policy {_default(policy)};"]
    lines += [f"    {_nft_rule(r)}" for r in expand(policy)]
    return "\n".join(lines + ["  }", "}", ""])


def _nft_rule(r: Naive) -> str:
    ip = {4: "ip", 6: "ip6"}.get(r.version)
    parts = []
    if r.src:
        parts.append(f"{ip} saddr {r.src}")
    if r.dst:
        parts.append(f"{ip} daddr {r.dst}")
    if r.proto is not None:
        name = PROTO_NAMES.get(r.proto)
        if (r.sport or r.dport) and name:
            for key, rng in (("sport", r.sport), ("dport", r.dport)):
                if rng:
                    parts.append(f"{name} {key} {_range(rng, '-')}")
        else:
            parts.append(f"ip protocol {r.proto}" if r.version == 4 else
                         f"ip6 nexthdr {r.proto}" if r.version == 6 else
                         f"meta l4proto {r.proto}")
    elif ip and not (r.src or r.dst):
        parts.append(f"meta protocol {ip}")
    parts.append("counter" if r.action == "count" else r.action)
    return " ".join(parts)


def _range(rng: tuple[int, int], sep: str) -> str:
    return str(rng[0]) if rng[0] == rng[1] else f"{rng[0]}{sep}{rng[1]}"


def load_nft(policy: ir.Policy, dev: str) -> None:
    text = nft_text(policy, dev)
    _run(["nft", "-f", "-"], text)


# --------------------------------------------------------------------------- iptables

def iptables_texts(policy: ir.Policy) -> dict[int, str]:
    """iptables-restore texts (IPv4, IPv6) of raw PREROUTING, one rule per naive rule."""
    rules = expand(policy)
    out = {}
    for version in (4, 6):
        lines = ["*raw", f":PREROUTING {_default(policy).upper()} [0:0]"]
        lines += [_ipt_rule(r) for r in rules if r.version in (version, None)]
        out[version] = "\n".join(lines + ["COMMIT", ""])
    return out


def _ipt_rule(r: Naive) -> str:
    parts = ["-A PREROUTING"]
    if r.src:
        parts.append(f"-s {r.src}")
    if r.dst:
        parts.append(f"-d {r.dst}")
    if r.proto is not None:
        name = PROTO_NAMES.get(r.proto, str(r.proto))
        parts.append(f"-p {name}")
        if r.sport or r.dport:
            if r.proto not in PROTO_NAMES:
                raise Refused(f"ports need tcp or udp (protocol {r.proto})")
            parts.append(f"-m {name}")
            parts += [f"--{k} {_range(v, ':')}" for k, v in (("sport", r.sport),
                                                             ("dport", r.dport)) if v]
    if r.action != "count":
        parts.append(f"-j {r.action.upper()}")
    return " ".join(parts)


def load_iptables(policy: ir.Policy) -> None:
    for version, text in iptables_texts(policy).items():
        _run(["iptables-restore" if version == 4 else "ip6tables-restore", "-w"], text)


# ------------------------------------------------------------------------- xdp-filter

def xdp_filter_available() -> bool:
    return shutil.which("xdp-filter") is not None


def xdp_filter_commands(policy: ir.Policy, dev: str, mode: str) -> list[list[str]]:
    """xdp-filter's commands for a plain deny list (default pass, drop rules) or allow
    list (default drop, pass rules) of rules with one address or one port each."""
    want = "drop" if policy.default is ir.Verdict.PASS else "accept"
    # --policy is what happens to frames no entry matches; entries do the opposite
    cmds = [["xdp-filter", "load", dev, "--mode", mode, "--policy",
             "deny" if want == "accept" else "allow"]]
    for rule in policy.rules:
        if _action(rule) != want or len(rule.matches) != 1 or rule.matches[0].negated:
            raise Refused(f"xdp-filter cannot express {_where(rule)}: it keeps one list of "
                          f"single-field entries ({'drop' if want == 'drop' else 'pass'} "
                          "rules with one address or one port match)")
        m = rule.matches[0]
        if isinstance(m, ir.AddrMatch):
            for p in m.prefixes:
                if p.prefixlen != p.max_prefixlen:
                    raise Refused(f"xdp-filter cannot express {_where(rule)}: prefix {p} "
                                  "(single addresses only)")
                cmds.append(["xdp-filter", "ip", str(p.network_address), "--mode", m.field])
        elif m.field in ("sport", "dport") and rule.proto in PROTO_NAMES:
            for lo, hi in m.ranges:
                for port in range(lo, hi + 1):
                    cmds.append(["xdp-filter", "port", str(port), "--mode", m.field[0:3]
                                 .replace("spo", "src").replace("dpo", "dst"),
                                 "--proto", PROTO_NAMES[rule.proto]])
        else:
            raise Refused(f"xdp-filter cannot express {_where(rule)}: `{m.field}`")
    return cmds


def load_xdp_filter(policy: ir.Policy, dev: str, mode: str = "native") -> None:
    for cmd in xdp_filter_commands(policy, dev, mode):
        _run(cmd)


def unload_xdp_filter(dev: str) -> None:
    subprocess.run(["xdp-filter", "unload", dev], capture_output=True, check=False)


def _run(argv: list[str], text: str | None = None) -> None:
    done = subprocess.run(argv, input=text, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"{argv[0]} failed: {(done.stderr or done.stdout).strip()[:400]}")
