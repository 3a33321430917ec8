"""A rule as a C comment above its code in the eBPF programs, rebuilt from IR values
(numbers, addresses, hex bytes, set names that are identifiers): nothing a user typed
is pasted into the C source as text (a log prefix stays out)."""

from __future__ import annotations

from pfc.backends.base import c_comment
from pfc.backends.ebpf import flowplan
from pfc.frontend import ir


def _net_text(net: ir.IPNetwork) -> str:
    return str(net.network_address) if net.prefixlen == net.max_prefixlen else str(net)


def _match_text(m: ir.Match) -> str:
    neg = "!" if m.negated else ""
    if isinstance(m, ir.AddrMatch):
        if len(m.prefixes) > 4:
            name = f"${m.set_name} " if m.set_name else ""
            return f"{neg}{m.field} {name}({len(m.prefixes)} entries)"
        return f"{neg}{m.field} " + ", ".join(_net_text(n) for n in m.prefixes)
    if isinstance(m, ir.IntMatch):
        return f"{neg}{m.field} " + ", ".join(
            f"{lo}" if lo == hi else f"{lo}-{hi}" for lo, hi in m.ranges)
    if isinstance(m, ir.FlagsMatch):
        return neg + "flags " + ",".join(("" if m.set & bit else "!") + name
                                         for name, bit in ir.TCP_FLAGS.items()
                                         if (m.set | m.clear) & bit)
    if isinstance(m, ir.FragMatch):
        return neg + "frag"
    if isinstance(m, ir.IfaceMatch):  # names of letters, digits, `_ . @ - *` (checked)
        return f"{neg}{m.field} " + ", ".join(m.names)
    if isinstance(m, ir.MacMatch):
        return f"{neg}{m.field} " + ", ".join(a.hex(":") for a in m.macs)
    assert isinstance(m, ir.PayloadMatch), m
    return f"{neg}payload[{m.offset}:{len(m.data)}] == 0x{m.data.hex()}"


def describe(rule: ir.Rule) -> str:
    """The rule as a C comment, rebuilt from IR values (set names are identifiers)."""
    words = [rule.action.name] + ([rule.proto_name] if rule.proto_name != "all" else [])
    words += [_match_text(m) for m in rule.matches]
    if isinstance(rule.action, ir.Redirect):
        port = rule.action.port
        words.append(f"to {rule.action.address}" + (f" port {port}" if port is not None
                                                     else ""))
    if isinstance(rule.action, ir.Reject):
        words.append(f"with {rule.action.kind}")
    if isinstance(rule.action, ir.Mark):
        words.append(f"to {rule.action.value:#x}")
    return c_comment(" ".join(words + flowplan.options_text(rule)))
