"""User text made safe to show: control and invisible characters by code point, long
words cut short.

Anything from a policy (its lines, names, strings, set file entries, even its file name)
may hold ESC sequences, NULs, a byte-order mark, bidi overrides or lone surrogates.
Diagnostics show such text through :func:`visible` (one line, every character either
printable or escaped as ``\\x1b``/``\\u200b``) and name a single odd character with
:func:`describe_char` (``U+FEFF (byte-order mark)``). Nothing here raises on any str.
"""

from __future__ import annotations

import unicodedata

# Names for characters whose Unicode name says little to a network engineer.
_NAMES = {
    "\ufeff": "byte-order mark", "\x00": "NUL", "\t": "tab", "\r": "carriage return",
    "\n": "line feed", "\x1b": "escape", "\x7f": "delete", "\xa0": "no-break space",
    "\u200b": "zero-width space", "\u200c": "zero-width non-joiner",
    "\u200d": "zero-width joiner", "\u2028": "line separator",
    "\u2029": "paragraph separator", "\u202e": "right-to-left override",
    "\u202d": "left-to-right override", "\u2066": "left-to-right isolate",
    "\u2067": "right-to-left isolate", "\u2069": "pop directional isolate",
    "\ufffd": "replacement character",
}


def is_plain(ch: str) -> bool:
    """Printable and visible: safe to show as itself (a space is plain, a tab is not)."""
    if ch == " " or ("!" <= ch <= "~"):
        return True
    return ch.isprintable() and unicodedata.category(ch) not in ("Cf", "Mn", "Me")


def escaped(ch: str) -> str:
    """``\\x1b``, ``\\u200b``, ``\\U0001f600``: how one character is shown escaped."""
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def visible(text: str, tab: str = " ") -> str:
    """``text`` with every character that is not plain escaped (tabs become ``tab``)."""
    if text.isascii() and text.isprintable():
        return text
    return "".join(c if is_plain(c) else tab if c == "\t" else escaped(c) for c in text)


def describe_char(ch: str) -> str:
    """``U+FEFF (byte-order mark)``, ``U+0041 (`A`)``: one character for a message."""
    code = f"U+{ord(ch):04X}"
    name = _NAMES.get(ch)
    if name is None and 0xD800 <= ord(ch) <= 0xDFFF:
        name = "lone surrogate, not a character"
    if name is None:
        name = unicodedata.name(ch, "").lower() or None
    if is_plain(ch):
        return f"`{ch}` ({code}{', ' + name if name and not ch.isascii() else ''})"
    return f"{code} ({name})" if name else code


def shorten(text: str, limit: int = 40) -> str:
    """``text`` cut to about ``limit`` characters (``0xffffffff…ffffffff``), so a
    message never repeats a huge word in full."""
    if len(text) <= limit:
        return text
    keep = max(4, limit // 2 - 1)
    return f"{text[:keep]}…{text[-keep:]}"
