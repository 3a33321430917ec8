"""``pfc apply`` (make the host match /etc/pfc/pfc.conf) and what ``--dry-run`` prints
for it and for ``pfc load --dry-run``."""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from typing import TextIO

from pfc.cli.common import Command
from pfc.cli.output import hex_witness, why
from pfc.cli.output import shown as printable

SHOWN_RULES = 20  # rules listed per side; the rest are counted


def load_dry_run(args: argparse.Namespace, compiled, target: str, dev: str) -> int:
    """``pfc load --dry-run``: :func:`pfc.api.dry_run`, shown as text or JSON."""
    from pfc import api
    from pfc.cli.common import print_diagnostics
    from pfc.cli.output import print_json
    from pfc.cli.prove import status_line
    from pfc.deploy.base import LoadError
    from pfc.frontend.diagnostics import CompileError

    try:
        with status_line("pfc load --dry-run: comparing verdicts") as progress:
            result = api.dry_run(compiled, target, dev, netns=args.netns, force=args.force,
                                 mode=args.mode, hook=args.hook, table=args.table,
                                 progress=progress)
    except CompileError as exc:
        print_diagnostics(exc.diagnostics, compiled.sources)
        return 1
    except LoadError as exc:
        if args.format == "json":
            print_json({"error": printable(exc.cause)})
        print(printable(f"pfc load --dry-run: error: {exc.cause}"), file=sys.stderr)
        if exc.hint:
            print(printable(f"hint: {exc.hint}"), file=sys.stderr)
        return 2
    if args.format == "json":
        print_json(dry_run_json(result))
    else:
        show_dry_run(result)
    return 0


def show_dry_run(result, out: TextIO | None = None) -> None:
    """A :class:`pfc.api.DryRun` for people: the kernel's check, then rules removed and
    added and the regions of frames whose verdict changes (as ``pfc diff``)."""
    seen = result.preview

    def say(text: str = "") -> None:
        print(printable(text), file=out or sys.stdout)

    where = f"the firewall of namespace {seen.netns}" if seen.target == "firewall" else \
        f"{seen.target} on {seen.dev} (namespace {seen.netns})"
    say(f"dry run: {where}; nothing was changed")
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
    if result.sets:
        say("  lists: " + "; ".join(c.text() for c in result.sets))
    for name, (gone, new) in (result.set_files or {}).items():
        say(f"  set file {name}: {gone} lines removed, {new} added since the load")
    if seen.target == "firewall":
        say("  verdicts: not compared for a whole firewall (`pfc verify FILE` runs it in "
            "a throw-away host)")
        return
    _regions(say, result.diff)


def _paired(removed: list, added: list) -> tuple[list, list, list]:
    """(removed, added, same): ``same`` the added rules whose text a removed one has
    (each paired once), left out of the other two."""
    left = Counter(t for _, t in added)
    gone, pairs = [], Counter()
    for n, t in removed:
        if left[t]:
            left[t] -= 1
            pairs[t] += 1
        else:
            gone.append((n, t))
    new, same = [], []
    for n, t in added:
        if pairs[t]:
            pairs[t] -= 1
            same.append((n, t))
        else:
            new.append((n, t))
    return gone, new, same


def _rules(say, removed: list, added: list) -> None:
    """Rules removed (-) and added (+); a rule whose text is the same on both sides
    changed only through a named list's contents (~, the lists' entries below)."""
    removed, added, same = _paired(removed, added)
    if not removed and not added and not same:
        say("  rules: none added or removed")
        return
    lists = f", {len(same)} changed by a list's entries" if same else ""
    say(f"  rules: {len(removed)} removed, {len(added)} added{lists}")
    for sign, rows in (("-", removed), ("+", added), ("~", same)):
        for line, text in rows[:SHOWN_RULES]:
            say(f"    {sign} line {line}: {text}")
        if len(rows) > SHOWN_RULES:
            say(f"    {sign} ... and {len(rows) - SHOWN_RULES} more")


