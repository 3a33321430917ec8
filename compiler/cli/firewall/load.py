"""``pfc load`` of a whole firewall: every block to the first target of ``--target
LIST`` that carries it, every part loaded in the namespace or none
(:mod:`pfc.deploy.firewall`); the devices are the file's, so no ``--dev``."""

from __future__ import annotations

import argparse
import sys

from pfc import api
from pfc.cli.common import UsageError, print_diagnostics
from pfc.cli.output import shown
from pfc.deploy import load as loading
from pfc.deploy.firewall.commit import LOADABLE
from pfc.frontend.diagnostics import CompileError


def targets(value: str) -> list[str]:
    chosen = [t.strip() for t in value.split(",") if t.strip()]
    bad = [t for t in chosen if t not in LOADABLE]
    if bad or not chosen:
        raise UsageError(f"`pfc load` of a whole firewall attaches targets "
                         f"{', '.join(LOADABLE)}; not `{shown(bad[0] if bad else value)}`")
    return chosen


def load(args: argparse.Namespace, compiled, fail) -> int:
    """Exit 0 loaded, 1 the firewall does not compile for the list, 2 the host
    refused (``fail`` prints the cause and hint)."""
    for option, given in (("--dev", args.dev), ("--hook", args.hook)):
        if given is not None:
            raise UsageError(f"`{shown(args.file)}` is a whole firewall: each block names "
                             f"its hook and devices; {option} is for one rule list")
    chosen = targets(args.target)
    if args.mode and "xdp" not in chosen:
        raise UsageError("--mode applies to --target xdp only")
    if args.dry_run:
        return _dry_run(args, compiled, chosen, fail)
    try:
        result = api.load_firewall(compiled, chosen, netns=args.netns, force=args.force,
                                   mode=args.mode, table=args.table, audit=args.audit)
    except CompileError as exc:
        print_diagnostics(exc.diagnostics, compiled.sources)
        return 1
    except loading.LoadError as exc:
        return fail("load", exc)
    for message in result.messages:
        print(shown(message), file=sys.stderr)
    parts = ", ".join(result.record.attach.get("parts", {}))
    print(shown(f"loaded {args.file} as the firewall of namespace {result.record.netns} "
                f"({parts})"))
    return 0


def _dry_run(args: argparse.Namespace, compiled, chosen: list[str], fail) -> int:
    import json

    from pfc.cli.apply import dry_run_json, show_dry_run

    try:
        result = api.dry_run_firewall(compiled, chosen, netns=args.netns, force=args.force,
                                      mode=args.mode, table=args.table)
    except CompileError as exc:
        print_diagnostics(exc.diagnostics, compiled.sources)
        return 1
    except loading.LoadError as exc:
        return fail("load --dry-run", exc)
    if args.format == "json":
        print(json.dumps(dry_run_json(result), indent=2))
    else:
        show_dry_run(result)
    return 0
