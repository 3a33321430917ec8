"""``pfc verify``: the equivalence check as a command, for users' CI."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.markup import escape

from pfc import api, backends
from pfc.cli.common import Command, UsageError, load, print_diagnostics, read_capture_arg
from pfc.cli.firewall import verify as firewall
from pfc.cli.output import cell, print_json, shown


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="+", metavar="FILE",
                   help="policy files (.pf); `-` reads one from standard input")
    p.add_argument("--targets", metavar="LIST",
                   help="comma-separated targets, TARGET:HOOK for another hook "
                        "(e.g. xdp,nft:input), or `all` (default). Named targets must "
                        "express every rule; with `all`, rules a target cannot express "
                        "are reported, not failed. A whole firewall: each target alone "
                        "(default nft; `all`: nft and iptables)")
    p.add_argument("--target", action="append", metavar="LIST",
                   help="a whole firewall: a target list as `pfc compile --target` takes "
                        "it (xdp,nft: each block to the first that carries it), verified "
                        "as one; repeatable. A rule list: as --targets")
    p.add_argument("--pcap", metavar="FILE",
                   help="run every target on the frames of this capture (pcap or "
                        "pcapng; Ethernet, Linux cooked or raw IP; `-`: standard input), "
                        "then on --frames generated frames if given")
    p.add_argument("--frames", type=int, metavar="N",
                   help="generated frames per policy (default 2000; with --pcap, none "
                        "unless given; a whole firewall: packets per target list, "
                        "default 300, conversations across the host on top)")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="random seed (default 0)")
    p.add_argument("--pcap-out", type=Path, metavar="DIR",
                   help="directory for the minimal failing pcap, created if missing "
                        "(default: ./pfc-verify)")
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="text: a table; json: one object for CI systems (docs/json.md)")
    p.add_argument("--against", action="append", metavar="ORIGINAL",
                   help="the ruleset FILE was imported from (`pfc import`; twice for an "
                        "iptables-save dump and its ip6tables-save twin): the original "
                        "loaded in one host lab, FILE compiled for its kind (nft or "
                        "iptables, or --targets T) in another, the same traffic into "
                        "both, compared packet by packet (docs/import.md)")
    p.add_argument("--kernel", metavar="LIST",
                   help="verify inside these kernels instead: comma-separated series "
                        "(5.10, 6.1, 6.12: Debian's, booted in the kernel lab under qemu) "
                        "or `host` (docs/kernels.md)")


def _targets(args: argparse.Namespace) -> tuple[list[str], bool]:
    """A rule list's targets: --targets and every --target's items."""
    known = [t for t in backends.registry() if t != "ir"]
    spec = ",".join(filter(None, [args.targets, *(args.target or [])]))
    if args.targets in (None, "all") and not args.target:
        return known, False
    chosen = list(dict.fromkeys(t.strip() for t in spec.split(",") if t.strip()))
    if "all" in chosen:
        return known, False
    for t in chosen:
        if t.split(":")[0] not in known:
            raise UsageError(f"unknown target `{shown(t)}`; known targets: "
                             f"{', '.join(known)}")
    return chosen, True


def _frames(args: argparse.Namespace) -> tuple[list[bytes], int]:
    """The user's frames (--pcap) and how many to generate."""
    if args.frames is not None and args.frames < 1:
        raise UsageError("--frames must be at least 1")
    if args.pcap is None:
        return [], 2000 if args.frames is None else args.frames
    capture = read_capture_arg(args.pcap)
    if not capture.frames and not args.frames:
        raise UsageError(f"`{shown(args.pcap)}` holds no frames (--frames N adds "
                         "generated ones)")
    return capture.frames, args.frames or 0


def _verify(args: argparse.Namespace) -> int:
    if args.against:
        return _against(args)
    if getattr(args, "kernel", None) is not None:
        return _verify_kernels(args)
    targets, explicit = _targets(args)
    user, generated = _frames(args)
    report, failed, empty = [], False, []
    for path in args.files:
        compiled = load(path)
        if not compiled.ok:
            print_diagnostics(compiled.diagnostics, compiled.sources)
            failed = True
            continue
        if compiled.ruleset is not None:
            results = firewall.verify(args, compiled)
            entry = firewall.to_json(compiled, results, args.frames or
                                     firewall.DEFAULT_PACKETS)
        else:
            results = _run_with_progress(compiled, targets if explicit else None, args,
                                         user, generated)
            entry = {"file": compiled.source.name, "pcap": args.pcap,
                     "pcap_frames": len(user), "generated_frames": generated,
                     "targets": [r.to_json() for r in results]}
        failed |= any(r.failed for r in results)
        report.append((compiled, results, entry))
        why = _nothing_verified(results)
        if why is not None:
            empty.append((compiled.source.name, why, _environment(results)))
    if args.format == "json":
        print_json({"ok": not (failed or empty), "files": [e for *_, e in report]})
    else:
        from rich.console import Console

        console = Console()
        for compiled, results, _ in report:
            if compiled.ruleset is not None:
                firewall.show(compiled, results)
                continue
            console.print(verify_table(compiled.source.name, results))
            _print_details(results)
    for path, why, _ in empty:
        print(f"pfc verify: error: {shown(path)}: nothing verified: {shown(why)}",
              file=sys.stderr)
    if any(environment for *_, environment in empty):
        return 2
    return 1 if failed or empty else 0


