"""``pfc``: the command line. A thin layer over the pipeline, the backends and the oracle.

Exit codes (``EXIT_CODES``, also in ``pfc --help``): 0 success; 1 the policy has errors
(or ``fmt --check`` found changes, or a verification disagreed); 2 bad usage or
environment (unknown target, unreadable input, bad option, an output that cannot be
written); 70 an internal error (a pfc bug: one line, the traceback with ``--debug``);
130 interrupted. A reader that goes away (``pfc ... | head``) ends the command quietly
with 0.
"""

from __future__ import annotations

import argparse
import gc
import sys
import traceback
from importlib import metadata

from pfc.build import OptionError
from pfc.cli import output
from pfc.cli.apply import APPLY
from pfc.cli.bench import BENCH
from pfc.cli.check import CHECK, FMT
from pfc.cli.common import CONTEXT, Command, UsageError, print_diagnostics
from pfc.cli.compile import COMPILE, TARGETS
from pfc.cli.decide import DECIDE
from pfc.cli.events.log import LOG
from pfc.cli.importing.command import IMPORT
from pfc.cli.load import LOAD, UNLOAD
from pfc.cli.lsp import LSP
from pfc.cli.output import OutputError, shown
from pfc.cli.prove import DIFF, PROVE
from pfc.cli.run import FRAMES, RUN
from pfc.cli.set import SET
from pfc.cli.status import STATUS
from pfc.cli.verify import VERIFY
from pfc.frontend.diagnostics import CompileError, suggest
from pfc.frontend.pipeline import COMMAND

# Every command, in `pfc --help` order.
COMMANDS: tuple[Command, ...] = (CHECK, FMT, IMPORT, COMPILE, RUN, FRAMES, VERIFY, DIFF,
                                 PROVE, BENCH, LOAD, UNLOAD, STATUS, LOG, DECIDE, APPLY, SET,
                                 TARGETS, LSP)

DESCRIPTION = """\
pfc compiles one packet-filter policy language to every Linux hook (classic BPF,
eBPF socket filters, tc and XDP programs, nftables rulesets, iptables scripts)
and proves that the copies agree with a reference interpreter.

A policy is a file of rules, one per line, tried top to bottom:

    define dut = 192.168.0.79
    default pass
    drop udp dst $dut dport 12345
    count icmp
    redirect udp dst 192.168.64.2 dport 8080 to 10.0.1.2:8083
"""

# Commands whose --format json is a report on stdout (compile's --format is the artifact's).
REPORTS = frozenset(("check", "run", "verify", "bench", "status", "targets", "apply",
                     "diff", "prove", "set", "load", "import"))
EX_SOFTWARE = 70  # sysexits.h: an internal software error
EXIT_CODES = """\
exit codes:
  0    ok (also when the reader of the output goes away: `pfc ... | head`)
  1    the policy has errors, a target disagrees (verify), or fmt --check
       found changes
  2    bad usage or environment: an unknown option or target, an unreadable
       input, an output that cannot be written, missing privileges
  70   internal error: a pfc bug (run with --debug for the traceback)
  130  interrupted (Ctrl-C); `pfc log` and `pfc status --watch`, which run until
       stopped, end with 0 on Ctrl-C (as with --count, --timeout)
"""

