"""``audited``: the policy in audit mode (``pfc load --audit``, ``pfc compile --audit``).

Every ``drop`` rule becomes ``drop ... audit`` and a ``default drop`` becomes an audited
default: nothing is dropped; each would-be drop passes, is counted by its rule (or the
default's counter) and is logged (docs/language.md "Audit mode"). The interpreter's
verdicts after this pass are the audit verdicts: ``pass`` wherever the policy said
``drop``, with the same deciding rule.
"""

from __future__ import annotations

from dataclasses import replace

from pfc.frontend import ir


def audited(policy: ir.Policy) -> ir.Policy:
    rules = tuple(replace(r, action=replace(r.action, audit=True))
                  if isinstance(r.action, ir.Drop) else r for r in policy.rules)
    return replace(policy, rules=rules,
                   default_audit=policy.default is ir.Verdict.DROP)