def _against(args: argparse.Namespace) -> int:
    """``--against``: one policy, its original, one target: 0 agree, 1 differ."""
    from pfc.importers.original import LoadFailed
    from pfc.kernel.netns import missing_privileges
    if len(args.files) != 1 or len(args.against) > 2:
        raise UsageError("--against compares one policy with the ruleset it was imported "
                         "from (one file, or an iptables dump and its ip6tables twin)")
    why = missing_privileges()
    if why is not None:
        raise UsageError(f"--against loads both rulesets in namespaces: {why}")
    compiled = load(args.files[0])
    if not compiled.ok:
        print_diagnostics(compiled.diagnostics, compiled.sources)
        return 1
    target = None if args.targets == "all" else args.targets
    try:
        report = api.verify_against(compiled, args.against, target=target,
                                    n=args.frames or 300, seed=args.seed)
    except (OSError, LoadFailed) as exc:
        raise UsageError(shown(str(exc))) from exc
    if args.format == "json":
        print_json({"ok": report.ok, "target": report.target, "items": report.items,
                    "agree": report.agree, "differences": [
                        {"item": d.item + 1, "what": d.what, "expected": d.expected,
                         "got": d.got} for d in report.differences]})
    else:
        print(f"{shown(compiled.source.name)} against {shown(', '.join(args.against))} "
              f"on {report.target}: {report.items} packets, {report.agree} alike, "
              f"{len(report.differences)} difference(s)")
        for d in report.differences[:10]:
            print("  " + shown(d.describe()[:300]))
    return 0 if report.ok else 1


def _nothing_verified(results) -> str | None:
    from pfc.verifier.run import nothing_verified  # hypothesis: only when verifying

    return nothing_verified(results)


def _environment(results) -> bool:
    """Whether nothing ran for want of privileges or a kernel feature (exit 2), not
    because no target can express the policy (exit 1)."""
    return any(r.status == "compiled-only" for r in results)


def _verify_kernels(args: argparse.Namespace) -> int:
    """``--kernel``: ``pfc verify`` itself in each kernel (pfc.verifier.kernels)."""
    from pfc.verifier import kernels

    try:
        chosen = kernels.parse_kernels(args.kernel)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    _targets(args)  # usage errors here, before any boot
    if "-" in args.files or args.pcap == "-":
        raise UsageError("--kernel reads policies and captures from files, not `-`")
    out = args.pcap_out or Path("pfc-verify")
    argv = kernels.verify_args(args.files, args.targets or "all", args.frames, args.seed,
                               args.pcap, out)
    if args.targets is None:  # the guest's own default (a whole firewall's is nft)
        at = argv.index("--targets")
        del argv[at:at + 2]
    argv += [word for t in args.target or [] for word in ("--target", t)]
    runs = [kernels.run_host(argv, out) if k == kernels.HOST
            else kernels.run(k, args.files, argv, out) for k in chosen]
    if args.format == "json":
        print_json({"ok": all(r.ok for r in runs), "kernels": [r.to_json() for r in runs]})
    else:
        for r in runs:
            _print_kernel(r)
    if any(r.error and r.returncode == 2 for r in runs):
        return 2
    return 0 if all(r.ok for r in runs) else 1


def _print_kernel(run) -> None:
    from rich.console import Console
    from rich.table import Table

    head = f"kernel {run.kernel}" + (f" ({run.release})" if run.release else "")
    if run.error:
        print(f"{shown(head)}: {shown(run.error)}")
        return
    for entry in run.report.get("files", []):
        table = Table(title=cell(f"pfc verify {entry['file']} — {head}"), show_edge=False)
        for col in ("target", "hook", "frames", "agree", "disagree", "status"):
            table.add_column(col, overflow="fold")
        for t in entry["targets"]:
            table.add_row(*(cell(str(t[k])) for k in ("target", "hook", "frames", "agree",
                                                       "disagree", "status")))
        Console().print(table)
        for t in entry["targets"]:
            if t["status"] != "agree" and (t.get("reason") or t.get("not_expressible")):
                why = t.get("reason") or "; ".join(
                    f"line {n['line']}: {n['rule']}" for n in t["not_expressible"])
                print(f"  {t['target']}: {shown(why)}")