EPILOG = f"""\
examples:
  pfc check examples/*.pf                 check every example
  pfc compile edge.pf --target cbpf --format asm
  pfc compile edge.pf --target xdp -o edge.o
  pfc frames edge.pf -n 1000 -o frames.pcap && pfc run edge.pf frames.pcap
  cat edge.pf | pfc check -               `-` is standard input (output for -o)

{EXIT_CODES}
`pfc COMMAND --help` explains each command. Docs: README.md and docs/ in the
source tree; --format json output: docs/json.md.
"""


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser; with ``argv``, only the command it names gets its options (some
    import heavy modules: ``lsp``'s load the LSP types, ~0.25 s), the others their names
    and summaries for ``pfc --help``."""
    wanted = _command_word(argv)
    parser = argparse.ArgumentParser(
        prog="pfc", description=DESCRIPTION, epilog=EPILOG, allow_abbrev=False,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"pfc {_version()}")
    parser.add_argument("--debug", action="store_true",
                        help="on an internal error, print the Python traceback")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        # Options are exact: `--pcap` is never silently `--pcap-out` (allow_abbrev).
        p = sub.add_parser(command.name, help=command.summary, description=command.doc,
                           epilog=EXIT_CODES, allow_abbrev=False,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        if wanted in (None, command.name):
            command.arguments(p)
        p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                       help="on an internal error, print the Python traceback")
        p.set_defaults(handler=command.handler)
    return parser


def parse(argv: list[str]) -> argparse.Namespace:
    """The arguments, or (through argparse's ``error``: usage, one line, exit 2) a usage
    error in the form README gives, ``pfc COMMAND: error: ...`` under the command's own
    usage: an unknown option names the command it was given to (and the option it
    resembles); an unknown command says which one it resembles."""
    parser = build_parser(argv)
    word = next((a for a in argv if not a.startswith("-")), None)
    names = [c.name for c in COMMANDS]
    if word is not None and word not in names:
        hint = suggest(word, names)
        parser.error(f"unknown command `{shown(word)}`" + (f"; {hint}" if hint else "")
                     + " (`pfc --help` lists the commands)")
    if word is not None:
        sub = _subparser(parser, word)
        rest = argv[argv.index(word) + 1:]
        rest = rest[:rest.index("--")] if "--" in rest else rest
        _unknown(sub, [a for a in rest if a.startswith("--")
                       and a.split("=", 1)[0] not in sub._option_string_actions])
    args, extra = parser.parse_known_args(argv)
    _unknown(_subparser(parser, args.command), extra)
    return args


def _unknown(sub: argparse.ArgumentParser, extra: list[str]) -> None:
    """A usage error for arguments the command does not take (checked before the
    missing ones: `--taget` is the cause of a missing `--target`)."""
    if not extra:
        return
    hint = next((h for a in extra if a.startswith("--") and
                 (h := suggest(a.split("=", 1)[0], sub._option_string_actions))), None)
    sub.error(f"unrecognized arguments: {shown(' '.join(extra))}"
              + (f"; {hint}" if hint else ""))


def _subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices[name]


def _command_word(argv: list[str] | None) -> str | None:
    """The command ``argv`` names (its first word that is not an option), or None."""
    if argv is None:
        return None
    words = [a for a in argv if not a.startswith("-")]
    names = {c.name for c in COMMANDS}
    return words[0] if words and words[0] in names else None


def _version() -> str:
    try:
        return metadata.version("pfc")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def main(argv: list[str] | None = None) -> int:
    """The program (``argv`` None: ``sys.argv``). As the program, the objects left at
    exit are frozen out of the collector: interpreter shutdown would otherwise walk them
    again and again (1.2 s after a 100k-entry compile)."""
    if argv is None:
        output.tolerant_encoding()
        try:
            return _main(sys.argv[1:])
        finally:
            gc.freeze()
    return _main(argv)


def _main(argv: list[str]) -> int:
    args = parse(argv)
    CONTEXT.reset()
    COMMAND.set(args.command)  # named when a command that takes one rule list gets a v2 file
    if args.command == "lsp":  # JSON-RPC on stdio: the server owns both streams
        return _boundary(args, lambda: args.handler(args))
    with output.guarded_stdout():
        return _boundary(args, lambda: _guarded(args))


def _guarded(args: argparse.Namespace) -> int:
    code = args.handler(args)
    sys.stdout.flush()  # a full disk shows here, inside the boundary
    return code


def _boundary(args: argparse.Namespace, run) -> int:
    """The one place exceptions become exit codes (see EXIT_CODES)."""
    try:
        return run()
    except (UsageError, OptionError) as exc:
        _fail(args, str(exc))
        return 2
    except CompileError as exc:  # a policy the command cannot take (a whole firewall)
        print_diagnostics(exc.diagnostics, exc.sources)
        return 1
    except OutputError as exc:
        if exc.closed:  # `pfc ... | head`: the reader has what it wanted
            output.silence_stdout()
            return 0
        _fail(args, str(exc), stdout_ok=False)
        return 2
    except KeyboardInterrupt:
        print("pfc: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 (the boundary: any bug ends here)
        _internal_error(args, exc)
        return EX_SOFTWARE


def _internal_error(args: argparse.Namespace, exc: Exception) -> None:
    if args.debug:
        traceback.print_exception(exc, file=sys.stderr)
    what = " ".join(shown(f"{type(exc).__name__}: {exc}").split())
    if len(what) > 300:
        what = what[:300] + "..."
    where = f" ({shown(CONTEXT.file)})" if CONTEXT.file else ""
    message = f"{what}{where}"
    if not args.debug:
        message += "; run with --debug for the traceback"
    _fail(args, message, label="internal error")


def _fail(args: argparse.Namespace, message: str, stdout_ok: bool = True,
          label: str = "error") -> None:
    """One line on stderr. With ``--format json`` also ``{"version": 1, "error": ...}``
    on stdout, so a CI job reading the JSON sees why there is no report; with
    ``compile --diagnostics json`` that object on stderr instead of the line."""
    message = shown(message)  # user text inside (a hook name, a path) stays inert
    text = message if label == "error" else f"{label}: {message}"
    if getattr(args, "diagnostics", None) == "json":
        output.print_json({"ok": False, "error": text}, file=sys.stderr)
        return
    print(f"pfc {args.command}: {label}: {message}", file=sys.stderr)
    if stdout_ok and args.command in REPORTS and getattr(args, "format", None) == "json":
        try:
            output.print_json({"error": text})
        except OutputError:
            pass

if __name__ == "__main__":
    sys.exit(main())
