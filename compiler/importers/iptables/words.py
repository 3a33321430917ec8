"""One iptables rule's words as iptables reads them: the general options (``-p -s -d
-i -o -f``), each ``-m MODULE`` with its options, and the target (``-j``/``-g``) with
its options. ``!`` before an option (or, in the old form, right after its name)
negates it. An option with no ``-m`` before it belongs to the protocol's module
(``-p tcp --dport 22``), as iptables loads it implicitly.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pfc.frontend.source import Span
from pfc.importers.iptables.dump import Word
from pfc.importers.model import Refuse

GENERAL = {"-p": "-p", "--protocol": "-p", "-s": "-s", "--source": "-s", "--src": "-s",
           "-d": "-d", "--destination": "-d", "--dst": "-d", "-i": "-i",
           "--in-interface": "-i", "-o": "-o", "--out-interface": "-o",
           "-f": "-f", "--fragment": "-f"}
JUMP = {"-j": False, "--jump": False, "-g": True, "--goto": True}
MATCH = ("-m", "--match")
# Options that take two words (everything else takes the words up to the next option).
TWO_WORDS = frozenset(("--tcp-flags", "--chunk-types", "--match-set", "--set-counters",
                       "--add-set", "--del-set", "--map-set"))
IMPLICIT = {"tcp": "tcp", "6": "tcp", "udp": "udp", "17": "udp", "icmp": "icmp",
            "1": "icmp", "icmpv6": "icmp6", "ipv6-icmp": "icmp6", "58": "icmp6",
            "sctp": "sctp", "dccp": "dccp", "udplite": "udplite"}


@dataclass(frozen=True)
class Opt:
    name: str
    args: tuple[Word, ...]
    negated: bool
    span: Span

    @property
    def value(self) -> str:
        return " ".join(w.text for w in self.args)


@dataclass
class Module:
    """``-m NAME`` (a match) or ``-j NAME`` (a target) and its options."""

    name: str
    span: Span
    opts: list[Opt] = field(default_factory=list)

    def get(self, *names: str) -> Opt | None:
        return next((o for o in self.opts if o.name in names), None)


@dataclass
class Words:
    general: dict[str, Opt] = field(default_factory=dict)
    matches: list[Module] = field(default_factory=list)
    target: Module | None = None
    goto: bool = False


def read_words(words: list[Word], file: str) -> Words:
    """The rule's parts; ``Refuse`` for words iptables itself would not take."""
    out = Words()
    current: Module | None = None
    i = 0
    while i < len(words):
        first = words[i]
        negated = not first.quoted and first.text == "!"
        i += negated
        if i == len(words):
            raise Refuse("`!` at the end of the rule", _span(file, first, first))
        word = words[i]
        if word.quoted or not _option_like(word):
            raise Refuse(f"`{word.text}`: expected an option here", _span(file, word, word))
        args, i = _args(words, i + 1, word.text)
        if args and args[0].text == "!" and not args[0].quoted:  # `--dport ! 22`
            negated, args = not negated, args[1:]
        opt = Opt(word.text, tuple(args), negated,
                  _span(file, first, args[-1] if args else word))
        current = _place(out, current, opt)
    return out


def _option_like(w: Word) -> bool:
    return not w.quoted and len(w.text) > 1 and w.text[0] == "-" \
        and not (w.text[1].isascii() and w.text[1].isdigit())


def _args(words: list[Word], i: int, name: str) -> tuple[list[Word], int]:
    """An option's words: one (two for ``TWO_WORDS``), none before the next option;
    an old-style ``!`` right after the name is extra."""
    want = 2 if name in TWO_WORDS else 1
    args: list[Word] = []
    if i < len(words) and words[i].text == "!" and not words[i].quoted \
            and i + 1 < len(words) and not _option_like(words[i + 1]):
        args.append(words[i])
        i += 1
        want += 1
    while i < len(words) and len(args) < want and not _option_like(words[i]) \
            and not (words[i].text == "!" and not words[i].quoted):
        args.append(words[i])
        i += 1
    return args, i


