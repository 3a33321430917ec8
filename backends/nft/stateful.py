"""nft terms for ``log``, ``limit``, ``audit`` and ``ct state`` (docs/language.md
"Logging, limits, audit and connection state"; docs/nft.md has the measurements).

- ``ct state S,...`` is ``ct state { S, ... }`` (``!=`` when negated: also true on an
  untracked packet, as in the interpreter); only at hooks after conntrack (``input``):
  netdev ingress and prerouting at -300 run before it, every packet would look
  untracked, so :func:`hook_errors` refuses them, naming the hook;
- ``limit rate N/UNIT burst B`` on a drop rule is ``limit rate over N/UNIT burst B
  packets`` (nft_limit: a bucket of B packets, refilled at N per unit; ``over``
  holds on the packets that find no token), placed after every match; with ``per
  src|dst`` a meter keyed by the address, whose elements expire only after the time
  a bucket takes to refill from empty (an expired element comes back full: the state
  it would have reached anyway), at most ``METER_SIZE`` addresses (a full meter
  creates no element: the rule does not hold for a new address, fail open);
- ``log`` is ``log prefix "pfc L<line> <verdict> <prefix>" group LOG_GROUP snaplen N``,
  after ``limit rate N/UNIT burst 5 packets`` when the rule has a rate;
- an audited drop is ``counter log ... accept``; so is an audited default.
The prefix was allow-listed by the checker; :func:`log` checks it again.
"""

from __future__ import annotations

import math
import re

from pfc.backends.nft import expr as x
from pfc.frontend import ir
from pfc.frontend.diagnostics import Diagnostic, error
from pfc.oracle.events import nflog_prefix

LOG_GROUP = 20  # NFLOG group of pfc's events (`pfc log` listens on it)
METER_SIZE = 65535
AFTER_CONNTRACK = ("input",)
_SAFE_PREFIX = re.compile(r"[A-Za-z0-9 _.,:=/+-]{0,63}")


def ct_state(m: ir.CtMatch) -> x.Node:
    states = [x.symbol(s) for s in m.states]
    return x.match(x.Node("ct state", {"ct": {"key": "state"}}), _states(states), m.negated)


def _states(states: list[x.Node]) -> x.Node:
    if len(states) == 1:
        return states[0]
    return x.Node("{ " + ", ".join(s.text for s in states) + " }",
                  {"set": [s.json for s in states]})


def limit(rate: ir.Rate, over: bool) -> x.Node:
    """``limit rate [over] N/UNIT burst B packets``."""
    word = "over " if over else ""
    text = f"limit rate {word}{rate.count}/{rate.unit} burst {rate.burst} packets"
    body = {"rate": rate.count, "burst": rate.burst, "per": rate.unit}
    if over:
        body["inv"] = True
    return x.Node(text, {"limit": body})


def meter(rule: ir.Rule, version: int, over: bool = True) -> x.Node:
    """A meter keyed by the rule's ``per`` address, each element a ``limit [over]``."""
    lim = rule.limit
    name = f"r{rule.index}_{lim.per}{version}"
    key = x.field("ip" if version == 4 else "ip6", "saddr" if lim.per == "src" else "daddr")
    timeout = refill_seconds(lim.rate)
    inner = limit(lim.rate, over=over)
    text = (f"meter {name} size {METER_SIZE} {{ {key.text} timeout {timeout}s "
            f"{inner.text} }}")
    return x.Node(text, {"meter": {"name": name, "size": METER_SIZE,
                                   "key": {"elem": {"val": key.json, "timeout": timeout}},
                                   "stmt": inner.json}})


def refill_seconds(rate: ir.Rate) -> int:
    """Whole seconds for an empty bucket to fill up, plus one."""
    return math.ceil(rate.capacity * rate.seconds / rate.count) + 1


def log(line: int, verdict: str, audit: bool, prefix: str, snap: int) -> x.Node:
    text = nflog_prefix(line, verdict, audit, prefix)
    if not _SAFE_PREFIX.fullmatch(text):  # the checker's allow-list, checked again
        raise ValueError(f"unsafe log prefix {text!r}")
    return x.Node(f'log prefix "{text}" group {LOG_GROUP} snaplen {snap}',
                  {"log": {"prefix": text, "group": LOG_GROUP, "snaplen": snap}})


def limit_terms(rule: ir.Rule, version: int | None) -> list[x.Node]:
    """The rule's limit, after its matches (empty without one)."""
    if rule.limit is None:
        return []
    over = not isinstance(rule.action, ir.Pass)  # `pass ... limit` holds within the rate
    if rule.limit.per is not None:
        return [meter(rule, version, over)]
    return [limit(rule.limit.rate, over=over)]


def log_terms(rule: ir.Rule, default: ir.Verdict) -> list[x.Node]:
    """A ``log`` rule's statements: its rate, then the log."""
    action = rule.action
    rate = [limit(action.rate, over=False)] if action.rate is not None else []
    return rate + [log(rule.line, default.value, False, action.prefix, action.snap)]


def family_gates(hook_family: str) -> list[x.Node]:
    """A rule for every frame (family ANY) with a bucket becomes one rule per IP
    version, and at netdev ingress one for the other frames: a bucket each, as the
    interpreter keeps them (and iptables, whose families are separate tables)."""
    if hook_family == "netdev":
        proto = x.meta("protocol")
        return [x.match(proto, x.symbol("ip")), x.match(proto, x.symbol("ip6")),
                x.match(proto, x.Node("{ ip, ip6 }", {"set": ["ip", "ip6"]}), True)]
    nfproto = x.meta("nfproto")
    return [x.match(nfproto, x.symbol("ipv4")), x.match(nfproto, x.symbol("ipv6"))]


def bucketed(rule: ir.Rule) -> bool:
    return rule.limit is not None or getattr(rule.action, "rate", None) is not None


def audit_terms(line: int) -> list[x.Node]:
    """An audited drop: counted, logged, accepted."""
    return [x.counter(), log(line, "drop", True, "", ir.LOG_SNAP_DEFAULT),
            x.verdict("accept")]


def hook_errors(policy: ir.Policy, hook: str) -> list[Diagnostic]:
    """``ct state`` (and ``queue ... first K``) at a hook before conntrack: an error on
    each such rule."""
    if hook in AFTER_CONNTRACK:
        return []
    from pfc.backends.nft.queue import hook_errors as queue_errors
    ct = [error(f"target `nft` cannot express `ct state` at hook `{hook}` (rule at line "
                f"{r.line}): it runs before conntrack, where every packet is untracked",
                r.span, hint="compile with `--hook input` (after conntrack)",
                code="unsupported")
          for r in {r.index: r for r in policy.rules}.values()
          if any(isinstance(m, ir.CtMatch) for m in r.matches)]
    return queue_errors(policy, hook) + ct
