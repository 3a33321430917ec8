"""``pfc log``: the log events of pfc's rules as they happen, one line each:
``line 7 drop udp 10.0.0.1:5353 → 192.168.0.79:12345 [web]``, or JSON lines
(``--format json``, docs/json.md). Every hook at once: the XDP and tc programs' ring
buffers and NFLOG group 20 (nft, iptables), see :mod:`pfc.deploy.events.stream`.
Stops after ``--count`` events, ``--timeout`` seconds or at Ctrl-C (exit 0)."""

from __future__ import annotations

import argparse
import json
import sys

from pfc import api
from pfc.cli.common import Command, UsageError
from pfc.cli.load import _dev, _fail, _where_args
from pfc.cli.output import shown
from pfc.deploy.base import LoadError
from pfc.oracle.events import describe, to_json

TARGETS = ("xdp", "tc", "nft", "iptables")


def _args(p: argparse.ArgumentParser) -> None:
    _where_args(p)
    p.add_argument("--target", choices=TARGETS, action="append",
                   help="this target's events only (repeatable; default: every target)")
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="text: one line per event; json: one JSON object per line")
    p.add_argument("--count", type=int, metavar="N",
                   help="stop after N events (default: until interrupted)")
    p.add_argument("--timeout", type=float, metavar="S", help="stop after S seconds")


def _line(event, form: str) -> str:
    if form == "json":
        return json.dumps({"version": 1, **to_json(event)})
    return shown(f"{describe(event)} (ifindex {event.ifindex})")


def _log(args: argparse.Namespace) -> int:
    if args.count is not None and args.count < 1:
        raise UsageError("--count must be at least 1")
    targets = tuple(args.target or TARGETS)

    def ready() -> None:
        print(f"pfc log: listening for events of {args.dev} ({', '.join(targets)})",
              file=sys.stderr, flush=True)

    try:
        events = api.log_events(_dev(args.dev), netns=args.netns, targets=targets,
                                timeout=args.timeout, ready=ready)
        for n, event in enumerate(events, 1):
            print(_line(event, args.format), flush=True)
            if args.count is not None and n >= args.count:
                break
    except LoadError as exc:
        return _fail("log", exc)
    except OSError as exc:
        raise UsageError(f"cannot listen for events: {exc.strerror or exc} (root is needed; "
                         "one NFLOG listener per namespace: --target xdp/tc reads only the "
                         "ring buffers)") from exc
    except KeyboardInterrupt:
        return 0
    return 0


LOG = Command("log", "show the log events of pfc's rules as they happen",
              "Print one line per log event of the policies loaded for DEV: `log` rules\n"
              "and audited drops (`drop ... audit`, `pfc load --audit`), from the XDP and\n"
              "tc programs' ring buffers and NFLOG group 20 (nft, iptables), e.g.\n"
              "`line 7 drop udp 10.0.0.1:5353 → 192.168.0.79:12345 [web] (ifindex 3)`.\n"
              "--format json prints one JSON object per line (docs/json.md). --count N\n"
              "and --timeout S end the stream; Ctrl-C too. Exit codes: 0; 2 no such\n"
              "device, or --target xdp/tc and no program with events there.", _args, _log)
