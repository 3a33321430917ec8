"""Per-packet cost versus number of rules (issue 9): pfc's output against naive chains.

For N in 1, 10, 100, 1k, 10k, 100k (``--quick``: up to 1k) three policies:

- ``list``: N rules ``drop src 10.x.y.z`` (pfc's ``group_runs`` pass and sets turn them
  into one lookup); the addresses are scattered over 10.0.0.0/8 (seeded), as a
  blocklist's are: adjacent ones would merge into a few prefixes and measure nothing;
- ``set``: one rule ``drop src $block`` with ``set block = file "..."`` of N addresses;
- ``naive``: the list policy written by hand, one nft / iptables rule per address
  (:mod:`pfc.bench.naive`), capped at ``--naive-max`` (default 10k: loading 100k naive
  rules takes minutes and each packet then walks them all).

Measured with :mod:`pfc.bench`'s own code: xdp, tc, socket by ``BPF_PROG_TEST_RUN``
(ns/packet, mean of a dropped and a passed frame; their veth traffic is recorded too);
nft, iptables and the naive chains by real traffic through the veth (CPU ns per
packet, softirq included; the ``none`` row is the same traffic with no filter). The
dropped frame matches the last address, the passed one none: both walk a whole naive
chain.

Run as root from the repository: ``.venv/bin/python benchmarks/scale.py [--quick]
[--plot docs/img/scale.png] [--out benchmarks/results/scale.json]``.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import random
import sys
import tempfile
import time
from pathlib import Path

from pfc.bench import measure as bench
from pfc.frontend.pipeline import compile_path, compile_text
from pfc.oracle import framebuild as fb

ROOT = Path(__file__).resolve().parent.parent
COUNTS = (1, 10, 100, 1_000, 10_000, 100_000)
QUICK = (1, 10, 100, 1_000)
EBPF = ("xdp", "tc", "socket")
NETFILTER = ("nft", "iptables")
NAIVE = ("nft-naive", "iptables-naive")
PASS_SRC = "192.0.2.200"


def addresses(n: int) -> list[str]:
    """``n`` distinct addresses in 10.0.0.0/8, scattered (the same ones every run)."""
    base = int(ipaddress.IPv4Address("10.0.0.0"))
    picks = random.Random(n).sample(range(1, 1 << 24), n)
    return [str(ipaddress.IPv4Address(base + i)) for i in picks]


def frame(src: str) -> bytes:
    s, d = ipaddress.IPv4Address(src).packed, bytes([192, 0, 2, 2])
    udp = fb.udp(s, d, 1234, 9000, b"pfc-scale-payload!")
    return fb.ethernet(bench.DUT_MAC, bench.SEND_MAC, fb.ETH_IP4, fb.ipv4(s, d, 17, udp))


def policies(n: int, tmp: Path, list_max: int) -> dict[str, tuple[str, object]]:
    """variant → (policy file, Compiled); the list variant only up to ``list_max``."""
    addrs = addresses(n)
    listed = "default pass\n" + "".join(f"drop src {a}\n" for a in addrs)
    list_path = tmp / f"list-{n}.pf"
    list_path.write_text(listed)
    (tmp / f"block-{n}.txt").write_text("\n".join(addrs) + "\n")
    set_path = tmp / f"set-{n}.pf"
    set_path.write_text(f'set block = file "block-{n}.txt"\ndefault pass\ndrop src $block\n')
    out = {"list": (str(list_path), compile_path(list_path))} if n <= list_max else {}
    return out | {"set": (str(set_path), compile_path(set_path))}


def measure_point(n: int, variant: str, path: str, compiled, args, frames) -> dict:
    """One policy: every pfc target (and the naive chains for the list variant)."""
    judged = bench.verdicts(compiled.require(), frames)
    out: dict[str, dict] = {}
    targets = [t for t in EBPF + NETFILTER if t in args.targets]
    req = bench.Request(path, compiled, targets, [], args.duration, None, args.repeat)
    t0 = time.monotonic()
    try:
        notes = bench.compile_targets(req, explicit=False)
    except bench.BenchError as exc:
        notes = [str(exc)]
    compile_s = time.monotonic() - t0
    for note in notes:
        print(f"  N={n} {variant}: {note}", file=sys.stderr)
    for target in targets:
        if target not in req.artifacts:
            out[target] = {"status": "not compiled"}
            continue
        out[target] = _one(req, target, frames, judged)
    if variant == "list":
        for name in NAIVE:
            if n > args.naive_max:
                out[name] = {"status": f"skipped: more than --naive-max {args.naive_max}"}
            else:
                out[name] = _one(req, name, frames, judged)
    out["_compile_s"] = {"seconds": round(compile_s, 2)}
    return out


def _one(req: bench.Request, name: str, frames, judged) -> dict:
    """One target or naive chain: test runs (eBPF) and traffic, as bench measures."""
    t0 = time.monotonic()
    try:
        row = bench.measure(req, "baseline" if name in NAIVE else "target", name, frames,
                            judged, lambda f: None)
    except Exception as exc:  # noqa: BLE001 - a point that fails is reported, not fatal
        return {"status": f"error: {exc}"[:300]}
    if row.traffic is None:
        return {"status": row.status}
    t = row.traffic
    out = {"status": "ok", "ns_per_packet": t["cpu_ns_per_packet"], "method": "traffic",
           "traffic_ns_per_packet": t["cpu_ns_per_packet"], "pps": t["pps"],
           "dropped": t["dropped"], "expected_dropped": row.expected_dropped,
           "seconds_incl_load": round(time.monotonic() - t0, 2)}
    if row.test_run_ns:
        out |= {"ns_per_packet": row.test_run_ns.get("mean"), "method": "test_run",
                "test_run_ns": row.test_run_ns}
    return out


def none_baseline(args, frames) -> dict:
    compiled = compile_text("default pass\n")
    req = bench.Request("<none>", compiled, [], ["none"], args.duration, None, args.repeat)
    judged = bench.verdicts(compiled.require(), frames)
    row = bench.measure(req, "baseline", "none", frames, judged, lambda f: None)
    return {"status": row.status, "ns_per_packet": row.traffic["cpu_ns_per_packet"],
            "pps": row.traffic["pps"]}


# ---------------------------------------------------------------------------- output

def columns(results: dict) -> list[str]:
    cols = []
    for point in results["points"]:
        for variant, per in point["variants"].items():
            for name in per:
                label = _label(variant, name)
                if not name.startswith("_") and label not in cols:
                    cols.append(label)
    return cols


def _label(variant: str, name: str) -> str:
    return name if variant == "list" or name in NAIVE else f"{name} (set file)"


def cell(point: dict, label: str) -> dict | None:
    for variant, per in point["variants"].items():
        for name, value in per.items():
            if _label(variant, name) == label:
                return value
    return None


def print_table(results: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if not console.is_terminal:
        console = Console(width=200)
    table = Table(title="ns/packet versus rule count (eBPF: BPF_PROG_TEST_RUN; nft, "
                        "iptables, naive: CPU ns/packet of veth traffic, none = "
                        f"{results['none']['ns_per_packet']:.0f})")
    cols = columns(results)
    table.add_column("rules", justify="right")
    for c in cols:
        table.add_column(c, justify="right")
    for point in results["points"]:
        cells = []
        for c in cols:
            v = cell(point, c)
            cells.append("-" if v is None else f"{v['ns_per_packet']:,.0f}"
                         if v.get("ns_per_packet") is not None else v["status"].split(":")[0])
        table.add_row(f"{point['rules']:,}", *cells)
    console.print(table)
    for line in ratio_lines(results):
        print(line)


def ratios(results: dict) -> dict:
    pts = {p["rules"]: p for p in results["points"]}
    out = {}
    lo, hi = min(pts), max(pts)
    for label in ("xdp", "xdp (set file)"):
        a, b = cell(pts[lo], label), cell(pts[hi], label)
        for key, what in (("ns_per_packet", "test run"), ("traffic_ns_per_packet",
                                                            "veth traffic CPU")):
            if a and b and a.get(key) and b.get(key):
                out[f"{label} {hi} vs {lo} rules ({what})"] = round(b[key] / a[key], 3)
    measured = [n for n in pts if (cell(pts[n], "nft-naive") or {}).get("ns_per_packet")]
    if not measured:
        return out
    at = 10_000 if 10_000 in measured else max(measured)
    for tool in ("nft", "iptables"):
        naive = cell(pts[at], f"{tool}-naive")
        for label in (tool, f"{tool} (set file)"):
            pfc = cell(pts[at], label)
            if pfc and naive and pfc.get("ns_per_packet") and naive.get("ns_per_packet"):
                out[f"{tool}-naive vs pfc {label} at {at} rules"] = round(
                    naive["ns_per_packet"] / pfc["ns_per_packet"], 2)
    return out


def ratio_lines(results: dict) -> list[str]:
    return [f"  {k}: {v}×" for k, v in results["ratios"].items()]


def plot(results: dict, out: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    colors = {"xdp": "C0", "tc": "C1", "socket": "C2", "nft": "C3", "iptables": "C4"}
    for label in columns(results):
        xs, ys = [], []
        for p in results["points"]:
            v = cell(p, label)
            if v and v.get("ns_per_packet"):
                xs.append(p["rules"])
                ys.append(v["ns_per_packet"])
        base = label.split(" ")[0].replace("-naive", "")
        style = ("--", "x") if "naive" in label else (":", "s") if "set" in label else ("-", "o")
        ax = axes[0] if base in EBPF else axes[1]
        ax.plot(xs, ys, linestyle=style[0], marker=style[1], color=colors[base], label=label)
    axes[1].axhline(results["none"]["ns_per_packet"], color="grey", linestyle=":",
                    label="no filter")
    axes[0].set_title("eBPF: BPF_PROG_TEST_RUN ns/packet")
    axes[1].set_title("netfilter: CPU ns/packet through a veth")
    axes[0].set_ylim(bottom=0)
    axes[0].set_ylabel("ns/packet")
    axes[1].set_yscale("log")
    axes[1].set_ylabel("CPU ns/packet (softirq incl.)")
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xlabel("rules (addresses)")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


# ------------------------------------------------------------------------------ main

def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="1, 10, 100, 1k rules only")
    p.add_argument("--counts", help="comma-separated rule counts (overrides --quick)")
    p.add_argument("--targets", default="xdp,tc,socket,nft,iptables")
    p.add_argument("--duration", type=float, default=1.0, help="seconds of traffic a point")
    p.add_argument("--repeat", type=int, default=100_000, help="test-run repetitions")
    p.add_argument("--naive-max", type=int, default=10_000)
    p.add_argument("--list-max", type=int, default=100_000,
                   help="largest N written as N rules (the set variant goes on)")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/scale.json")
    p.add_argument("--plot", type=Path, default=ROOT / "docs/img/scale.png")
    args = p.parse_args(argv)
    args.targets = args.targets.split(",")
    counts = [int(c) for c in args.counts.split(",")] if args.counts else \
        QUICK if args.quick else COUNTS
    why = bench.missing_privileges()
    if why:
        print(f"scale: {why}", file=sys.stderr)
        return 1
    frames = [frame(addresses(max(counts))[0]), frame(PASS_SRC)]
    results: dict = {"counts": counts, "duration": args.duration, "repeat": args.repeat,
                     "naive_max": args.naive_max, "list_max": args.list_max, "points": []}
    results["none"] = none_baseline(args, frames)
    with tempfile.TemporaryDirectory() as tmp:
        for n in counts:
            frames = [frame(addresses(n)[-1]), frame(PASS_SRC)]
            variants = {}
            for variant, (path, compiled) in policies(n, Path(tmp), args.list_max).items():
                print(f"scale: {n} rules, {variant}", file=sys.stderr)
                variants[variant] = measure_point(n, variant, path, compiled, args, frames)
            results["points"].append({"rules": n, "variants": variants})
            results["ratios"] = ratios(results)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(results, indent=2) + "\n")  # after every N
    print_table(results)
    plot(results, args.plot)
    print(f"wrote {args.out} and {args.plot}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
