"""``pfc run`` of a whole firewall: each frame of a capture through the path
interpreter as received on ``--iif``: its fate, the blocks it went through (each
block's verdict and deciding line), what it left as, the replies ``reject`` sent."""

from __future__ import annotations

import argparse
from collections import Counter

from pfc import api
from pfc.cli.common import UsageError, read_capture_arg
from pfc.cli.output import cell, print_json, shown
from pfc.frontend.firewall.ruleset import LOOPBACK
from pfc.oracle.path.host import host_of


def interface(args: argparse.Namespace, ruleset) -> str:
    """``--iif``, or the host's one interface besides lo; a UsageError otherwise."""
    names = [p.name for p in host_of(ruleset).ports if p.name != LOOPBACK]
    if args.iif is not None:
        if args.iif not in names + [LOOPBACK]:
            raise UsageError(f"--iif {shown(args.iif)}: the firewall's host has no such "
                             f"interface (it has {', '.join([LOOPBACK, *names])})")
        return args.iif
    if len(names) == 1:
        return names[0]
    if not names:
        raise UsageError(f"`{shown(args.file)}` is a whole firewall whose host has no "
                         "interface besides lo: --iif lo, or describe one (`interface "
                         "eth0 address ...`)")
    raise UsageError(f"`{shown(args.file)}` is a whole firewall with interfaces "
                     f"{', '.join(names)}: --iif DEV names the one the frames arrive on")


def run(args: argparse.Namespace, compiled, describe) -> int:
    ruleset = compiled.ruleset
    iif = interface(args, ruleset)
    capture = read_capture_arg(args.pcap)
    journeys = api.walk(compiled, capture.frames, iif, capture.times, capture.outgoing)
    rules = {r.index: r for r in ruleset.rules}
    if args.format == "json":
        print_json({"firewall": True, "iif": iif, "packets": [
            _packet_json(n, f, j, rules, describe, n - 1 in capture.outgoing)
            for n, (f, j) in enumerate(zip(capture.frames, journeys, strict=True), 1)],
            "fates": dict(Counter(j.fate for j in journeys)),
            "rules": _decided(ruleset, journeys)})
        return 0
    if not args.summary:
        for n, (frame, j) in enumerate(zip(capture.frames, journeys, strict=True), 1):
            sent = " (outgoing)" if n - 1 in capture.outgoing else ""
            left = _left(frame, j, describe)
            print(f"{n:>6}  {len(frame):>5}B  {_fate(j)}  {describe(frame)}{sent}{left}")
            print(f"{'':>6}  {shown(_path(j, rules))}")
            for reply in j.replies:
                print(f"{'':>6}  reply: {_fate(reply)}  {describe(reply.frame)}")
    _summary(ruleset, journeys, compiled)
    return 0


def _left(frame: bytes, j, describe) -> str:
    """``  as ADDR:PORT → ADDR:PORT`` when NAT changed what the packet says."""
    if j.frame is None or j.fate not in ("delivered", "forwarded", "sent"):
        return ""
    after = describe(j.frame)
    return f"  as {after}" if after != describe(frame) else ""


def _fate(j) -> str:
    where = f" at {j.where}" if j.where else ""
    out = f" out of {j.oif}" if j.oif and j.fate in ("forwarded", "sent") else ""
    return f"{j.fate}{where}{out}"


def _step(step, rules) -> str:
    o = step.outcome
    block = step.block + (f" {step.device}" if step.device else "")
    verdict = "reject" if o.reject else (o.nat.kind if o.nat else o.verdict.value)
    how = f"line {rules[o.rule].line}" if o.rule is not None and o.rule in rules \
        else "default"
    return f"{block}: {verdict} ({how})"


def _path(j, rules) -> str:
    return " → ".join(_step(s, rules) for s in j.steps) or "no block judged it"


def _step_json(step, rules) -> dict:
    o = step.outcome
    rule = rules.get(o.rule) if o.rule is not None else None
    return {"block": step.block, "device": step.device, "verdict": o.verdict.value,
            "reject": o.reject, "nat": o.nat.kind if o.nat else None,
            "rule": o.rule, "line": rule.line if rule else None}


def _packet_json(n: int, frame: bytes, j, rules, describe, outgoing: bool) -> dict:
    return {"n": n, "length": len(frame), "summary": describe(frame), "outgoing": outgoing,
            **_journey_json(j, rules, describe)}


def _journey_json(j, rules, describe) -> dict:
    return {"fate": j.fate, "where": j.where, "oif": j.oif,
            "frame": j.frame.hex() if j.frame else None,
            "steps": [_step_json(s, rules) for s in j.steps],
            "replies": [{"summary": describe(r.frame) if r.frame else None,
                         **_journey_json(r, rules, describe)} for r in j.replies]}


def _decided(ruleset, journeys) -> list[dict]:
    """Per block and rule, the packets it decided (replies' blocks included)."""
    seen: Counter = Counter()
    for j in journeys:
        for part in [j, *j.replies]:
            for s in part.steps:
                seen[(id(ruleset.block(s.block, s.device)), s.outcome.rule)] += 1
    out = []
    for p in ruleset.lists:
        name = " ".join([p.hook.name, *p.hook.devices])
        out += [{"block": name, "index": r.index, "line": r.line, "action": r.action.name,
                 "decided": seen[(id(p), r.index)]} for r in p.rules]
        out.append({"block": name, "index": None, "line": None,
                    "action": f"default {p.default.value}", "decided": seen[(id(p), None)]})
    return out


def _summary(ruleset, journeys, compiled) -> None:
    from rich.console import Console
    from rich.table import Table

    fates = Counter(j.fate for j in journeys)
    table = Table(title=f"{len(journeys)} packets: " + ", ".join(
        f"{n} {fate}" for fate, n in fates.most_common()))
    for col, justify in (("block", "left"), ("line", "right"), ("rule", "left"),
                         ("decided", "right")):
        table.add_column(col, justify=justify, overflow="fold")
    texts = {r.index: compiled.rule_text(r) for r in ruleset.rules}
    for row in _decided(ruleset, journeys):
        text = texts.get(row["index"], row["action"]) if row["index"] is not None \
            else row["action"]
        table.add_row(cell(row["block"]), str(row["line"] or ""), cell(text),
                      str(row["decided"]))
    Console().print(table)
