"""``queue`` on iptables: ``-j NFQUEUE --queue-num N [--queue-bypass]`` (xt_NFQUEUE,
loaded through nft_compat by iptables-nft), and with ``first K`` the verdict cache
before it: two lines with the rule's matches reading the connection's mark
(``-m connmark``: ``MARK_PASS`` returns, as pfc's ``pass`` does, ``MARK_DROP`` drops),
which ``pfc decide`` writes once it has decided the flow. A pass from the decider itself
(and ``--queue-bypass`` without one) is NFQUEUE's ``NF_ACCEPT``: the packet leaves the
hook, and later rules of the base chain do not see it. The cache needs conntrack:
``first`` only at ``filter-input`` (raw PREROUTING runs before it)."""

from __future__ import annotations

from pfc.frontend import ir
from pfc.frontend.diagnostics import Diagnostic, error
from pfc.frontend.options.queue import MARK_DROP, MARK_MASK, MARK_PASS

AFTER_CONNTRACK = ("filter-input",)


def target(action: ir.Queue) -> str:
    return f"-j NFQUEUE --queue-num {int(action.num)}" + (" --queue-bypass"
                                                          if action.bypass else "")


def lines(rule: ir.Rule, words: list[str], passed: str = "RETURN") -> list[str]:
    """The lines of one alternative (``words``: its matches) of a queue rule;
    ``passed``: the target of pfc's ``pass``."""
    action = rule.action
    out = []
    if action.first is not None:
        out += [" ".join(words + ["-m", "connmark", "--mark",
                                  f"{mark:#x}/{MARK_MASK:#x}", "-j", verdict])
                for mark, verdict in ((MARK_PASS, passed), (MARK_DROP, "DROP"))]
    return out + [" ".join(words + [target(action)])]


def hook_errors(policy: ir.Policy, hook: str) -> list[Diagnostic]:
    """``queue ... first K`` before conntrack: the cache has no connection to live in."""
    if hook in AFTER_CONNTRACK:
        return []
    return [error(f"target `iptables` cannot keep `queue ... first K` verdicts at hook "
                  f"`{hook}` (rule at line {r.line}): raw PREROUTING runs before "
                  "conntrack, and the verdict cache is the connection's mark", r.span,
                  hint="compile with `--hook filter-input` (after conntrack), or leave "
                  "`first` out (every packet to the decider)", code="unsupported")
            for r in {r.index: r for r in policy.rules}.values()
            if isinstance(r.action, ir.Queue) and r.action.first is not None]
