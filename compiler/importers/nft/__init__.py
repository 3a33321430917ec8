"""nft rulesets: ``nft list ruleset`` output, ``nft -f`` files, ``nft -j`` JSON."""

from __future__ import annotations

from pathlib import Path

from pfc.frontend.source import SourceFile
from pfc.importers.model import Firewall

# A named set of more elements than this is a set file beside OUT.pf (``set NAME = file``)
# when the policy goes to a file; a smaller one, or any when it goes to standard output,
# a ``define``.
LARGE_SET = 256


def import_nft(sources: list[SourceFile], json: bool = False, set_stem: str | None = None
               ) -> tuple[Firewall, frozenset[int]]:
    """An nft ruleset (text, with its includes, or JSON) as one firewall. ``set_stem``:
    the stem of OUT.pf, whose folder takes the large sets' files (``STEM.NAME.set``);
    None: every named set is a ``define``."""
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
    for name, values in named.items():
        if set_stem is not None and len(values) > LARGE_SET:
            lines = [f"# nft set @{name} of {Path(sources[0].name).name}", *values]
            fw.sets.append((name, f"{set_stem}.{name}.set", lines))
        else:
            fw.defines.append((name, "{ " + ", ".join(values) + " }"))
    fw.header = [f"imported by `pfc import` from {sources[0].name} (nft"
                 f"{' JSON' if json else ''})"]
    fw.extra_sources = dict(ruleset.sources)
    return fw, frozenset((4, 6))
