"""The v2 actions (docs/language.md "Whole firewalls", Actions): ``reject [with R]``,
``notrack``, ``mark ... to N``, ``dnat``/``snat ... to ADDR[:PORT]``, ``masquerade``,
``redirect ... to :PORT`` (a nat block's), ``jump``/``goto NAME``; from a rule node to
an IR action, with every diagnostic.

What each block allows is checked elsewhere (``pfc.frontend.firewall.allowed``); here
the action's own form: a target where one is needed and none where it is not, a
``tcp`` rule for ``tcp-reset``, ``tcp``/``udp`` for a port, one host address.
"""

from __future__ import annotations

from collections.abc import Callable

from pfc.frontend import ir
from pfc.frontend.diagnostics import Diagnostic, error, suggest
from pfc.frontend.syntax import RuleNode, Target
from pfc.frontend.values import Atom

V2_ACTIONS = frozenset(("reject", "notrack", "mark", "dnat", "snat", "masquerade", "jump",
                        "goto"))
MARK_MAX = 0xFFFFFFFF
# What other firewalls call the reject replies (iptables --reject-with, nft icmp/icmpx).
REJECT_ALIASES = {"net-unreachable": "no-route", "tcp-rst": "tcp-reset",
                  "adm-prohibited": "admin-prohibited", "host-prohib": "host-prohibited",
                  "net-prohib": "net-prohibited", "prot-unreachable": "proto-unreachable",
                  "proto-unreach": "proto-unreachable", "addr-unreachable": "host-unreachable",
                  "noroute": "no-route"}

Resolve = Callable[[object], "list[Atom] | None"]


def reject(node: RuleNode, diags: list[Diagnostic]) -> ir.Reject | None:
    if len(node.reject_with) > 1:
        diags.append(error("`with` is given twice", node.reject_with[1].keyword_span,
                           code="option-twice"))
        return None
    if not node.reject_with:
        return ir.Reject(span=node.action_span)
    value = node.reject_with[0].value
    kind = value.text
    if kind not in ir.REJECTS:
        diags.append(error(f"`{kind}` is not a reject reply; replies: "
                           + ", ".join(ir.REJECTS), value.span, hint=_reject_hint(kind),
                           code="bad-reject"))
        return None
    if kind == "tcp-reset" and node.protocol != "tcp":
        has = f"this rule is `{node.protocol}`" if node.protocol else \
            "this rule names no protocol"
        diags.append(error(f"`with tcp-reset` needs a `tcp` rule; {has}", value.span,
                           hint="write `reject tcp ... with tcp-reset`; other packets get "
                           "an ICMP reply (`with port-unreachable`, the default)",
                           code="needs-protocol"))
        return None
    return ir.Reject(kind, node.action_span.cover(value.span))


def _reject_hint(kind: str) -> str | None:
    bare = kind.lower()
    for prefix in ("icmpx-", "icmp6-", "icmpv6-", "icmp-"):
        bare = bare.removeprefix(prefix)
    bare = REJECT_ALIASES.get(bare, bare)
    if bare in ir.REJECTS and bare != kind:
        both = None not in ir.REJECTS[bare]
        return f"write `with {bare}`" + (" (one word for ICMP and ICMPv6)" if both else "")
    return suggest(kind, ir.REJECTS)


def reject_family(action: ir.Reject, node: RuleNode, versions: set[int], any_frame: bool,
                  diags: list[Diagnostic]) -> None:
    """A reply of one family only (``host-prohibited``: ICMP; ``policy-fail``: ICMPv6)
    needs a rule that holds for that family only: it is not narrowed to it in silence."""
    codes = ir.REJECTS[action.kind]
    if action.kind == "tcp-reset" or None not in codes:
        return
    version = 4 if codes[0] is not None else 6
    if any_frame or versions != {version}:
        word = "ip" if version == 4 else "ip6"
        value = node.reject_with[0].value
        diags.append(error(f"`with {action.kind}` is an ICMP{'v6' if version == 6 else ''} "
                           f"reply: it needs a rule for IPv{version} packets only",
                           value.span, code="family-conflict",
                           hint=f"write `reject {word} ... with {action.kind}` (or an "
                           f"IPv{version} address); a reply for both families: "
                           "`with admin-prohibited`"))


def mark(node: RuleNode, resolve: Resolve, diags: list[Diagnostic]) -> ir.Mark | None:
    """``mark ... to N``: N a 32-bit number."""
    target = node.target
    atoms = resolve(target.address)
    if atoms is None:
        return None
    if len(atoms) != 1 or atoms[0].kind != "int" or atoms[0].value > MARK_MAX:
        diags.append(error(f"a mark is one number 0-{MARK_MAX} (0x{MARK_MAX:x})",
                           target.address.span, code="bad-target"))
        return None
    return ir.Mark(atoms[0].value, node.action_span.cover(target.span))


