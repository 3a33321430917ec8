"""``pfc load`` refuses an eBPF artifact the running kernel cannot take, before touching
anything: here the kernel is made to answer as Linux 5.10 does (no fetching atomics);
tests/kernel/test_matrix.py sees the real 5.10 refuse the same."""

from __future__ import annotations

import contextlib
import io
import subprocess

import pytest

from pfc.cli.main import main
from pfc.kernel import bpf_probe, netns
from tests.paths import ROOT

ROOT_REASON = netns.missing_privileges()
pytestmark = [pytest.mark.kernel,
              pytest.mark.skipif(ROOT_REASON is not None, reason=ROOT_REASON or "")]


def _pfc(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


def _held(name: str) -> str:
    return subprocess.run(["ip", "netns", "exec", name, "sh", "-c",
                           "tc filter show dev dut ingress; ip -d link show dut"],
                          capture_output=True, text=True).stdout


@pytest.mark.parametrize("target", ["tc", "xdp"])
def test_a_kernel_without_cmpxchg_refuses_before_anything(target, tmp_path, monkeypatch):
    monkeypatch.setenv("PFC_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setattr(bpf_probe, "atomic_fetch", lambda: False)
    with netns.lab() as lab:
        before = _held(lab.name)
        code, out, err = _pfc("load", ROOT / "examples" / "rate-limit-log.pf", "--target",
                              target, "--dev", lab.dut, "--netns", lab.name)
        assert code == 2, (out, err)
        assert "need atomic compare-and-exchange (Linux 5.12)" in err
        assert _held(lab.name) == before
        assert not (tmp_path / "state").exists() or not any((tmp_path / "state").rglob(
            "*.json"))
