"""Measure the classification prototypes on ClassBench-style policies (issue 16).

For each flavour (acl, fw, ipc) and rule count N (``--rules 1,32,1000,8000``):

1. the policy from ``benchmarks/classbench.py`` (seeded), through pfc's front end;
2. every prototype (``--algos``) built from it, compiled for xdp and tc, loaded, its
   maps filled: build, compile, load (verifier) and fill times, the program's size,
   the instructions the verifier processed, the maps' memory (memlock);
3. correctness: verdicts and counters against pfc's reference interpreter on
   ``--check`` frames (corner, uniform and the malformed mix of pfc.oracle.gen),
   per hook as the hook sees them;
4. cost: ``BPF_PROG_TEST_RUN`` ns/packet (kernel-measured, ``--repeat`` runs per
   frame, mean over ``--frames`` corner/uniform frames, median over ``--rounds``
   interleaved rounds), beside pfc's own output for a 1-rule policy of the flavour
   (the peer of the ratios) and pfc's linear chain for the N-rule policy when
   N <= ``--linear-max``.

Prints a table and writes JSON (``--out``). Run as root from the repository:
``.venv/bin/python benchmarks/classify_research/run.py --rules 1,32,1000,8000``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import classbench  # noqa: E402
from benchmarks.classify_research import lbvs, model, proto  # noqa: E402
from pfc.backends.ebpf import maps as ebpf_maps  # noqa: E402
from pfc.backends.ebpf import run as ebpf_run  # noqa: E402
from pfc.build import build_artifact  # noqa: E402
from pfc.frontend import ir  # noqa: E402
from pfc.frontend.pipeline import compile_text  # noqa: E402
from pfc.oracle import interp, packets  # noqa: E402

HOOKS = ("xdp", "tc")
ALGOS = {
    "lbvs-lpm": lambda cs: lbvs.build(cs, "lpm", summary=True),
    "lbvs-lpm-plain": lambda cs: lbvs.build(cs, "lpm", summary=False),
    "lbvs-dir": lambda cs: lbvs.build(cs, "dir", summary=True),
    "lbvs-dir-plain": lambda cs: lbvs.build(cs, "dir", summary=False),
    "lbvs-grouped": lambda cs: lbvs.build(cs, "dir", summary=True, grouped=True),
    "tss": lambda cs: _module("tss").build(cs),
    "dtree": lambda cs: _module("dtree").build(cs),
}


def _module(name: str):
    import importlib

    return importlib.import_module(f"benchmarks.classify_research.{name}")


# ----------------------------------------------------------------------- the programs

class Peer:
    """pfc's own output (1-rule policy, or today's linear chain) loaded for a hook."""

    def __init__(self, name: str, compiled, hook: str):
        t0 = time.perf_counter()
        artifact, diags = build_artifact(compiled, hook)
        if artifact is None:
            raise RuntimeError("; ".join(d.message for d in diags))
        self.compile_s = time.perf_counter() - t0
        self.name, self.hook, self.artifact = name, hook, artifact
        t1 = time.perf_counter()
        self.obj = ebpf_maps.open_filled(artifact)
        self.load_s = time.perf_counter() - t1
        self.prog = self.obj.programs[artifact.meta["program"]]
        self.insns = proto.xlated_insns(self.prog.fd)
        self.verified_insns = int(proto.fdinfo(self.prog.fd).get("verified_insns", -1))

    def close(self) -> None:
        self.obj.close()


def view(hook: str, frame: bytes) -> bytes | None:
    """The frame as the hook's test run takes it, or None if it cannot."""
    v = frame if hook == "xdp" else packets.l2_input_view(frame)
    if v is None or len(v) < 14 or (hook == "tc" and ebpf_run.tc_refuses(v)):
        return None
    return v


def check(loaded: proto.Loaded, policy: ir.Policy, frames: list[bytes]) -> dict:
    """Verdict and counter mismatches against the interpreter, frames as the hook
    sees them."""
    hook = loaded.hook
    seen = [v for v in (view(hook, f) for f in frames) if v is not None]
    outcomes, counters = interp.run(policy, seen, skip_tag=hook == "xdp")
    table = loaded.obj.maps["pfc_counters"]
    table.reset()
    wrong = 0
    for frame, outcome in zip(seen, outcomes, strict=True):
        result = loaded.prog.test_run(frame)
        if ebpf_run.verdict_of(hook, result.retval, frame) != outcome.verdict:
            wrong += 1
    bad_counters = sum(1 for i, want in counters.items() if table.sum_u64(i) != want)
    return {"frames": len(seen), "verdict_mismatches": wrong,
            "counter_mismatches": bad_counters, "count_rules": len(counters)}


def cost(progs: dict, frames: list[bytes], hook: str, repeat: int, rounds: int) -> dict:
    """name -> ns/packet: per round the mean over frames, then the median of rounds
    (programs interleaved within each round, so drift hits all alike)."""
    seen = [v for v in (view(hook, f) for f in frames) if v is not None]
    per: dict[str, list[float]] = {name: [] for name in progs}
    for _ in range(rounds):
        for name, prog in progs.items():
            runs = [prog.test_run(f, repeat=repeat).duration for f in seen]
            per[name].append(sum(runs) / len(runs))
    return {name: round(statistics.median(v), 1) for name, v in per.items()}


# ----------------------------------------------------------------------------- points

