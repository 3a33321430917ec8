"""``pfc run`` (the reference interpreter over a pcap) and ``pfc frames`` (test frames).

``-`` is standard input for ``run``'s policy or capture (not both) and standard output
for ``frames -o``.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter

from pfc import api
from pfc.cli.common import Command, UsageError, load, print_diagnostics, read_capture_arg
from pfc.cli.output import STDIO, OutputError, cell, open_output, print_json, shown
from pfc.frontend import ir
from pfc.oracle import packets
from pfc.oracle.events import describe as describe_event
from pfc.oracle.events import to_json as event_json


def _run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", help="policy file (.pf); `-`: standard input")
    p.add_argument("pcap", metavar="PCAP",
                   help="capture (pcap or pcapng: Ethernet, Linux cooked from tcpdump -i "
                        "any, or raw IP); `-`: standard input")
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="text: one line per packet, then a summary table; json: one "
                        "object (docs/json.md)")
    p.add_argument("--summary", action="store_true", help="print only the summary")
    p.add_argument("--iif", metavar="DEV",
                   help="a whole firewall (v2): the interface of its host the frames "
                        "arrive on (default: its only interface besides lo)")
    p.add_argument("--decider", metavar="SPEC",
                   help="the user-space decider of `queue` rules, as `pfc decide` takes "
                        "it (pattern:TEXT, pass, drop, module:callable); default: none "
                        "listens (queued packets fail closed, or open with `bypass`)")


def _run(args: argparse.Namespace) -> int:
    compiled = load(args.file)
    if not compiled.ok:
        print_diagnostics(compiled.diagnostics, compiled.sources)
        return 1
    if compiled.ruleset is not None:
        from pfc.cli.firewall.run import run as run_firewall

        return run_firewall(args, compiled, describe)
    if args.iif is not None:
        raise UsageError(f"--iif is for whole firewalls (hook blocks); `{shown(args.file)}` "
                         "is one rule list, judged at one hook")
    policy = compiled.require()
    decider = None
    if args.decider is not None:
        from pfc.decide.analyse import load as load_decider
        try:
            decider = load_decider(args.decider)
        except (ValueError, ImportError, AttributeError) as exc:
            raise UsageError(f"--decider: {exc}") from exc
    capture = read_capture_arg(args.pcap)
    outcomes, counters = api.run(policy, capture.frames, capture.times, capture.outgoing,
                                 decider=decider)
    texts = {r.index: compiled.rule_text(r) for r in policy.rules}
    if args.format == "json":
        print_json(_json_report(policy, capture, outcomes, counters))
        return 0
    if not args.summary:
        _print_packets(policy, capture, outcomes, texts)
    _print_summary(policy, outcomes, counters, texts)
    _print_capture_notes(capture)
    return 0


# ----------------------------------------------------------------- describing a frame

def describe(frame: bytes) -> str:
    """One frame in a few words, read by the oracle's frame reader (semantics.md
    "Reading a frame"): ``10.0.0.1:5353 → 192.168.0.79:12345 udp``; ports only when the
    transport header is readable (first fragment, a header the kernel accepts)."""
    view = packets.read_frame(frame)
    if view.l3 is None:
        return f"runt ({len(frame)} bytes)" if len(frame) < 14 else "truncated VLAN tag"
    if view.version is None:
        return f"ethertype 0x{view.ethertype:04x}" + (" (ARP)" if view.ethertype == 0x0806
                                                       else "")
    src, dst = packets.ip_field(view, "src"), packets.ip_field(view, "dst")
    if src is None or dst is None:
        return f"IPv{view.version}, header cut short"
    icmp = packets.ICMP if view.version == 4 else packets.ICMP6
    name = {packets.TCP: "tcp", packets.UDP: "udp", icmp: "icmp" if view.version == 4
            else "icmp6"}.get(view.l4proto, f"proto {view.l4proto}")
    return _flow(view, src, dst, name)


def _flow(view, src, dst, name: str) -> str:
    proto = view.l4proto
    sport = packets.transport_field(view, "sport", proto) if proto in (6, 17) else None
    dport = packets.transport_field(view, "dport", proto) if proto in (6, 17) else None
    if sport is not None and dport is not None:
        return f"{_addr(src, sport)} → {_addr(dst, dport)} {name}"
    line = f"{src} → {dst} {name}"
    icmp = packets.transport_field(view, "icmp-type", proto) if name.startswith("icmp") \
        else None
    if icmp is not None:
        return f"{line} type {icmp}"
    if view.l4 is None and not name.startswith("proto"):
        return f"{line} (no transport header: a later fragment or a bad IP header)"
    return line


def _addr(address, port: int) -> str:
    return f"[{address}]:{port}" if address.version == 6 else f"{address}:{port}"


def destination(frame: bytes) -> str:
    """Where a frame goes: ``10.0.1.2:8083`` (the address alone without a port)."""
    view = packets.read_frame(frame)
    dst = packets.ip_field(view, "dst") if view.version is not None else None
    if dst is None:
        return "?"
    port = packets.transport_field(view, "dport", view.l4proto) \
        if view.l4proto in (packets.TCP, packets.UDP) else None
    return str(dst) if port is None else _addr(dst, port)


# ------------------------------------------------------------------------------- text

def _print_packets(policy, capture, outcomes, texts) -> None:
    lines = {r.index: r.line for r in policy.rules}
    redirects = {r.index for r in policy.rules if isinstance(r.action, ir.Redirect)}
    for n, (frame, out) in enumerate(zip(capture.frames, outcomes, strict=True), 1):
        if out.rule is None:
            why = f"default {policy.default.value}"
        else:
            why = f"line {lines[out.rule]}: {shown(texts[out.rule])}"
        extra = f" → {destination(out.frame)}" if out.rule in redirects else ""
        extra += " (audit: would drop)" if out.audited else ""
        sent = " (outgoing)" if n - 1 in capture.outgoing else ""
        print(f"{n:>6}  {len(frame):>5}B  {out.verdict.value:<4}  {describe(frame)}{sent}"
              f"  {why}{extra}")
        for event in out.events:
            print(f"{'':>6}  log: {shown(describe_event(event))}")


def summary_table(policy, outcomes, counters, texts):
    """One row per rule and the default: the packets each decided, a `count` rule's
    counter, and with `log` rules or audited drops the log events each sent."""
    from rich.table import Table

    decided = Counter(o.rule for o in outcomes)
    sent = Counter(e.line for o in outcomes for e in o.events)  # line 0: the default
    logging = [_logs(r) for r in policy.rules]
    events = any(logging) or policy.default_audit
    table = Table(title=f"{len(outcomes)} packets")
    columns = [("line", "right"), ("rule", "left"), ("decided", "right"),
               ("counted pkts", "right"), ("counted bytes", "right")]
    for col, justify in columns + ([("events", "right")] if events else []):
        table.add_column(col, justify=justify, overflow="fold")
    for rule, logs in zip(policy.rules, logging, strict=True):
        pkts, nbytes = counters.get(rule.index, (None, None))
        row = [str(rule.line), cell(texts[rule.index]),
               "-" if not rule.terminal else str(decided[rule.index]),
               "-" if pkts is None else str(pkts), "-" if nbytes is None else str(nbytes)]
        table.add_row(*row, *([str(sent[rule.line]) if logs else "-"] if events else []))
    default = ["", f"default {policy.default.value}", str(decided[None]), "-", "-"]
    table.add_row(*default, *([str(sent[0]) if policy.default_audit else "-"]
                              if events else []))
    return table


def _logs(rule: ir.Rule) -> bool:
    """Whether the rule sends log events: a `log` rule, an audited drop."""
    return isinstance(rule.action, ir.Log) or (isinstance(rule.action, ir.Drop)
                                               and rule.action.audit)


def _print_summary(policy, outcomes, counters, texts) -> None:
    from rich.console import Console

    Console().print(summary_table(policy, outcomes, counters, texts))


def _print_capture_notes(capture) -> None:
    from pfc.oracle.pcap import linktype_name

    if capture.rebuilt:
        kinds = ", ".join(sorted(linktype_name(t) for t in capture.linktypes))
        print(f"note: the capture's link type is {kinds}: each packet was judged behind "
              "an Ethernet header pfc built (README.md, `Reading captures`)", file=sys.stderr)
    if capture.outgoing:
        print(f"note: {len(capture.outgoing)} packets were sent by the capturing host "
              "(marked outgoing); they were judged as if received (conntrack takes them "
              "as sent)", file=sys.stderr)


# ------------------------------------------------------------------------------- JSON

def _json_report(policy, capture, outcomes, counters) -> dict:
    from pfc.oracle.pcap import linktype_name

    decided = Counter(o.rule for o in outcomes)
    rules = {r.index: r for r in policy.rules}
    return {
        "linktypes": sorted(linktype_name(t) for t in capture.linktypes),
        "packets": [_packet_json(rules, n, frame, o, n - 1 in capture.outgoing)
                    for n, (frame, o) in enumerate(zip(capture.frames, outcomes,
                                                       strict=True), 1)],
        "rules": [{"index": r.index, "line": r.line, "action": r.action.name,
                   "decided": decided[r.index] if r.terminal else None,
                   "counter": list(counters[r.index]) if r.index in counters else None}
                  for r in policy.rules],
        "default": {"verdict": policy.default.value, "decided": decided[None]},
    }


def _packet_json(rules: dict[int, ir.Rule], n: int, frame: bytes, outcome,
                 outgoing: bool) -> dict:
    rule = rules.get(outcome.rule) if outcome.rule is not None else None
    redirected = rule is not None and isinstance(rule.action, ir.Redirect)
    return {"n": n, "length": len(frame), "summary": describe(frame),
            "outgoing": outgoing, "verdict": outcome.verdict.value, "rule": outcome.rule,
            "line": rule.line if rule else None, "counted": list(outcome.counted),
            "rewritten": outcome.frame.hex() if redirected else None,
            "audited": outcome.audited, "events": [event_json(e) for e in outcome.events]}


RUN = Command("run", "run the reference interpreter over a pcap",
              "Judge every packet of a capture with the reference interpreter (the oracle\n"
              "all targets are checked against): per packet (numbered from 1) its\n"
              "addresses, protocol and ports, the verdict, the rule that decided it (with\n"
              "its line; a redirect: `→ ADDR:PORT`, where it sends the packet) and its log\n"
              "events, then a summary per rule: packets decided, counters, events sent.\n"
              "Reads pcap and pcapng of Ethernet, Linux cooked (`tcpdump -i any`) and raw\n"
              "IP captures; a cooked or raw IP packet is judged behind an Ethernet header\n"
              "pfc builds (README.md, `Reading captures`).\n"
              "A whole firewall (v2): each frame through the path of a packet as received\n"
              "on --iif (outgoing ones as sent by the host): its fate, every block it went\n"
              "through with its verdict and deciding line, the replies reject sent.",
              _run_args, _run)


# ----------------------------------------------------------------------------- frames

def _frames_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", help="policy file (.pf) whose constants to use")
    p.add_argument("-n", type=int, default=1000, help="number of frames (default 1000)")
    p.add_argument("-o", "--output", required=True, metavar="PCAP",
                   help="pcap to write (the directory must exist); `-`: standard output")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--well-formed", action="store_true",
                   help="only well-formed frames (no truncation, bad headers, tags)")


def _frames(args: argparse.Namespace) -> int:
    from pfc.oracle.pcap import PcapError, write_pcap

    if args.n < 1:
        raise UsageError("-n must be at least 1")
    compiled = load(args.file)
    if not compiled.ok:
        print_diagnostics(compiled.diagnostics, compiled.sources)
        return 1
    frames = api.frames(compiled, args.n, seed=args.seed, malformed=not args.well_formed)
    with open_output(args.output) as stream:
        try:
            write_pcap(stream, frames)
        except PcapError as exc:
            if isinstance(exc.__cause__, OSError):
                raise OutputError(f"`{shown(args.output)}`", exc.__cause__) from exc
            raise UsageError(str(exc)) from exc
    where = "standard output" if args.output == STDIO else shown(args.output)
    print(f"wrote {len(frames)} frames to {where}", file=sys.stderr)
    return 0


FRAMES = Command("frames", "write a pcap of test frames built from a policy's constants",
                 "Generate frames biased to the policy's own addresses, prefix edges, ports,\n"
                 "flags and payload bytes, plus malformed ones (fragments, options, bad\n"
                 "lengths, truncation, VLAN tags, runts), and write them to a pcap.",
                 _frames_args, _frames)
