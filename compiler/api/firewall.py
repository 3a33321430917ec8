"""pfc as a library: whole firewalls (v2; docs/language.md "Whole firewalls"). Part of
:mod:`pfc.api`, which re-exports every name here."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from pfc.api.common import DryRun, PolicyInput, front, set_file_changes

if TYPE_CHECKING:
    from pfc.deploy.load import Result
    from pfc.oracle.path.walk import Journey
    from pfc.verifier.whole import FirewallResult


def walk(policy: PolicyInput, frames: Iterable[bytes] | str | os.PathLike, iif: str,
         times: Iterable[int] | None = None, outgoing: Iterable[int] = ()) -> list[Journey]:
    """``pfc run`` of a whole firewall: every frame (bytes, or a pcap file) through the
    path interpreter (semantics.md "The path of a packet") as received on ``iif``, one
    host over time (``times`` in ns); those at positions ``outgoing`` sent by the host
    (from their IP header). One :class:`~pfc.oracle.path.walk.Journey` per frame.
    CompileError (errors, or not a whole firewall); ValueError for an unknown ``iif``."""
    from pfc.oracle.path.walk import Walker

    ruleset = front(policy).require_ruleset()
    walker = Walker(ruleset)
    if walker.host.port(iif) is None:
        names = ", ".join(p.name for p in walker.host.ports)
        raise ValueError(f"the firewall's host has no interface `{iif}` (it has {names})")
    if isinstance(frames, str | os.PathLike):
        from pfc.oracle.pcap import read_capture

        capture = read_capture(frames)
        frames, times, outgoing = capture.frames, capture.times, capture.outgoing
    frames = list(frames)
    times = list(times) if times is not None else [0] * len(frames)
    sent = set(outgoing)
    return [walker.send(f[14:], t) if n in sent else walker.receive(f, iif, t)
            for n, (f, t) in enumerate(zip(frames, times, strict=True))]


def verify_firewall(policy: PolicyInput, targets: Iterable[str] = (), *,
                    packets: int = 300, seed: int = 0,
                    progress: Callable[[str], None] | None = None,
                    tick: Callable[[int], None] | None = None) -> list[FirewallResult]:
    """``pfc verify`` of a whole firewall (docs/verify.md "Whole firewalls"): for each
    of ``targets`` (a list as ``pfc compile --target`` takes it, ``"xdp,nft"``; default
    ``nft``) the parts loaded into a throw-away host built from the file, ``packets``
    generated packets (and conversations) compared with the path interpreter's.
    ``progress(list)`` as each list starts, ``tick(n)`` after each packet."""
    from pfc.verifier.whole import assignments, verify_file

    compiled = front(policy)
    ruleset = compiled.require_ruleset()
    out = []
    for chosen in assignments(list(targets)):
        (progress or (lambda _: None))(",".join(chosen))
        out.append(verify_file(ruleset, chosen, n=packets, seed=seed,
                               tick=tick or (lambda _: None)))
    return out


def load_firewall(policy: PolicyInput, targets: str | Iterable[str] = "nft", *,
                  netns: str | None = None, force: bool = False, mode: str | None = None,
                  table: str = "pfc", audit: bool = False) -> Result:
    """``pfc load`` of a whole firewall (docs/load.md "Whole firewalls"): each block to
    the first of ``targets`` (``"xdp,nft"`` or a list; nft, iptables, xdp, tc) that
    carries it, every part loaded in namespace ``netns`` or none, replacing pfc's
    previous firewall there. ``pfc.unload("firewall", ":firewall")`` or
    :func:`unload_firewall` removes it. CompileError, LoadError as for :func:`load`."""
    from pfc.deploy.firewall.commit import load_compiled as load_ruleset

    chosen = targets.split(",") if isinstance(targets, str) else list(targets)
    return load_ruleset(front(policy), [t.strip() for t in chosen], netns, force, mode,
                        table, audit)


def unload_firewall(netns: str | None = None, force: bool = False) -> Result:
    """``pfc unload`` of the namespace's whole firewall, every part (idempotent)."""
    from pfc.deploy.firewall.commit import unload as unload_ruleset

    return unload_ruleset(netns, force)


def dry_run_firewall(policy: PolicyInput, targets: str | Iterable[str] = "nft", *,
                     netns: str | None = None, force: bool = False,
                     mode: str | None = None, table: str = "pfc") -> DryRun:
    """``pfc load --dry-run`` of a whole firewall: its parts checked by the kernel, its
    rules compared block by block with the loaded firewall (``BLOCK: rule``)."""
    from pfc.deploy.firewall import preview

    compiled = front(policy)
    chosen = targets.split(",") if isinstance(targets, str) else list(targets)
    seen, compared, removed, added, old = preview.dry_run(
        compiled, [t.strip() for t in chosen], netns, force, mode, table)
    return DryRun(seen, compared, removed, added, None,
                  set_file_changes(old, compiled) if old is not None else None)
