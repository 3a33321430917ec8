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
from pfc.deploy import load as loading
from pfc.frontend.diagnostics import CompileError

SOCKET_HINT = ("socket filters (socket, cbpf) are attached by the application: "
               "pfc.attach_socket(sock, artifact), see docs/load.md")


def _fail(command: str, exc: loading.LoadError) -> int:
    print(f"pfc {command}: error: {exc.cause}", file=sys.stderr)
    if exc.hint:
        print(f"hint: {exc.hint}", file=sys.stderr)
    return 2


def _target(value: str) -> str:
    if value in ("socket", "cbpf"):
        raise UsageError(f"target `{value}` is not loaded onto a device; {SOCKET_HINT}")
    if value not in loading.TARGETS:
        raise UsageError(f"`pfc load` attaches targets {', '.join(loading.TARGETS)}; "
                         f"not `{value}`")
    return value


def _dev(value: str) -> str:
    try:
        return check_dev(value)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


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
    p.add_argument("--table", default="pfc", metavar="NAME",
                   help="nft table / iptables chain prefix owned by pfc (default pfc)")
    p.add_argument("--force", action="store_true",
                   help="replace a program, filter, table or chain pfc did not load")


def _load(args: argparse.Namespace) -> int:
    target, dev = _target(args.target), _dev(args.dev)
    if args.mode and target != "xdp":
        raise UsageError("--mode applies to --target xdp only")
    compiled = load(args.file)
    if compiled.diagnostics:
        print_diagnostics(compiled.diagnostics, compiled.sources)
    if not compiled.ok:
        return 1
    try:
        result = api.load(compiled, target, dev, netns=args.netns, force=args.force,
                          mode=args.mode, hook=args.hook, table=args.table)
    except CompileError as exc:
        print_diagnostics(exc.diagnostics, compiled.sources)
        return 1
    except loading.LoadError as exc:
        return _fail("load", exc)
    for message in result.messages:
        print(message, file=sys.stderr)
    print(f"loaded {args.file} on {dev} ({_place(result.record)})")
    return 0


def _place(record) -> str:
    a = record.attach
    where = [record.target, record.hook] if record.hook != record.target else [record.target]
    if "prog_id" in a:
        where.append(f"program id {a['prog_id']}")
    if a.get("mode"):
        where.append(a["mode"])
    if a.get("table"):
        where.append(f"table {a['table']}")
    if a.get("chain"):
        where.append(f"chain {a['chain']}")
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


def _unload(args: argparse.Namespace) -> int:
    target, dev = _target(args.target), _dev(args.dev)
    try:
        result = api.unload(target, dev, netns=args.netns)
    except loading.LoadError as exc:
        return _fail("unload", exc)
    for message in result.messages:
        print(message)
    return 0


UNLOAD = Command("unload", "remove what pfc load attached (idempotent)",
                 "Remove exactly what `pfc load` added for a target on a device: the XDP\n"
                 "program, the tc filter (and the clsact qdisc if pfc created it and\n"
                 "nothing else uses it), pfc's nftables table, pfc's iptables chains, jumps\n"
                 "and ipsets, and the pins and state record. Nothing else is touched. A\n"
                 "second unload says `nothing loaded` and exits 0.",
                 _unload_args, _unload)


# ---------------------------------------------------------------------------- status

def _status_args(p: argparse.ArgumentParser) -> None:
    _where_args(p, dev_required=False)
    p.add_argument("--watch", action="store_true", help="refresh until Ctrl-C")
    p.add_argument("--interval", type=float, default=1.0, metavar="S",
                   help="seconds between refreshes with --watch (default 1)")
    p.add_argument("--format", choices=("text", "json"), default="text")


def status_json(entries: list[loading.Status]) -> dict:
    return {"version": 1, "loaded": [_entry_json(s) for s in entries]}


