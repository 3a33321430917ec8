"""``queue`` on nft: ``queue num N [bypass]`` (nft_queue), and with ``first K`` the
verdict cache before it, two rules with the rule's matches reading the connection's
mark (``ct mark & MASK == PASS accept`` / ``... == DROP drop``) that ``pfc decide``
writes once it has decided the flow (docs/queue.md). A pass from the decider is
NFQUEUE's ``NF_ACCEPT``, so a cached pass is ``accept``. The cache needs conntrack:
``first`` only at ``input`` (``prerouting`` is priority -300, before it).

nft_queue is a kernel module of its own (``CONFIG_NFT_QUEUE``): a kernel built without
it refuses the rule at load time ("No such file or directory"); iptables' ``NFQUEUE``
target (xt_NFQUEUE) is the other way in.
"""

from __future__ import annotations

from pfc.backends.nft import expr as x
from pfc.frontend import ir
from pfc.frontend.diagnostics import Diagnostic, error
from pfc.frontend.options.queue import MARK_DROP, MARK_MASK, MARK_PASS

AFTER_CONNTRACK = ("input",)


def statement(action: ir.Queue) -> x.Node:
    num = int(action.num)
    text = f"queue num {num}" + (" bypass" if action.bypass else "")
    body: dict = {"num": num}
    if action.bypass:
        body["flags"] = ["bypass"]
    return x.Node(text, {"queue": body})


def rules(rule: ir.Rule, base: list[x.Node]) -> list[tuple[x.Node, ...]]:
    """The terms of each nft rule a queue rule is (its matches: ``base``)."""
    out = []
    if rule.action.first is not None:
        mark = x.masked(x.Node("ct mark", {"ct": {"key": "mark"}}), MARK_MASK)
        out += [(*base, x.match(mark, x.hexvalue(value)), x.counter(), x.verdict(verdict))
                for value, verdict in ((MARK_PASS, "accept"), (MARK_DROP, "drop"))]
    return out + [(*base, x.counter(), statement(rule.action))]


def hook_errors(policy: ir.Policy, hook: str) -> list[Diagnostic]:
    """``queue ... first K`` before conntrack: an error on each such rule."""
    if hook in AFTER_CONNTRACK:
        return []
    return [error(f"target `nft` cannot keep `queue ... first K` verdicts at hook `{hook}` "
                  f"(rule at line {r.line}): it runs before conntrack, and the verdict "
                  "cache is the connection's mark", r.span,
                  hint="compile with `--hook input` (after conntrack), or leave `first` "
                  "out (every packet to the decider)", code="unsupported")
            for r in {r.index: r for r in policy.rules}.values()
            if isinstance(r.action, ir.Queue) and r.action.first is not None]
