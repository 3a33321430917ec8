"""Chains of a whole firewall: names, ``jump``/``goto`` targets, depth and what each
chain's rules may hold (docs/language.md "Chains").

A chain is defined once, before its first use, and never used from itself or from a
chain above it, so the jumps form no loop. Jumps nest at most ``MAX_DEPTH`` deep (nft's
jump stack, ``NFT_JUMP_STACK_SIZE``). A chain's rules must be allowed in every hook
block that reaches it: an error at the rule's word, with a note at the ``jump`` in the
block.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pfc.frontend.diagnostics import Diagnostic, Note, error, suggest, warning
from pfc.frontend.firewall.allowed import word_errors
from pfc.frontend.firewall.hooks import BLOCKS
from pfc.frontend.firewall.names import valid_chain
from pfc.frontend.source import Span
from pfc.frontend.syntax import BlockOpen, RuleNode

MAX_DEPTH = 16


@dataclass
class ChainDef:
    name: str
    open: BlockOpen
    rules: list[RuleNode] = field(default_factory=list)
    jumps: list[tuple[RuleNode, str]] = field(default_factory=list)  # (rule, chain)
    used: bool = False


class Chains:
    """Every chain of a file; ``every`` holds the names of all of them (found before
    checking, for "used before it is defined")."""

    def __init__(self, every: dict[str, Span], diags: list[Diagnostic]):
        self.every = every
        self.defined: dict[str, ChainDef] = {}
        self.diags = diags
        # hook block name → its jump rules (rule, chain)
        self.block_jumps: list[tuple[str, RuleNode, str]] = []
        self.named: set[str] = set()  # every name a jump gives (for "never used")
        self.broken: set[str] = set()  # chains whose definition had an error

    def define(self, opener: BlockOpen) -> ChainDef | None:
        if not valid_chain(opener.name):
            self.broken.add(opener.name)
            self.diags.append(error(f"chain name `{opener.name[:40]}` is too long: at most 31 "
                                    "characters", opener.name_span, code="bad-name"))
            return None
        first = self.defined.get(opener.name)
        if first is not None:
            self.diags.append(error(f"chain `{opener.name}` is already defined",
                                    opener.name_span, code="redefined",
                                    notes=(Note("first defined here", first.open.span),)))
            return None
        chain = ChainDef(opener.name, opener)
        self.defined[opener.name] = chain
        return chain

    def use(self, node: RuleNode, where: ChainDef | str) -> bool:
        """A ``jump``/``goto`` in a chain (``where``) or a hook block (its name): its
        chain must be defined above. False after an error."""
        name, span = node.chain.text, node.chain.span
        self.named.add(name)
        target = self.defined.get(name)
        if target is None and name in self.broken:
            return False  # its definition's error says it
        current = where if isinstance(where, ChainDef) else None
        if current is not None and name == current.name:
            self.diags.append(error(f"chain `{name}` cannot `{node.action}` to itself", span,
                                    code="chain-loop", hint="chains cannot loop; write "
                                    "the rules out, or split the chain"))
            return False
        if target is None:
            self.diags.append(self._unknown(name, span, node.action))
            return False
        target.used = True
        if current is not None:
            current.jumps.append((node, name))
        else:
            self.block_jumps.append((where, node, name))
        return True

    def _unknown(self, name: str, span: Span, action: str) -> Diagnostic:
        later = self.every.get(name)
        if later is not None:
            return error(f"chain `{name}` is used before it is defined", span,
                         code="use-before-define", notes=(Note("defined later, here",
                                                               later),),
                         hint=f"move `chain {name} {{ ... }}` above its first `{action}` "
                         "(a chain may only use chains above it: no loops)")
        return error(f"there is no chain `{name}`", span, code="unknown-chain",
                     hint=suggest(name, self.every) or f"define it first: `chain {name} {{`")

    def finish(self) -> None:
        """Depths, what each hook block reaches, unused chains."""
        depth: dict[str, int] = {}
        for chain in self.defined.values():  # in source order: callees come first
            depth[chain.name] = self._depth(chain, depth)
        seen: dict[str, set[str]] = {}
        for block, node, name in self.block_jumps:
            if depth.get(name, 0) > MAX_DEPTH:
                continue  # already said at the chain
            self._reach(block, node, name, seen.setdefault(block, set()))
        for chain in self.defined.values():
            if chain.name not in self.named:
                self.diags.append(warning(
                    f"chain `{chain.name}` is never used", chain.open.name_span,
                    code="unused-chain", hint=f"`jump {chain.name} ...` runs it from a "
                    "block; or delete it"))

    def _depth(self, chain: ChainDef, depth: dict[str, int]) -> int:
        deepest = 1
        for node, name in chain.jumps:
            below = depth.get(name, 1)
            if below + 1 > MAX_DEPTH and below <= MAX_DEPTH:
                self.diags.append(error(f"jumps nest deeper than {MAX_DEPTH} chains here",
                                        node.chain.span, code="chain-depth",
                                        hint="nft and iptables keep at most 16 jumps on "
                                        "their stack; flatten some chains"))
            deepest = max(deepest, below + 1)
        return deepest

    def _reach(self, block: str, via: RuleNode, name: str, seen: set[str],
               caller: str = "") -> None:
        """Check chain ``name``'s rules (and its chains') against ``block``."""
        if name in seen:
            return
        seen.add(name)
        chain = self.defined[name]
        spec = BLOCKS[block]
        for rule in chain.rules:
            self.diags.extend(word_errors(rule, spec, via.span, caller or name, chain=True))
        for _, inner in chain.jumps:
            self._reach(block, via, inner, seen, name)
