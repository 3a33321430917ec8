"""``pfc status``: what pfc loaded where, as the kernel holds it, with per-rule counters;
``--watch`` refreshes until Ctrl-C (exit 0: the normal end of a command that runs until
stopped, as ``pfc log``)."""

from __future__ import annotations

import argparse
import json
import time

from pfc.cli.common import Command, UsageError
from pfc.cli.load import _dev, _fail, _where_args
from pfc.cli.output import shown, versioned
from pfc.deploy import load as loading

EXIT_VANISHED, EXIT_CHANGED = 3, 4  # docs/load.md: what status's exit codes mean


def _status_args(p: argparse.ArgumentParser) -> None:
    _where_args(p)
    p.add_argument("--all", action="store_true", dest="every",
                   help="every namespace's records, not only the current one's")
    p.add_argument("--prune", action="store_true",
                   help="remove the records of namespaces that no longer exist")
    p.add_argument("--watch", action="store_true",
                   help="refresh until Ctrl-C, with packets per second per rule")
    p.add_argument("--interval", type=float, default=1.0, metavar="S",
                   help="seconds between refreshes with --watch (default 1)")
    p.add_argument("--format", choices=("text", "json"), default="text")



Rates = dict[tuple, float]  # (netns, dev, target, rule key) → packets per second


def rates(before: tuple[float, list[loading.Status]] | None, now: float,
          entries: list[loading.Status]) -> Rates:
    """Packets per second of every counter since the sample ``before`` (time, entries);
    a counter that went down (a new load) has no rate."""
    if before is None or now <= before[0]:
        return {}
    old = {_key(s, k): v for s in before[1] for k, v in (s.inspection.counters or {}).items()}
    out = {}
    for s in entries:
        for k, (packets, _) in (s.inspection.counters or {}).items():
            prev = old.get(_key(s, k))
            if prev is not None and packets >= prev[0] and \
                    s.record.loaded_at == _loaded(before[1], s):
                out[_key(s, k)] = (packets - prev[0]) / (now - before[0])
    return out


def _key(s: loading.Status, k) -> tuple:
    return (s.record.netns, s.record.dev, s.record.target, str(k))


def _loaded(entries: list[loading.Status], s: loading.Status) -> str | None:
    return next((e.record.loaded_at for e in entries if _key(e, "") == _key(s, "")), None)


def status_json(report: loading.Report, rate: Rates | None = None) -> dict:
    return versioned({"loaded": [_entry_json(s, rate) for s in report.entries],
            "warnings": report.warnings, "recovered": report.messages,
            "gone": [{"target": r.target, "dev": r.dev, "netns": r.netns,
                      "policy": r.policy} for r in report.gone],
            "pruned": report.pruned, "elsewhere": report.elsewhere,
            "exit": exit_code(report)})


def _entry_json(s: loading.Status, rate: Rates | None) -> dict:
    r, counters = s.record, s.inspection.counters

    def row(key, **fields) -> dict:
        out = fields | {"packets": _counter(counters, key, 0),
                        "bytes": _counter(counters, key, 1)}
        if rate is not None:
            out["packets_per_s"] = rate.get(_key(s, key))
        return out

    extra = {}
    if counters and "not_ready" in counters:
        extra["not_ready"] = row("not_ready")
    return {"target": r.target, "hook": r.hook, "dev": r.dev, "netns": r.netns,
            "policy": r.policy, "sha256": r.sha256, "loaded_at": r.loaded_at,
            "policy_file_changed": s.file_changed, "attach": r.attach,
            "health": s.inspection.health, "detail": s.inspection.detail,
            "default": r.default, "counters_readable": counters is not None,
            "default_counter": row("default"), **extra,
            "rules": [row(x.index, index=x.index, line=x.line, text=x.text, action=x.action,
                          counted_with=x.counted_with, block=x.block) for x in r.rules],
            **({"blocks": [row(f"default {b['block']}", **b) for b in r.attach.get("hooks",
                                                                                   [])]}
               if r.hook == "ruleset" else {})}


def _counter(counters, index, i: int) -> int | None:
    if counters is None or index not in counters:
        return None
    return counters[index][i]


def exit_code(report: loading.Report) -> int:
    """0 all in force as loaded; 3 something pfc loaded is gone (vanished); 4 the
    kernel holds something else at pfc's place, or a record is unreadable."""
    health = {s.inspection.health for s in report.entries}
    if "changed" in health or report.warnings:
        return EXIT_CHANGED
    return EXIT_VANISHED if "vanished" in health else 0


