"""The original ruleset of an import, loaded as it is (``pfc verify OUT.pf --against
FILE``): an iptables-save dump (and its ip6tables-save twin) through
``iptables-restore``/``ip6tables-restore``, an nft ruleset through libnftables, into
the current network namespace (the caller enters the lab's host first).

Rates are slowed to 1/minute, as ``pfc verify`` slows pfc's own (``verifier.firewall.
slowed``): a lab run takes seconds, in which a fast bucket refills while the path
interpreter judges every packet at one instant; both sides are slowed alike, so the
comparison stays exact on which packets reach a bucket and on its size.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass

from pfc.frontend.source import SourceFile

_IPT_RATES = re.compile(r"(--limit|--hashlimit-upto|--hashlimit-above)\s+[0-9]+/\w+")
_NFT_RATES = re.compile(r"(limit\s+rate\s+(?:over\s+)?)[0-9]+\s*/\s*(second|minute|hour|day"
                        r"|week)")
TARGETS = {"iptables": "iptables", "nft": "nft", "nft-json": "nft"}


class LoadFailed(RuntimeError):
    """The kernel refused the original ruleset."""


@dataclass(frozen=True)
class Original:
    fmt: str
    sources: tuple[SourceFile, ...]
    families: tuple[int, ...] = ()  # iptables: the family of each source
    root: str | None = None  # nft: where absolute includes are read

    @property
    def target(self) -> str:
        """The pfc target the original is compared with by default."""
        return TARGETS[self.fmt]

    def load(self) -> None:
        """Load the ruleset (slowed) into the current network namespace."""
        if self.fmt == "iptables":
            for source, family in zip(self.sources, self.families, strict=True):
                tool = "ip6tables-nft-restore" if family == 6 else "iptables-nft-restore"
                _run([tool], slowed(source.text, self.fmt).encode())
        else:
            from pfc.kernel import nftlib
            nft = nftlib.load().Nftables()
            text = self.sources[0].text
            if self.fmt == "nft":
                text = lab_text(flattened(self.sources[0], self.root))
            rc, _, err = nft.cmd(slowed(text, self.fmt))
            if rc != 0:
                raise LoadFailed(f"nft refused the original ruleset: {err.strip()}")


def slowed(text: str, fmt: str) -> str:
    if fmt == "iptables":
        return _IPT_RATES.sub(lambda m: f"{m.group(1)} 1/min", text)
    if fmt == "nft":
        return _NFT_RATES.sub(lambda m: f"{m.group(1)}1/minute", text)
    return re.sub(r'("rate":\s*)[0-9]+(,\s*"per":\s*)"\w+"', r'\g<1>1\g<2>"minute"', text)


_INCLUDE = re.compile(r'^\s*include\s+"([^"]+)"\s*$', re.M)
_FLUSH = re.compile(r"^\s*flush\s+ruleset\s*;?\s*$", re.M)


def flattened(source: SourceFile, root: str | None, depth: int = 0) -> str:
    """The nft text with its includes in place (read as the importer reads them)."""
    import os
    from pathlib import Path

    def include(m: re.Match) -> str:
        path = m.group(1)
        base = Path(source.name).parent
        full = Path(root) / path.lstrip("/") if os.path.isabs(path) and root else \
            Path(path) if os.path.isabs(path) else base / path
        if depth > 16 or not full.is_file():
            return m.group(0)
        return flattened(SourceFile.read(full), root, depth + 1)
    return _INCLUDE.sub(include, source.text)


def lab_text(text: str) -> str:
    """Without ``flush ruleset``: the lab's own observer table stays (a fresh
    namespace has no other ruleset to flush)."""
    return _FLUSH.sub("", text)


def original(sources: list[SourceFile], fmt: str | None = None,
             root: str | None = None) -> Original:
    """The original of an import: its format and, for iptables, each dump's family."""
    from pfc.importers.detect import detect
    from pfc.importers.iptables.dump import read_dump
    fmt = fmt or detect(sources[0])
    families: tuple[int, ...] = ()
    if fmt == "iptables":
        first = read_dump(sources[0]).family or 4
        families = (first,) if len(sources) == 1 else (first, 10 - first)
    return Original(fmt, tuple(sources), families, root)


def lab_ruleset(ruleset):
    """``ruleset`` with a host to test on: an interface for each name pattern its rules
    use (``ppp*`` → ``ppp0``) and, so that packets come from outside and are forwarded,
    at least two interfaces besides ``lo`` (``eth0``, ``eth1``): imported rulesets name
    no ``interface`` lines. Nothing in a compiled artifact depends on them."""
    from dataclasses import replace

    from pfc.frontend import ir
    from pfc.frontend.firewall.ruleset import Interface
    named = {i.name for i in ruleset.interfaces}
    for rule in ruleset.rules:
        for m in rule.matches:
            if isinstance(m, ir.IfaceMatch):
                named |= {n.rstrip("*") + ("0" if n.endswith("*") else "") for n in m.names}
    named.discard("lo")
    extra = [n for n in ("eth0", "eth1") if n not in named][:max(0, 2 - len(named))]
    known = {i.name for i in ruleset.interfaces}
    add = [Interface(n) for n in sorted(named - known) + extra]
    return replace(ruleset, interfaces=ruleset.interfaces + tuple(add))


def _run(argv: list[str], data: bytes) -> None:
    result = subprocess.run(argv, input=data, capture_output=True, check=False)
    if result.returncode:
        raise LoadFailed(f"`{' '.join(argv)}` refused the original ruleset: "
                         f"{result.stderr.decode(errors='replace').strip()}")
