"""``pfc load``, ``pfc unload``, ``pfc status``: deploy a policy to a device and watch it.

Exit codes: 0 done (an unload with nothing loaded too); 1 the policy has errors (the
compiler's diagnostics); 2 the environment refused (missing device, privileges,
another program in the way, a driver without native XDP ...): one line with the cause,
one with a hint.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from pfc import api
from pfc.backends.base import check_dev
from pfc.cli.common import Command, UsageError, load, print_diagnostics
from pfc.cli.output import shown, versioned
from pfc.deploy import load as loading
from pfc.frontend.diagnostics import CompileError

SOCKET_HINT = ("socket filters (socket, cbpf) are attached by the application: "
               "pfc.attach_socket(sock, artifact), see docs/load.md")


def _fail(command: str, exc: loading.LoadError) -> int:
    print(shown(f"pfc {command}: error: {exc.cause}"), file=sys.stderr)
    if exc.hint:
        print(shown(f"hint: {exc.hint}"), file=sys.stderr)
    return 2


def _target(value: str) -> str:
    if value in ("socket", "cbpf"):
        raise UsageError(f"target `{value}` is not loaded onto a device; {SOCKET_HINT}")
    if value not in loading.TARGETS:
        raise UsageError(f"`pfc load` attaches targets {', '.join(loading.TARGETS)}; "
                         f"not `{value}`")
    return value


def _dev(value: str) -> str:
    """A device name: the backends' allow-list, and never a path component (``.``,
    ``..``) — the name also names pfc's state directory."""
    try:
        check_dev(value)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if value in (".", "..") or "/" in value:
        raise UsageError(f"invalid device name `{value}`: not a Linux interface name")
    return value


def _where_args(p: argparse.ArgumentParser, dev_required: bool = True) -> None:
    p.add_argument("--dev", required=dev_required, metavar="DEV", help="network device")
    p.add_argument("--netns", metavar="NS",
                   help="network namespace (a name from `ip netns list`; default: the "
                        "current one)")


# ------------------------------------------------------------------------------ load

def _load_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", help="policy file (.pf)")
    p.add_argument("--target", "-t", required=True, metavar="T",
                   help="xdp, tc, nft or iptables")
    _where_args(p)
    p.add_argument("--mode", choices=("native", "generic"),
                   help="xdp: driver (native) or generic XDP; default: native when the "
                        "driver supports it, and on a replace the mode already in use")
    p.add_argument("--hook", metavar="H", help="nft/iptables hook (see `pfc targets`)")
    p.add_argument("--audit", action="store_true", help="audit mode: drop nothing; count "
                   "and log every would-be drop (`pfc log` shows them)")
    p.add_argument("--table", default="pfc", metavar="NAME",
                   help="nft table / iptables chain prefix owned by pfc (default pfc)")
    p.add_argument("--force", action="store_true",
                   help="replace a program, filter, table or chain pfc did not load")
    p.add_argument("--dry-run", "-n", action="store_true",
                   help="check with the kernel (verifier, nft -c, iptables-restore "
                        "--test) and print what would change; change nothing")
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="--dry-run's report: text (default) or one JSON object")


def _load(args: argparse.Namespace) -> int:
    target, dev = _target(args.target), _dev(args.dev)
    if args.mode and target != "xdp":
        raise UsageError("--mode applies to --target xdp only")
    for warning in _ignored(args, target):
        print(f"pfc load: warning: {warning}", file=sys.stderr)
    compiled = load(args.file)
    if compiled.diagnostics:
        print_diagnostics(compiled.diagnostics, compiled.sources)
    if not compiled.ok:
        return 1
    if args.dry_run:
        from pfc.cli.apply import load_dry_run
        return load_dry_run(args, compiled, target, dev)
    try:
        result = api.load(compiled, target, dev, netns=args.netns, force=args.force,
                          mode=args.mode, hook=args.hook, table=args.table, audit=args.audit)
    except CompileError as exc:
        print_diagnostics(exc.diagnostics, compiled.sources)
        return 1
    except loading.LoadError as exc:
        return _fail("load", exc)
    for message in result.messages:
        print(shown(message), file=sys.stderr)
    print(shown(f"loaded {args.file} on {dev} ({_place(result.record)})"))
    return 0


def _ignored(args: argparse.Namespace, target: str) -> list[str]:
    """A line when ``--table`` is given to a target that has no table (xdp and tc attach
    a program to the device itself; their only hook is checked by the compiler)."""
    if target not in ("xdp", "tc") or args.table == "pfc":
        return []
    where = "the device's XDP hook" if target == "xdp" else "the device's tc ingress"
    return [f"--table {shown(args.table)} is ignored by target `{target}`: it attaches a "
            f"program to {where}, not to a table or chain"]


