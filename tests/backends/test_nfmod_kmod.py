"""What the running kernel lacks for nfmod and u32 (backends/nfmod/kmod.py), on made-up
/proc, /sys and /boot trees: each reason names the kernel and what it lacks."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import pytest

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


def test_pfc_load_refuses_with_the_reason_before_anything(monkeypatch) -> None:
    """``check_kernel`` runs before the lock, the namespace and the device (the host's
    refusals end to end: tests/deploy/test_load_modular.py)."""
    from pfc.build import build_artifact
    from pfc.deploy.base import LoadError, check_kernel
    from pfc.frontend.pipeline import compile_text

    compiled = compile_text("drop dst 10.0.0.0/8\n", "t.pf")
    for target, probe in (("nfmod", "modules_unavailable"), ("u32", "u32_unavailable")):
        artifact, diags = build_artifact(compiled, target, dev="dut")
        assert artifact is not None, diags
        monkeypatch.setattr(kmod, probe, lambda: "kernel X cannot")
        with pytest.raises(LoadError) as refused:
            check_kernel(artifact)
        assert refused.value.cause == f"target `{target}`: kernel X cannot; nothing was changed"
        monkeypatch.setattr(kmod, probe, lambda: None)
        check_kernel(artifact)
