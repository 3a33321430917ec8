"""Hints for syntax errors: what a user coming from iptables, nftables or pf probably
meant (``default allow``, ``DROP``, ``from``, ``icmp type 8``, ``dport 53,80``,
``src 10.0.0.1-10.0.0.5``, ``limit 10/second``), or a keyword one typo away.

Every hint is checked against what the parser could take at that place, so a hint never
suggests a word that would be another error there. Cheap on any input: no hint looks
at more than the line it is on (``suggest`` bounds its own work).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Container

from pfc.frontend.diagnostics import suggest
from pfc.frontend.firewall.words import V2_KEYWORDS, dash_hint, v2_candidates, word_hint
from pfc.frontend.text import describe_char, is_plain, shorten

KEYWORDS = ("define", "set", "file", "default", "to", "drop", "pass", "accept", "count",
            "redirect", "all", "ip", "ip6", "tcp", "udp", "icmp", "icmp6", "src", "dst",
            "sport", "dport", "proto", "icmp-type", "ttl", "len", "flags", "frag", "payload",
            "log", "prefix", "rate", "snap", "limit", "burst", "per", "audit", "ct", "state",
            "queue", "num", "first", "bypass")
_FIELDS = frozenset(("src", "dst", "sport", "dport", "proto", "icmp-type", "ttl", "len"))

# Words of other firewalls and what pfc says instead (`reject` is pfc's own: v2).
ACTION_WORDS = {"allow": "pass", "permit": "pass", "deny": "drop", "block": "drop",
                "discard": "drop"}
_WORD_HINTS = {
    "from": "pfc has no `from`/`to` matches: write `src ADDRESS` (and `sport PORT`), "
            "`dst ADDRESS` (and `dport PORT`)",
    "any": "leave the match out to match any value: `drop udp dport 53` matches any "
           "address",
    "port": "write `dport PORT` (destination) or `sport PORT` (source)",
}
MAX_RANGE_PREFIXES = 6


def terminal_of(keyword: str) -> str:
    """The grammar terminal a keyword is lexed as (``dport`` → ``FIELD``)."""
    return "FIELD" if keyword in _FIELDS else keyword.upper()


def name_hint(word: str, expected: Container[str], before: str, after: str,
              defined: Container[str]) -> str | None:
    """A hint for an unexpected name ``word`` (``before``/``after``: the rest of its
    line), or None."""
    lower = word.lower()
    if lower != word and (lower in KEYWORDS or lower in ACTION_WORDS or lower in V2_KEYWORDS):
        return f"keywords are lowercase: write `{lower}`"
    if lower in ACTION_WORDS:
        say = ACTION_WORDS[lower]
        what = f"default {say}" if _ends(before, "default") else say
        return f"pfc's verdicts are `pass` and `drop`: write `{what}`"
    if lower == "reject":
        return "`reject` is an action: it starts a rule (`reject tcp dport 23`), inside a " \
               "hook block of a whole firewall"
    if lower == "type" and _ends(before, "icmp", "icmp6"):
        value = after.split()[0] if after.split() else "8"
        return f"the ICMP type is one word: write `icmp-type {value}`"
    if lower in _WORD_HINTS:
        return _WORD_HINTS[lower]
    if word_hint(word) is not None:
        return word_hint(word)
    hint = suggest(word, [k for k in KEYWORDS if terminal_of(k) in expected]
                   + v2_candidates(expected))
    if hint is None and "VARREF" in expected and word in defined:
        hint = f"`{word}` is defined above: write `${word}`"
    return hint


def comma_hint(before: str, after: str) -> str | None:
    """``dport 53,80`` → write ``{ 53, 80 }``."""
    first = re.search(r"([^\s,{}]+)\s*$", before)
    rest = re.match(r"\s*([^\s,{}]+(?:\s*,\s*[^\s,{}]+)*)", after)
    if first is None or rest is None:
        return None
    items = [first.group(1)] + [i.strip() for i in rest.group(1).split(",")]
    shown = ", ".join(items[:6]) + (", ..." if len(items) > 6 else "")
    return f"a list is written in braces: `{{ {shown} }}`"


def range_hint(before: str, after: str) -> str | None:
    """``src 10.0.0.1-10.0.0.5``: address ranges are prefixes or lists; ``-i eth0``:
    iptables' options."""
    dash = dash_hint(before, after)
    if dash is not None:
        return dash
    first = re.search(r"([0-9A-Fa-f.:]+)\s*$", before)
    last = re.match(r"\s*([0-9A-Fa-f.:]+)", after)
    if first is None or last is None:
        return None
    try:
        lo, hi = ipaddress.ip_address(first.group(1)), ipaddress.ip_address(last.group(1))
        nets = list(ipaddress.summarize_address_range(lo, hi))
    except (ValueError, TypeError):
        return None
    general = "an address range is written as prefixes or a list"
    if len(nets) > MAX_RANGE_PREFIXES:
        return f"{general}: {lo}-{hi} is {len(nets)} prefixes, from {nets[0]}"
    items = ", ".join(str(n.network_address) if n.num_addresses == 1 else str(n)
                      for n in nets)
    return f"{general}: `{items}`" if len(nets) == 1 else f"{general}: `{{ {items} }}`"


def rate_hint(number: str, before: str, after: str) -> str | None:
    """``limit 10/second`` → write ``limit rate 10/second``; a bare ``10/second`` is
    ``rate`` on a ``log`` rule and ``limit rate`` on the others."""
    unit = re.match(r"\s*/\s*([A-Za-z]+)", after)
    if unit is None:
        return None
    rate = f"rate {shorten(number)}/{shorten(unit.group(1))}"
    is_log = before.split()[:1] == ["log"] and not _ends(before, "limit")
    return f"write `{rate}`" if is_log else f"write `limit {rate}`"


def char_hint(char: str) -> str | None:
    """A hint for an unexpected character."""
    if char == "'":
        return 'strings use double quotes: "..."'
    if char == ";":
        return "one rule per line; no `;` needed"
    if char in "\u201c\u201d\u201e\u2018\u2019":
        return 'strings use straight double quotes: "..."'
    if char in "\u2010\u2011\u2012\u2013\u2014\u2212":
        return "a range is written with `-` (the ASCII hyphen-minus)"
    if char == "\ufeff":
        return "a byte-order mark belongs only at the very start of a file (where pfc " \
               "ignores it); delete this one"
    if char.isspace():
        return "a Unicode space: use a plain space or tab"
    if not is_plain(char):
        return "an invisible or control character (often from copy and paste): delete it"
    return None


def char_message(char: str) -> str:
    """``unexpected character `'` `` or ``unexpected character U+FEFF (byte-order mark)``."""
    if char.isascii() and is_plain(char):
        return f"unexpected character `{char}`"
    return f"unexpected character {describe_char(char)}"


def _ends(before: str, *words: str) -> bool:
    tail = before.split()
    return bool(tail) and tail[-1] in words
