"""Policy files whose names start with `-` (fuzz-and-faults S2): every tool pfc runs gets
such names as files, never as options (`clang -c -.xdp.c` took `-.xdp.c` for an
option, and the compile failed as "a pfc bug").

The only tool pfc gives a file name is clang (`pfc.kernel.toolchain`): iptables-restore,
ipset and nft read their input on standard input or through libnftables, and the kernel
objects are loaded through libbpf. So: `compile` for every target, the saved clang
command run again by hand, and `load`/`unload` (which build the objects the same way)
in a throw-away namespace.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from pfc import backends
from pfc.kernel.netns import missing_privileges
from tests.deploy.test_load import isolated, lab, pfc  # noqa: F401 - fixtures

kernel = pytest.mark.skipif(missing_privileges() is not None,
                            reason=str(missing_privileges()))
NAMES = ["-.pf", "--help.pf"]
TARGETS = list(backends.registry())
POLICY = "drop udp dport 53\npass tcp dport 80\n"
# what u32 can express (docs/u32.md: no transport fields), so that it compiles
POLICY_FOR = {"u32": "drop src 10.0.0.0/8\npass dst 192.0.2.0/24\n"}
# nfmod's files carry the module's names, not the policy's: Kbuild builds `obj-m :=
# MODULE.o` from MODULE.c (docs/nfmod.md), so a `-` name never reaches make
FILES_FOR = {"nfmod": ["Kbuild", "Makefile", "pfc_nf.c"]}


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in NAMES:
        (tmp_path / name).write_text(POLICY)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", NAMES)
def test_compile_every_target(folder: Path, name: str, target: str) -> None:
    """Both spellings a shell user has: `./-.pf`, and `--` before the name."""
    if target in POLICY_FOR:
        (folder / name).write_text(POLICY_FOR[target])
    code, _, err = pfc("compile", f"./{name}", "--target", target, "-o", "a/")
    assert code == 0, err
    code, _, err = pfc("compile", "--target", target, "-o", "b/", "--", name)
    assert code == 0, err
    stem = name[:-3]
    written = sorted(p.name for p in (folder / "a").iterdir())
    if target in FILES_FOR:
        assert written == FILES_FOR[target]
    else:
        assert written and all(n.startswith(f"{stem}.") for n in written), written
    assert written == sorted(p.name for p in (folder / "b").iterdir())


@pytest.mark.parametrize("name", NAMES)
def test_the_saved_clang_command_runs_again(folder: Path, name: str) -> None:
    code, _, err = pfc("compile", f"./{name}", "--target", "xdp", "-o", "out/")
    assert code == 0, err
    stem = f"{name[:-3]}.xdp"
    command = (folder / "out" / f"{stem}.clang.txt").read_text().splitlines()[-1]
    assert f" -c ./{stem}.c -o ./{stem}.o" in command
    (folder / "out" / f"{stem}.o").unlink()
    subprocess.run(command, shell=True, cwd=folder / "out", check=True)
    assert (folder / "out" / f"{stem}.o").stat().st_size > 0


@pytest.mark.kernel
@kernel
@pytest.mark.usefixtures("isolated")
@pytest.mark.parametrize("target", ["xdp", "tc", "nft", "iptables"])
def test_load_and_unload(folder: Path, lab, target: str) -> None:  # noqa: F811
    for name in NAMES:
        code, _, err = pfc("load", f"./{name}", "--target", target, "--dev", lab.dut,
                           "--netns", lab.name)
        assert code == 0, (name, err)
    code, _, err = pfc("unload", "--target", target, "--dev", lab.dut, "--netns",
                       lab.name)
    assert code == 0, err
