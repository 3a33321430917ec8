"""Large heterogeneous policies (issue 16): pfc's output per target, 1 → 64k rules.

For each ClassBench-style flavour (acl, fw, ipc; ``benchmarks/classbench.py``, seeded)
and rule count N: the policy is written to a file, its trace (frames aimed at the
rules' corners and uniform ones) generated, and every target of the table
:data:`TARGETS` measured by one function ``measure(target, policy_path, trace_frames)
-> dict``. The eBPF hooks (xdp, tc) are measured here:

- ``compile_s``: ``pfc compile`` in process (front end, passes, classifier tables,
  clang); ``load_s``: the verifier and the map fill (``maps.open_filled``);
- ``map_bytes``: the kernel's memory for the object's maps (``memlock`` of each map in
  /proc/self/fdinfo), ``insns``/``verified_insns``: the program's size and the
  verifier's work;
- ``ns``: ``BPF_PROG_TEST_RUN`` ns/packet (kernel-measured, ``--repeat`` runs per frame,
  mean over the trace, median over ``--rounds`` rounds) of pfc's program for the policy
  (``pfc``: the classifier from ``classify_plan.MIN_RULES`` rules, the linear program
  below), of pfc's program for the flavour's 1-rule policy (``1-rule``: the peer of the
  ratios) and of today's linear chain for the N-rule policy (``linear``, while N <=
  ``--linear-max`` and the kernel takes it); the programs of a point run interleaved
  in every round, so drift hits all alike. A test run repeats one frame, so the
  classifier's flow cache hits from the second run on: ``pfc`` is the *hit* cost;
  ``miss`` is the same policy built with the cache defeated (every lookup misses,
  every entry is still written: the cost of a new flow) and ``nocache`` without it;
- ``zipf``: a mixed trace (``--zipf-packets`` packets over ``--zipf-flows`` flows of
  the trace generator, another seed; flow ranks Zipf-distributed, exponent
  ``--zipf-s``): ``repeat_share``, the packets whose flow came before (the hit rate of
  a cache that never evicts), and the cost estimated from it and the measured hit and
  miss costs (:func:`zipf` says why not measured packet by packet).

nft, iptables and cbpf are measured by ``benchmarks/classify_netfilter.py`` when it is
present (its ``measure`` has the same signature; another engineer's part of the issue).
Writes JSON (``--out``, default benchmarks/results/classify.json), prints a table, and
with ``--plot`` draws ns/packet against N (PNG). Root needed (CAP_BPF).

    sudo .venv/bin/python benchmarks/classify.py --rules 1,32,150,1000,8000
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import classbench  # noqa: E402
from pfc.backends.ebpf import maps as ebpf_maps  # noqa: E402
from pfc.backends.ebpf import run as ebpf_run  # noqa: E402
from pfc.build import build_artifact  # noqa: E402
from pfc.frontend.pipeline import compile_path  # noqa: E402
from pfc.oracle import packets  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
OPTIONS = {"repeat": 2000, "rounds": 5, "linear_max": 1000, "zipf_packets": 0,
           "zipf_flows": 4096, "zipf_s": 1.0}
# the classifier from this many rules (backends/ebpf/classify/plan.py MIN_RULES)


# ----------------------------------------------------------------------------- eBPF

def fdinfo(fd: int) -> dict[str, str]:
    out = {}
    for line in Path(f"/proc/self/fdinfo/{fd}").read_text().splitlines():
        key, _, value = line.partition(":")
        out[key.strip()] = value.strip()
    return out


class Loaded:
    """A policy compiled for an eBPF hook and loaded with its maps filled."""

    def __init__(self, path: Path, hook: str, classify: str = "auto", cache=None,
                 tuning: dict | None = None) -> None:
        t0 = time.perf_counter()
        compiled = compile_path(path)
        artifact, diags = build_artifact(compiled, hook, extra={
            "classify": classify, "flow_cache": cache, "classify_tuning": tuning})
        self.compile_s = time.perf_counter() - t0
        if artifact is None:
            raise RuntimeError("; ".join(d.message for d in diags)[:300])
        self.artifact = artifact
        t1 = time.perf_counter()
        self.obj = ebpf_maps.open_filled(artifact)
        self.load_s = time.perf_counter() - t1
        self.prog = self.obj.programs[artifact.meta["program"]]

    def facts(self) -> dict:
        from pfc.backends.ebpf.backend import program_insns

        info = fdinfo(self.prog.fd)
        maps = {n: int(fdinfo(m.fd).get("memlock", 0)) for n, m in self.obj.maps.items()
                if not n.startswith(".")}
        elf = ebpf_maps.object_bytes(self.artifact)
        return {"compile_s": round(self.compile_s, 2), "load_s": round(self.load_s, 2),
                "classifier": "classifier" in self.artifact.meta,
                "insns": program_insns(elf, self.artifact.hook),
                "verified_insns": int(info.get("verified_insns", -1)),
                "map_bytes": sum(maps.values()), "rules": len(self.artifact.policy.rules)}

    def close(self) -> None:
        self.obj.close()


def view(hook: str, frame: bytes) -> bytes | None:
    v = frame if hook == "xdp" else packets.l2_input_view(frame)
    if v is None or len(v) < 14 or (hook == "tc" and ebpf_run.tc_refuses(v)):
        return None
    return v


def cost(progs: dict, frames: list[bytes], hook: str) -> dict[str, float]:
    """name -> ns/packet: per round the mean over frames, then the median of rounds."""
    seen = [v for v in (view(hook, f) for f in frames) if v is not None]
    per: dict[str, list[float]] = {name: [] for name in progs}
    for _ in range(OPTIONS["rounds"]):
        for name, prog in progs.items():
            runs = [prog.test_run(f, repeat=OPTIONS["repeat"]).duration for f in seen]
            per[name].append(sum(runs) / len(runs))
    return {name: round(statistics.median(v), 1) for name, v in per.items()}


def zipf_trace(frames: list[bytes], seed: int = 7) -> tuple[list[bytes], float]:
    """``zipf_packets`` packets over the frames (flows), rank k drawn with weight
    1/k^s; and the share of packets whose flow came before."""
    import random

    rng = random.Random(seed)
    flows = frames
    weights = [1 / (k + 1) ** OPTIONS["zipf_s"] for k in range(len(flows))]
    picks = rng.choices(range(len(flows)), weights, k=OPTIONS["zipf_packets"])
    seen: set[int] = set()
    again = 0
    for p in picks:
        again += p in seen
        seen.add(p)
    return [flows[p] for p in picks], again / len(picks)


def zipf(ns: dict[str, float], frames: list[bytes], hook: str) -> dict:
    """The mixed trace (module doc): its repeat share, and the ns/packet it would cost
    at that hit rate from the hit and miss costs measured (an estimate: a test run of
    one packet is dominated by cold caches and the run's own cost; and collisions in
    the cache lower the hit rate below the repeat share when flows near its size)."""
    seen = [v for v in (view(hook, f) for f in frames) if v is not None]
    packets, share = zipf_trace(seen)
    est = share * ns["pfc"] + (1 - share) * ns["miss"]
    return {"packets": len(packets), "flows": len({bytes(p) for p in packets}),
            "repeat_share": round(share, 3), "estimated_ns": round(est, 1),
            "estimated_ratio": round(est / ns["1-rule"], 2) if "1-rule" in ns else None}


def measure_ebpf(target: str, policy_path: Path, trace_frames: list[bytes], *,
                 peer_path: Path | None = None, zipf_frames: list[bytes] = ()) -> dict:
    """pfc's program for the policy on hook ``target`` beside the 1-rule policy
    (``peer_path``) and today's linear chain (module doc)."""
    out: dict = {}
    loaded: dict[str, Loaded] = {}
    try:
        try:
            loaded["pfc"] = Loaded(policy_path, target)
        except Exception as exc:  # noqa: BLE001 - a refusal is a result
            return {"status": f"failed: {str(exc).splitlines()[0][:200]}"}
        out = loaded["pfc"].facts()
        if peer_path is not None:
            loaded["1-rule"] = Loaded(peer_path, target)
        n = out["rules"]
        if out["classifier"] and n <= OPTIONS["linear_max"]:
            try:
                loaded["linear"] = Loaded(policy_path, target, "never")
                out["linear"] = loaded["linear"].facts()
            except Exception as exc:  # noqa: BLE001
                out["linear"] = {"status": f"failed: {str(exc).splitlines()[0][:200]}"}
        if out["classifier"]:
            out["flow_cache"] = loaded["pfc"].artifact.meta["classifier"]["flow_cache"]
            out["flow_cache"]["memlock"] = int(fdinfo(
                loaded["pfc"].obj.maps["pfc_flow_cache"].fd).get("memlock", 0))
            for name, knob in (("miss", "miss"), ("nocache", 0)):
                loaded[name] = Loaded(policy_path, target, cache=knob)
                out[name] = loaded[name].facts()
        out["ns"] = cost({k: v.prog for k, v in loaded.items()}, trace_frames, target)
        if out["classifier"] and zipf_frames:
            out["zipf"] = zipf(out["ns"], list(zipf_frames), target)
        if "1-rule" in out["ns"]:
            base = out["ns"]["1-rule"]
            out["ratio"] = {k: round(v / base, 2) for k, v in out["ns"].items()}
    finally:
        for v in loaded.values():
            v.close()
    return out