def _place(out: Words, current: Module | None, opt: Opt) -> Module | None:
    name = opt.name
    if name in GENERAL:  # anywhere in the rule, also after the target
        key = GENERAL[name]
        if (key == "-f") != (not opt.args):
            raise Refuse(f"`{name}` " + ("takes no value" if key == "-f" else
                                         "needs a value"), opt.span)
        if key in out.general:
            raise Refuse(f"`{name}` given twice", opt.span)
        out.general[key] = opt
        return current
    if name in MATCH:
        if not opt.args or opt.negated:
            raise Refuse("`-m` needs a module name", opt.span)
        module = Module(opt.args[0].text.lower(), opt.span)
        out.matches.append(module)
        return module
    if name in JUMP:
        if not opt.args or out.target is not None:
            raise Refuse("`-j`/`-g` needs one target", opt.span)
        out.target = Module(opt.args[0].text, opt.span)
        out.goto = JUMP[name]
        return out.target
    if name in ("-c", "--set-counters"):
        return current
    owner = _owner(out, current, opt)
    owner.opts.append(opt)
    return current if current is not None else owner


# The options of the match modules whose options overlap others' (iptables gives an
# option to the loaded module that knows it, then to the protocol's, implicitly).
KNOWN = {
    "tcp": {"--sport", "--source-port", "--dport", "--destination-port", "--tcp-flags",
            "--syn", "--tcp-option"},
    "udp": {"--sport", "--source-port", "--dport", "--destination-port"},
    "state": {"--state"},
    "comment": {"--comment"},
    "conntrack": {"--ctstate", "--ctstatus", "--ctproto", "--ctorigsrc", "--ctorigdst",
                  "--ctreplsrc", "--ctrepldst", "--ctorigsrcport", "--ctorigdstport",
                  "--ctreplsrcport", "--ctrepldstport", "--ctexpire", "--ctdir"},
    "multiport": {"--ports", "--dports", "--sports", "--destination-ports",
                  "--source-ports"},
    "icmp": {"--icmp-type"}, "icmp6": {"--icmpv6-type"}, "mark": {"--mark"},
    "connmark": {"--mark"}, "mac": {"--mac-source"}, "length": {"--length"},
    "addrtype": {"--src-type", "--dst-type", "--limit-iface-in", "--limit-iface-out"},
    "iprange": {"--src-range", "--dst-range"}, "limit": {"--limit", "--limit-burst"},
    "ttl": {"--ttl-eq", "--ttl-lt", "--ttl-gt"}, "hl": {"--hl-eq", "--hl-lt", "--hl-gt"},
}


def _owner(out: Words, current: Module | None, opt: Opt) -> Module:
    """The module an option belongs to: the current one when it knows it (or when pfc
    does not know its options), else a loaded one that does, else the protocol's."""
    if current is not None and (current is out.target or current.name not in KNOWN
                                or opt.name in KNOWN[current.name]):
        return current
    for module in reversed(out.matches):
        if opt.name in KNOWN.get(module.name, ()):
            return module
    proto = out.general.get("-p")
    implicit = IMPLICIT.get(proto.value.lower()) if proto is not None else None
    if implicit in KNOWN and opt.name in KNOWN[implicit]:
        return _implicit(out, opt)
    if current is not None:
        return current
    return _implicit(out, opt)


def _implicit(out: Words, opt: Opt) -> Module:
    """``-p tcp --dport 22``: the protocol's match module, loaded implicitly."""
    proto = out.general.get("-p")
    module = IMPLICIT.get(proto.value.lower()) if proto is not None else None
    if module is None:
        raise Refuse(f"`{opt.name}`: an option of no match (add `-m MODULE` before it)",
                     opt.span)
    found = next((m for m in out.matches if m.name == module), None)
    if found is None:
        found = Module(module, opt.span)
        out.matches.append(found)
    return found


def _span(file: str, first: Word, last: Word) -> Span:
    return Span(file, first.start, last.end)
