"""``pfc diff`` (what changes between two policies, for every frame) and ``pfc prove``
(an artifact equal to its policy, for every frame)."""

from __future__ import annotations

import argparse
import contextlib
import sys
import time

from pfc.cli.common import Command, UsageError, load, print_diagnostics
from pfc.cli.output import hex_witness, print_json, why, write_witnesses


def _bound(value: str) -> int:
    try:
        n = int(value, 0)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a number: {value!r}") from exc
    if not 14 <= n <= 65535:
        raise argparse.ArgumentTypeError("the frame length bound must be 14 to 65535")
    return n


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="text (default) or one JSON object")
    p.add_argument("-w", "--write", metavar="PCAP",
                   help="write the witness frames to this pcap")
    p.add_argument("--max-len", type=_bound, default=None, metavar="N",
                   help="frame length bound in bytes (default 1518)")


def _loaded(path: str):
    """The compiled file (a rule list or a whole firewall), or None after its errors."""
    compiled = load(path)
    if not compiled.ok:
        print_diagnostics(compiled.diagnostics, compiled.sources)
        return None
    return compiled


@contextlib.contextmanager
def status_line(label: str):
    """A ``progress(text)`` that keeps one line on a terminal's standard error up to
    date (``pfc diff: 3 regions found, looking for more (41 s)``) and clears it at
    the end; None when standard error is not a terminal (logs stay clean)."""
    if not sys.stderr.isatty():
        yield None
        return
    start = time.monotonic()

    def progress(text: str) -> None:
        print(f"\r\033[K{label}: {text} ({time.monotonic() - start:.0f} s)", end="",
              file=sys.stderr, flush=True)
    try:
        yield progress
    finally:
        print("\r\033[K", end="", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------- diff

def _diff_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("old", metavar="OLD", help="the policy before (.pf)")
    p.add_argument("new", metavar="NEW", help="the policy after (.pf)")
    _common(p)
    p.add_argument("--limit", type=int, default=8, metavar="N",
                   help="report at most N regions (default 8)")


def _side_json(s) -> dict:
    return {"verdict": s.verdict, "rule": s.rule, "line": s.line, "text": s.text,
            "counted": list(s.counted)}


def _diff(args: argparse.Namespace) -> int:
    from pfc.prove.diff import DEFAULT_BOUND, diff

    if args.limit < 1:
        raise UsageError("--limit must be at least 1")
    old, new = _loaded(args.old), _loaded(args.new)
    if old is None or new is None:
        return 2
    if old.ruleset is not None or new.ruleset is not None:
        if old.ruleset is None or new.ruleset is None:
            raise UsageError("pfc diff compares a whole firewall with a whole firewall "
                             f"(`{args.old if old.ruleset is None else args.new}` is one "
                             "rule list: write it in a hook block)")
        from pfc.cli.firewall import prove as fw
        with status_line("pfc diff") as progress:
            return fw.diff(args, old.ruleset, new.ruleset, args.max_len or DEFAULT_BOUND,
                           progress)
    old, new = old.require(), new.require()
    try:
        with status_line("pfc diff") as progress:
            result = diff(old, new, bound=args.max_len or DEFAULT_BOUND, limit=args.limit,
                          progress=progress)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    write_witnesses(args.write, [r.witness for r in result.regions])
    if args.format == "json":
        print_json({
            "same": result.same, "complete": result.complete, "max_len": result.bound,
            "sets": [c.to_json() for c in result.sets],
            "regions": [{"where": r.where, "change": r.change, "old": _side_json(r.old),
                         "new": _side_json(r.new), "witness": r.witness.hex()}
                        for r in result.regions]})
    else:
        _print_diff(args, result)
    return 0 if result.same else 1


def _print_diff(args: argparse.Namespace, result) -> None:
    scope = f"every frame up to {result.bound} bytes"
    if result.same:
        print(f"same meaning: {args.old} and {args.new} give every verdict, counter "
              f"and rewrite alike ({scope})")
        return
    more = "" if result.complete else " (the first ones; there are more)"
    n = len(result.regions)
    print(f"{args.old} → {args.new}: {n} region{'s' * (n != 1)} of frames change{more}:")
    if result.sets:
        print("  lists: " + "; ".join(c.text() for c in result.sets))
    for r in result.regions:
        print(f"  {r.line()}")
        print(f"      old: {why(r.old)}; new: {why(r.new)}")
        print(f"      witness: {hex_witness(r.witness)}")
    if args.write:
        print(f"wrote {n} witness frame{'s' * (n != 1)} to {args.write}", file=sys.stderr)


def _watched(command, args: argparse.Namespace) -> int:
    """``command(args)`` where no Ctrl-C is lost (:func:`pfc.prove.worker.sigint_watched`)."""
    from pfc.prove.worker import sigint_watched

    with sigint_watched():
        return command(args)


DIFF = Command("diff", "the frames whose verdict, counters or rewrite change between policies",
               "Compare two policies on every frame up to a length bound (a solver, not\n"
               "samples) and print the regions of frames they treat differently, as\n"
               "match words, each with one witness frame. Reordering disjoint rules,\n"
               "splitting a prefix or adding a redundant rule report `same meaning`.\n"
               "Two whole firewalls are compared hook by hook; what a hook reads besides\n"
               "the frame (interface names, marks, ct state, rates) is an input, and\n"
               "NAT's effect on later packets is not compared (each hook says so).\n"
               "Exit 0: same meaning; 1: differences; 2: errors.",
               _diff_args, lambda args: _watched(_diff, args))


# --------------------------------------------------------------------------- prove

def _prove_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="+", metavar="FILE", help="policy files (.pf)")
    p.add_argument("--targets", default="all", metavar="LIST",
                   help="comma-separated targets, TARGET:HOOK for another hook (e.g. "
                        "nft:input), or `all` (default: every target that can express "
                        "the policy)")
    p.add_argument("--target", metavar="T", help="with --artifact: the artifact's target")
    p.add_argument("--hook", metavar="H", help="with --artifact: the artifact's hook")
    p.add_argument("--artifact", metavar="PATH",
                   help="prove this file (e.g. hand-edited) instead of pfc's own output")
    p.add_argument("--no-run", action="store_true",
                   help="do not run the artifact on a witness to confirm it")
    p.add_argument("--timeout", type=float, metavar="S",
                   help="give up a proof whose solver has not answered S seconds after "
                        "the proof began (an error, exit 2; default: no limit). Large "
                        "classifier policies on xdp can take many minutes (docs/prove.md)")
    _common(p)



