"""``pfc diff`` and ``pfc prove`` of whole firewalls (v2 files): hook by hook, each
hook's context stated as inputs, with what each proof covers said plainly
(docs/prove.md "Whole firewalls")."""

from __future__ import annotations

import argparse
import sys

from pfc.cli.output import hex_witness, print_json, why, write_witnesses
from pfc.prove.firewall.inputs import inputs_text


def diff(args: argparse.Namespace, old, new, bound: int, progress=None) -> int:
    """``pfc diff`` of two whole firewalls (``Ruleset``s)."""
    from pfc.prove.firewall.diff import diff as diff_
    from pfc.prove.firewall.diff import region_json

    result = diff_(old, new, bound=bound, limit=args.limit, progress=progress)
    regions = [(h.hook, r) for h in result.hooks for r in h.regions]
    write_witnesses(args.write, [r.witness for _, r in regions])
    if args.format == "json":
        print_json({
            "same": result.same, "complete": all(h.complete for h in result.hooks),
            "max_len": bound, "firewall": True, "sets": [],
            "regions": [{"hook": hook} | region_json(r) for hook, r in regions],
            "hooks": [{"hook": h.hook, "same": h.same, "complete": h.complete,
                       "covers": h.notes, "seconds": round(h.seconds, 3)}
                      for h in result.hooks]})
        return 0 if result.same else 1
    scope = f"every frame up to {bound} bytes, every value of each hook's inputs"
    if result.same:
        print(f"same meaning: {args.old} and {args.new} give every hook's verdict, "
              f"mark, translation and rewrite alike ({scope})")
    else:
        n = len(regions)
        print(f"{args.old} → {args.new}: {n} region{'s' * (n != 1)} of frames change, "
              f"hook by hook ({scope}):")
    for h in result.hooks:
        _print_hook(h)
    if args.write and regions:
        print(f"wrote {len(regions)} witness frames to {args.write}", file=sys.stderr)
    return 0 if result.same else 1


def _print_hook(h) -> None:
    if h.same:
        print(f"  {h.hook}: same meaning")
    else:
        more = "" if h.complete else " (the first ones; there are more)"
        n = len(h.regions)
        print(f"  {h.hook}: {n} region{'s' * (n != 1)} change{more}:")
    for r in h.regions:
        print(f"    {r.line()}")
        print(f"        old: {why(r.old)}; new: {why(r.new)}")
        print(f"        inputs: {inputs_text(r.inputs)}")
        print(f"        witness: {hex_witness(r.witness)}")
    for note in h.notes:
        print(f"    covers: {note}")


def prove(args: argparse.Namespace, path: str, ruleset, specs: list[str], explicit: bool,
          bound: int) -> dict:
    """``pfc prove`` of a whole firewall: a line per target and hook (flushed as each
    is known), what each hook's proof covers, and the file's JSON entry (each target
    entry with its ``hook``)."""
    from pfc import backends
    from pfc.prove.firewall.proof import prove_firewall

    if args.artifact:
        raise ValueError("--artifact proves one list's artifact; a whole firewall is "
                         "proved from pfc's own output (--targets)")
    if not explicit:
        blocks = {p.hook.name for p in ruleset.lists}
        specs = [t for t in specs if blocks & set(backends.get(t).carries)]
    text = args.format != "json"
    targets, said = [], set()
    for r in prove_firewall(ruleset, specs, explicit=explicit, bound=bound,
                            timeout=args.timeout):
        targets.append(r.to_json())
        if text:
            print(f"{path}: {r.line()}", flush=True)
            for note in r.covers if r.hook not in said else ():
                print(f"    covers: {note}", flush=True)
            if r.covers:
                said.add(r.hook)
    statuses = [t["status"] for t in targets]
    unproved = "not-modelled" in statuses and explicit
    proved = "proved" in statuses and not unproved and all(
        s in ("proved", "not-modelled", "not-expressible") for s in statuses)
    reason = None if proved else ("some hooks are not proved" if "proved" in statuses
                                  else "no hook proved")
    if reason and text and "proved" not in statuses:
        print(f"{path}: not proved: {reason}", flush=True)
    return {"file": path, "proved": proved, "reason": reason, "notes": [],
            "firewall": True, "targets": targets}
