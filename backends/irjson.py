"""Target ``ir``: the checked IR as JSON, the contract every other backend reads.

Spans are written as byte offsets plus the rule's line; addresses as text, payload bytes
as hex, ranges as ``[lo, hi]`` pairs.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
from enum import Enum

from pfc import ir
from pfc.backends.base import FEATURES, Artifact, Backend, Options, artifact_name
from pfc.source import Span


def to_jsonable(obj: object) -> object:
    if isinstance(obj, Span):
        return {"start": obj.start, "end": obj.end}
    if dataclasses.is_dataclass(obj):
        out = {"kind": type(obj).__name__}
        for f in dataclasses.fields(obj):
            out[f.name] = to_jsonable(getattr(obj, f.name))
        return out
    if isinstance(obj, Enum):
        return obj.value
    if isinstance(obj, (ipaddress.IPv4Network, ipaddress.IPv6Network,
                        ipaddress.IPv4Address, ipaddress.IPv6Address)):
        return str(obj)
    if isinstance(obj, bytes):
        return obj.hex()
    if isinstance(obj, (tuple, list)):
        return [to_jsonable(x) for x in obj]
    return obj


def emit(policy: ir.Policy, options: Options) -> Artifact:
    text = json.dumps(to_jsonable(policy), indent=2) + "\n"
    return Artifact("ir", "none", "json", text,
                    {artifact_name(policy, "ir", "json"): text.encode()}, policy)


BACKENDS = (Backend(
    name="ir", description="the checked IR as JSON (what every backend reads)",
    supports=frozenset(FEATURES), formats=("json",), hooks=("none",), emit=emit),)