def _specs(args: argparse.Namespace) -> tuple[list[str], bool]:
    from pfc import backends
    from pfc.prove.run import MODELLED
    known = [t for t in backends.registry() if t != "ir"]
    if args.artifact:
        if not args.target or args.target not in MODELLED:
            raise UsageError("--artifact needs --target T with T one of "
                             + ", ".join(MODELLED))
        if len(args.files) != 1:
            raise UsageError("--artifact proves one artifact against one policy file")
        return [f"{args.target}:{args.hook}" if args.hook else args.target], True
    if args.target or args.hook:
        raise UsageError("--target and --hook go with --artifact; use --targets otherwise")
    if args.targets == "all":
        return known, False
    chosen = [t.strip() for t in args.targets.split(",") if t.strip()]
    for t in chosen:
        if t.split(":")[0] not in known:
            raise UsageError(f"unknown target `{t}`; known targets: {', '.join(known)}")
    return chosen, True


def _prove(args: argparse.Namespace) -> int:
    from pfc.prove.diff import DEFAULT_BOUND

    specs, explicit = _specs(args)
    if args.timeout is not None and not args.timeout > 0:
        raise UsageError(f"--timeout {args.timeout:g}: give a number of seconds above 0")
    files, code = [], 0
    for path in args.files:
        compiled = load(path)
        if not compiled.ok:
            print_diagnostics(compiled.diagnostics, compiled.sources)
            files.append({"file": path, "proved": False, "reason": "does not compile",
                          "targets": []})
            code = 2
            continue
        entry = _prove_one(args, path, compiled, specs, explicit,
                           args.max_len or DEFAULT_BOUND)
        files.append(entry)
        code = max(code, _file_code(entry))
    write_witnesses(args.write, [bytes.fromhex(t["wire"]) for f in files for t in f["targets"]
                        if t.get("wire")])
    if args.format == "json":
        print_json({"ok": code == 0, "files": files})
    return code


def _prove_one(args: argparse.Namespace, path: str, compiled, specs: list[str],
               explicit: bool, bound: int) -> dict:
    """Prove one file, each target's line printed (and flushed: a pipe or a CI log
    shows it) as soon as it is known; the file's JSON entry."""
    from pfc.prove.run import prove_file, slow_redirects, stateful

    text = args.format != "json"
    if compiled.ruleset is not None:
        from pfc.cli.firewall import prove as fw
        try:
            return fw.prove(args, path, compiled.ruleset, specs, explicit, bound)
        except ValueError as exc:
            raise UsageError(str(exc)) from exc
    why = stateful(compiled)
    if why is not None:
        if text:
            print(f"{path}: not proved: {why}", flush=True)
        return {"file": path, "proved": False, "reason": why, "targets": []}
    notes = slow_redirects(compiled.require())
    for note in notes if text else ():
        print(f"{path}: note: {note}", flush=True)
    targets = []
    try:
        for r in prove_file(compiled, specs, explicit=explicit, artifact=args.artifact,
                            bound=bound, confirm=not args.no_run, timeout=args.timeout):
            targets.append(r.to_json())
            if text:
                print(f"{path}: {r.line()}", flush=True)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    proved = any(t["status"] == "proved" for t in targets)
    reason = None if proved else "no target could express it" if all(
        t["status"] in ("not-expressible", "not-modelled") for t in targets) else None
    if reason and text:
        print(f"{path}: not proved: {reason} (--targets T:HOOK chooses a hook)", flush=True)
    return {"file": path, "proved": proved, "reason": reason, "notes": notes,
            "targets": targets}


def _file_code(entry: dict) -> int:
    """2 an error, 1 a difference or nothing proved, else 0."""
    statuses = {t["status"] for t in entry["targets"]}
    if "error" in statuses:
        return 2
    if statuses - {"proved", "not-expressible", "not-modelled"} or not entry["proved"]:
        return 1
    return 0


PROVE = Command("prove", "prove a compiled artifact equal to its policy, for every frame",
                "Compile the policy for each target (or take the artifact given with\n"
                "--target T --artifact PATH) and prove, with a solver over every frame up\n"
                "to the length bound that the target's hook sees, that the artifact's\n"
                "verdicts, rewritten bytes and counters are the policy's. Classic BPF and\n"
                "eBPF are executed symbolically from their instructions (eBPF from the ELF\n"
                "object and its maps file), nft from what the kernel holds after a load\n"
                "into a throw-away namespace, iptables from the restore file. On a\n"
                "difference: a witness frame, run through the artifact in the kernel to\n"
                "confirm it. A whole firewall is proved hook by hook (nft, iptables);\n"
                "each hook's `covers:` lines say what is an input and what is not\n"
                "proved (NAT on later packets). Exit 0: proved; 1: a difference; 2: errors.",
                _prove_args, lambda args: _watched(_prove, args))
