"""``pfc log --dev DEV``: stream the log events of what pfc attached to a device.

eBPF hooks (XDP, tc): the programs' ring buffers, found from the kernel
(:mod:`pfc.deploy.events.bpf`). Each event is one line, decoded by
``pfc.oracle.events``: ``line 7 drop udp 10.0.0.1:5353 → 192.168.0.79:12345 [web]``,
or a JSON object per line (``--format json``). Exit codes: 0 (the stream ended:
``--count``, ``--timeout``, Ctrl-C), 2 no device or no program with events there.
"""

from __future__ import annotations

import argparse
import json
import sys

from pfc.cli.common import Command
from pfc.cli.load import _dev, _fail, _where_args
from pfc.cli.output import shown
from pfc.deploy.base import LoadError
from pfc.oracle.events import describe, to_json


def _log_args(p: argparse.ArgumentParser) -> None:
    _where_args(p)
    p.add_argument("--target", choices=("xdp", "tc"), action="append",
                   help="read this hook's program only (repeatable; default: xdp and tc)")
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="text: one line per event; json: one JSON object per line")
    p.add_argument("--count", type=int, metavar="N", help="stop after N events")
    p.add_argument("--timeout", type=float, metavar="S", help="stop after S seconds")


def _log(args: argparse.Namespace) -> int:
    from pfc.deploy.events import bpf as bpf_events

    dev = _dev(args.dev)
    try:
        found = bpf_events.sources(dev, tuple(args.target or bpf_events.HOOKS), args.netns)
    except LoadError as exc:
        return _fail("log", exc)
    for event in bpf_events.stream(found, args.timeout, args.count):
        if args.format == "json":
            print(json.dumps(to_json(event)), flush=True)
        else:
            print(shown(f"{describe(event)} (ifindex {event.ifindex})"), flush=True)
    sys.stdout.flush()
    return 0


LOG = Command("log", "stream the log events of the programs pfc attached to a device",
              "Print the events of `log` rules and audited drops (`drop ... audit`,\n"
              "`pfc load --audit`) from the XDP and tc programs on --dev, as they come:\n"
              "one line each (`line 7 drop udp 10.0.0.1:5353 → 192.168.0.79:53 [web]`)\n"
              "or a JSON object per line (--format json). --count N / --timeout S end\n"
              "the stream; Ctrl-C too. Exit codes: 0; 2 no device or no program with\n"
              "events on it.", _log_args, _log)