def render(report: loading.Report, rate: Rates | None = None):
    """A rich renderable: per loaded policy a header and a table of rules. Every user
    string is a Text (never markup) with control characters escaped."""
    from rich.console import Group
    from rich.text import Text

    parts = [Text(shown(m), style="yellow") for m in report.warnings + report.messages]
    if not report.entries:
        parts.append(Text("nothing loaded by pfc" + (" in this namespace" if report.gone
                                                      or report.elsewhere else "")))
        if report.elsewhere:
            parts.append(Text(shown(
                f"note: pfc loaded policies in other namespaces ({_some(report.elsewhere)})"
                ": `pfc status --all`, or --netns NS")))
    for s in report.entries:
        parts += [_header(s), _table(s, rate), Text("")]
    if report.gone:
        parts.append(Text(shown(_gone(report))))
    return Group(*parts)


SHOWN_NAMES = 3  # namespaces a note names before "and N more"


def _some(names: list[str]) -> str:
    more = len(names) - SHOWN_NAMES
    return ", ".join(names[:SHOWN_NAMES]) + (f" and {more} more" if more > 0 else "")


def _gone(report: loading.Report) -> str:
    """Records of namespaces that no longer exist: listed with ``--all``, otherwise
    counted (they are other namespaces' business: new-user finding m17)."""
    spaces = sorted({r.netns for r in report.gone})
    n = len(report.gone)
    what = f"{n} record{'s' * (n != 1)} of {len(spaces)} deleted namespace" + \
        "s" * (len(spaces) != 1)
    if report.pruned:
        return f"removed {what}: {_some(spaces) if not report.every else ', '.join(spaces)}"
    if report.every:
        held = {ns: [f"{r.target} on {r.dev}" for r in report.gone if r.netns == ns]
                for ns in spaces}
        listing = "; ".join(f"{ns} ({', '.join(what)})" for ns, what in held.items())
        return f"note: {what}: {listing}; `pfc status --prune` removes them"
    return f"note: {what} (`pfc status --all` lists them, `--prune` removes them)"


def _table(s: loading.Status, rate: Rates | None):
    from rich.table import Table

    table = Table(show_edge=False, pad_edge=False)
    columns = [("line", "right"), ("rule", "left"), ("action", "left"),
               ("packets", "right"), ("bytes", "right")]
    for col, justify in columns + ([("pkt/s", "right")] if rate is not None else []):
        table.add_column(col, justify=justify, overflow="fold")
    lines = {row.index: row.line for row in s.record.rules}
    counters = s.inspection.counters
    if s.record.hook == "ruleset":
        _firewall_rows(s, table, rate)
        return table
    for row in s.record.rules:
        p, b = _counter(counters, row.index, 0), _counter(counters, row.index, 1)
        if row.counted_with is not None and p is None:
            p = b = f"in line {lines.get(row.counted_with, '?')}"
        table.add_row(*_cells(s, row.index, [str(row.line), row.text, row.action], p, b,
                              rate))
    table.add_row(*_cells(s, "default", ["", f"default {s.record.default}", ""],
                          _counter(counters, "default", 0), _counter(counters, "default", 1),
                          rate))
    if counters and counters.get("not_ready", (0, 0))[0]:
        table.add_row(*_cells(s, "not_ready", ["", "not ready: sets not filled yet",
                                               "drop"], *counters["not_ready"], rate))
    return table


def _firewall_rows(s: loading.Status, table, rate: Rates | None) -> None:
    """A whole firewall's rules, block by block, each block ending in its default
    (a nat block has none); then the chains' rules."""
    counters = s.inspection.counters
    hooks = s.record.attach.get("hooks", [])
    groups = [h["block"] for h in hooks] + sorted(
        {r.block for r in s.record.rules if r.block and r.block.startswith("chain ")})
    for block in dict.fromkeys(groups):
        devices = next((h.get("devices") for h in hooks if h["block"] == block), None)
        title = f"{block} {' '.join(devices)}" if devices else block
        table.add_row(*_cells(s, "", ["", f"{title}:", ""], "", "", rate))
        for row in (r for r in s.record.rules if r.block == block):
            table.add_row(*_cells(s, row.index, [str(row.line), "  " + row.text, row.action],
                                  _counter(counters, row.index, 0),
                                  _counter(counters, row.index, 1), rate))
        default = next((h["default"] for h in hooks if h["block"] == block), None)
        if default:
            key = f"default {block}"
            table.add_row(*_cells(s, key, ["", f"  default {default}", ""],
                                  _counter(counters, key, 0), _counter(counters, key, 1),
                                  rate))


