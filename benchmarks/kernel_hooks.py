"""Every hook of one kernel: per-packet cost of nfmod and u32 beside XDP, tc, nft and
iptables, in Debian's 6.1 booted in the kernel lab (issue 31: "reported as ratios
within one kernel").

For each policy, ``pfc bench --kernel 6.1`` (:mod:`pfc.bench.lab`): one guest boot, the
bench run ``--rounds`` times in it (each row a fresh namespace, the same two frames:
one the policy drops, one it passes), each row's CPU ns per packet the median of the
rounds, divided by the xdp row's. Under TCG (this machine: no usable KVM) every
instruction is emulated, so only the ratios within one run mean something, and only
as "which hook costs more here", not as hardware numbers (docs/bench.md).

Policies: the seeds' DDoS rule (``examples/ddos-drop-udp-subnet.pf``: one subnet) and
the same rule over 64 subnets (u32: 64 nodes tried in turn; nfmod: a binary search;
nft and eBPF: their sets/maps).

    .venv/bin/python benchmarks/kernel_hooks.py [--kernel 6.1] [--seconds 4]
        [--rounds 5] [--json benchmarks/results/kernel_hooks.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pfc.bench import lab as bench_lab  # noqa: E402
from pfc.frontend.pipeline import compile_path  # noqa: E402

TARGETS = ["xdp", "tc", "nft", "iptables", "nfmod", "u32"]
MANY = "drop udp dst { " + ", ".join(f"10.{i}.{i}.0/24" for i in range(64)) + " }\n"


def policies(folder: Path) -> dict[str, Path]:
    many = folder / "ddos-drop-udp-64-subnets.pf"
    many.write_text("# the seeds' DDoS rule over 64 subnets\n" + MANY)
    return {"1 subnet": ROOT / "examples" / "ddos-drop-udp-subnet.pf", "64 subnets": many}


def measure(path: Path, kernel: str, seconds: float, rounds: int) -> dict:
    argv = ["--targets", ",".join(TARGETS), "--baselines", "none", "--duration",
            str(seconds), "--repeat", "1000", "--seed", "0"]
    return bench_lab.run(compile_path(path), str(path), kernel, argv, rounds, TARGETS,
                         lambda step, _: print(f"  {path.name}: {step}", file=sys.stderr))


def table(results: dict[str, dict]) -> str:
    names = ["none"] + TARGETS
    out = ["| policy | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    for label, report in results.items():
        ratios = report.get("cost_to_xdp") or {}
        cells = [f"{ratios[n]:.2f}" if n in ratios else "-" for n in names]
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    rows = next(iter(results.values()))["rows"]
    out.append("")
    out.append("CPU ns/packet (medians; TCG): " + "; ".join(
        f"{label}: " + ", ".join(f"{r['name']} {r['traffic']['cpu_ns_per_packet']:,.0f}"
                                 for r in rep["rows"] if r.get("traffic"))
        for label, rep in results.items()))
    bad = [f"{label}/{r['name']}: {r['status']}" for label, rep in results.items()
           for r in rep["rows"] if r["status"] != "ok"]
    checked = all(r["traffic"]["dropped"] == r["expected_dropped"] for rep in results.values()
                  for r in rep["rows"] if r.get("traffic"))
    out.append(f"rows not measured: {bad or 'none'}; every row's drops equal the "
               f"interpreter's: {checked} (rows per report: {len(rows)})")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernel", default="6.1")
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="pfc-kernel-hooks-", dir=ROOT / "benchmarks") \
            as tmp:
        results = {label: measure(path, args.kernel, args.seconds, args.rounds)
                   for label, path in policies(Path(tmp)).items()}
    text = table(results)
    print(text)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
