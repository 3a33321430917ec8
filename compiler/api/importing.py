"""pfc as a library: ``pfc import`` and the kernel check of an import (docs/import.md).
Part of :mod:`pfc.api`, which re-exports every name here."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from pfc.api.common import PolicyInput, front


def import_(files: Iterable[str | os.PathLike], *, fmt: str | None = None,
            expr: str | None = None, output: str = "imported.pf"):
    """An existing firewall as a pfc policy (``pfc import``, docs/import.md): an
    iptables-save dump (and its ip6tables-save twin), an nft ruleset (text or JSON),
    or a pcap-filter expression (``expr``, or a file holding one). ``fmt`` is
    ``iptables``, ``nft``, ``nft-json`` or ``pcap-filter`` (told from the text when
    None). Returns a :class:`pfc.importers.driver.ImportResult`: ``.text`` the policy,
    ``.refusals`` one diagnostic per source rule pfc cannot say (``.complete`` when
    there are none). OSError if a file cannot be read;
    :class:`pfc.importers.driver.UnknownFormat` if the format cannot be told."""
    from pfc.frontend.source import SourceFile
    from pfc.importers.driver import import_sources, read_input
    sources = [read_input(f) for f in files]
    if expr is not None:
        sources.insert(0, SourceFile("<expr>", expr))
    return import_sources(sources, fmt, output_name=Path(output).name)


def verify_against(policy: PolicyInput, original: Iterable[str | os.PathLike], *,
                   target: str | None = None, n: int = 300, seed: int = 0,
                   fmt: str | None = None, root: str | None = None):
    """``pfc verify POLICY --against FILE``: the original ruleset an import came from
    loaded in one host lab, ``policy`` compiled for ``target`` (the original's own
    kind by default: nft or iptables) in another, the same traffic into both, what
    came out compared packet by packet (``pfc.verifier.firewall.against``). Packets
    behind an IPv6 extension header are left out: pfc reads no transport field there,
    by design (docs/import.md "What differs"). Needs root. Returns the
    ``verifier.firewall.Report``."""
    from pfc.importers.driver import read_input
    from pfc.importers.original import lab_ruleset
    from pfc.importers.original import original as original_of
    from pfc.verifier import firewall
    ruleset = lab_ruleset(front(policy).require_ruleset())
    source = original_of([read_input(f) for f in original], fmt, root)
    return firewall.against(ruleset, target or source.target, source.load, n=n,
                            seed=seed, keep=lambda item: not extension_header(item))


def extension_header(item) -> bool:
    """An IPv6 packet whose first header after the fixed one is an extension header
    (Hop-by-Hop, Routing, Fragment, Destination Options, AH)."""
    data = item.data if item.port is None else item.data[14:]
    return len(data) > 6 and data[0] >> 4 == 6 and data[6] in (0, 43, 44, 60, 51)
