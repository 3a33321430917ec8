"""What every iptables form shares: the families and their tools, pfc's chain names,
the Jinja2 environment and the ipset file. Used by the v1 backend (``backend``) and
whole firewalls (``ruleset``)."""

from __future__ import annotations

import functools
from importlib import resources
from typing import TYPE_CHECKING

from pfc.backends.base import check_name, printable
from pfc.backends.iptables import lower as low
from pfc.frontend import ir

if TYPE_CHECKING:  # jinja2 loads on first render
    import jinja2

FAMILIES = {4: ("iptables", "IPv4", "inet"), 6: ("ip6tables", "IPv6", "inet6")}
RESERVED = {"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING", "ACCEPT", "DROP",
            "RETURN", "QUEUE", "REJECT", "CT", "NOTRACK", "LOG", "NFLOG"}
MAX_TABLE = 16  # chain PREFIX-notrack within iptables' 28, set names within ipset's 31


def chain_name(table: str) -> str:
    check_name(table, "table")
    chain = table.upper()
    if len(table) > MAX_TABLE or chain in RESERVED:
        raise ValueError(f"invalid table `{table}` for iptables: at most {MAX_TABLE} "
                         "characters, not a built-in chain or target name")
    return chain


def ipset_text(env: jinja2.Environment, policy: ir.Policy, lowering: low.Lowering,
                name: str) -> str:
    sets = [{"name": s.name, "tmp": f"{s.name[:27]}.new", "family": FAMILIES[s.family][2],
             "maxelem": max(65536, 1 << (len(s.prefixes) - 1).bit_length()),
             "prefixes": [str(p) for p in s.prefixes]}
            for s in lowering.sets.values()]
    return env.get_template("ipset.j2").render(source=printable(policy.source), name=name,
                                               sets=sets) + "\n"


@functools.cache
def environment() -> jinja2.Environment:
    import jinja2

    root = resources.files("pfc.templates")
    return jinja2.Environment(
        loader=jinja2.FunctionLoader(lambda n: (root / n).read_text()),
        undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)