def nat(node: RuleNode, in_nat: bool, resolve: Resolve,
        diags: list[Diagnostic]) -> ir.Nat | None:
    """``dnat``/``snat ... to ADDR[:PORT]``, ``masquerade``, and (in a nat block)
    ``redirect ... to :PORT``."""
    kind, target = node.action, node.target
    if kind == "masquerade":
        if target is not None:
            diags.append(error("`masquerade` takes no `to`: it uses the address of the "
                               "interface the packet leaves by", target.span,
                               hint="for a fixed address write `snat ... to ADDRESS`",
                               code="stray-to"))
            return None
        return ir.Nat("masquerade", span=node.action_span)
    if target is None:
        form = "to :PORT" if kind == "redirect" else "to ADDRESS[:PORT]"
        diags.append(error(f"`{kind}` needs a target: `{form}`", node.span,
                           code="no-target", hint=f"e.g. `{_example(kind)}`"))
        return None
    if kind == "redirect":
        return _redirect(node, target, resolve, diags) if in_nat else None
    if target.address is None:
        diags.append(error(f"`{kind}` needs an address: `to ADDRESS[:PORT]`", target.span,
                           hint="`redirect ... to :PORT` sends to the host itself",
                           code="bad-target"))
        return None
    address = _address(target, kind, resolve, diags)
    port = _port(node, target, kind, resolve, diags)
    if address is None or port is False:
        return None
    return ir.Nat(kind, address, port, node.action_span.cover(target.span))


def _example(kind: str) -> str:
    return {"dnat": "dnat tcp dport 8080 to 10.0.0.2:80", "snat": "snat to 203.0.113.2",
            "redirect": "redirect tcp dport 80 to :8080"}[kind]


def _redirect(node: RuleNode, target: Target, resolve: Resolve,
              diags: list[Diagnostic]) -> ir.Nat | None:
    if target.address is not None:
        diags.append(error("in a nat block `redirect` takes only `to :PORT` (the host "
                           "itself)", target.span, code="bad-target",
                           hint="to send the connection elsewhere write `dnat ... to "
                           "ADDRESS[:PORT]`"))
        return None
    port = _port(node, target, "redirect", resolve, diags)
    if port is False:
        return None
    return ir.Nat("redirect", None, port, node.action_span.cover(target.span))


def _address(target: Target, kind: str, resolve: Resolve,
             diags: list[Diagnostic]) -> ir.IPAddress | None:
    atoms = resolve(target.address)
    if atoms is None:
        return None
    if len(atoms) != 1 or atoms[0].kind != "addr" or atoms[0].value.num_addresses != 1:
        diags.append(error(f"a `{kind}` target is one address, not a prefix or list",
                           target.address.span, code="bad-target"))
        return None
    return atoms[0].value.network_address


def _port(node: RuleNode, target: Target, kind: str, resolve: Resolve,
          diags: list[Diagnostic]) -> int | None | bool:
    """The target's port, None without one, False after an error."""
    if target.port is None:
        return None
    if node.protocol not in ("tcp", "udp"):
        diags.append(error(f"a `{kind}` port needs `tcp` or `udp` in the rule",
                           target.port.span, hint=f"write `{kind} tcp ... to ...:PORT`",
                           code="needs-protocol"))
        return False
    atoms = resolve(target.port)
    if atoms is None:
        return False
    if len(atoms) != 1 or atoms[0].kind != "int" or atoms[0].value > 65535:
        diags.append(error(f"a `{kind}` port is one number 0-65535", target.port.span,
                           code="bad-target"))
        return False
    return atoms[0].value


def jump(node: RuleNode, diags: list[Diagnostic]) -> ir.Jump | None:
    """``jump``/``goto NAME MATCH*``: no options, no ``to`` (the chain's name is checked
    with the chains)."""
    extra = [o.keyword_span for o in node.options]
    extra += [node.target.span] if node.target is not None else []
    if extra:
        diags.append(error(f"`{node.action}` takes matches only, no options and no `to`",
                           extra[0], code="stray-option",
                           hint="put `limit`, `log` and the like on the chain's rules"))
        return None
    return ir.Jump(node.chain.text, node.action == "goto", node.action_span.cover(
        node.chain.span))


def no_target(node: RuleNode, diags: list[Diagnostic]) -> bool:
    """``reject``/``notrack`` take no ``to``: False after the error."""
    if node.target is None:
        return True
    diags.append(error(f"`to` belongs to `redirect`, `dnat`, `snat` and `mark`, not "
                       f"`{node.action}`", node.target.span, code="stray-to",
                       hint="to match the destination, write `dst ADDRESS` (and `dport "
                       "PORT`)"))
    return False


def stray_with(node: RuleNode) -> Diagnostic | None:
    """``with`` on anything but ``reject``."""
    if not node.reject_with or node.action == "reject":
        return None
    return error(f"`with` belongs to `reject`, not `{node.action}`",
                 node.reject_with[0].keyword_span, code="stray-option",
                 hint="`reject MATCHES with REPLY` sends REPLY back")
