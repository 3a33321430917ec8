"""``pfc load`` of nfmod and u32 refused, with the reason, before anything is touched,
on a kernel that cannot take them: this host (no module loading at all), and kernels
made to answer as one enforcing module signatures or locked down would. Their loads
in a kernel that can take them: tests/kernel/test_modular_load.py (the 6.1 lab)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from pfc.backends.nfmod import kmod
from pfc.kernel import netns
from tests.deploy.test_load import pfc, policy_file

ROOT_REASON = netns.missing_privileges()
pytestmark = [pytest.mark.kernel,
              pytest.mark.skipif(ROOT_REASON is not None, reason=ROOT_REASON or "")]
POLICY = "default pass\ndrop udp dst 10.0.0.0/8\n"


@pytest.fixture
def lab(tmp_path, monkeypatch):
    monkeypatch.setenv("PFC_STATE_DIR", str(tmp_path / "state"))
    with netns.lab() as lab:
        yield lab


def held(lab) -> str:
    cmd = ("tc qdisc show; tc filter show dev dut ingress; nft list ruleset; "
           "cat /proc/modules 2>/dev/null; ip -d link show")
    return subprocess.run(["ip", "netns", "exec", lab.name, "sh", "-c", cmd],
                          capture_output=True, text=True).stdout


def refused(lab, tmp_path: Path, target: str) -> str:
    before = held(lab)
    code, out, err = pfc("load", policy_file(tmp_path, POLICY), "--target", target,
                         "--dev", lab.dut, "--netns", lab.name)
    assert code == 2, (out, err)
    assert held(lab) == before
    assert not (tmp_path / "state").exists() or not any((tmp_path / "state").rglob("*"))
    lines = err.strip().splitlines()
    assert len(lines) == 2 and lines[1].startswith("hint: "), err
    assert lines[0].endswith("; nothing was changed"), err
    return lines[0]


def test_this_kernel_cannot_load_modules(lab, tmp_path):
    why = kmod.modules_unavailable()
    if why is None:
        pytest.skip("this kernel loads modules: the refusal is tested with a stand-in")
    line = refused(lab, tmp_path, "nfmod")
    assert line == f"pfc load: error: target `nfmod`: {why}; nothing was changed"
    assert "cannot load modules" in line or "signatures" in line or "locked down" in line


def test_u32_refused_naming_what_the_kernel_lacks(lab, tmp_path):
    why = kmod.u32_unavailable()
    if why is None:
        pytest.skip("this kernel has tc u32, gact and matchall: tested in the 6.1 lab")
    line = refused(lab, tmp_path, "u32")
    assert line == f"pfc load: error: target `u32`: {why}; nothing was changed"


@pytest.mark.parametrize(("files", "reason"), [
    ({"sys/module/module/parameters/sig_enforce": "Y\n"}, "enforces module signatures"),
    ({"sys/kernel/security/lockdown": "none [integrity] confidentiality\n"},
     "is locked down (none [integrity]"),
])
def test_signing_or_lockdown_refused_before_anything(lab, tmp_path, monkeypatch, files,
                                                     reason):
    fake = tmp_path / "fake"
    (fake / "proc").mkdir(parents=True)
    (fake / "proc" / "modules").write_text("")
    for name, text in files.items():
        (fake / name).parent.mkdir(parents=True, exist_ok=True)
        (fake / name).write_text(text)
    real = kmod.modules_unavailable
    monkeypatch.setattr(kmod, "modules_unavailable",
                        lambda: real(fake / "proc", fake / "sys"))
    line = refused(lab, tmp_path, "nfmod")
    assert reason in line and "unsigned" in line


def test_unload_and_status_with_nothing_loaded_touch_nothing(lab, tmp_path):
    before = held(lab)
    for target in ("nfmod", "u32"):
        code, out, err = pfc("unload", "--target", target, "--dev", lab.dut,
                             "--netns", lab.name)
        assert code == 0 and f"nothing loaded: no {target} policy of pfc" in out, err
    code, out, _ = pfc("status", "--netns", lab.name)
    assert code == 0 and "nothing loaded" in out
    assert held(lab) == before
