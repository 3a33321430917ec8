"""Reading an ``iptables-save`` / ``ip6tables-save`` dump (legacy and nft flavours) as
``iptables-restore`` reads it: ``*table`` ... ``COMMIT`` sections, ``:CHAIN POLICY
[p:b]`` declarations, ``-A``/``-I``/``-N``/``-P`` commands, ``#`` comments, optional
``[p:b]`` counters before a command. A rule line is split into words exactly as
iptables' ``add_param_to_argv`` splits it (double quotes, backslash escapes inside
them), each word keeping its place in the file for diagnostics.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from pfc.frontend.source import SourceFile, Span
from pfc.importers.model import Origin

BUILTIN = {
    "filter": ("INPUT", "FORWARD", "OUTPUT"),
    "nat": ("PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"),
    "mangle": ("PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"),
    "raw": ("PREROUTING", "OUTPUT"),
    "security": ("INPUT", "FORWARD", "OUTPUT"),
}
_COUNTERS = re.compile(r"\[[0-9]+:[0-9]+\]\s*")


@dataclass(frozen=True)
class Word:
    text: str
    start: int  # offset of the word in the file
    end: int
    quoted: bool = False


@dataclass
class Line:
    """One rule command: ``-A CHAIN words...`` (``insert`` for ``-I``, at ``position``)."""

    table: str
    chain: str
    words: list[Word]
    origin: Origin
    insert: bool = False
    position: int = 1


@dataclass
class Table:
    name: str
    origin: Origin
    policies: dict[str, tuple[str, Origin]] = field(default_factory=dict)  # builtin chains
    chains: dict[str, Origin] = field(default_factory=dict)  # user chains, in order
    lines: list[Line] = field(default_factory=list)
    committed: bool = False

    def rules(self, chain: str) -> list[Line]:
        """The chain's rules in order (``-I`` lines inserted where they say)."""
        out: list[Line] = []
        for line in self.lines:
            if line.chain != chain:
                continue
            if line.insert:
                out.insert(min(max(line.position, 1), len(out) + 1) - 1, line)
            else:
                out.append(line)
        return out


@dataclass
class Problem:
    message: str
    span: Span
    origin: Origin


@dataclass
class Dump:
    source: SourceFile
    tables: dict[str, Table] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    family: int | None = None  # 6 for ip6tables-save (its header or its words)
    flavour: str = ""  # "legacy", "nf_tables" or "" (not said)


_PLAIN = re.compile(r"[^ \t\r\n]+")


def split_words(text: str, base: int) -> list[Word]:
    """``add_param_to_argv``: words split at blanks; ``"..."`` quotes (a backslash
    inside escapes the next character) may be part of a word."""
    if '"' not in text:
        return [Word(m.group(), base + m.start(), base + m.end())
                for m in _PLAIN.finditer(text)]
    words: list[Word] = []
    buf: list[str] = []
    start = None
    quote = escaped = quoted = False
    for i, ch in enumerate(text):
        if quote:
            if escaped:
                buf.append(ch)
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                quote = False
            else:
                buf.append(ch)
            continue
        if ch == '"':
            quote = quoted = True
            start = i if start is None else start
        elif ch in " \t\r\n":
            if start is not None:
                words.append(Word("".join(buf), base + start, base + i, quoted))
            buf, start, quoted = [], None, False
        else:
            buf.append(ch)
            start = i if start is None else start
    if start is not None:
        words.append(Word("".join(buf), base + start, base + len(text), quoted))
    return words


def read_dump(source: SourceFile) -> Dump:
    """Every section, declaration and command of the dump; what iptables-restore would
    refuse is a ``Problem`` at its line (the rest is still read)."""
    dump = Dump(source)
    table: Table | None = None
    offset = 0
    for number, raw in enumerate(source.text.split("\n"), start=1):
        line_start, offset = offset, offset + len(raw) + 1
        text = raw.strip()
        origin = Origin(source.span(line_start, line_start + len(raw.rstrip())), number,
                        text)
        if not text:
            continue
        if text.startswith("#"):
            _header_comment(dump, text)
            continue
        table = _statement(dump, table, text, raw, line_start, origin)
    if table is not None and not table.committed:
        _problem(dump, f"table `{table.name}` has no COMMIT: the dump is cut short "
                 "(iptables-restore would apply nothing of it)", table.origin)
    dump.family = dump.family or _family_from_words(dump)
    return dump


def _header_comment(dump: Dump, text: str) -> None:
    # iptables-save, iptables-legacy-save, and iptables-nft-save (`v1.8.9 (nf_tables)`)
    m = re.match(r"#\s*Generated by (ip6?)tables(-nft|-legacy)?-save v[0-9.]+"
                 r"(?:\s*\((\w+)\))?", text)
    if m:
        dump.family = 6 if m.group(1) == "ip6" else 4
        dump.flavour = m.group(3) or ("nf_tables" if m.group(2) == "-nft" else "legacy")


