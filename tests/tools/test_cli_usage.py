"""The command line as the round-3 new-user trial met it (new-user-trial.md, main
8dd2744): `check --target` is compile's check (m7), `fmt` goes on past an unreadable
file (m8), usage errors name the command and the word meant (m11), and every `--help`
fits 80 columns."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pfc import backends
from pfc.cli.main import COMMANDS, main
from tests.paths import ROOT

PFC = [sys.executable, "-m", "pfc.cli"]
STATEFUL = """\
pass ct state established
drop ct state invalid
log udp dport 53 prefix "dns" rate 10/second
drop udp dport 7000 limit rate 100/second per src
"""
REDIRECT = "redirect udp dport 53 to 10.0.0.53\ndrop tcp dport 23 audit\n"
PORTS = ", ".join(str(p) for p in range(1000, 1400, 2))
TOO_COMPLEX = f"drop udp dport {{ {PORTS} }} sport {{ {PORTS} }}\n"
POLICIES = {"stateful": STATEFUL, "redirect": REDIRECT, "too-complex": TOO_COMPLEX,
            "edge": (ROOT / "examples" / "edge-drop.pf").read_text()}
SPECS = [(name, hook) for name, b in backends.registry().items() for hook in
         (None, *b.hooks)]


# -------------------------------------------------- m7: check --target is compile's check

@pytest.mark.parametrize("policy", POLICIES)
def test_check_refuses_exactly_what_compile_refuses(policy: str, tmp_path: Path,
                                                    capsys) -> None:
    """For every target and hook (and the default hook): `pfc check --target T[:HOOK]`
    exits 1 exactly when `pfc compile --target T [--hook HOOK]` does, and names the
    same errors."""
    path = tmp_path / f"{policy}.pf"
    path.write_text(POLICIES[policy])
    for target, hook in SPECS:
        spec, hook_args = (f"{target}:{hook}", ["--hook", hook]) if hook else (target, [])
        dev = ["--dev", "eth0"] if hook == "ingress" else []
        checked = main(["check", str(path), "--target", spec, *dev])
        check_err = capsys.readouterr().err
        compiled = main(["compile", str(path), "--target", target, *hook_args, *dev,
                         "-o", str(tmp_path / "out") + "/"])
        compile_err = capsys.readouterr().err
        assert checked == compiled, (spec, check_err, compile_err)
        errors = sorted(line for line in check_err.splitlines() if ": error: " in line)
        assert errors == sorted(line for line in compile_err.splitlines()
                                if ": error: " in line), spec


def test_check_takes_hooks_and_comma_lists(tmp_path: Path, capsys) -> None:
    """The trial's commands: `--target nft --target iptables` finds the ct state
    rules at the default hooks; `nft:input,iptables:filter-input` accepts them."""
    path = tmp_path / "s.pf"
    path.write_text(STATEFUL)
    assert main(["check", "--target", "nft", "--target", "iptables", str(path)]) == 1
    err = capsys.readouterr().err
    assert "at hook `prerouting`" in err and "at hook `raw-prerouting`" in err
    assert main(["check", "--target", "nft:input,iptables:filter-input", str(path)]) == 0
    assert main(["check", "--target", "cbpf,iptables", str(path)]) == 1
    assert "target `cbpf` cannot express" in capsys.readouterr().err


@pytest.mark.parametrize("value, needle", [
    ("nft:bogus", "target `nft` has no hook `bogus`; hooks: ingress, prerouting, input"),
    ("bogus", "unknown target `bogus`; known targets: cbpf"),
    ("xdp,,tc", "an empty target in the list"),
])
def test_bad_target_specs_are_usage_errors(value: str, needle: str, capsys) -> None:
    assert main(["check", "--target", value, str(ROOT / "examples" / "edge-drop.pf")]) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1


# ------------------------------------------------- m8: fmt goes on past unreadable files

@pytest.mark.parametrize("check", [False, True])
def test_fmt_goes_on_past_an_unreadable_file(tmp_path: Path, capsys, check: bool) -> None:
    for name in ("f2.pf", "f3.pf"):
        (tmp_path / name).write_text("drop  udp dport 53\n")
    files = [str(tmp_path / n) for n in ("f2.pf", "missing.pf", "f3.pf")]
    assert main(["fmt", *(["--check"] if check else []), *files]) == 2
    out, err = capsys.readouterr()
    assert "pfc fmt: error: cannot read" in err and "missing.pf" in err
    if check:
        assert out.count("+drop udp dport 53") == 2  # both diffs
    else:
        assert (tmp_path / "f3.pf").read_text() == "drop udp dport 53\n"


# ------------------------------------------------------- m11: usage errors, did you mean

def _usage_error(*args: str) -> list[str]:
    proc = subprocess.run([*PFC, *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    return proc.stderr.strip().splitlines()


def test_an_unknown_option_gets_the_commands_usage_and_its_name() -> None:
    lines = _usage_error("compile", "x.pf", "--target", "nft", "--bogus")
    assert lines[0].startswith("usage: pfc compile ")
    assert lines[-1] == "pfc compile: error: unrecognized arguments: --bogus"


def test_a_misspelt_option_is_named_before_the_option_it_hides() -> None:
    """`--taget nft` is why --target is missing: say so, with the option meant."""
    lines = _usage_error("compile", "x.pf", "--taget", "nft")
    assert lines[-1] == ("pfc compile: error: unrecognized arguments: --taget; "
                         "did you mean `--target`?")


def test_a_misspelt_command_says_which_one_was_meant() -> None:
    lines = _usage_error("chek", "x.pf")
    assert lines[-1] == ("pfc: error: unknown command `chek`; did you mean `check`? "
                         "(`pfc --help` lists the commands)")
    assert _usage_error("--debug", "bogus")[-1].startswith("pfc: error: unknown command")


def test_names_after_double_dash_are_files(tmp_path: Path) -> None:
    (tmp_path / "--target.pf").write_text("drop udp dport 53\n")
    proc = subprocess.run([*PFC, "check", "--", "--target.pf"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


# ------------------------------------------------------------------ --help at 80 columns

@pytest.mark.parametrize("command", [None, *(c.name for c in COMMANDS)])
def test_every_help_fits_80_columns(command: str | None) -> None:
    """The exit-code epilog was 84 columns; argparse wraps the options to COLUMNS,
    the description and epilog are ours."""
    argv = [*PFC, *([command] if command else []), "--help"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "80"})
    assert proc.returncode == 0, proc.stderr
    wide = [line for line in proc.stdout.splitlines() if len(line) > 80]
    assert not wide, wide
    assert "exit codes:" in proc.stdout