def _entry_json(s: loading.Status) -> dict:
    r, counters = s.record, s.inspection.counters
    return {"target": r.target, "hook": r.hook, "dev": r.dev, "netns": r.netns,
            "policy": r.policy, "sha256": r.sha256, "loaded_at": r.loaded_at,
            "policy_file_changed": s.file_changed, "attach": r.attach,
            "health": s.inspection.health, "detail": s.inspection.detail,
            "default": r.default, "counters_readable": counters is not None,
            "rules": [{"index": row.index, "line": row.line, "text": row.text,
                       "action": row.action, "counted_with": row.counted_with,
                       "packets": _counter(counters, row.index, 0),
                       "bytes": _counter(counters, row.index, 1)} for row in r.rules]}


def _counter(counters, index: int, i: int) -> int | None:
    if counters is None or index not in counters:
        return None
    return counters[index][i]


def render(entries: list[loading.Status]):
    """A rich renderable: per loaded policy a header and a table of rules."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    if not entries:
        return Text("nothing loaded by pfc")
    parts = []
    for s in entries:
        parts.append(_header(s))
        table = Table(show_edge=False, pad_edge=False)
        for col, justify in (("line", "right"), ("rule", "left"), ("action", "left"),
                             ("packets", "right"), ("bytes", "right")):
            table.add_column(col, justify=justify)
        lines = {row.index: row.line for row in s.record.rules}
        for row in s.record.rules:
            p = _counter(s.inspection.counters, row.index, 0)
            b = _counter(s.inspection.counters, row.index, 1)
            if row.counted_with is not None and p is None:
                p = b = f"in line {lines[row.counted_with]}"
            table.add_row(str(row.line), row.text, row.action,
                          "-" if p is None else str(p), "-" if b is None else str(b))
        table.add_row("", f"default {s.record.default}", "", "-", "-")
        parts += [table, Text("")]
    return Group(*parts)


def _header(s: loading.Status):
    from rich.text import Text

    r, insp = s.record, s.inspection
    style = {"ok": "green", "vanished": "red", "changed": "red"}[insp.health]
    text = Text(f"{r.target} on {r.dev} (namespace {r.netns}): ")
    text.append(insp.health.upper() if insp.health != "ok" else "ok", style=style)
    text.append(f" — {insp.detail}\n")
    text.append(f"  policy {r.policy} sha256 {r.sha256[:16]}… loaded {r.loaded_at}")
    if s.file_changed:
        text.append("  (the file has changed since)", style="yellow")
    if insp.counters is None:
        text.append("\n  counters unreadable (pins or table gone)", style="yellow")
    return text


def _status(args: argparse.Namespace) -> int:
    if args.dev:
        _dev(args.dev)
    if args.interval <= 0:
        raise UsageError("--interval must be positive")
    try:
        if args.watch:
            return _watch(args)
        if args.format == "json":
            print(json.dumps(status_json(api.status(args.dev, args.netns)), indent=2))
            return 0
        from rich.console import Console

        Console(width=max(100, Console().width)).print(
            render(api.status(args.dev, args.netns)))
    except loading.LoadError as exc:
        return _fail("status", exc)
    return 0


def _watch(args: argparse.Namespace) -> int:
    """Refresh until Ctrl-C: a rich Live table, or one JSON object per line."""
    try:
        if args.format == "json":
            while True:
                print(json.dumps(status_json(api.status(args.dev, args.netns))),
                      flush=True)
                time.sleep(args.interval)
        from rich.console import Console
        from rich.live import Live

        with Live(render(api.status(args.dev, args.netns)), console=Console(),
                  auto_refresh=False) as live:
            while True:
                time.sleep(args.interval)
                live.update(render(api.status(args.dev, args.netns)), refresh=True)
    except KeyboardInterrupt:
        return 0


STATUS = Command("status", "what pfc loaded where, with per-rule counters",
                 "Show every policy pfc loaded (or those on --dev / in --netns): target,\n"
                 "program id or table/chain, the policy file and its sha256, the load time,\n"
                 "whether it is still attached as loaded (or vanished / was replaced under\n"
                 "pfc), and per-rule packet and byte counters with each rule's line.\n"
                 "--watch refreshes until Ctrl-C; --format json for scripts.",
                 _status_args, _status)
