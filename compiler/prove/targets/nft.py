"""nft: what the kernel holds after a load, read back and executed symbolically.

The artifact is loaded into a throw-away namespace (the nft runner's lab,
``pfc.backends.nft.run.session``) and read back through libnftables: the rules as
the kernel's own expressions (``nft --debug=netlink list table``: one line per
expression, registers and byte offsets as the kernel runs them) and every set's
elements (interval sets as the kernel's start/end elements). The libnftables JSON
listing is not enough: it hides the implicit dependencies (``meta l4proto``), and
it prints a raw ``@th,16,16 set`` write as ``udp dport set``, which is another
statement (it updates the UDP checksum). :mod:`pfc.prove.targets.nft_vm` executes the
parsed rules.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from pfc.backends.base import Artifact
from pfc.prove.frame import Behaviour, Frame
from pfc.prove.targets import nft_vm
from pfc.prove.targets.cbpf import Unsupported
from pfc.prove.targets.nft_maps import parse_element
from pfc.prove.targets.nft_vm import Listing

_SET_HEAD = re.compile(r"^(\w+) (\S+) @(\S+)$")
_RULE_HEAD = re.compile(r"^(\w+) (\S+) (\S+) (\d+)(?: \d+)?$")
_EXPR = re.compile(r"^\s*\[ (.*) \]$")
_POLICY = re.compile(r"chain (\S+) \{\s*type [^;]*;\s*policy (accept|drop);")


def parse_listing(text: str) -> Listing:
    """Sets and chains of an ``nft --debug=netlink list table`` output."""
    listing, current, rule = Listing(), None, None
    listing.policies = dict(_POLICY.findall(text))
    for line in text.splitlines():
        if line.startswith("table ") or line.startswith("}"):
            break  # the ruleset as text follows the netlink dump
        if m := _SET_HEAD.match(line):
            current, rule = listing.sets.setdefault(m.group(3), []), None
        elif line.lstrip().startswith("element "):
            current.append(parse_element(line))
        elif m := _RULE_HEAD.match(line):
            rule = []
            listing.chains.setdefault(m.group(3), []).append(rule)
        elif m := _EXPR.match(line):
            if rule is None:
                raise Unsupported(f"an expression outside a rule: {line}")
            rule.append(m.group(1))
    return listing


def kernel_listing(artifact: Artifact) -> str:
    """Load ``artifact`` into a throw-away namespace and list its table back."""
    from pfc.backends.nft import run as nftrun

    family, table = artifact.meta["family"], artifact.meta["table"]
    current = getattr(nftrun, "_current", None)  # the runner's lab, when one is open
    if current is not None:
        return _listed(current, artifact, family, table)
    with nftrun.session() as s:
        return _listed(s, artifact, family, table)


def _listed(session, artifact: Artifact, family: str, table: str) -> str:
    from pfc.backends.nft import run as nftrun

    session.load(artifact)
    session.ctx.set_debug("netlink")
    try:
        return nftrun.nft_cmd(session.ctx, f"list table {family} {table}")
    finally:
        session.ctx.set_debug(0)


def behaviour(artifact: Artifact, frame: Frame) -> Behaviour:
    text = artifact.meta.get("prove_listing") or kernel_listing(artifact)
    listing = parse_listing(text)
    counters = {name: index for index, name in artifact.meta.get("counters", {}).items()}
    return nft_vm.run(listing, artifact.meta["chain"], artifact.hook, frame, counters)


_HOOK_TEXT = re.compile(r"\btype\s+filter\s+hook\s+(\w+)")
_HOOK_JSON = re.compile(r'"hook"\s*:\s*"(\w+)"')


def hook_of(data: bytes) -> str | None:
    """The hook of the base chain a ruleset file (text or JSON) declares, or None
    when it declares none or several."""
    text = data.decode(errors="replace")
    found = set(_HOOK_TEXT.findall(text)) | set(_HOOK_JSON.findall(text))
    return found.pop() if len(found) == 1 else None


def adopt(artifact: Artifact, path: Path, data: bytes) -> Artifact:
    """A ruleset file given by path: text (``nft -f``) or JSON (``.json``)."""
    text = data.decode()
    fmt = "json" if path.suffix == ".json" else "nft"
    adopted = replace(artifact, format=fmt, text=text, files={path.name: data},
                      meta=dict(artifact.meta))
    adopted.meta.pop("prove_listing", None)
    return adopted
