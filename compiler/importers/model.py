"""The shared rule model of every importer: a whole firewall in pfc's own words.

Close to the v2 AST (docs/language.md "Whole firewalls"): hook blocks and named chains
hold rules; a rule has pfc's action word, protocol keyword, matches (a pfc field and
its values as pfc writes them), options and a target. Each rule keeps where it came
from (``Origin``: the source file's span and the line's text) so that the policy
printed from it comments every rule with its source line, and a rule that cannot be
said in pfc is a ``Refusal`` at that line and column. ``family`` (4, 6 or None) is the
IP version the source rule was for (iptables vs ip6tables); the emitter pins it when
the rule's own words do not.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from pfc.frontend.source import Span

# The fields whose absence a packet reaching a netfilter hook never shows: a negated
# match on them holds exactly when the positive one fails (docs/import.md "RETURN").
ALWAYS_PRESENT = frozenset(("src", "dst", "proto", "ttl", "len", "ct", "ct-status",
                            "ct-mark", "mark", "dst-type", "src-type"))


@dataclass(frozen=True)
class Origin:
    """Where a rule came from: its span in the source (file, offsets) and the line."""

    span: Span
    line: int
    text: str  # the source line (or statement), stripped

    @property
    def where(self) -> str:
        return f"{self.span.file.rsplit('/', 1)[-1]}:{self.line}"


@dataclass(frozen=True)
class Match:
    """``[!]FIELD VALUES``: ``values`` are pfc texts (``10.0.0.0/8``, ``1024-65535``,
    ``eth*``, ``syn``/``!ack`` for flags, ``new`` for ct state); several make a list
    (``{ a, b }``; comma-joined for ``flags``, ``ct state`` and ``ct status``)."""

    field: str
    values: tuple[str, ...]
    negated: bool = False

    def negate(self) -> Match:
        return replace(self, negated=not self.negated)

    def text(self) -> str:
        neg = "!" if self.negated else ""
        if self.field == "frag":
            return f"{neg}frag"
        if self.field in ("flags", "ct", "ct-status"):
            word = {"flags": "flags", "ct": "ct state", "ct-status": "ct status"}
            return f"{neg}{word[self.field]} " + ",".join(self.values)
        word = "ct mark" if self.field == "ct-mark" else self.field
        return f"{neg}{word} {list_text(self.values)}"


def list_text(values: tuple[str, ...]) -> str:
    return values[0] if len(values) == 1 else "{ " + ", ".join(values) + " }"


@dataclass(frozen=True)
class Rule:
    """One pfc rule. ``action``: a pfc action word (``pass drop reject count log mark
    notrack dnat snat masquerade redirect jump goto``); ``chain`` the chain of
    ``jump``/``goto``; ``options`` printed after the matches (``limit rate 1/second``,
    ``prefix "web"``, ``with tcp-reset``); ``to`` the text after ``to``."""

    action: str
    origin: Origin | None
    protocol: str | None = None
    matches: tuple[Match, ...] = ()
    options: tuple[str, ...] = ()
    to: str | None = None
    chain: str | None = None
    family: int | None = None
    comment: str = ""
    twin: Origin | None = None  # the other family's line, when merged from two

    def key(self) -> tuple:
        """What the rule does, without where it came from (merging twins)."""
        return (self.action, self.protocol, self.matches, self.options, self.to,
                self.chain)

    def fields(self) -> set[str]:
        return {m.field for m in self.matches}


@dataclass(frozen=True)
class Skipped:
    """A source rule that is not in the policy, kept in its place as a comment:
    refused (``--partial``) or unreachable in the source itself."""

    origin: Origin
    why: str


Item = Rule | Skipped


@dataclass
class Block:
    """A hook block (``input``, ``nat prerouting`` ...); ``default`` None for nat
    blocks (they have none) and for a default left to pfc (``pass``)."""

    name: str
    items: list[Item] = field(default_factory=list)
    default: str | None = None
    comment: str = ""
    reach: frozenset[int] | None = None  # the IP versions its rules see (None: all)


@dataclass
class Chain:
    name: str
    items: list[Item] = field(default_factory=list)
    comment: str = ""


@dataclass(frozen=True)
class Refusal:
    """A source rule pfc cannot say: the reason, at the span of the words that need it
    (``span`` inside ``origin``'s line)."""

    origin: Origin
    reason: str
    span: Span


@dataclass(frozen=True)
class Remark:
    """Something the reader should know that changes no verdict (a log prefix
    shortened, a chain nothing jumps to left out), at a source span or the file."""

    message: str
    span: Span


@dataclass
class Firewall:
    """What an importer read: blocks in path order, chains in the order they may be
    defined (a chain before the chains that jump to it), defines, what was refused."""

    blocks: list[Block] = field(default_factory=list)
    chains: list[Chain] = field(default_factory=list)
    defines: list[tuple[str, str]] = field(default_factory=list)
    sets: list[tuple[str, str, list[str]]] = field(default_factory=list)  # name, file, lines
    header: list[str] = field(default_factory=list)
    refusals: list[Refusal] = field(default_factory=list)
    remarks: list[Remark] = field(default_factory=list)
    source_rules: int = 0  # the rules the source holds (each -A line, each nft rule)
    extra_sources: dict = field(default_factory=dict)  # included files, by name

    def block(self, name: str) -> Block | None:
        return next((b for b in self.blocks if b.name == name), None)


class Refuse(Exception):  # noqa: N818  (a signal, caught where the rule is known)
    """Raised while converting one source rule: pfc cannot say it. ``at``: the span
    of the offending words, or None for the whole rule."""

    def __init__(self, reason: str, at: Span | None = None):
        super().__init__(reason)
        self.reason = reason
        self.at = at


def negatable(conj: tuple[Match, ...]) -> bool:
    """Whether ``not conj`` can be written as pfc matches exactly: each match's field
    is one every packet at a netfilter hook has (docs/import.md "RETURN")."""
    return all(m.field in ALWAYS_PRESENT or m.field in ("iif", "oif") for m in conj)


# ------------------------------------------------------------- joining matches

# Fields pfc's checker refuses twice in a rule (it merges the others itself): their
# matches are joined here. Universes of the fields whose values partition packets.
JOINED = frozenset(("ct", "dst-type", "src-type", "iif", "oif", "ether-src", "ether-dst",
                    "ct-status"))
UNIVERSE = {"ct": ("invalid", "established", "related", "new", "untracked"),
            "dst-type": ("local", "broadcast", "multicast", "unicast"),
            "src-type": ("local", "broadcast", "multicast", "unicast")}


def conjoin(matches: tuple[Match, ...], extra: tuple[Match, ...]
            ) -> tuple[Match, ...] | None:
    """``matches`` and ``extra`` all holding, one match per field pfc wants once;
    None when nothing can hold; ``Refuse`` when pfc has no one match for the join."""
    out = list(matches)
    for m in extra:
        same = next((i for i, x in enumerate(out) if x.field == m.field), None)
        if m.field not in JOINED or same is None:
            out.append(m)
            continue
        joined = _join(out[same], m)
        if joined is None:
            return None
        out[same] = joined
    return tuple(out)


def _join(a: Match, b: Match) -> Match | None:
    if a == b:
        return a
    if a.field in UNIVERSE:
        every = UNIVERSE[a.field]
        left = set(a.values) if not a.negated else set(every) - set(a.values)
        right = set(b.values) if not b.negated else set(every) - set(b.values)
        both = [v for v in every if v in left & right]
        return Match(a.field, tuple(both)) if both else None
    if a.field == "ct-status":
        if not a.negated and not b.negated:
            return Match(a.field, tuple(dict.fromkeys(a.values + b.values)))
        raise Refuse(f"`{a.text()}` and `{b.text()}`: pfc has no one `ct status` match "
                     "for both")
    if a.negated and b.negated:
        return Match(a.field, tuple(dict.fromkeys(a.values + b.values)), True)
    if not a.negated and not b.negated:
        both = [x for x in (_meet(p, q) for p in a.values for q in b.values) if x]
        return Match(a.field, tuple(dict.fromkeys(both))) if both else None
    pos, neg = (a, b) if b.negated else (b, a)
    kept = []
    for p in pos.values:
        if any(_covers(q, p) for q in neg.values):
            continue
        if any(_meet(p, q) for q in neg.values):
            raise Refuse(f"`{pos.text()}` and `{neg.text()}`: pfc has no one "
                         f"`{a.field}` match for both")
        kept.append(p)
    return Match(a.field, tuple(kept)) if kept else None


def _meet(p: str, q: str) -> str | None:
    """The names both ``p`` and ``q`` match (``eth*`` patterns), as one of them."""
    pw, qw = p.endswith("*"), q.endswith("*")
    ps, qs = p.rstrip("*").strip('"'), q.rstrip("*").strip('"')
    if not pw and not qw:
        return p if ps == qs else None
    if pw and qw:
        return p if ps.startswith(qs) else q if qs.startswith(ps) else None
    exact, pattern = (p, qs) if not pw else (q, ps)
    return exact if exact.strip('"').startswith(pattern) else None


def _covers(q: str, p: str) -> bool:
    """Every name ``p`` matches, ``q`` matches."""
    qs, ps = q.rstrip("*").strip('"'), p.rstrip("*").strip('"')
    if q.endswith("*"):
        return ps.startswith(qs)
    return not p.endswith("*") and ps == qs