def _regions(say, diff) -> None:
    if diff is None:
        say("  verdicts: not compared (log, limit, audit or ct state: `pfc diff` compares "
            "stateless policies)")
        return
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
            "sets": [c.to_json() for c in result.sets or []],
            "regions": [{"where": r.where, "change": r.change}
                        for r in (result.diff.regions if result.diff else [])]}


# --------------------------------------------------------------------------- apply

def _apply_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", "-c", metavar="PATH",
                   help="the config (default: $PFC_CONFIG, else /etc/pfc/pfc.conf)")
    p.add_argument("--dry-run", "-n", action="store_true",
                   help="check each change with the kernel and print it; change nothing")
    p.add_argument("--format", choices=("text", "json"), default="text")


WORDS = {"unchanged": "unchanged", "loaded": "loaded", "replaced": "replaced",
         "repaired": "repaired (it had changed outside pfc)", "unloaded": "unloaded "
         "(not in the config)", "failed": "FAILED", "fallback": "FAILED, fell back to "
         "the last good copy"}
DRY_WORDS = {"loaded": "would load", "replaced": "would replace",
             "repaired": "would repair (it changed outside pfc)",
             "unloaded": "would unload (not in the config)"}


def _apply(args: argparse.Namespace) -> int:
    from pfc import api
    from pfc.deploy import apply as applying
    from pfc.deploy.base import LoadError

    error = None
    try:
        outcomes = api.apply(args.config, dry_run=args.dry_run)
        code = 0 if all(o.ok for o in outcomes) else 1
    except applying.ConfigError as exc:
        error = str(exc)
        print(printable(f"pfc apply: error: {exc}"), file=sys.stderr)
        outcomes, code = [] if args.dry_run else \
            applying.fallback_all(f"the config is unreadable: {exc}"), 2
    except LoadError as exc:
        error = exc.cause
        print(printable(f"pfc apply: error: {exc.cause}"), file=sys.stderr)
        if exc.hint:
            print(printable(f"hint: {exc.hint}"), file=sys.stderr)
        outcomes, code = [], 2
    if args.format == "json":
        print(json.dumps(apply_json(outcomes, args.dry_run, code, error), indent=2))
        return code
    for o in outcomes:
        word = (DRY_WORDS if args.dry_run else {}).get(o.action) or WORDS[o.action]
        print(printable(f"{o.place}: {word}"))
        for m in o.messages:
            for line in m.splitlines():
                print(printable(f"  {line}"), file=sys.stderr if not o.ok else sys.stdout)
        if o.preview is not None:
            show_dry_run(o.preview)
    if error is not None:
        print(printable("the config was not applied: " + (
            "only last good copies were loaded where nothing of pfc's was in force"
            if any(o.action == "fallback" for o in outcomes) else
            "nothing was changed (what pfc loaded before stays in force)")))
    elif all(o.action == "unchanged" for o in outcomes):
        print("nothing to change" if outcomes else "nothing to change: the config lists "
              "no policy and pfc has none loaded")
    return code


def apply_json(outcomes: list, dry: bool, code: int, error: str | None = None) -> dict:
    out = {"version": 1, "dry_run": dry, "exit": code,
           "changed": any(o.action not in ("unchanged", "failed") for o in outcomes),
           "outcomes": [{"place": o.place, "action": o.action, "messages": o.messages,
                         "preview": dry_run_json(o.preview) if o.preview else None}
                        for o in outcomes]}
    return out | ({"error": error} if error is not None else {})


APPLY = Command("apply", "make the host hold the policies of /etc/pfc/pfc.conf",
                "Load every policy the config lists where it says (xdp, tc, nft,\n"
                "iptables; a namespace), skip those already loaded as listed\n"
                "(`nothing to change`), repair those changed outside pfc, and unload\n"
                "pfc's policies the config does not list (unless unlisted = \"keep\").\n"
                "A policy that fails keeps the previous one in force; where none is,\n"
                "the last good copy pfc kept (/var/lib/pfc, PFC_LIB_DIR) is loaded.\n"
                "--dry-run: the kernel's check and what would change, per policy.\n"
                "Exit: 0 done, 1 a policy failed, 2 the config is unreadable. The\n"
                "systemd unit packaging/pfc.service runs it at boot (docs/operate.md).",
                _apply_args, _apply)