Measure = Callable[..., dict]
TARGETS: dict[str, Measure] = {"xdp": measure_ebpf, "tc": measure_ebpf}


def _netfilter_targets() -> dict[str, Measure]:
    """nft, iptables, cbpf from benchmarks/classify_netfilter.py, if present."""
    try:
        module = importlib.import_module("benchmarks.classify_netfilter")
    except ImportError:
        return {}
    names = getattr(module, "TARGETS", ("nft", "iptables", "cbpf"))
    return {name: module.measure for name in names}


# --------------------------------------------------------------------------- points

def one_point(flavour: str, n: int, targets: dict[str, Measure], workdir: Path,
              seed: int, frames: int) -> dict:
    rules = classbench.generate(flavour, n, seed)
    path = workdir / f"{flavour}-{n}.pf"
    path.write_text(rules.text())
    peer = workdir / f"{flavour}-1.pf"
    peer.write_text(classbench.generate(flavour, 1, 0).text())
    trace = classbench.trace(rules, frames, seed)
    zipf_frames = classbench.trace(rules, OPTIONS["zipf_flows"], seed + 1) \
        if OPTIONS["zipf_packets"] else []
    point: dict = {"flavour": flavour, "rules": n, "load_average": os.getloadavg()[0],
                   "targets": {}}
    for name, fn in targets.items():
        kwargs = {"peer_path": peer, "zipf_frames": zipf_frames} if fn is measure_ebpf else {}
        try:
            point["targets"][name] = fn(name, path, trace, **kwargs)
        except Exception as exc:  # noqa: BLE001 - one target's failure is a result
            point["targets"][name] = {"status": f"failed: {exc}"[:300]}
    return point