def _run_with_progress(compiled, targets: list[str] | None, args: argparse.Namespace,
                       user: list[bytes], generated: int):
    from rich.console import Console
    from rich.progress import Progress

    def verify(tick=None):
        return api.verify(compiled, targets, frames=generated, seed=args.seed,
                          pcap_dir=args.pcap_out, progress=tick, pcap=user)

    if args.format == "json" or not sys.stderr.isatty():
        return verify()
    path = shown(compiled.source.name)
    total = len(targets) if targets else len(backends.registry()) - 1
    with Progress(console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task(escape(f"verify {path}"), total=total)

        def tick(target: str) -> None:
            progress.update(task, advance=1, description=escape(f"verify {path}: {target}"))

        return verify(tick)


def verify_table(path: str, results):
    """The table; every column folds rather than cuts (80-column terminals)."""
    from rich.table import Table

    table = Table(title=cell(f"pfc verify {path}"), show_edge=False)
    for col in ("target", "hook", "frames", "agree", "disagree", "skipped\nby hook",
                "status"):  # 79 columns at most, with raw-prerouting: only status wraps
        table.add_column(col, overflow="fold", no_wrap=col != "status",
                         justify="left" if col in ("target", "hook", "status") else "right")
    for r in results:
        rep = r.report
        table.add_row(cell(r.target), cell(r.hook), *(str(x) for x in (
            (rep.total, rep.agree, len(rep.mismatches), rep.skipped) if rep else ("-",) * 4)),
            status_cell(r))
    return table


def status_cell(r):
    if r.status == "agree" and r.report and not r.report.counters_agree:
        return cell("counters differ", "red")
    text, style = {"agree": ("agree", "green"), "disagree": ("DISAGREE", "red"),
                   "error": ("not expressible", "red"),
                   "not-expressible": ("not expressible", ""),
                   "compiled-only": ("compiled only", "yellow")}[r.status]
    return cell(text, style)


def _print_details(results) -> None:
    """Plain lines (never wrapped): they are meant to be copied into a shell."""
    for r in results:
        at = f" at hook {r.hook}" if r.hook else ""
        for line, text in r.not_expressible:
            print(f"  {r.target}: not expressible{at}: line {line}: {shown(text)}")
        if r.hint:
            print(f"  {r.target}: hint: {shown(r.hint)}")
        if r.status == "compiled-only":
            print(f"  {r.target}: compiled only, not run: {shown(r.reason)}")
        for note in r.notes:  # another hook than the default; buckets at 1/minute
            print(f"  {r.target}: note: {shown(note)}")
        if r.report is not None and not r.report.ok:
            print(f"  {r.target}: " + r.report.summary().replace("\n", "\n    "))
        if r.pcap:
            _print_replay(r)
        elif r.status == "disagree" and r.reason:  # the failing frames were not written
            print(f"  {r.target}: {shown(r.reason)}")


def _print_replay(r) -> None:
    if not r.report.mismatches:  # only the counters differ: the frames they counted
        n = r.pcap_frame
        print(f"  the counters differ over: {shown(str(r.pcap))}, {n} frame{'s' * (n != 1)}; "
              "replay with:")
    elif r.pcap_frame == 1:
        print(f"  minimal failing frame: {shown(str(r.pcap))}; replay with:")
    else:
        print(f"  failing sequence: {shown(str(r.pcap))}, {r.pcap_frame} frames, the "
              "failing one last (its state depends on the frames before); replay with:")
    for cmd in r.replay:
        print(f"    {shown(cmd)}")


VERIFY = Command("verify", "check every target against the reference interpreter, in the kernel",
                 "Compile each policy for every requested target, generate frames from the\n"
                 "policy's constants (malformed ones included), run each target in the kernel\n"
                 "on the frames its hook can see (BPF_PROG_TEST_RUN, a packet socket, a\n"
                 "throw-away namespace), and compare verdicts, rewritten bytes and counters\n"
                 "with the reference interpreter. On a disagreement: exit 1, a minimal failing\n"
                 "pcap (shrunk by hypothesis; for a stateful policy, the frames up to the\n"
                 "failing one) and the commands to replay it. A target whose default hook\n"
                 "cannot express the policy (ct state) runs at one that can. Needs root for\n"
                 "the kernel runs; without it, targets are only compiled, and a policy on\n"
                 "which no target ran fails: exit 2 (exit 1 when none can express it).\n"
                 "A whole firewall (v2) runs in a throw-away host built from its\n"
                 "interface lines, each --target list loaded as `pfc load` would, every\n"
                 "packet compared with the path interpreter (docs/verify.md).",
                 _args, _verify)