def one_point(flavour: str, n: int, args, peers: dict) -> dict:
    rules = classbench.generate(flavour, n, args.seed)
    t0 = time.perf_counter()
    compiled = compile_text(rules.text(), f"{flavour}-{n}.pf")
    policy = compiled.require()
    front_s = time.perf_counter() - t0
    cs = model.conds(policy)
    measure = classbench.trace(rules, args.frames, args.seed)
    checking = classbench.trace(rules, args.check, args.seed + 1, malformed=0.3,
                                policy=policy)
    point: dict = {"flavour": flavour, "rules": n, "front_end_s": round(front_s, 2),
                   "mix": classbench.counts(rules), "algos": {}, "hooks": {}}
    built = {}
    for name in args.algos:
        t1 = time.perf_counter()
        try:
            b = ALGOS[name](cs)
        except MemoryError as exc:
            point["algos"][name] = {"status": f"build failed: {exc}"}
            continue
        b.build_s = time.perf_counter() - t1
        built[name] = b
        point["algos"][name] = {"build_s": round(b.build_s, 2), "stats": b.stats,
                                "hooks": {}}
    for hook in args.hooks:
        point["hooks"][hook] = _hook_point(hook, n, policy, compiled, cs, built, peers,
                                           measure, checking, point, args)
    return point


def _hook_point(hook, n, policy, compiled, cs, built, peers, measure, checking, point,
                args) -> dict:
    progs = {"1-rule": peers[hook].prog}
    loaded = []
    out: dict = {}
    linear = None
    if n <= args.linear_max:
        try:
            linear = Peer("linear", compiled, hook)
            progs["linear"] = linear.prog
            out["linear"] = {"compile_s": round(linear.compile_s, 2),
                             "load_s": round(linear.load_s, 2), "insns": linear.insns,
                             "verified_insns": linear.verified_insns}
        except Exception as exc:  # noqa: BLE001 - a refusal is a result
            out["linear"] = {"status": f"failed: {str(exc).splitlines()[0][:200]}"}
    for name, b in built.items():
        record = point["algos"][name]["hooks"]
        try:
            ld = proto.load(b, cs, policy.default.value, hook)
        except Exception as exc:  # noqa: BLE001 - a refusal is a result
            lines = str(exc).splitlines()
            record[hook] = {"status": f"failed: {lines[0][:160]} {lines[-1][:160]}"}
            continue
        loaded.append(ld)
        record[hook] = {"compile_s": round(ld.compile_s, 2), "load_s": round(ld.load_s, 2),
                        "fill_s": round(ld.fill_s, 2), "insns": ld.insns,
                        "verified_insns": ld.verified_insns, "map_bytes": ld.map_bytes,
                        "maps": ld.maps, "check": check(ld, policy, checking)}
        progs[name] = ld.prog
    try:
        out["ns"] = cost(progs, measure, hook, args.repeat, args.rounds)
    finally:
        for ld in loaded:
            ld.close()
        if linear is not None:
            linear.close()
    base = out["ns"]["1-rule"]
    out["ratio"] = {k: round(v / base, 2) for k, v in out["ns"].items()}
    return out


def _peers(flavour: str, hooks) -> dict:
    one = compile_text(classbench.generate(flavour, 1, 0).text(), "one.pf")
    return {hook: Peer("1-rule", one, hook) for hook in hooks}


# ----------------------------------------------------------------------------- report

def table(points: list[dict], algos, hooks) -> str:
    cols = ["1-rule", "linear", *algos]
    lines = []
    for hook in hooks:
        lines.append(f"\n{hook}: ns/packet (ratio to the 1-rule policy)")
        lines.append("| flavour | rules | " + " | ".join(cols) + " |")
        lines.append("|---|--:|" + "--:|" * len(cols))
        for p in points:
            h = p["hooks"].get(hook, {})
            cells = []
            for c in cols:
                v, r = h.get("ns", {}).get(c), h.get("ratio", {}).get(c)
                cells.append("" if v is None else f"{v:.0f} ({r:.2f}x)")
            lines.append(f"| {p['flavour']} | {p['rules']:,} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rules", default="1,32,1000,8000")
    ap.add_argument("--flavours", default=",".join(classbench.FLAVOURS))
    ap.add_argument("--algos", default="lbvs-lpm,lbvs-dir,tss,dtree")
    ap.add_argument("--hooks", default=",".join(HOOKS))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--frames", type=int, default=64, help="frames timed per program")
    ap.add_argument("--check", type=int, default=1500, help="frames checked per program")
    ap.add_argument("--repeat", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--linear-max", type=int, default=1000,
                    help="largest N for which pfc's linear chain is compiled")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    args.algos = [a for a in args.algos.split(",") if a]
    args.hooks = [h for h in args.hooks.split(",") if h]
    unknown = [a for a in args.algos if a not in ALGOS]
    if unknown:
        ap.error(f"unknown algorithms {unknown}; known: {', '.join(ALGOS)}")
    points = []
    for flavour in args.flavours.split(","):
        peers = _peers(flavour, args.hooks)
        try:
            for n in (int(x) for x in args.rules.split(",")):
                t0 = time.monotonic()
                points.append(one_point(flavour, n, args, peers))
                print(f"{flavour} {n}: {time.monotonic() - t0:.0f} s", file=sys.stderr)
                if args.out:
                    args.out.write_text(json.dumps(points, indent=1))
        finally:
            for p in peers.values():
                p.close()
    print(table(points, args.algos, args.hooks))
    return 0


if __name__ == "__main__":
    sys.exit(main())
