"""``pfc load`` of nfmod and u32 in Debian's 6.1, booted in the kernel lab: load, traffic,
``status`` counters against the interpreter, a replace, a load that fails after it
began (the old policy stays), unload (tests/kernel/guest_modular.py, run in the guest
with pytest); then ``pfc bench`` of both in the same guest, their drops checked
against the interpreter's. The guest is the session's 6.1 (tests/kernel/conftest.py
``guests``: one boot shared with the kernel matrix). The host's refusals are
tests/deploy/test_load_modular.py."""

from __future__ import annotations

import json
import sys

import pytest

from pfc.backends.nfmod import build
from pfc.bench import lab as bench_lab
from pfc.build import build_artifact
from pfc.deploy.modular import nfmod as load_nfmod
from pfc.frontend.pipeline import compile_path
from pfc.kernel import lab
from pfc.verifier import kernels as vk
from tests.kernel.conftest import needs_lab
from tests.kernel.guest_modular import POLICIES
from tests.paths import ROOT

pytestmark = [pytest.mark.lab, needs_lab, pytest.mark.timeout(3600)]


def write_policies(into) -> None:
    into.mkdir(exist_ok=True)
    for name, text in POLICIES.items():
        (into / f"{name}.pf").write_text(text)


def prebuild(folder, release: str) -> None:
    """The modules the guest's loads insert, built here for its kernel (cached)."""
    for name, slot in (("first", 0), ("second", 1), ("third", 0)):
        artifact, diags = build_artifact(compile_path(folder / f"{name}.pf"), "nfmod",
                                         dev="dut")
        assert artifact is not None, diags
        module = load_nfmod.names(artifact.meta["module"])[slot]
        build.build(load_nfmod.module_files(artifact, module), module, release)


def test_nfmod_and_u32_load_in_6_1(guests):
    kernel = lab.fetch("6.1")
    vm = guests.get("6.1")
    folder = vm.shared / "policies"
    write_policies(folder)
    prebuild(folder, kernel.release)
    done = vm.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                   "tests/kernel/guest_modular.py"], cwd=ROOT,
                  env=vk._env() | {"PFC_GUEST_POLICIES": str(folder)})
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert "5 passed" in done.stdout, done.stdout[-3000:]
    bench_policy = folder / "first.pf"
    assert bench_lab.prebuild(compile_path(bench_policy), kernel.release) is None
    done = vm.run([sys.executable, "-m", "pfc", "bench", str(bench_policy), "--targets",
                   "nfmod,u32", "--baselines", "none", "--packets", "2000",
                   "--format", "json"], cwd=ROOT, env=vk._env())
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {r["name"]: r for r in json.loads(done.stdout)["rows"]}
    for name in ("nfmod", "u32"):
        row = rows[name]
        assert row["status"] == "ok" and row["traffic"]["lost_in_veth"] == 0, row
        assert row["traffic"]["dropped"] == row["expected_dropped"] > 0, row