def table(points: list[dict], targets) -> str:
    lines = []
    for target in targets:
        lines += [f"\n{target}: ns/packet (ratio to the 1-rule policy); compile, load, maps",
                  "| flavour | rules | 1-rule | linear (today) | pfc (cache hit) | miss "
                  "| no cache | compile s | load s | map memory |",
                  "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
        for p in points:
            t = p["targets"].get(target, {})
            ns, ratio = t.get("ns", {}), t.get("ratio", {})

            def cell(k: str, ns=ns, ratio=ratio) -> str:
                if k not in ns:
                    return "—"
                return f"{ns[k]:,.0f}" + (f" ({ratio[k]:.2f}×)" if k in ratio else "")
            linear = cell("linear") if "linear" in ns else (
                "refused" if "status" in t.get("linear", {}) else "—")
            mem = t.get("map_bytes")
            lines.append(f"| {p['flavour']} | {p['rules']:,} | {cell('1-rule')} | {linear} "
                         f"| {cell('pfc')} | {cell('miss')} | {cell('nocache')} "
                         f"| {t.get('compile_s', '—')} | "
                         f"{t.get('load_s', '—')} | "
                         + (f"{mem / 2**20:.1f} MiB" if mem else "—") + " |")
    return "\n".join(lines)


def plot(points: list[dict], targets, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(targets), figsize=(6 * len(targets), 4.2), squeeze=False)
    for ax, target in zip(axes[0], targets, strict=True):
        for flavour in sorted({p["flavour"] for p in points}):
            mine = [p for p in points if p["flavour"] == flavour
                    and "ns" in p["targets"].get(target, {})]
            for key, style in (("pfc", "-o"), ("linear", ":x"), ("1-rule", "--")):
                xs = [p["rules"] for p in mine if key in p["targets"][target]["ns"]]
                ys = [p["targets"][target]["ns"][key] for p in mine
                      if key in p["targets"][target]["ns"]]
                if xs:
                    ax.plot(xs, ys, style, label=f"{flavour} {key}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("rules")
        ax.set_ylabel("ns/packet (BPF_PROG_TEST_RUN)")
        ax.set_title(target)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rules", default="1,32,150,1000,8000")
    ap.add_argument("--flavours", default=",".join(classbench.FLAVOURS))
    ap.add_argument("--targets", default=None, help="default: xdp,tc and the netfilter "
                    "module's targets when present")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--frames", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=OPTIONS["repeat"])
    ap.add_argument("--rounds", type=int, default=OPTIONS["rounds"])
    ap.add_argument("--linear-max", type=int, default=OPTIONS["linear_max"])
    ap.add_argument("--zipf-packets", type=int, default=0, help="a mixed trace of this "
                    "many packets (0: none)")
    ap.add_argument("--zipf-flows", type=int, default=OPTIONS["zipf_flows"])
    ap.add_argument("--zipf-s", type=float, default=1.0)
    ap.add_argument("--out", type=Path, default=RESULTS / "classify.json")
    ap.add_argument("--plot", type=Path)
    args = ap.parse_args(argv)
    OPTIONS.update(repeat=args.repeat, rounds=args.rounds, linear_max=args.linear_max,
                   zipf_packets=args.zipf_packets, zipf_flows=args.zipf_flows,
                   zipf_s=args.zipf_s)
    known = TARGETS | _netfilter_targets()
    names = args.targets.split(",") if args.targets else list(known)
    unknown = [t for t in names if t not in known]
    if unknown:
        ap.error(f"unknown targets {unknown}; known: {', '.join(known)}")
    targets = {t: known[t] for t in names}
    points: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="pfc-classify-") as tmp:
        for flavour in args.flavours.split(","):
            for n in (int(x) for x in args.rules.split(",")):
                t0 = time.monotonic()
                points.append(one_point(flavour, n, targets, Path(tmp), args.seed,
                                        args.frames))
                print(f"{flavour} {n}: {time.monotonic() - t0:.0f} s", file=sys.stderr)
                args.out.write_text(json.dumps(points, indent=1))
    print(table(points, targets))
    if args.plot:
        plot(points, [t for t in targets if t in TARGETS], args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
