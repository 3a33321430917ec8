"""What a hook block allows (``hooks.BLOCKS``), checked on a rule as written: each word
a block does not allow is an error at the word, naming the blocks that do allow it
(docs/language.md "What a hook sees decides what may be written in it").
"""

from __future__ import annotations

from pfc.frontend.diagnostics import Diagnostic, Note, error
from pfc.frontend.firewall.hooks import BLOCKS, Block, allows_field, blocks_allowing
from pfc.frontend.source import Span
from pfc.frontend.syntax import RuleNode

# How a field is written, for messages (``ct`` is ``ct state``).
WRITTEN = {"ct": "ct state", "ct-status": "ct status", "ct-mark": "ct mark"}


def action_word(node: RuleNode) -> str:
    """The action's name in ``Block.actions`` (``accept`` is ``pass``)."""
    return "pass" if node.action == "accept" else node.action


def not_allowed(node: RuleNode, block: Block) -> list[tuple[str, Span, str]]:
    """(word, span, the blocks that allow it) for each word of the rule ``block`` does
    not allow: the action, then each match in order."""
    out = []
    action = action_word(node)
    if action not in block.actions:
        out.append((action, node.action_span, _where(blocks_allowing(action=action))))
    for m in node.matches:
        if not allows_field(block, m.field):
            word = WRITTEN.get(m.field, m.field)
            out.append((word, m.field_span, _where(blocks_allowing(field=m.field))))
    return out


def _where(names: list[str]) -> str:
    return ", ".join(names) if names else "no block"


def word_errors(node: RuleNode, block: Block, via: Span | None = None,
                caller: str = "", chain: bool = False) -> list[Diagnostic]:
    """The errors of ``not_allowed``; ``via``: the ``jump`` by which the rule (of a
    ``chain``) is reached from ``block`` (a note), ``caller`` the chain it is in."""
    notes = (Note(f"reached from block `{block.name}` by this `jump`"
                  + (f" (into chain `{caller}`)" if caller else ""), via),) if via else ()
    out = []
    for word, span, where in not_allowed(node, block):
        out.append(error(f"`{word}` is not allowed in block `{block.name}`; only in: "
                         f"{where}", span, notes=notes, code="not-in-block",
                         hint=_hint(word, block)))
    form = _redirect_form(node, block) if chain else None
    if form is not None:
        out.append(error(form, node.target.span, notes=notes, code="bad-target"))
    return out


def _redirect_form(node: RuleNode, block: Block) -> str | None:
    """A chain's ``redirect`` reached from a block where its form means nothing:
    ``to :PORT`` outside nat blocks, ``to ADDRESS`` in them."""
    if node.action != "redirect" or node.target is None or "redirect" not in block.actions:
        return None
    if block.kind == "nat" and node.target.address is not None:
        return f"in block `{block.name}` `redirect` takes only `to :PORT` (the host itself)"
    if block.kind != "nat" and node.target.address is None:
        return f"`to :PORT` (the host itself) is for nat blocks, not `{block.name}`"
    return None


def _hint(word: str, block: Block) -> str | None:
    if word in ("ct state", "ct status", "ct mark") and block.kind in ("raw", "device"):
        return f"`{block.name}` runs before conntrack has seen the packet"
    if word == "reject" and block.kind == "nat":
        return "a nat block decides translations only; filter in `input` or `forward`"
    if word in ("dnat", "snat", "masquerade") or (word == "redirect" and block.kind != "nat"
                                                   and "redirect" not in block.actions):
        return "translations are written in nat blocks (`nat prerouting { ... }`)"
    if word == "drop" and block.kind == "nat":
        return "a nat block decides translations only: drop in `prerouting`, `input` " \
               "or `forward`"
    return None


def default_error(block_name: str | None, span: Span) -> Diagnostic | None:
    """``default`` where it cannot be: a nat block, a chain (``block_name`` None)."""
    if block_name is None:
        return error("a chain has no `default`", span, code="bad-default",
                     hint="a packet no rule of the chain decides goes on after its `jump` "
                     "(or gets the block's default after a `goto`)")
    if not BLOCKS[block_name].has_default:
        return error(f"block `{block_name}` has no `default`", span, code="bad-default",
                     hint="a connection no rule of a nat block translates stays "
                     "untranslated; write `pass` rules to say so")
    return None