def _place(record) -> str:
    a = record.attach
    where = [record.target, record.hook] if record.hook != record.target else [record.target]
    if "prog_id" in a:
        where.append(f"program id {a['prog_id']} tag {a.get('prog_tag')}")
    if a.get("mode"):
        where.append(a["mode"])
    if a.get("table"):
        where.append(f"table {a['table']}")
    if a.get("chain"):
        where.append(f"chain {a['chain']}" + (f" → {a['gen_chain']}" if a.get("gen_chain")
                                              else ""))
    where.append(f"namespace {record.netns}")
    return ", ".join(where)


LOAD = Command("load", "compile a policy and attach it to a device (atomic replace)",
               "Compile a policy and attach it to a device: XDP, tc ingress, an nftables\n"
               "table or an iptables chain owned by pfc. All or nothing: a policy that\n"
               "fails to compile, verify or attach leaves what was loaded before exactly\n"
               "as it was. Loading over a policy pfc loaded replaces it atomically (no\n"
               "gap); counters start at zero. Refuses to replace what pfc did not load\n"
               "unless --force. State: /run/pfc (PFC_STATE_DIR); pins: /sys/fs/bpf/pfc.",
               _load_args, _load)


# ---------------------------------------------------------------------------- unload

def _unload_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", "-t", required=True, metavar="T",
                   help="xdp, tc, nft or iptables")
    _where_args(p)
    p.add_argument("--force", action="store_true",
                   help="also remove what sits at pfc's place (program, filter, table, "
                        "chain) when pfc's record does not name it")


def _unload(args: argparse.Namespace) -> int:
    target, dev = _target(args.target), _dev(args.dev)
    try:
        result = api.unload(target, dev, netns=args.netns, force=args.force)
    except loading.LoadError as exc:
        return _fail("unload", exc)
    for message in result.messages:
        print(shown(message))
    return 0


UNLOAD = Command("unload", "remove what pfc load attached (idempotent)",
                 "Remove exactly what `pfc load` added for a target on a device, as the\n"
                 "kernel shows it: the XDP program or tc filter pfc loaded (by id, or by\n"
                 "name and tag), the clsact qdisc if pfc created it and nothing else uses\n"
                 "it, pfc's nftables table, pfc's iptables chains, jumps and ipsets, and\n"
                 "the state record. Nothing else is touched unless --force. An\n"
                 "interrupted load is finished or rolled back first. A second unload says\n"
                 "`nothing loaded` and exits 0.",
                 _unload_args, _unload)


# ---------------------------------------------------------------------------- status

EXIT_VANISHED, EXIT_CHANGED = 3, 4  # docs/load.md: what status's exit codes mean


def _status_args(p: argparse.ArgumentParser) -> None:
    _where_args(p, dev_required=False)
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
                          counted_with=x.counted_with) for x in r.rules]}


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
                f"note: pfc loaded policies in other namespaces ({', '.join(report.elsewhere)})"
                ": `pfc status --all`, or --netns NS")))
    for s in report.entries:
        parts += [_header(s), _table(s, rate), Text("")]
    if report.gone:
        spaces: dict[str, list[str]] = {}
        for r in report.gone:
            spaces.setdefault(r.netns, []).append(f"{r.target} on {r.dev}")
        which = "; ".join(f"{ns} ({', '.join(what)})" for ns, what in spaces.items())
        parts.append(Text(shown(
            f"removed the records of namespaces that no longer exist: {which}"
            if report.pruned else f"note: records of namespaces that no longer exist: "
            f"{which}; `pfc status --prune` removes them")))
    return Group(*parts)


def _table(s: loading.Status, rate: Rates | None):
    from rich.table import Table

    table = Table(show_edge=False, pad_edge=False)
    columns = [("line", "right"), ("rule", "left"), ("action", "left"),
               ("packets", "right"), ("bytes", "right")]
    for col, justify in columns + ([("pkt/s", "right")] if rate is not None else []):
        table.add_column(col, justify=justify, overflow="fold")
    lines = {row.index: row.line for row in s.record.rules}
    counters = s.inspection.counters
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
    text = Text(shown(f"{r.target} on {r.dev} (namespace {r.netns}): "))
    text.append(insp.health.upper() if insp.health != "ok" else "ok", style=style)
    text.append(shown(f" — {insp.detail}"))
    text.append("\n" + shown(f"  policy {r.policy} sha256 {r.sha256[:16]}… loaded "
                                 f"{r.loaded_at}"))
    if s.file_changed:
        text.append("  (the file has changed since)", style="yellow")
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
