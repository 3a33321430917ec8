"""``pfc compile`` and ``pfc targets``: the backends as commands.

Options a target never reads (``--dev`` for cbpf, ``--table`` for xdp, ``--notrack``
for nft ...) are a warning on stderr naming the option and why: the output is exactly
what it would be without them. Options that contradict each other, so that the output
would not do what they ask (``--dev eth0`` with nft's ``input`` hook, which filters
every device; ``--notrack`` with iptables' filter table), are usage errors (exit 2).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pfc import api, backends
from pfc.backends.base import Artifact, Backend
from pfc.build import OptionError, backend, build_ruleset, write_artifact
from pfc.cli.common import Command, UsageError, load, print_diagnostics
from pfc.cli.output import STDIO, OutputError, cell, cell_lines, print_json, refuse_terminal, shown
from pfc.frontend.diagnostics import CompileError, Diagnostic, to_json
from pfc.frontend.source import SourceFile

# The compile options each target reads besides --format and --hook. An option given
# to a target that does not read it is warned about (WHY says why it has no effect).
# A target missing here reads none of them.
READS = {"nft": {"dev", "table"}, "iptables": {"dev", "table", "notrack"}, "u32": {"dev"},
         "nfmod": {"table"}}
WHY = {
    "dev": {"cbpf": "a socket filter is attached to a socket by the application",
            "socket": "a socket filter is attached to a socket by the application",
            "xdp": "the object is attached to a device when it is loaded (pfc load --dev)",
            "tc": "the object is attached to a device when it is loaded (pfc load --dev)",
            None: "the output does not depend on a device"},
    "table": {None: "it names pfc's nftables table or iptables chains"},
    "notrack": {None: "it adds iptables' CT --notrack (raw table) and nothing else"},
}


def _compile_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", help="policy file (.pf); `-` reads standard input")
    p.add_argument("--target", "-t", required=True, metavar="T",
                   help="target: " + ", ".join(backends.registry()) + " (see `pfc targets`); "
                   "for a whole firewall a list T1,T2: each block goes to the first that "
                   "carries it")
    p.add_argument("-o", "--output", metavar="OUT",
                   help="write the artifact here: a file (its companions beside it, "
                        "named after it; the directory must exist), OUT/ a directory "
                        "(created if missing; each file under its own name "
                        "STEM.TARGET.EXT), or `-` for standard output (the main file "
                        "only). Without -o the text form goes to standard output")
    p.add_argument("--format", "-f", metavar="F", help="output format (per target; see "
                   "`pfc targets`)")
    p.add_argument("--hook", metavar="H", help="attach point (per target; see `pfc targets`)")
    p.add_argument("--link", choices=tuple(LINK_HOOKS),
                   help="cbpf: where the program reads packets from, as tcpdump -y: ether "
                        "(the Ethernet header: packet sockets, tc; the default) or ip (the "
                        "IP header: iptables -m bpf, like tcpdump -y RAW); the same as "
                        "--hook socket / --hook xt-bpf")
    p.add_argument("--dev", metavar="DEV",
                   help="network device: nft netdev ingress, iptables `-i DEV` jump")
    p.add_argument("--table", metavar="NAME",
                   help="nftables table / iptables chain prefix owned by pfc (default pfc)")
    p.add_argument("--notrack", action="store_true",
                   help="iptables raw-prerouting: also exempt matched traffic from "
                        "conntrack (NOTRACK)")
    p.add_argument("--audit", action="store_true", help="audit mode: every drop (and a "
                   "default drop) becomes a would-be drop: passed, counted and logged")
    p.add_argument("--kernel", metavar="VERSION",
                   help="eBPF targets: the kernel the artifact must load on (5.10, 6.1, "
                        "6.12, ... or `host`): lowerings it supports (5.10: no classifier, "
                        "the linear program), an error naming each feature it lacks and "
                        "the kernel that has it (docs/kernels.md)")
    p.add_argument("--diagnostics", choices=("text", "json"), default="text",
                   help="text: diagnostics and notes as lines on stderr; json: one JSON "
                        "object on stderr instead (docs/json.md); the artifact is "
                        "unchanged")


LINK_HOOKS = {"ether": "socket", "ip": "xt-bpf"}  # cbpf's hooks by the link they read


def _hook(args: argparse.Namespace) -> str | None:
    """``--hook``, or the cbpf hook ``--link`` names (a usage error if they disagree)."""
    if args.link is None:
        return args.hook
    if args.target != "cbpf":
        raise UsageError(f"--link is for target cbpf, not `{args.target}`")
    hook = LINK_HOOKS[args.link]
    if args.hook not in (None, hook):
        raise UsageError(f"--link {args.link} is hook `{hook}`, not `{args.hook}`")
    return hook


def _compile(args: argparse.Namespace) -> int:
    report = _Report(args)
    try:
        code = _compile_into(args, report)
    except (UsageError, OptionError, OutputError) as exc:
        if not report.json or getattr(exc, "closed", False):
            raise
        report.error, code = str(exc), 2
    report.finish()
    return code


def _compile_into(args: argparse.Namespace, report: _Report) -> int:
    targets = args.target.split(",") if "," in args.target else [args.target]
    chosen = [backend(t) for t in targets]
    for warning in dict.fromkeys(w for c in chosen for w in option_warnings(c, args)):
        report.warn(warning)
    hook = _hook(args)
    compiled = load(args.file)
    report.diagnose(compiled.diagnostics, compiled.sources)
    if not compiled.ok:
        return 1
    if compiled.ruleset is not None:
        return _compile_firewall(args, compiled, targets, report)
    if len(chosen) > 1:
        raise UsageError(f"a list of targets is for whole firewalls (hook blocks); "
                         f"`{shown(args.file)}` is one rule list: give one target")
    chosen = chosen[0]
    try:
        artifact = api.compile(compiled, args.target, format=args.format, hook=hook,
                               dev=args.dev, table=args.table or "pfc",
                               notrack=args.notrack, audit=args.audit,
                               kernel=getattr(args, "kernel", None))
    except CompileError as exc:
        report.diagnose(exc.diagnostics, compiled.sources)
        return 1
    report.diagnose([d for d in artifact.diagnostics if d not in compiled.diagnostics],
                    compiled.sources)
    if hook is None and artifact.hook != chosen.hooks[0]:
        report.note(f"compiled for hook `{artifact.hook}` (`pfc targets` explains the "
                    "hooks; --hook chooses)")
    _write(args, artifact, report)
    return 0


def _compile_firewall(args: argparse.Namespace, compiled, targets: list[str],
                      report: _Report) -> int:
    """A whole firewall: each block to the first target that carries it
    (``pfc.build.build_ruleset``); one artifact per block (per target for targets
    that take all their blocks at once)."""
    if args.hook is not None or args.link is not None:
        raise UsageError(f"`{shown(args.file)}` is a whole firewall: each block names its "
                         "hook; --hook and --link are for one rule list")
    artifacts, diags = build_ruleset(compiled.ruleset, targets, args.format, dev=args.dev,
                                     table=args.table or "pfc", notrack=args.notrack,
                                     audit=args.audit)
    if diags:
        report.diagnose(diags, compiled.sources)
        return 1
    if len(artifacts) == 1:
        _write(args, artifacts[0], report)
        return 0
    output = args.output or ""
    if not output or output == STDIO or not (output.endswith("/") or Path(output).is_dir()):
        names = ", ".join(f"`{name}`" for a in artifacts for name in list(a.files)[:1])
        raise UsageError(f"`{shown(args.file)}` compiles to {len(artifacts)} artifacts "
                         f"({names}): write them with -o DIR/")
    for artifact in artifacts:
        for path in _write_files(artifact, output):
            report.wrote(str(path))
    return 0


def option_warnings(chosen: Backend, args: argparse.Namespace) -> list[str]:
    """One line per option ``chosen`` does not read; a UsageError for contradictions."""
    given = {"dev": args.dev is not None, "table": args.table is not None,
             "notrack": bool(args.notrack)}
    reads = READS.get(chosen.name, set())
    out = []
    for option, on in given.items():
        if on and option not in reads:
            why = WHY[option].get(chosen.name) or WHY[option][None]
            out.append(f"--{option} is ignored by target `{chosen.name}`: {why}")
    if chosen.name == "nft" and args.dev is not None and args.hook not in (None, "ingress"):
        raise UsageError(f"--dev {shown(args.dev)} with --hook {shown(args.hook)}: nft's "
                         f"`{shown(args.hook)}` hook filters every device, not only "
                         f"{shown(args.dev)}; use --hook ingress to filter that device "
                         "only, or leave out --dev")
    return out


def _write(args: argparse.Namespace, artifact: Artifact, report: _Report) -> None:
    if args.output == STDIO and artifact.text is None:
        name, *others = artifact.files
        refuse_terminal(f"format `{artifact.format}`")
        sys.stdout.flush()
        sys.stdout.buffer.write(artifact.files[name])
        if others:
            report.note(f"-o - writes only {name}; not written: {', '.join(others)} "
                        "(use -o DIR/ for every file)")
    elif args.output and args.output != STDIO:
        for path in _write_files(artifact, args.output):
            report.wrote(str(path))
    elif artifact.text is None:
        raise UsageError(f"format `{artifact.format}` is binary: write it with -o FILE "
                         "(or -o - for standard output)")
    else:
        sys.stdout.write(artifact.text)


def _write_files(artifact: Artifact, output: str) -> list[Path]:
    out = Path(output)
    try:
        if output.endswith("/"):
            out.mkdir(parents=True, exist_ok=True)
        return write_artifact(artifact, out)
    except OSError as exc:
        where = exc.filename if exc.filename is not None else output
        raise OutputError(f"`{shown(str(where))}`", exc) from exc


class _Report:
    """What compile says besides the artifact: lines on stderr as they come, or (with
    ``--diagnostics json``) one JSON object on stderr at the end."""

    def __init__(self, args: argparse.Namespace):
        self.json = args.diagnostics == "json"
        self.file, self.target = args.file, args.target
        self.diagnostics: list[dict] = []
        self.warnings: list[str] = []
        self.notes: list[str] = []
        self.written: list[str] = []
        self.error: str | None = None

    def diagnose(self, diags: list[Diagnostic], sources: dict[str, SourceFile]) -> None:
        if self.json:
            self.diagnostics += [to_json(d, sources) for d in diags]
        elif diags:
            print_diagnostics(diags, sources)

    def warn(self, message: str) -> None:
        self._line("warning", message, self.warnings)

    def note(self, message: str) -> None:
        self._line("note", message, self.notes)

    def wrote(self, path: str) -> None:
        if self.json:
            self.written.append(path)
        else:
            print(f"wrote {shown(path)}", file=sys.stderr)

    def _line(self, kind: str, message: str, into: list[str]) -> None:
        if self.json:
            into.append(message)
        else:
            print(f"pfc compile: {kind}: {message}", file=sys.stderr)

    def finish(self) -> None:
        if not self.json:
            return
        ok = self.error is None and not any(d["severity"] == "error"
                                            for d in self.diagnostics)
        print_json({"ok": ok, "file": self.file, "target": self.target,
                    "error": self.error, "diagnostics": self.diagnostics,
                    "warnings": self.warnings, "notes": self.notes,
                    "wrote": self.written}, file=sys.stderr)


COMPILE = Command("compile", "compile a policy for one target",
                  "Compile a policy for one target and print it, or write it with -o.\n"
                  "Rules the target cannot express are errors naming the targets that can;\n"
                  "nothing is dropped silently. `pfc targets` lists targets, hooks, formats.\n"
                  "An option the target does not read is a warning; options that\n"
                  "contradict each other (nft --hook input with --dev) are a usage error.",
                  _compile_args, _compile)


# ---------------------------------------------------------------------------- targets

def _targets_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="text: a table; json: one object on stdout (docs/json.md)")


def targets_json() -> dict:
    return {"targets": [
        {"name": b.name, "description": b.description, "hooks": list(b.hooks),
         "formats": list(b.formats), "binary_formats": sorted(b.binary_formats),
         "supports": sorted(b.supports), "blocks": [{"block": k, "hook": v}
                                                 for k, v in b.carries.items()]}
        for b in backends.registry().values()]}


def targets_table():
    """The table: hooks, formats and features one per line, every column folding
    rather than cutting (hook names are typed by users: never an ellipsis)."""
    from rich.table import Table

    table = Table(title="pfc targets (first hook and format: the default)")
    for column in ("target", "hooks", "formats", "supports"):  # names: never broken
        table.add_column(column, no_wrap=True, overflow="fold")
    table.add_column("what", overflow="fold")
    for b in backends.registry().values():
        table.add_row(cell(b.name), cell_lines(b.hooks), cell_lines(b.formats),
                      cell_lines(sorted(b.supports)), cell(b.description))
    return table


def blocks_table():
    """The blocks of a whole firewall, each with the targets that carry it (the hook
    it is emitted at where that has another name)."""
    from rich.table import Table

    from pfc.frontend.firewall.hooks import BLOCKS

    table = Table(title="whole firewalls: the targets that carry each block")
    table.add_column("block", no_wrap=True)
    table.add_column("targets (→ the hook it runs at)", overflow="fold")
    for name in BLOCKS:
        takers = [b.name if b.carries[name] in (name, b.name, "none") else
                  f"{b.name} → {b.carries[name]}"
                  for b in backends.registry().values() if name in b.carries]
        table.add_row(cell(name), ", ".join(takers) or "none yet")
    return table


def _targets(args: argparse.Namespace) -> int:
    if args.format == "json":
        print_json(targets_json())
        return 0
    from rich.console import Console

    console = Console()
    console.print(targets_table())
    console.print(blocks_table())
    return 0


TARGETS = Command("targets", "list targets with their hooks, formats and features",
                  "List every compilation target: its hooks (first is the default), its\n"
                  "output formats (first is the default), the features it supports and\n"
                  "the blocks of a whole firewall it carries (BLOCK→HOOK where the block\n"
                  "is emitted at a hook of another name; docs/language.md).",
                  _targets_args, _targets)
