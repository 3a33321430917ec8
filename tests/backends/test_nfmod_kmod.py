"""What the running kernel lacks for nfmod and u32 (backends/nfmod/kmod.py), on made-up
/proc, /sys and /boot trees: each reason names the kernel and what it lacks."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

from pfc.backends.nfmod import kmod

RELEASE = os.uname().release


def _tree(tmp: Path, *, modules: bool = True, sig: str = "N", lockdown: str = "[none]",
          config: str | None = None) -> tuple[Path, Path, Path]:
    proc, sys, boot = tmp / "proc", tmp / "sys", tmp / "boot"
    params = sys / "module" / "module" / "parameters"
    params.mkdir(parents=True)
    (sys / "kernel" / "security").mkdir(parents=True)
    proc.mkdir()
    boot.mkdir()
    if modules:
        (proc / "modules").write_text("")
    (params / "sig_enforce").write_text(sig + "\n")
    (sys / "kernel" / "security" / "lockdown").write_text(lockdown + "\n")
    if config is not None:
        (proc / "config.gz").write_bytes(gzip.compress(config.encode()))
    return proc, sys, boot


def test_a_kernel_without_module_loading(tmp_path: Path) -> None:
    proc, sys, _ = _tree(tmp_path, modules=False)
    assert kmod.modules_unavailable(proc, sys) == (
        f"kernel {RELEASE} cannot load modules (built without CONFIG_MODULES: "
        "no /proc/modules)")


def test_signatures_enforced_and_lockdown(tmp_path: Path) -> None:
    proc, sys, _ = _tree(tmp_path / "a", sig="Y")
    assert "enforces module signatures (module.sig_enforce=Y)" in kmod.modules_unavailable(
        proc, sys)
    proc, sys, _ = _tree(tmp_path / "b", lockdown="none [integrity] confidentiality")
    assert "is locked down" in kmod.modules_unavailable(proc, sys)


def test_a_kernel_that_loads_modules(tmp_path: Path) -> None:
    proc, sys, _ = _tree(tmp_path)
    assert kmod.modules_unavailable(proc, sys) is None


def test_u32_kinds_built_in_as_modules_or_missing(tmp_path: Path) -> None:
    every = "".join(f"{opt}=y\n" for _, opt in kmod.U32_KINDS)
    proc, sys, boot = _tree(tmp_path / "a", config=every)
    assert kmod.u32_unavailable(proc, boot, sys) is None
    half = ("CONFIG_NET_SCH_INGRESS=y\nCONFIG_NET_CLS_U32=y\n"
            "# CONFIG_NET_ACT_GACT is not set\nCONFIG_NET_CLS_MATCHALL=m\n")
    proc, sys, boot = _tree(tmp_path / "b", config=half, modules=False)
    assert kmod.u32_unavailable(proc, boot, sys) == (
        f"kernel {RELEASE} lacks what tc u32 needs: act_gact not built "
        "(CONFIG_NET_ACT_GACT not set); cls_matchall only as modules, which it cannot load")


def test_u32_without_a_readable_config_lets_tc_say(tmp_path: Path) -> None:
    proc, sys, boot = _tree(tmp_path)
    assert kmod.u32_unavailable(proc, boot, sys) is None


def test_pfc_load_says_how_to_load_by_hand_and_why_not_here(capsys) -> None:
    from pfc.cli.main import main
    from tests.paths import ROOT

    policy = str(ROOT / "examples" / "ddos-drop-all.pf")
    for target, how, why in (("nfmod", "insmod DIR/pfc_nf.ko", kmod.modules_unavailable()),
                             ("u32", "tc -batch FILE", kmod.u32_unavailable())):
        assert main(["load", policy, "--target", target, "--dev", "lo"]) == 2
        err = capsys.readouterr().err
        assert f"pfc has no loader for target `{target}` yet" in err and how in err, err
        assert (f"this kernel cannot run it: {why}" in err) if why else \
            "cannot run it" not in err
