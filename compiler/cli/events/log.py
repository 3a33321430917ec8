"""``pfc log``: the log events of pfc's rules as they happen (nft and iptables, NFLOG
group 20), one line each: ``line 7 drop udp 10.0.0.1:5353 → 192.168.0.79:12345``,
or JSON lines (``--format json``, docs/json.md). Stops after ``--count`` events or at
Ctrl-C (exit 0)."""

from __future__ import annotations

import argparse
import json
import sys

from pfc import api
from pfc.cli.common import Command, UsageError
from pfc.cli.output import shown
from pfc.oracle.events import describe, to_json


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dev", required=True, metavar="DEV",
                   help="the device whose incoming packets' events to show")
    p.add_argument("--netns", metavar="NS", help="the network namespace of DEV")
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="text: one line per event; json: one JSON object per line")
    p.add_argument("--count", type=int, metavar="N",
                   help="stop after N events (default: until interrupted)")


def _log(args: argparse.Namespace) -> int:
    if args.count is not None and args.count < 1:
        raise UsageError("--count must be at least 1")

    def ready() -> None:
        print(f"pfc log: listening for events of {args.dev} (NFLOG group 20)",
              file=sys.stderr, flush=True)

    try:
        events = api.log_events(args.dev, netns=args.netns, ready=ready)
        for n, event in enumerate(events, 1):
            text = json.dumps({"version": 1, **to_json(event)}) if args.format == "json" else \
                shown(describe(event))
            print(text, flush=True)
            if args.count is not None and n >= args.count:
                break
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    except OSError as exc:
        raise UsageError(f"cannot listen for events: {exc.strerror or exc} (root is needed; "
                         "one listener per namespace)") from exc
    except KeyboardInterrupt:
        return 0
    return 0


LOG = Command("log", "show the log events of pfc's rules as they happen (nft, iptables)",
              "Print one line per log event of the policy loaded for DEV: `log` rules and\n"
              "audited drops (`drop ... audit`, `pfc load --audit`), read from NFLOG group\n"
              "20, e.g. `line 7 drop udp 10.0.0.1:5353 → 192.168.0.79:12345 [web]`.\n"
              "--format json prints one JSON object per line (docs/json.md).",
              _args, _log)