def _statement(dump: Dump, table: Table | None, text: str, raw: str, line_start: int,
               origin: Origin) -> Table | None:
    if text.startswith("*"):
        if table is not None and not table.committed:
            _problem(dump, f"table `{table.name}` has no COMMIT before the next table",
                     table.origin)
        name = text[1:].strip()
        if name not in BUILTIN:
            _problem(dump, f"unknown table `{name}` (iptables has filter, nat, mangle, "
                     "raw and security)", origin)
            return Table(name, origin, committed=True)  # read on, keep nothing of it
        new = Table(name, origin)
        dump.tables[name] = new
        return new
    if table is None:
        _problem(dump, "a command outside any table (`*filter` ... `COMMIT`)", origin)
        return None
    if text == "COMMIT":
        table.committed = True
        return table
    if table.committed:
        _problem(dump, "a command after COMMIT (iptables-restore wants `*TABLE` first)",
                 origin)
        return table
    if text.startswith(":"):
        _declaration(dump, table, text, origin)
        return table
    counters = _COUNTERS.match(text)
    if counters:  # `[p:b] -A ...` (iptables-save -c)
        text = text[counters.end():]
    base = line_start + raw.index(text)
    _command(dump, table, split_words(text, base), origin)
    return table


def _declaration(dump: Dump, table: Table, text: str, origin: Origin) -> None:
    parts = text[1:].split()
    if len(parts) < 2:
        _problem(dump, "a chain declaration needs a name and a policy (`:INPUT ACCEPT "
                 "[0:0]`)", origin)
        return
    name, policy = parts[0], parts[1]
    if name in BUILTIN[table.name]:
        if policy not in ("ACCEPT", "DROP"):
            _problem(dump, f"policy `{policy}` of {name}: a built-in chain's policy is "
                     "ACCEPT or DROP", origin)
            return
        table.policies[name] = (policy, origin)
    elif policy != "-":
        _problem(dump, f"`{name}` is not a built-in chain of table {table.name}: its "
                 "policy must be `-`", origin)
    else:
        table.chains.setdefault(name, origin)


def _command(dump: Dump, table: Table, words: list[Word], origin: Origin) -> None:
    if words and words[0].text in ("-4", "-6"):
        family = 4 if words[0].text == "-4" else 6
        if dump.family not in (None, family):
            return  # `-6 -A ...` in an iptables (IPv4) file: restore skips it
        words = words[1:]
    if len(words) == 1 and words[0].text in ("-F", "--flush", "-X", "--delete-chain",
                                             "-Z", "--zero"):
        if words[0].text in ("-F", "--flush"):
            table.lines = []
        elif words[0].text in ("-X", "--delete-chain"):
            table.chains.clear()
            table.lines = [line for line in table.lines if line.chain in BUILTIN[table.name]]
        return
    if len(words) < 2:
        _problem(dump, "not an iptables-restore command", origin)
        return
    verb, chain = words[0].text, words[1].text
    if verb in ("-A", "--append", "-I", "--insert"):
        insert = verb in ("-I", "--insert")
        position, rest = 1, words[2:]
        if insert and rest and rest[0].text.isascii() and rest[0].text.isdigit():
            position, rest = int(rest[0].text), rest[1:]
        if chain not in BUILTIN[table.name] and chain not in table.chains:
            _problem(dump, f"chain `{chain}` is not declared in table {table.name}",
                     origin)
            return
        table.lines.append(Line(table.name, chain, rest, origin, insert, position))
    elif verb in ("-N", "--new-chain"):
        table.chains.setdefault(chain, origin)
    elif verb in ("-F", "--flush"):
        table.lines = [line for line in table.lines if line.chain != chain]
    elif verb in ("-X", "--delete-chain"):
        table.chains.pop(chain, None)
        table.lines = [line for line in table.lines if line.chain != chain]
    elif verb in ("-Z", "--zero"):
        pass
    elif verb in ("-P", "--policy") and len(words) >= 3:
        _declaration(dump, table, f":{chain} {words[2].text}", origin)
    else:
        _problem(dump, f"`{verb}`: pfc imports what iptables-restore reads (-A, -I, -N, "
                 "-P, -F, -X, -Z and chain declarations)", origin)


def _problem(dump: Dump, message: str, origin: Origin) -> None:
    dump.problems.append(Problem(message, origin.span, origin))


_V6_WORDS = re.compile(r"(^|\s)(-s|-d|--source|--destination)\s+!?\s*[0-9a-fA-F]*:"
                       r"|icmpv6|ipv6-icmp|icmp6-|--hl-")


def _family_from_words(dump: Dump) -> int | None:
    """6 when the rules say IPv6 (addresses, ICMPv6, hop limits), else None."""
    for table in dump.tables.values():
        for line in table.lines:
            if _V6_WORDS.search(line.origin.text):
                return 6
    return None
