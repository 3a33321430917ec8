"""``pfc bench --kernel``'s report: the rounds' medians and the ratios to xdp
(``pfc.bench.lab.combine``, ``pfc.bench.report.ratio_lines``); the bench itself runs
in the 6.1 guest in tests/kernel/test_modular_load.py."""

from __future__ import annotations

from pfc.bench import lab as bench_lab
from pfc.bench import report as bench_report


def _round(cpu: dict[str, float | None]) -> dict:
    return {"rows": [{"name": n, "status": "ok" if v else "error: x",
                      "traffic": {"cpu_ns_per_packet": v} if v else None,
                      "ratio_to_none": None} for n, v in cpu.items()]}


def test_medians_over_rounds_and_ratios_to_xdp():
    rounds = [_round({"none": 100, "xdp": 200, "u32": 150, "nfmod": None}),
              _round({"none": 120, "xdp": 260, "u32": 130, "nfmod": None}),
              _round({"none": 110, "xdp": 220, "u32": 110, "nfmod": None})]
    out = bench_lab.combine(rounds, "6.1.0-57-amd64", "tcg")
    rows = {r["name"]: r for r in out["rows"]}
    assert rows["xdp"]["traffic"]["cpu_ns_per_packet"] == 220
    assert rows["u32"]["rounds_cpu_ns"] == [150, 130, 110]
    assert rows["u32"]["ratio_to_none"]["cpu_ns_per_packet"] == round(130 / 110, 3)
    assert out["cost_to_xdp"] == {"none": 0.5, "xdp": 1.0, "u32": round(130 / 220, 3)}
    assert rows["nfmod"]["traffic"] is None and rows["nfmod"]["rounds_cpu_ns"] == []
    lines = bench_report.ratio_lines(out)
    assert lines[0].startswith("per-packet CPU cost relative to xdp, kernel "
                               "6.1.0-57-amd64 (tcg), median of 3 round(s)")
    assert any(line.split() == ["u32", "0.59×", "(rounds", "110-150", "ns)"]
               for line in lines), lines
    assert "TCG emulates every instruction" in lines[-1]


def test_no_xdp_row_no_ratios():
    out = bench_lab.combine([_round({"none": 100, "xdp": None})], "6.1", "kvm")
    assert out["cost_to_xdp"] is None
    assert bench_report.ratio_lines(out) == ["no ratios: the xdp row has no CPU time "
                                             "(see its status)"]


def test_nfmod_and_u32_on_a_kernel_that_cannot_take_them(capsys, monkeypatch):
    """Named: an error saying why and where it runs; with `all`: skipped, in the notes
    (compile_targets: before any namespace or traffic)."""
    from pfc.backends.nfmod import kmod
    from pfc.bench import measure
    from pfc.cli.main import main
    from pfc.frontend.pipeline import compile_text
    from tests.paths import ROOT

    monkeypatch.setattr(kmod, "modules_unavailable", lambda: "kernel X cannot load modules")
    monkeypatch.setattr(kmod, "u32_unavailable", lambda: "kernel X lacks act_gact")
    monkeypatch.setattr(measure, "missing_privileges", lambda: None)
    assert main(["bench", str(ROOT / "examples" / "ddos-drop-udp-subnet.pf"),
                 "--targets", "nfmod"]) == 1
    err = capsys.readouterr().err
    assert "target `nfmod`: kernel X cannot load modules (`pfc bench --kernel 6.1`" in err
    compiled = compile_text("drop udp dst 10.0.0.0/8\n", "t.pf")
    req = measure.Request("t.pf", compiled, list(measure.TARGETS), [])
    notes = measure.compile_targets(req, explicit=False)
    assert notes == ["nfmod: skipped: kernel X cannot load modules",
                     "u32: skipped: kernel X lacks act_gact"]
    assert req.targets == [t for t in measure.TARGETS if t not in ("nfmod", "u32")]
    assert {"xdp", "tc", "socket", "nft", "iptables", "cbpf", "userspace"} <= set(req.targets)
