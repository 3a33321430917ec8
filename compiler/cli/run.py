"""``pfc run`` (the reference interpreter over a pcap) and ``pfc frames`` (test frames)."""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter

from pfc import api
from pfc.cli.common import Command, UsageError, load, print_diagnostics
from pfc.frontend import ir


def _run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", help="policy file (.pf)")
    p.add_argument("pcap", metavar="PCAP", help="Ethernet pcap file (e.g. from tcpdump -w)")
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="text: one line per packet, then a summary table; json: one object")
    p.add_argument("--summary", action="store_true", help="print only the summary")


def _run(args: argparse.Namespace) -> int:
    from pfc.oracle.pcap import PcapError, read_pcap

    compiled = load(args.file)
    if not compiled.ok:
        print_diagnostics(compiled.diagnostics, compiled.sources)
        return 1
    policy = compiled.policy
    try:
        frames = read_pcap(args.pcap)
    except (OSError, PcapError) as exc:
        raise UsageError(str(exc)) from exc
    outcomes, counters = api.run(policy, frames)
    texts = {r.index: compiled.rule_text(r) for r in policy.rules}
    if args.format == "json":
        print(json.dumps(_json_report(policy, outcomes, counters), indent=2))
    else:
        if not args.summary:
            _print_packets(policy, frames, outcomes, texts)
        _print_summary(policy, outcomes, counters, texts)
    return 0


def _print_packets(policy, frames, outcomes, texts) -> None:
    lines = {r.index: r.line for r in policy.rules}
    for n, (frame, out) in enumerate(zip(frames, outcomes, strict=True), 1):
        if out.rule is None:
            why = f"default {policy.default.value}"
        else:
            why = f"line {lines[out.rule]}: {texts[out.rule]}"
        extra = " (rewritten)" if out.frame != frame else ""
        print(f"{n:>6}  {len(frame):>5}B  {out.verdict.value:<4}  {why}{extra}")


def _print_summary(policy, outcomes, counters, texts) -> None:
    from rich.console import Console
    from rich.table import Table

    decided = Counter(o.rule for o in outcomes)
    table = Table(title=f"{len(outcomes)} packets")
    for col, justify in (("line", "right"), ("rule", "left"), ("decided", "right"),
                         ("counted pkts", "right"), ("counted bytes", "right")):
        table.add_column(col, justify=justify)
    for rule in policy.rules:
        pkts, nbytes = counters.get(rule.index, (None, None))
        table.add_row(str(rule.line), texts[rule.index],
                      "-" if not rule.terminal else str(decided[rule.index]),
                      "-" if pkts is None else str(pkts), "-" if nbytes is None else str(nbytes))
    table.add_row("", f"default {policy.default.value}", str(decided[None]), "-", "-")
    Console(width=max(100, Console().width)).print(table)


def _json_report(policy, outcomes, counters) -> dict:
    decided = Counter(o.rule for o in outcomes)
    rules = {r.index: r for r in policy.rules}
    return {
        "packets": [_packet_json(rules, n, o) for n, o in enumerate(outcomes, 1)],
        "rules": [{"index": r.index, "line": r.line, "action": r.action.name,
                   "decided": decided[r.index] if r.terminal else None,
                   "counter": list(counters[r.index]) if r.index in counters else None}
                  for r in policy.rules],
        "default": {"verdict": policy.default.value, "decided": decided[None]},
    }


def _packet_json(rules: dict[int, ir.Rule], n: int, outcome) -> dict:
    rule = rules.get(outcome.rule) if outcome.rule is not None else None
    redirected = rule is not None and isinstance(rule.action, ir.Redirect)
    return {"n": n, "verdict": outcome.verdict.value, "rule": outcome.rule,
            "line": rule.line if rule else None, "counted": list(outcome.counted),
            "rewritten": outcome.frame.hex() if redirected else None}


RUN = Command("run", "run the reference interpreter over a pcap",
              "Judge every packet of a pcap with the reference interpreter (the oracle all\n"
              "targets are checked against): per packet the verdict and the rule that\n"
              "decided it (with its line), then a summary per rule with counters.",
              _run_args, _run)


# ----------------------------------------------------------------------------- frames

def _frames_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", help="policy file (.pf) whose constants to use")
    p.add_argument("-n", type=int, default=1000, help="number of frames (default 1000)")
    p.add_argument("-o", "--output", required=True, metavar="PCAP", help="pcap to write")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--well-formed", action="store_true",
                   help="only well-formed frames (no truncation, bad headers, tags)")


def _frames(args: argparse.Namespace) -> int:
    from pfc.oracle.pcap import write_pcap

    compiled = load(args.file)
    if not compiled.ok:
        print_diagnostics(compiled.diagnostics, compiled.sources)
        return 1
    if args.n < 1:
        raise UsageError("-n must be at least 1")
    frames = api.frames(compiled, args.n, seed=args.seed, malformed=not args.well_formed)
    write_pcap(args.output, frames)
    print(f"wrote {len(frames)} frames to {args.output}", file=sys.stderr)
    return 0


FRAMES = Command("frames", "write a pcap of test frames built from a policy's constants",
                 "Generate frames biased to the policy's own addresses, prefix edges, ports,\n"
                 "flags and payload bytes, plus malformed ones (fragments, options, bad\n"
                 "lengths, truncation, VLAN tags, runts), and write them to a pcap.",
                 _frames_args, _frames)
