"""``pfc bench`` of a whole firewall in the kernel: every load measured beside no
firewall through ``pfc load``'s own path, refusals named, nothing left behind, usage
errors. Short runs; no timing assertions."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from pfc.cli.main import main
from pfc.kernel.netns import missing_privileges
from tests.paths import ROOT

EDGE = str(ROOT / "examples" / "ddos-edge.pf")
kernel = pytest.mark.skipif(missing_privileges() is not None,
                            reason=missing_privileges() or "")
SHORT = ["--duration", "0.2", "--rounds", "1"]


def _ours() -> set[str]:
    """This process's namespaces (the labs' names carry the pid; others run beside)."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {n for n in (line.split()[0] for line in out.splitlines() if line.strip())
            if f"-{os.getpid()}-" in n}


@pytest.mark.kernel
@kernel
def test_whole_firewall_bench_json(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("PFC_STATE_DIR", str(tmp_path / "state"))
    code = main(["bench", EDGE, "--targets", "nft,iptables,xdp+nft", "--format", "json",
                 *SHORT])
    out, err = capsys.readouterr()
    assert code == 0, err
    report = json.loads(out)
    assert report["kind"] == "firewall" and report["frames"]["eth0"] > 0
    rows = {r["name"]: r for r in report["rows"]}
    assert list(rows) == ["none", "nft", "iptables", "xdp+nft"]
    for name in ("none", "nft", "xdp+nft"):
        assert rows[name]["status"] == "ok", rows[name]
        assert rows[name]["ns_per_frame"]["eth0"] > 0
    assert rows["none"]["to_none"]["eth0"] == 1.0
    assert rows["iptables"]["status"].startswith("refused:") \
        and "`ingress` block" in rows["iptables"]["status"]
    assert _ours() == set()  # every lab removed
    assert not list((tmp_path / "state").glob("**/*.json"))  # every load unloaded


@pytest.mark.parametrize("args,message", [
    (["--pcap", "x.pcap"], "--pcap: not for a whole firewall"),
    (["--baselines", "nft-naive"], "--baselines: not for a whole firewall"),
    (["--targets", "nft+bogus"], "unknown target `bogus`"),
    (["--rounds", "0"], "--rounds must be positive"),
])
def test_whole_firewall_usage_errors(capsys, args, message):
    assert main(["bench", EDGE, *args]) == 2
    assert message in capsys.readouterr().err
