"""``pfc apply`` (make the host match /etc/pfc/pfc.conf) and what ``--dry-run`` prints
for it and for ``pfc load --dry-run``."""

from __future__ import annotations

import sys
from typing import TextIO

from pfc.cli.output import shown as printable
from pfc.cli.prove import hex_witness, why

SHOWN_RULES = 20  # rules listed per side; the rest are counted


def show_dry_run(result, out: TextIO | None = None) -> None:
    """A :class:`pfc.api.DryRun` for people: the kernel's check, then rules removed and
    added and the regions of frames whose verdict changes (as ``pfc diff``)."""
    seen = result.preview

    def say(text: str = "") -> None:
        print(printable(text), file=out or sys.stdout)

    say(f"dry run: {seen.target} on {seen.dev} (namespace {seen.netns}); nothing was "
        "changed")
    for line in seen.warnings + seen.checked:
        say(f"  {line}")
    if result.compared == "nothing loaded":
        say("  nothing of pfc's is loaded there: the whole policy would be new")
        return
    record = seen.previous
    say(f"  loaded now: {record.policy} (sha256 {record.sha256[:16]}…, loaded "
        f"{record.loaded_at}){'' if seen.health is None else ', ' + seen.health.health}")
    if seen.health is not None and seen.health.health != "ok":
        say(f"    {seen.health.detail}")
    if result.compared == "no copy":
        say("  pfc kept no copy of the loaded policy's sources: rules and verdicts "
            "cannot be compared (load it once with this pfc)")
        return
    _rules(say, result.removed, result.added)
    for name, (gone, new) in (result.set_files or {}).items():
        say(f"  set file {name}: {gone} lines removed, {new} added since the load")
    _regions(say, result.diff)


def _rules(say, removed: list, added: list) -> None:
    if not removed and not added:
        say("  rules: none added or removed")
        return
    say(f"  rules: {len(removed)} removed, {len(added)} added")
    for sign, rows in (("-", removed), ("+", added)):
        for line, text in rows[:SHOWN_RULES]:
            say(f"    {sign} line {line}: {text}")
        if len(rows) > SHOWN_RULES:
            say(f"    {sign} ... and {len(rows) - SHOWN_RULES} more")


def _regions(say, diff) -> None:
    scope = f"every frame up to {diff.bound} bytes, as `pfc diff`"
    if diff.same:
        say(f"  verdicts: no verdict, counter or rewrite changes ({scope})")
        return
    more = "" if diff.complete else " (the first ones; there are more)"
    say(f"  verdicts: {len(diff.regions)} region{'s' * (len(diff.regions) != 1)} of "
        f"frames change{more} ({scope}):")
    for r in diff.regions:
        say(f"    {r.line()}")
        say(f"        old: {why(r.old)}; new: {why(r.new)}")
        say(f"        witness: {hex_witness(r.witness)}")


def dry_run_json(result) -> dict:
    seen = result.preview
    return {"target": seen.target, "dev": seen.dev, "netns": seen.netns,
            "checked": seen.checked, "warnings": seen.warnings,
            "loaded": None if seen.previous is None else {
                "policy": seen.previous.policy, "sha256": seen.previous.sha256,
                "health": seen.health.health if seen.health else None},
            "compared": result.compared, "changes": result.changes,
            "removed": [{"line": n, "text": t} for n, t in result.removed or []],
            "added": [{"line": n, "text": t} for n, t in result.added or []],
            "set_files": {k: {"removed": a, "added": b}
                          for k, (a, b) in (result.set_files or {}).items()},
            "regions": [{"where": r.where, "change": r.change}
                        for r in (result.diff.regions if result.diff else [])]}
