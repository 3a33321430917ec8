"""One line of plain text per IR rule, for the comments above each emitted rule.

The emitted files are meant to be read next to the policy: every rule's lines are
preceded by ``# rule INDEX, line LINE: TEXT``, where TEXT is the rule as the IR holds it
(lists expanded, names kept as ``$name``, values normalised by the checker).
"""

from __future__ import annotations

from pfc.frontend import ir


def describe(rule: ir.Rule) -> str:
    words = [rule.action.name]
    if rule.proto_name != "all":
        words.append(rule.proto_name)
    words += [match_text(m) for m in rule.matches]
    words += options_text(rule)
    if isinstance(rule.action, ir.Redirect):
        port = f":{rule.action.port}" if rule.action.port is not None else ""
        words.append(f"to {rule.action.address}{port}")
    words += _target(rule.action)
    return " ".join(words)


def _target(action: ir.Action) -> list[str]:
    """What follows the matches of the v2 actions: ``with R``, ``to ADDR:PORT``, ..."""
    if isinstance(action, ir.Reject):
        return [f"with {action.kind}"]
    if isinstance(action, ir.Nat) and action.kind != "masquerade":
        address = str(action.address) if action.address is not None else ""
        if address and ":" in address and action.port is not None:
            address = f"[{address}]"
        port = f":{action.port}" if action.port is not None else ""
        return [f"to {address}{port}"]
    if isinstance(action, ir.Mark):
        return [f"to {action.value:#x}"]
    if isinstance(action, ir.Jump):
        return [action.chain]
    return []


def _rate(rate: ir.Rate) -> str:
    return f"rate {rate.count}/{rate.unit}"


def options_text(rule: ir.Rule) -> list[str]:
    """``log``'s options, a limit, ``audit``: as the policy writes them."""
    action, out = rule.action, []
    if isinstance(action, ir.Log):
        out += [f'prefix "{action.prefix}"'] if action.prefix else []
        out += [_rate(action.rate)] if action.rate else []
        out.append(f"snap {action.snap}")
    if rule.limit is not None:
        out.append(f"limit {_rate(rule.limit.rate)} burst {rule.limit.rate.burst}")
        out += [f"per {rule.limit.per}"] if rule.limit.per else []
    if isinstance(action, ir.Drop) and action.audit:
        out.append("audit")
    return out


def match_text(m: ir.Match) -> str:
    neg = "!" if m.negated else ""
    if isinstance(m, ir.AddrMatch):
        value = f"${m.set_name}" if m.set_name else _listed([str(p) for p in m.prefixes])
        return f"{neg}{m.field} {value}"
    if isinstance(m, ir.IntMatch):
        value = f"${m.set_name}" if m.set_name else _listed(
            [str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in m.ranges])
        field = "ct mark" if m.field == "ct-mark" else m.field
        return f"{neg}{field} {value}"
    if isinstance(m, ir.FlagsMatch):
        names = [n for n, bit in ir.TCP_FLAGS.items() if m.set & bit]
        names += ["!" + n for n, bit in ir.TCP_FLAGS.items() if m.clear & bit]
        return f"{neg}flags {','.join(names)}"
    if isinstance(m, ir.FragMatch):
        return f"{neg}frag"
    if isinstance(m, ir.CtMatch):
        return f"{neg}ct state {','.join(m.states)}"
    if isinstance(m, ir.CtStatusMatch):
        return f"{neg}ct status {','.join(m.statuses)}"
    if isinstance(m, ir.IfaceMatch):
        return f"{neg}{m.field} {_listed(list(m.names))}"
    if isinstance(m, ir.MacMatch):
        return f"{neg}{m.field} {_listed([':'.join(f'{b:02x}' for b in x) for x in m.macs])}"
    if isinstance(m, ir.AddrTypeMatch):
        return f"{neg}{m.field} {_listed(list(m.types))}"
    where = f"{m.offset}" if len(m.data) == 1 else f"{m.offset}:{len(m.data)}"
    return f"{neg}payload[{where}] == 0x{m.data.hex()}"


# A comment shows this many list values, then how many more: a list of 1,000 merged
# rules on one comment line is 15 kB, which iptables-nft-restore refuses to parse.
LISTED_MAX = 16


def _listed(items: list[str]) -> str:
    if len(items) == 1:
        return items[0]
    more = f", ... {len(items) - LISTED_MAX} more" if len(items) > LISTED_MAX else ""
    return "{ " + ", ".join(items[:LISTED_MAX]) + more + " }"
