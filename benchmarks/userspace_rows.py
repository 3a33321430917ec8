"""Seed 000's whole comparison (§5.1-5.3 and the kernel hooks) with ``pfc bench``'s rows,
user space included: CPU ns per packet of each row over the ``none`` row, in rounds.

One round is one ``pfc bench`` run (``pfc.bench.measure.run``: every row in turn, each
in a fresh namespace, the same two frames: one the policy drops, one it passes); the
rounds interleave the rows, so drift on the shared 2-core machine hits them alike. The
table shows, per row, the median over rounds of CPU ns/packet and of its ratio to
``none`` in the same round, every round's ratio, and for the user-space rows the part
their own process spent (user + system time). Every row's drops are checked against the
interpreter in every round (``dropped`` = the interpreter's count, or an upper bound
when veth lost frames); a round where they differ stops the script.

    sudo .venv/bin/python benchmarks/userspace_rows.py [--policy examples/edge-drop.pf] \\
        [--duration S] [--rounds N] [--json benchmarks/results/bench_userspace.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from pathlib import Path

from pfc.bench import measure
from pfc.frontend.pipeline import compile_path

ROOT = Path(__file__).resolve().parent.parent


def one_round(path: Path, duration: float, seed: int) -> dict[str, dict]:
    compiled = compile_path(path)
    req = measure.Request(str(path), compiled, list(measure.TARGETS), ["none",
                          "nft-naive", "iptables-naive"], duration, seed=seed)
    measure.compile_targets(req, explicit=False)
    out = {}
    for row in measure.run(req)["rows"]:
        t = row["traffic"]
        if t is None:
            out[row["name"]] = {"status": row["status"]}
            continue
        expected, lost = row["expected_dropped"], t["lost_in_veth"]
        if t["dropped"] != expected and not (lost and t["dropped"] <= expected):
            raise SystemExit(f"{row['name']}: dropped {t['dropped']}, the interpreter says "
                             f"{expected}")
        out[row["name"]] = {"cpu": t["cpu_ns_per_packet"],
                            "process": t["process_cpu_ns_per_packet"],
                            "ratio": row["ratio_to_none"]["cpu_ns_per_packet"],
                            "hook": row["hook"], "pps": t["pps"]}
    return out


def table(rounds: list[dict[str, dict]]) -> tuple[str, list[dict]]:
    lines = ["| row | hook | CPU ns/pkt | × none (median) | × none per round | "
             "of which the process, ns/pkt |", "|---|---|---:|---:|---|---:|"]
    rows = []
    for name in rounds[0]:
        got = [r[name] for r in rounds if "cpu" in r.get(name, {})]
        if not got:
            lines.append(f"| {name} | | {rounds[0][name]['status']} | | | |")
            continue
        proc = [g["process"] for g in got if g["process"] is not None]
        row = {"row": name, "hook": got[0]["hook"],
               "cpu_ns": statistics.median(g["cpu"] for g in got),
               "ratio": statistics.median(g["ratio"] for g in got),
               "ratios": [g["ratio"] for g in got],
               "process_ns": statistics.median(proc) if proc else None}
        rows.append(row)
        lines.append(f"| {name} | {row['hook']} | {row['cpu_ns']:,.0f} | {row['ratio']:.2f} | "
                     f"{' '.join(f'{x:.2f}' for x in row['ratios'])} | "
                     f"{_ns(row['process_ns'])} |")
    return "\n".join(lines), rows


def _ns(value: float | None) -> str:
    return "—" if value is None else f"{value:.0f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--policy", type=Path, default=ROOT / "examples" / "edge-drop.pf")
    ap.add_argument("--duration", type=float, default=2.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    rounds = [one_round(args.policy, args.duration, seed=0) for _ in range(args.rounds)]
    text, rows = table(rounds)
    print(text)
    if args.json:
        args.json.write_text(json.dumps({
            "policy": str(args.policy.relative_to(ROOT)) if args.policy.is_relative_to(ROOT)
            else str(args.policy), "duration": args.duration, "rounds": args.rounds,
            "kernel": os.uname().release, "load": os.getloadavg()[0], "rows": rows,
            "per_round": rounds}, indent=1) + "\n")


if __name__ == "__main__":
    main()
