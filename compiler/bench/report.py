"""``pfc bench`` output: the rich table, JSON, and the PNG chart (matplotlib, Agg)."""

from __future__ import annotations

import json
from pathlib import Path

COLUMNS = ("target/baseline", "hook", "test-run ns/pkt drop/pass", "Mpps sent", "dropped/s",
           "dropped (expected)", "CPU ns/pkt", "× none", "latency µs p50 / p99")


def to_json(report: dict) -> str:
    return json.dumps(report, indent=2)


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


def print_table(report: dict, notes: list[str]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"pfc bench {report['file']} ({report['duration']} s of traffic "
                        f"per row, test runs ×{report['repeat']})")
    for i, col in enumerate(COLUMNS):
        table.add_column(col, justify="left" if i < 2 else "right")
    for row in table_rows(report):
        table.add_row(*row)
    console = Console()
    if not console.is_terminal:
        console = Console(width=160)
    console.print(table)
    for r in report["rows"]:
        if r["status"] != "ok":
            print(f"  {r['name']}: {r['status']}")
    for frame in report["frames"]:
        print(f"  frame ({frame['verdict']}): {frame['hex'][:96]}"
              f"{'…' if len(frame['hex']) > 96 else ''}")
    for note in notes:
        print(f"  note: {note}")


def plot(report: dict, out: Path) -> Path:
    """Two bar charts side by side: test-run ns/packet (eBPF hooks) and, for every
    row with traffic, CPU ns/packet and Mpps through the veth."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in report["rows"] if r["traffic"]]
    names = [r["name"] for r in rows]
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.2))
    ebpf = [r for r in report["rows"] if r["test_run_ns"]]
    axes[0].bar([r["name"] for r in ebpf], [r["test_run_ns"].get("mean", 0) for r in ebpf],
                color="tab:blue")
    axes[0].set_title("BPF_PROG_TEST_RUN ns/packet")
    axes[1].bar(names, [r["traffic"]["cpu_ns_per_packet"] or 0 for r in rows],
                color="tab:orange")
    axes[1].set_title("CPU ns/packet through the veth (softirq incl.)")
    axes[2].bar(names, [r["traffic"]["pps"] / 1e6 for r in rows], color="tab:green")
    axes[2].set_title("Mpps sent (one CPU)")
    for ax in axes:
        ax.tick_params(axis="x", rotation=30)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(f"pfc bench {report['file']}")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
