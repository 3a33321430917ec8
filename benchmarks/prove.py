"""`pfc diff` and `pfc prove` (issue 19): time against the issue's budgets, beside a
naive z3 encoding measured in the same run.

- diff: two generated policies of N rules (``--sizes``, default 1k and 10k) that
  differ in one rule (its port), budgets 1 s (1k) and 10 s (10k). pfc's diff encodes
  the changed rules and those that can meet them (``pfc.prove.boxes``) and solves
  with z3's bit-blasting tactic; the naive peer encodes every rule of both policies
  as one first-match chain and asks z3's default solver, capped at ``--naive-cap``.
- prove: every example on every target that can express it (default hooks; nft at
  netdev ingress), budget 60 s for all of them, beside the same formulas given to
  z3's default solver (arrays kept, no Ackermann reduction), each capped at
  ``--naive-cap``. The kernel confirmation of witnesses is off (``confirm=False``):
  pfc's own artifacts have none.
- ``--mutants N``: N mutants per target of ddos-drop-tcp-subnet-payload.pf (the
  mutation test's example):
  how many the prover says differ (each confirmed by running it in the kernel), how
  many it proves equal, how many are not programs the kernel takes.

    sudo .venv/bin/python benchmarks/prove.py [--sizes 1000,10000] [--mutants 100]

Results go to benchmarks/results/prove.json. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

import z3

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "benchmarks" / "results" / "prove.json"
DIFF_BUDGET = {1000: 1.0, 10000: 10.0}
PROVE_BUDGET = 60.0


def policy_text(n: int, seed: int = 3) -> list[str]:
    """``n`` rules of an edge ACL: per-subnet UDP and TCP services, some sources."""
    rng = random.Random(seed)
    lines = []
    for i in range(n):
        net = f"10.{(i >> 8) & 255}.{i & 255}.0/24"
        kind = rng.random()
        if kind < 0.4:
            lines.append(f"drop udp dst {net} dport {rng.randrange(1, 65535)}")
        elif kind < 0.8:
            lines.append(f"pass tcp dst {net} dport {rng.choice([22, 80, 443, 8080])}")
        else:
            lines.append(f"drop src 172.{16 + i % 16}.{rng.randrange(256)}.{rng.randrange(256)}")
    return lines


def _policy(lines: list[str]):
    from pfc.frontend.pipeline import compile_text
    return compile_text("default pass\n" + "\n".join(lines) + "\n").require()


def bench_diff(n: int, cap: float) -> dict:
    from pfc.prove import diff as prove_diff

    old = policy_text(n)
    new = list(old)
    middle = next(i for i in range(n // 2, n) if " udp " in old[i])  # one port changed
    new[middle] = new[middle].rsplit(" ", 1)[0] + " 65535"
    start = time.perf_counter()
    a, b = _policy(old), _policy(new)
    front = time.perf_counter() - start
    start = time.perf_counter()
    result = prove_diff.diff(a, b)
    ours = time.perf_counter() - start
    naive, naive_same = _naive_diff(a, b, cap)
    return {"rules": n, "seconds": round(ours, 3), "budget": DIFF_BUDGET.get(n),
            "front_end_seconds": round(front, 3),  # both policies parsed and checked
            "regions": [r.line() for r in result.regions], "encoded": result.encoded,
            "naive_seconds": naive, "naive_same": naive_same}


def _naive_diff(a, b, cap: float) -> tuple[float | str, bool | None]:
    from pfc.prove import diff as prove_diff
    from pfc.prove import formula
    from pfc.prove.frame import Frame, Reading

    start = time.perf_counter()
    frame = Frame.fresh()
    reading = Reading(frame)
    ma, mb = formula.meaning(a, reading), formula.meaning(b, reading)
    solver = z3.Solver()
    solver.set("timeout", int(cap * 1000))
    solver.add(frame.valid(), prove_diff.differ(ma, mb, frame,
                                                prove_diff.align(a, b).counters))
    found = solver.check()
    took = round(time.perf_counter() - start, 3)
    if found == z3.unknown:
        return f">{cap:g}", None
    return took, found == z3.unsat


def bench_prove(cap: float) -> dict:
    from pfc import backends
    from pfc.build import build_artifact
    from pfc.frontend.pipeline import compile_path
    from pfc.prove import proof

    rows, total = [], 0.0
    for path in sorted((ROOT / "examples").glob("*.pf")):
        compiled = compile_path(path)
        for target in backends.registry():
            if target == "ir":
                continue
            built, _ = build_artifact(compiled, target, **({"dev": "dut"} if target == "nft"
                                                          else {}))
            if built is None:
                continue
            row = {"example": path.stem, "target": target, "hook": built.hook}
            try:
                result = proof.prove(built, compiled.require(), confirm=False)
                row |= {"status": result.status, "seconds": round(result.seconds, 3)}
                total += result.seconds
            except Exception as exc:  # a model gap: reported, not hidden
                row |= {"status": f"error: {exc}", "seconds": None}
            row["naive_seconds"] = _naive_prove(built, compiled.require(), cap)
            rows.append(row)
            print(f"  {row}", file=sys.stderr)
    return {"total_seconds": round(total, 2), "budget": PROVE_BUDGET, "rows": rows}


def _naive_prove(artifact, policy, cap: float) -> float | str | None:
    from pfc.prove import formula, proof, views
    from pfc.prove.frame import Frame, Reading

    kind = views.kind(artifact.target, artifact.hook)
    start = time.perf_counter()
    try:
        frame = Frame.fresh()
        pol = formula.meaning(policy, Reading(frame, views.skip_tag(kind)))
        art = proof.behaviour(artifact, frame)
    except Exception:
        return None
    solver = z3.Solver()
    solver.set("timeout", int(cap * 1000))
    solver.add(views.constraint(kind, frame), proof.differ(pol, art, frame))
    found = solver.check()
    return f">{cap:g}" if found == z3.unknown else round(time.perf_counter() - start, 3)


def bench_mutants(n: int) -> list[dict]:
    from pfc.build import build_artifact
    from pfc.frontend.pipeline import compile_path
    from pfc.prove import mutate, proof
    from pfc.prove.targets.cbpf import Unsupported
    from tests.prove.test_prove import _lab

    out = []
    for target in ("cbpf", "xdp", "tc", "socket", "nft", "iptables"):
        example = "ddos-drop-tcp-subnet-payload"  # as tests/prove/test_prove.py
        compiled = compile_path(ROOT / "examples" / f"{example}.pf")
        built, _ = build_artifact(compiled, target, **({"dev": "dut"} if target == "nft"
                                                      else {}))
        counts = {"differs": 0, "proved": 0, "refused": 0, "unconfirmed": 0, "error": 0}
        start = time.perf_counter()
        with _lab(target):
            for m in mutate.mutants(compiled, built, n, seed=1):
                try:
                    result = proof.prove(m.artifact, compiled.require())
                except Unsupported:
                    counts["refused"] += 1
                    continue
                except Exception:
                    counts["error"] += 1
                    continue
                if not result.equal and "refuses to load" in result.note:
                    key = "refused"  # the verifier rejects it: no program to run
                else:
                    key = "proved" if result.equal else (
                        "differs" if result.confirmed else "unconfirmed")
                counts[key] += 1
        out.append({"target": target, "example": example, "mutants": n, **counts,
                    "seconds": round(time.perf_counter() - start, 1)})
        print(f"  {out[-1]}", file=sys.stderr)
    return out


def _load() -> list[float]:
    """The machine's 1, 5 and 15 minute load averages (2 cores shared)."""
    return [round(x, 2) for x in os.getloadavg()]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="1000,10000")
    p.add_argument("--naive-cap", type=float, default=120.0)
    p.add_argument("--mutants", type=int, default=0)
    p.add_argument("--skip-prove", action="store_true")
    p.add_argument("--output", type=Path, default=RESULTS)
    args = p.parse_args()
    report: dict = {"z3": z3.get_version_string(), "load_average": _load()}
    report["diff"] = [bench_diff(int(n), args.naive_cap) for n in args.sizes.split(",")]
    for row in report["diff"]:
        print(f"diff {row['rules']} rules: {row['seconds']} s (budget {row['budget']} s), "
              f"naive z3 {row['naive_seconds']} s; {row['regions']}")
    if not args.skip_prove:
        report["prove"] = bench_prove(args.naive_cap)
        print(f"prove, every example on every target: {report['prove']['total_seconds']} s "
              f"(budget {PROVE_BUDGET} s)")
    if args.mutants:
        report["mutants"] = bench_mutants(args.mutants)
    report["load_average_after"] = _load()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
