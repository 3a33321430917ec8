"""``pfc load``, ``pfc unload``: deploy a policy to a device (``pfc status``:
:mod:`pfc.cli.status`).

Exit codes: 0 done (an unload with nothing loaded too); 1 the policy has errors (the
compiler's diagnostics); 2 the environment refused (missing device, privileges,
another program in the way, a driver without native XDP ...): one line with the cause,
one with a hint.
"""

from __future__ import annotations

import argparse
import sys

from pfc import api
from pfc.backends.base import check_dev
from pfc.cli.common import Command, UsageError, load, print_diagnostics
from pfc.cli.output import shown
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
    if value in ("cgroup", "nfbpf"):
        raise UsageError(f"`pfc load` does not attach `{value}` objects yet (`pfc compile` "
                         f"and `pfc verify --target {value}` build and check them); "
                         f"docs/{value}.md shows how to attach one by hand")
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


def _where_args(p: argparse.ArgumentParser, dev_help: str = "network device") -> None:
    p.add_argument("--dev", metavar="DEV", help=dev_help)
    p.add_argument("--netns", metavar="NS",
                   help="network namespace (a name from `ip netns list`; default: the "
                        "current one)")


# ------------------------------------------------------------------------------ load

def _load_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", help="policy file (.pf)")
    p.add_argument("--target", "-t", required=True, metavar="T",
                   help="xdp, tc, nft, iptables, nfmod or u32; a whole firewall (v2): a "
                        "list, each "
                        "block to the first that carries it (xdp,nft)")
    _where_args(p, "network device (required for one rule list; a whole firewall names "
                   "its devices)")
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
    if "," not in args.target:
        _target(args.target)
    compiled = load(args.file)
    if compiled.diagnostics:
        print_diagnostics(compiled.diagnostics, compiled.sources)
    if not compiled.ok:
        return 1
    if compiled.ruleset is not None:
        from pfc.cli.firewall.load import load as load_firewall

        return load_firewall(args, compiled, _fail)
    if "," in args.target:
        raise UsageError(f"a list of targets is for whole firewalls (hook blocks); "
                         f"`{shown(args.file)}` is one rule list: give one target")
    if args.dev is None:
        raise UsageError(f"`{shown(args.file)}` is one rule list: --dev DEV names the "
                         "device to attach it to")
    target, dev = _target(args.target), _dev(args.dev)
    if args.mode and target != "xdp":
        raise UsageError("--mode applies to --target xdp only")
    for warning in _ignored(args, target):
        print(f"pfc load: warning: {warning}", file=sys.stderr)
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
    if a.get("module"):
        where.append(f"module {a['module']}")
    if a.get("nodes"):
        prefs = sorted(map(int, a["nodes"]))
        where.append(f"tc preferences {prefs[0]}-{prefs[-1]}")
    if a.get("table"):
        where.append(f"table {a['table']}")
    if a.get("chain"):
        where.append(f"chain {a['chain']}" + (f" → {a['gen_chain']}" if a.get("gen_chain")
                                              else ""))
    where.append(f"namespace {record.netns}")
    return ", ".join(where)


LOAD = Command("load", "compile a policy and attach it to a device (atomic replace)",
               "Compile a policy and attach it to a device: XDP, tc ingress, an nftables\n"
               "table or an iptables chain owned by pfc, pfc's netfilter module (nfmod:\n"
               "insmod in the namespace) or tc u32 filters. All or nothing: a policy that\n"
               "fails to compile, verify or attach leaves what was loaded before exactly\n"
               "as it was. Loading over a policy pfc loaded replaces it atomically (no\n"
               "gap); counters start at zero. Refuses to replace what pfc did not load\n"
               "unless --force. State: /run/pfc (PFC_STATE_DIR); pins: /sys/fs/bpf/pfc.\n"
               "A whole firewall (v2: hook blocks) is loaded without --dev: every block\n"
               "to the first target of --target LIST that carries it, every part in the\n"
               "namespace or none (docs/load.md \"Whole firewalls\").",
               _load_args, _load)


# ---------------------------------------------------------------------------- unload

def _unload_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", "-t", required=True, metavar="T",
                   help="xdp, tc, nft, iptables, nfmod or u32; without --dev: the "
                        "namespace's whole "
                        "firewall (v2) that uses it, every part")
    _where_args(p)
    p.add_argument("--force", action="store_true",
                   help="also remove what sits at pfc's place (program, filter, table, "
                        "chain) when pfc's record does not name it")


def _unload(args: argparse.Namespace) -> int:
    targets = [_target(t) for t in args.target.split(",")]
    try:
        if args.dev is None:
            result = _unload_firewall(targets, args)
        else:
            result = api.unload(targets[0], _dev(args.dev), netns=args.netns,
                                force=args.force)
    except loading.LoadError as exc:
        return _fail("unload", exc)
    for message in result.messages:
        print(shown(message))
    return 0


def _unload_firewall(targets: list[str], args: argparse.Namespace) -> loading.Result:
    """The namespace's whole firewall, if it uses one of ``targets``."""
    from pfc.deploy import state
    from pfc.deploy.base import in_netns
    from pfc.deploy.firewall import commit
    from pfc.deploy.firewall.loader import DEV, TARGET

    with in_netns(args.netns) as ns:
        try:
            record = state.read(ns, DEV, TARGET)
        except state.Unreadable:
            record = None  # (unload reports it)
    uses = record is None or set(targets) & set(record.attach.get("targets", []))
    if not uses:
        raise loading.LoadError(
            f"the firewall in namespace {ns} uses {', '.join(record.attach['targets'])}, "
            f"not {', '.join(targets)}", hint="name one of its targets, or give --dev "
            "DEV for a policy loaded on a device")
    return commit.unload(args.netns, args.force)


UNLOAD = Command("unload", "remove what pfc load attached (idempotent)",
                 "Remove exactly what `pfc load` added for a target on a device, as the\n"
                 "kernel shows it: the XDP program or tc filter pfc loaded (by id, or by\n"
                 "name and tag), the clsact qdisc if pfc created it and nothing else uses\n"
                 "it, pfc's nftables table, pfc's iptables chains, jumps and ipsets, and\n"
                 "the state record. Nothing else is touched unless --force. An\n"
                 "interrupted load is finished or rolled back first. A second unload says\n"
                 "`nothing loaded` and exits 0. Without --dev: the namespace's whole\n"
                 "firewall (v2) that uses --target, every hook and every part.",
                 _unload_args, _unload)
