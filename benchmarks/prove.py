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
- ``--mutants N``: N mutants per target (``MUTATED``: shared out between
  edge-drop and ddos-drop-tcp-subnet-flags for classic BPF and eBPF, web-server for
  nft and iptables; the suite's mutation test uses a third example), each judged by
  ``pfc.prove.mutate.judge``: differs (confirmed by running it in the kernel), proved
  equal (then run on 200 generated frames too), the kernel refuses to load it, the
  models refuse a program the kernel takes (listed), unconfirmed (a pfc bug).

    sudo .venv/bin/python benchmarks/prove.py [--sizes 1000,10000] [--mutants 100]
        [--mutant-targets cbpf,...] [--skip-diff] [--skip-prove]

Results go to benchmarks/results/prove.json (sections not run are kept from the
last run, each with its load averages). Nothing is asserted.
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
        if compiled.ruleset is not None:
            continue  # a whole firewall: docs/prove.md "Whole firewalls" times those
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
                row |= {"status": result.status, "seconds": round(result.seconds, 3),
                        "fell_back": result.fell_back or None}
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


# the mutation run's examples per target: the mutants are shared out among them (the
# web-server's eBPF programs take 5-30 s a proof on a loaded machine: two medium
# examples give the eBPF targets and classic BPF 100 distinct mutants sooner)
SMALL = ("edge-drop", "ddos-drop-tcp-subnet-flags")
MUTATED = {"cbpf": SMALL, "xdp": SMALL, "tc": SMALL, "socket": SMALL,
           "nft": ("web-server",), "iptables": ("web-server",)}


def bench_mutants(n: int, targets: list[str]) -> list[dict]:
    from pfc.prove import mutate

    out = []
    for target in targets:
        examples = MUTATED[target]
        counts = {k: 0 for k in (*mutate.OUTCOMES, "error", "proved, disagrees on a sample")}
        notes: dict[str, list[str]] = {"models refuse": [], "unconfirmed": [], "error": [],
                                       "proved, disagrees on a sample": []}
        start, total = time.perf_counter(), 0
        with mutate.lab(target):
            for i, example in enumerate(examples):
                share = n // len(examples) + (n % len(examples) if i == 0 else 0)
                total += _judge_mutants(target, example, share, counts, notes)
        out.append({"target": target, "examples": list(examples), "mutants": total,
                    **counts, "seconds": round(time.perf_counter() - start, 1),
                    "notes": {k: v for k, v in notes.items() if v}})
        print(f"  {out[-1]}", file=sys.stderr)
    return out


def _judge_mutants(target: str, example: str, n: int, counts: dict, notes: dict) -> int:
    from pfc.build import build_artifact
    from pfc.frontend.pipeline import compile_path
    from pfc.prove import mutate

    compiled = compile_path(ROOT / "examples" / f"{example}.pf")
    policy = compiled.require()
    built, _ = build_artifact(compiled, target, **({"dev": "dut"} if target == "nft" else {}))
    pool = mutate.mutants(compiled, built, n, seed=1)
    for m in pool:
        try:
            judged = mutate.judge(m, policy)
            outcome, note = judged.outcome, judged.note
            if outcome == "proved" and mutate.disagreement(m.artifact, policy):
                outcome = "proved, disagrees on a sample"
        except Exception as exc:  # a model gap: reported, not hidden
            outcome, note = "error", f"{type(exc).__name__}: {exc}"
        counts[outcome] += 1
        if outcome in notes:
            notes[outcome].append(f"{example}: {m.what}: "
                                  f"{note.splitlines()[0] if note else ''}")
    return len(pool)


def bench_classifier(sizes: list[int], hooks: list[str], cap: float) -> list[dict]:
    """``pfc prove`` of the eBPF classifier (forced: ``classify=always``) on ClassBench
    acl policies of each size, per hook, each in a child process given ``cap``
    seconds; and of a /24-bitmap set of 1,300 random IPv4 prefixes."""
    rows = []
    for n in sizes:
        for hook in hooks:
            rows.append(_capped(f"classifier:{n}:{hook}", cap) | {"rules": n, "hook": hook})
            print(f"classifier acl {n} {hook}: {rows[-1]}", flush=True)
    for hook in hooks:
        rows.append(_capped(f"bitmap:1300:{hook}", cap) | {"bitmap_prefixes": 1300,
                                                          "hook": hook})
        print(f"bitmap set 1300 {hook}: {rows[-1]}", flush=True)
    return rows


def _capped(job: str, cap: float) -> dict:
    import subprocess
    start = time.perf_counter()
    try:
        out = subprocess.run([sys.executable, __file__, "--one", job], capture_output=True,
                             text=True, timeout=cap, check=False)
    except subprocess.TimeoutExpired:
        return {"status": f"over {cap:.0f} s", "seconds": None, "load": _load()}
    status = (out.stdout.strip().splitlines() or [out.stderr.strip()[-200:]])[-1]
    return {"status": status, "seconds": round(time.perf_counter() - start, 2),
            "load": _load()}


def _one(job: str) -> None:
    """One classifier or bitmap proof (``--one KIND:N:HOOK``), its status printed."""
    import ipaddress
    import random
    import tempfile

    from benchmarks import classbench
    from pfc.build import build_artifact
    from pfc.frontend.pipeline import compile_path, compile_text
    from pfc.prove import proof

    kind, n, hook = job.split(":")
    if kind == "classifier":
        compiled = compile_text(classbench.generate("acl", int(n), seed=3,
                                                    default="drop").text(), "c.pf")
        built, _ = build_artifact(compiled, hook, extra={"classify": "always"})
    else:
        rng, tmp = random.Random(5), Path(tempfile.mkdtemp())
        nets = {str(ipaddress.ip_network((rng.getrandbits(32), rng.choice(
            [32, 32, 28, 24, 22, 16])), strict=False)) for _ in range(int(n))}
        (tmp / "bl.txt").write_text("\n".join(sorted(nets)) + "\n")
        (tmp / "p.pf").write_text('set bl = file "bl.txt"\ndrop src $bl\n'
                                  "pass tcp dport 22\ndefault pass\n")
        compiled = compile_path(tmp / "p.pf")
        built, _ = build_artifact(compiled, hook)
    print(proof.prove(built, compiled.require()).status, flush=True)


def _load() -> list[float]:
    """The machine's 1, 5 and 15 minute load averages (2 cores shared)."""
    return [round(x, 2) for x in os.getloadavg()]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="1000,10000")
    p.add_argument("--naive-cap", type=float, default=120.0)
    p.add_argument("--mutants", type=int, default=0)
    p.add_argument("--mutant-targets", default=",".join(MUTATED))
    p.add_argument("--skip-diff", action="store_true")
    p.add_argument("--skip-prove", action="store_true")
    p.add_argument("--output", type=Path, default=RESULTS)
    p.add_argument("--classifier", default="", help="rule counts, e.g. 30,60,100,150")
    p.add_argument("--classifier-cap", type=float, default=300.0)
    p.add_argument("--one", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        _one(args.one)
        return 0
    # sections not run this time are kept from the last results (each has its loads)
    report: dict = json.loads(args.output.read_text()) if args.output.exists() else {}
    report |= {"z3": z3.get_version_string(), "load_average": _load()}
    if not args.skip_diff:
        report["diff"] = [bench_diff(int(n), args.naive_cap) for n in args.sizes.split(",")]
        report["diff_load_average"] = _load()
        for row in report["diff"]:
            print(f"diff {row['rules']} rules: {row['seconds']} s (budget {row['budget']} s), "
                  f"naive z3 {row['naive_seconds']} s; {row['regions']}")
    if not args.skip_prove:
        before = _load()
        report["prove"] = bench_prove(args.naive_cap)
        report["prove"]["load_average"] = [before, _load()]
        print(f"prove, every example on every target: {report['prove']['total_seconds']} s "
              f"(budget {PROVE_BUDGET} s)")
    if args.mutants:
        before = _load()
        rows = bench_mutants(args.mutants, args.mutant_targets.split(","))
        kept = [r for r in report.get("mutants", []) if r["target"] not in
                {row["target"] for row in rows} and r.get("examples") == list(MUTATED[r["target"]])]
        report["mutants"] = sorted(kept + rows, key=lambda r: list(MUTATED).index(r["target"]))
        report["mutants_load_average"] = [before, _load()]
    if args.classifier:
        report["classifier"] = bench_classifier(
            [int(n) for n in args.classifier.split(",")], ["xdp", "tc", "socket"],
            args.classifier_cap)
    report["load_average_after"] = _load()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
