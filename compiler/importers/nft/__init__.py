"""nft rulesets: ``nft list ruleset`` output, ``nft -f`` files, ``nft -j`` JSON."""

from __future__ import annotations

from pfc.frontend.source import SourceFile
from pfc.importers.model import Firewall


def import_nft(sources: list[SourceFile], json: bool = False) -> tuple[Firewall, frozenset[int]]:
    """An nft ruleset (text, with its includes, or JSON) as one firewall."""
    from pfc.importers.nft.matches import NAMED
    from pfc.importers.nft.parse import read_ruleset
    from pfc.importers.nft.tables import read_tables
    if json:
        from pfc.importers.nft.json import read_json
        ruleset = read_json(sources[0])
    else:
        ruleset = read_ruleset(sources[0])
    named: dict[str, tuple[str, ...]] = {}
    token = NAMED.set(named)
    try:
        fw = read_tables(ruleset)
    finally:
        NAMED.reset(token)
    fw.defines = [(name, "{ " + ", ".join(values) + " }") for name, values in named.items()]
    fw.header = [f"imported by `pfc import` from {sources[0].name} (nft"
                 f"{' JSON' if json else ''})"]
    fw.extra_sources = dict(ruleset.sources)
    return fw, frozenset((4, 6))
