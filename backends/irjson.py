"""Target ``ir``: the checked IR as JSON, the contract every other backend reads.

Spans are written as byte offsets plus the rule's line; addresses as text, payload bytes
as hex, ranges as ``[lo, hi]`` pairs. A whole firewall (v2) is its ``Ruleset`` as
``pfc.build`` hands it to a target: the lists in path order (chains written out), the
interfaces (addresses as ``A/LEN``, MAC addresses as hex).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
from dataclasses import replace
from enum import Enum

from pfc.backends.base import FEATURES, Artifact, Backend, Options, artifact_name
from pfc.frontend import ir
from pfc.frontend.firewall.hooks import BLOCKS
from pfc.frontend.firewall.ruleset import Ruleset
from pfc.frontend.source import Span


def to_jsonable(obj: object) -> object:
    convert = _CONVERTERS.get(type(obj))
    if convert is None:
        convert = _CONVERTERS[type(obj)] = _converter(type(obj))
    return convert(obj)


_CONVERTERS: dict[type, object] = {}  # each type's converter, chosen once
# Fields of whole firewalls (v2) left out where they hold their v1 value, so a v1
# policy's IR reads as it always has.
_V2_ONLY = {"hook": (None,), "chains": ((),)}
# A field named like the discriminator "kind" gets a key of its own.
_RENAMED = {("Reject", "kind"): "reply", ("Nat", "kind"): "nat"}


def _converter(cls: type):
    if issubclass(cls, Span):
        return lambda obj: {"start": obj.start, "end": obj.end}
    if dataclasses.is_dataclass(cls):
        names = tuple(f.name for f in dataclasses.fields(cls))
        kind = cls.__name__
        keys = {n: _RENAMED.get((kind, n), n + "_" if n == "kind" else n) for n in names}

        def dataclass_(obj: object) -> dict:
            out = {"kind": kind}
            for name in names:
                value = getattr(obj, name)
                if name in _V2_ONLY and value in _V2_ONLY[name]:
                    continue
                out[keys[name]] = to_jsonable(value)
            return out
        return dataclass_
    if issubclass(cls, Enum):
        return lambda obj: obj.value
    if issubclass(cls, (ipaddress.IPv4Network, ipaddress.IPv6Network,
                        ipaddress.IPv4Address, ipaddress.IPv6Address,
                        ipaddress.IPv4Interface, ipaddress.IPv6Interface)):
        return str
    if issubclass(cls, bytes):
        return bytes.hex
    if issubclass(cls, (tuple, list)):
        return lambda obj: [to_jsonable(x) for x in obj]
    return lambda obj: obj


def dumps(value: object) -> str:
    """``json.dumps(value, indent=2)``, for what ``to_jsonable`` returns, written out
    directly (json's pure-Python indenting encoder took seconds on 100k rules)."""
    out: list[str] = []
    try:
        _write(value, "\n", out)
    except _Unusual:
        return json.dumps(value, indent=2)
    return "".join(out)


class _Unusual(Exception):
    """A value ``_write`` does not print itself (json.dumps decides)."""


_SCALARS = {True: "true", False: "false", None: "null"}


def _write(value: object, newline: str, out: list[str]) -> None:
    if isinstance(value, str):
        out.append(_string(value))
    elif value is None or isinstance(value, bool):
        out.append(_SCALARS[value])
    elif isinstance(value, dict):
        if not value:
            out.append("{}")
            return
        inner = newline + "  "
        sep = "{" + inner
        for key, item in value.items():
            if not isinstance(key, str):
                raise _Unusual
            out.append(sep + _string(key) + ": ")
            _write(item, inner, out)
            sep = "," + inner
        out.append(newline + "}")
    elif isinstance(value, list):
        if not value:
            out.append("[]")
            return
        inner = newline + "  "
        sep = "[" + inner
        for item in value:
            out.append(sep)
            _write(item, inner, out)
            sep = "," + inner
        out.append(newline + "]")
    elif isinstance(value, int):
        out.append(int.__repr__(value))
    elif isinstance(value, float):
        out.append(json.dumps(value))
    else:
        raise _Unusual


_string = json.encoder.encode_basestring_ascii


def emit(policy: ir.Policy, options: Options) -> Artifact:
    text = dumps(to_jsonable(policy)) + "\n"
    return Artifact("ir", "none", "json", text,
                    {artifact_name(policy, "ir", "json"): text.encode()}, policy)


def emit_ruleset(ruleset: Ruleset, options: Options) -> Artifact:
    """A whole firewall as one JSON document."""
    whole = replace(ruleset, lists=tuple(replace(p, chains=()) for p in ruleset.lists))
    text = dumps(to_jsonable(whole)) + "\n"
    anchor = ir.Policy((), source=ruleset.source)
    return Artifact("ir", "none", "json", text,
                    {artifact_name(anchor, "ir", "json"): text.encode()}, anchor,
                    meta={"ruleset": ruleset})


BACKENDS = (Backend(
    name="ir", description="the checked IR as JSON (what every backend reads)",
    supports=frozenset(FEATURES), formats=("json",), hooks=("none",), emit=emit,
    carries=dict.fromkeys(BLOCKS, "none"), emit_ruleset=emit_ruleset),)
