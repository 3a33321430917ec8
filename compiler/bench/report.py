"""``pfc bench`` output: the table's rows, JSON, and the PNG chart (matplotlib, Agg).
The terminal rendering of the rows is the CLI's (``pfc.cli.bench``)."""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

COLUMNS = ("target/baseline", "hook", "test-run ns/pkt drop/pass", "Mpps sent", "dropped/s",
           "dropped (expected)", "CPU ns/pkt", "× none", "latency µs p50 / p99")


def _num(value, fmt: str = "{:,.0f}") -> str:
    return "-" if value is None else fmt.format(value)


def table_rows(report: dict) -> list[tuple[str, ...]]:
    out = []
    for r in report["rows"]:
        t, tr = r["traffic"], r["test_run_ns"]
        if t is None:
            status = r["status"] if len(r["status"]) < 20 else r["status"].split(":")[0]
            out.append((r["name"], r["hook"], _test_run(tr), status, *("",) * 5))
            continue
        lat = t["latency_us"]
        ratio = (r.get("ratio_to_none") or {}).get("cpu_ns_per_packet")
        out.append((
            r["name"], r["hook"], _test_run(tr), _num(t["pps"] / 1e6, "{:.3f}"),
            _num(t["dropped_pps"]), _dropped(t, r["expected_dropped"]),
            _num(t["cpu_ns_per_packet"]), _num(ratio, "{:.2f}"),
            f"{lat['median']:.1f} / {lat['p99']:.1f}" if lat else "-"))
    return out


def _dropped(t: dict, expected: int | None) -> str:
    """Dropped (expected); frames veth lost before the hook make ``expected`` an upper
    bound, so they are shown too."""
    lost = f", {t['lost_in_veth']:,} lost in veth" if t["lost_in_veth"] else ""
    return f"{t['dropped']:,} ({_num(expected)}{lost})"


def _test_run(tr: dict | None) -> str:
    if not tr:
        return "-"
    return " / ".join(f"{tr[k]:.0f}" if k in tr else "-" for k in ("drop", "pass"))


def ratio_lines(report: dict) -> list[str]:
    """``--kernel``: each row's CPU ns/packet over the xdp row's (medians of the
    rounds), with the spread of the rounds, and what the numbers are."""
    ratios, lab = report.get("cost_to_xdp") or {}, report.get("lab") or {}
    if not ratios:
        return ["no ratios: the xdp row has no CPU time (see its status)"]
    head = (f"per-packet CPU cost relative to xdp, kernel {lab.get('kernel')} "
            f"({lab.get('accel')}), median of {lab.get('rounds')} round(s):")
    out = [head]
    for r in report["rows"]:
        if r["name"] in ratios:
            spread = r.get("rounds_cpu_ns") or []
            span = f" (rounds {min(spread):,.0f}-{max(spread):,.0f} ns)" if spread else ""
            out.append(f"  {r['name']:<15} {ratios[r['name']]:6.2f}×{span}")
    if lab.get("accel") == "tcg":
        out.append("  (TCG emulates every instruction: compare rows of this run, not "
                   "absolute numbers)")
    return out


def stamp(report: dict, started: datetime, elapsed: float) -> dict:
    """The report with when and where it ran: ``kernel`` (uname release),
    ``started`` (ISO 8601, local time with offset), ``elapsed_s`` (the whole run)."""
    return dict(report, kernel=os.uname().release,
                started=started.astimezone().isoformat(timespec="seconds"),
                elapsed_s=round(elapsed, 1))


def _bar_values(rows: list[dict], value) -> tuple[list[float], list[str]]:
    """Heights and labels: the value on its bar, or why a row has none (``refused``,
    ``not installed``, ``error``) on an empty slot, so no row silently disappears."""
    heights, labels = [], []
    for r in rows:
        v = value(r)
        if v is None:
            heights.append(0)
            labels.append(r["status"].split(":")[0] if r["status"] != "ok" else "-")
        else:
            heights.append(v)
            labels.append(f"{v:,.3f}" if v < 10 else f"{v:,.0f}")
    return heights, labels


def plot(report: dict, out: Path) -> Path:
    """Write :func:`figure` to ``out`` as PNG (its directory must exist: OSError)."""
    import matplotlib.pyplot as plt

    fig = figure(report)
    try:
        fig.savefig(out, dpi=110, format="png")
    finally:
        plt.close(fig)
    return out


def figure(report: dict):
    """Three bar charts, each bar labelled with its value: test-run ns/packet (eBPF
    hooks), CPU ns/packet and Mpps through the veth (every row; a row without traffic
    has an empty slot saying why: ``refused``, ``not installed``). The title says
    kernel, date and duration; a note says it is one run (no error bars)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = report["rows"]
    ebpf = [r for r in rows if r["test_run_ns"]
            or (r["kind"] == "target" and r["name"] in ("xdp", "tc", "socket"))]
    charts = (
        (ebpf, lambda r: (r["test_run_ns"] or {}).get("mean"),
         "BPF_PROG_TEST_RUN ns/packet", "tab:blue"),
        (rows, lambda r: r["traffic"] and r["traffic"]["cpu_ns_per_packet"],
         "CPU ns/packet through the veth (softirq incl.)", "tab:orange"),
        (rows, lambda r: r["traffic"] and r["traffic"]["pps"] / 1e6,
         "Mpps sent (one CPU)", "tab:green"),
    )
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.8))
    for ax, (chosen, value, title, color) in zip(axes, charts, strict=True):
        heights, labels = _bar_values(chosen, value)
        bars = ax.bar([r["name"] for r in chosen], heights, color=color)
        ax.bar_label(bars, labels=labels, fontsize=7, padding=2)
        ax.set_title(title, fontsize=10)
        ax.tick_params(axis="x", rotation=30, labelsize=8)
        ax.grid(axis="y", alpha=0.3)
        ax.margins(y=0.15)
    fig.suptitle(_plot_title(report))
    fig.text(0.5, 0.01, "one run, no error bars: differences of a few percent between "
             "rows are within run-to-run noise (docs/bench.md)", ha="center", fontsize=8,
             style="italic")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return fig


def _plot_title(report: dict) -> str:
    when = report.get("started", "")[:16].replace("T", " ")
    parts = [f"pfc bench {report['file']}", f"Linux {report.get('kernel', '?')}", when,
             f"{report['duration']} s of traffic per row"]
    if report.get("elapsed_s") is not None:
        parts.append(f"{report['elapsed_s']} s in all")
    return " — ".join(p for p in parts if p)