def _cells(s: loading.Status, key, texts: list[str], p, b, rate: Rates | None) -> list:
    from rich.text import Text

    cells = [Text(shown(t)) for t in texts]
    cells += [Text("-" if v is None else str(v)) for v in (p, b)]
    if rate is not None:
        r = rate.get(_key(s, key))
        cells.append(Text("-" if r is None else f"{r:,.1f}"))
    return cells


def _header(s: loading.Status):
    from rich.text import Text

    r, insp = s.record, s.inspection
    style = {"ok": "green", "vanished": "red", "changed": "red"}.get(insp.health, "red")
    where = f"firewall ({', '.join(r.attach.get('targets', []))})" if r.hook == \
        "ruleset" else f"{r.target} on {r.dev}"
    text = Text(shown(f"{where} (namespace {r.netns}): "))
    text.append(insp.health.upper() if insp.health != "ok" else "ok", style=style)
    text.append("\n" + shown(f"  {insp.detail}"))  # a line each: 80 columns (m17)
    text.append("\n" + shown(f"  policy {r.policy}"))
    text.append("\n" + shown(f"  loaded {r.loaded_at}, sha256 {r.sha256[:16]}…"))
    if s.file_changed:
        text.append(" (the file has changed since)", style="yellow")
    if insp.counters is None:
        text.append("\n  counters unreadable (the program, table or chain is gone)",
                    style="yellow")
    return text


def _report(args: argparse.Namespace) -> loading.Report:
    from pfc.deploy.sets import drifted

    report = loading.report(args.dev, args.netns, every=args.every, prune=args.prune)
    drifted(report.entries)  # nft sets and ipsets changed outside pfc
    return report


def _console():
    from rich.console import Console

    console = Console()
    return console if console.is_terminal else Console(width=1000)


def _status(args: argparse.Namespace) -> int:
    if args.dev:
        _dev(args.dev)
    if args.interval <= 0:
        raise UsageError("--interval must be positive")
    if args.every and args.netns:
        raise UsageError("--all and --netns exclude each other")
    try:
        if args.watch:
            return _watch(args)
        report = _report(args)
    except loading.LoadError as exc:
        return _fail("status", exc)
    if args.format == "json":
        print(json.dumps(status_json(report), indent=2))
    else:
        _console().print(render(report), soft_wrap=False)
    return exit_code(report)


def _watch(args: argparse.Namespace) -> int:
    """Refresh until Ctrl-C (exit 0): a rich Live table, or one JSON object per line,
    each with packets per second since the previous refresh."""
    before = None
    try:
        if args.format == "json":
            while True:
                report, now = _report(args), time.monotonic()
                print(json.dumps(status_json(report, rates(before, now, report.entries))),
                      flush=True)
                before = (now, report.entries)
                time.sleep(args.interval)
        from rich.live import Live

        report = _report(args)
        before = (time.monotonic(), report.entries)
        with Live(render(report, {}), console=_console(), auto_refresh=False) as live:
            while True:
                time.sleep(args.interval)
                report, now = _report(args), time.monotonic()
                live.update(render(report, rates(before, now, report.entries)),
                            refresh=True)
                before = (now, report.entries)
    except KeyboardInterrupt:
        return 0


STATUS = Command("status", "what pfc loaded where, with per-rule counters",
                 "Show the policies pfc loaded in the current network namespace (--netns\n"
                 "NS: in NS; --all: everywhere; inside `ip netns exec NS`: NS), as the\n"
                 "kernel holds them: target, program id or table/chain, the policy file\n"
                 "and its sha256, the load time, the health (ok; VANISHED: pfc's program,\n"
                 "table, chain, device or namespace is gone; CHANGED: something else sits\n"
                 "at pfc's place), and packet and byte counters for every rule and the\n"
                 "default. An interrupted load is finished or rolled back first, and says\n"
                 "so. Exit codes: 0 all ok, 3 something vanished, 4 something changed\n"
                 "outside pfc or a record is unreadable, 2 bad usage or environment.\n"
                 "--watch refreshes until Ctrl-C with packets/s; --format json for scripts.",
                 _status_args, _status)
