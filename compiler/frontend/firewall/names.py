"""Names in whole firewalls: interface names (in ``iif``/``oif``, block headers and
``interface`` lines) and chain names, checked against allow-lists before they can reach
any emitted text.

The interface allow-list is the backends' (``pfc.backends.base.check_dev``, the kernel's
``dev_valid_name`` narrowed to letters, digits and ``_ . @ -``; a test keeps the two
equal); ``iif``/``oif`` also take a trailing ``*`` (nft's ``iifname "eth*"``, iptables'
``-i eth+``), within the same 15 characters (IFNAMSIZ 16 with the NUL). A chain name is
the backends' ``check_name`` allow-list (nft chains, iptables chains).
"""

from __future__ import annotations

import re

from pfc.frontend.diagnostics import Diagnostic, error
from pfc.frontend.syntax import Value
from pfc.frontend.text import shorten, visible
from pfc.frontend.values import KIND_WORDS, Atom, atom_error, decode_string

DEV = re.compile(r"[A-Za-z0-9_.@-]{1,15}")
CHAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,30}")
IFNAMSIZ = 16
DEV_RULE = "1 to 15 letters, digits and `_ . @ -` (not `.` or `..`)"


def valid_device(name: str, wildcard: bool = False) -> bool:
    """Whether ``name`` is a device name (``wildcard``: or a prefix and a ``*``)."""
    if wildcard and name.endswith("*"):
        return len(name) < IFNAMSIZ and valid_device(name[:-1])
    return name not in (".", "..") and DEV.fullmatch(name) is not None


def device_atom(atom: Atom, field: str, wildcard: bool) -> tuple[str | None, Diagnostic | None]:
    """The interface name an atom (a bare name or a string) holds, or an error."""
    if atom.kind == "name":
        name = str(atom.value)
    elif atom.kind == "bytes":
        name = atom.value.decode("utf-8", "replace")
    else:
        return None, atom_error(f"`{field}` needs interface names; `{shorten(atom.text)}` is "
                                f"{_kind_word(atom.kind)}", atom, code="wrong-type",
                                hint='an interface name is written bare (`eth0`) or '
                                'quoted (`"eth0.100"`)')
    if valid_device(name, wildcard):
        return name, None
    return None, atom_error(_bad_device(name, wildcard), atom, code="bad-interface",
                            hint=_device_hint(name, wildcard))


def device_value(value: Value, diags: list[Diagnostic]) -> str | None:
    """A device of a block header or an ``interface`` line (no ``*``)."""
    if value.kind == "string":
        data = decode_string(value, diags)
        if data is None:
            return None
        name = data.decode("utf-8", "replace")
    else:
        name = value.text
    if valid_device(name):
        return name
    diags.append(error(_bad_device(name, False), value.span, code="bad-interface",
                       hint=_device_hint(name, False)))
    return None


def _bad_device(name: str, wildcard: bool) -> str:
    shown = shorten(visible(name))
    if wildcard and name.endswith("*") and len(name) >= IFNAMSIZ:
        return f"`{shown}` is too long: an interface pattern is at most 15 characters, `*` included"
    return f"`{shown}` is not an interface name: {DEV_RULE}"


def _device_hint(name: str, wildcard: bool) -> str | None:
    if "*" in name and not wildcard:
        return "a device here is one interface; `*` patterns are for `iif`/`oif`"
    if "*" in name.rstrip("*") or name.count("*") > 1:
        return "`*` may only end a name (`eth*`)"
    if name == "*":
        return "leave the match out to match any interface"
    if len(name) >= IFNAMSIZ:
        return "Linux interface names have at most 15 characters"
    return None


def _kind_word(kind: str) -> str:
    return KIND_WORDS.get(kind, kind)


def valid_chain(name: str) -> bool:
    return CHAIN.fullmatch(name) is not None
