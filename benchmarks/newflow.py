"""New flows at 8k rules: pfc's XDP and tc classifier beside DPDK's rte_acl, one run.

The question (issue 30): what does a packet of a *new* flow (the flow cache's miss:
every packet of a SYN flood or a scan) cost pfc at 8k ClassBench rules, against the
best software classifier, DPDK's ``rte_acl``, on the same rules and the same traffic?

- Rules: the first ``--rules`` filters of the published ClassBench sets (acl1, fw1,
  ipc1; ``benchmarks/cbsets.py``), as published for ``dpdk-test-acl``, as pfc rules
  (alternating drop/pass, default drop) for pfc.
- Traffic: the set's own trace, each distinct header once (first-appearance order),
  cycled: 33-47k flows, so pfc's per-CPU flow cache (4,096 entries) never holds a
  flow when it comes round again. ``dpdk-test-acl`` classifies that same file
  (``--tracef``, all of it, ``--iter`` times, bursts of ``--tracestep``).
- pfc: the frames replayed through a veth into the program attached to the
  receiving end (native XDP, or tc clsact ingress) at full rate (the bench lab of
  ``pfc bench``: AF_PACKET ``sendmmsg`` from one pinned CPU, whose softirq runs the
  receive path). ``ns``: the program's own CPU time per packet as the kernel accounts
  it (``BPF_ENABLE_STATS``: ``run_time_ns / run_cnt``, which includes the two clock
  reads around each run, a few ns: see the empty program); ``cpu_ns``: system + irq +
  softirq CPU per packet of that CPU (injector and stack included). Beside it the
  same replay into the set's 1-rule policy (its first filter) and into an empty one.
- ``hot``: the old figure, never the headline: ``BPF_PROG_TEST_RUN`` of one frame
  repeated ``--repeat`` times with the cache defeated (a build whose every lookup
  misses), mean over 64 trace frames: every line the lookup touches is in L1.
- ``--flows new@N``: the first N distinct headers cycled (how the cost grows with the
  flows' working set). ``--flows repeat``: the first 256 distinct headers cycled
  (each a cache hit after its first packet); ``--flows zipf``: ``--zipf-packets``
  packets drawn from the distinct headers with Zipf ranks (exponent ``--zipf-s``):
  measured, not estimated.
- DPDK: ``dpdk-test-acl`` (Debian's ``dpdk-dev``; installed with apt-get when missing
  and ``--install``), ``--no-pci --no-huge``, on CPU 1 under SCHED_FIFO (``chrt``) so
  that other jobs do not preempt it inside its timed loop; ns/packet = 1e9 / its
  pkt/sec. Algorithms ``--algs`` (avx2, scalar, avx512x16; AVX-512 with
  ``--force-max-simd-bitwidth=512``).

- ``cold``: each of the first ``--cold`` distinct flows run once (``BPF_PROG_TEST_RUN``,
  repeat 1) by the cache-defeated build, the 1-rule and the empty program in turn:
  the median and p99 of one new flow's cost, a distribution the replay's mean hides
  (test-run overhead included: see the empty program).
- ``--variant LABEL=JSON``: pfc built with ``extra["classify_tuning"]`` JSON too,
  measured beside the default in the same rounds (before/after a layout change).

Every peer of a set is run once per round, interleaved (the order of pfc's programs
rotated round by round, after one unrecorded warm-up replay of each), ``--rounds``
rounds; the medians are reported with the load average. Root needed.

    sudo .venv/bin/python benchmarks/newflow.py --sets acl1,fw1,ipc1 --rules 8000
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import cbsets  # noqa: E402
from benchmarks.classify import Loaded, fdinfo  # noqa: E402
from pfc.bench import measure as bench_measure  # noqa: E402
from pfc.bench import traffic as bench_traffic  # noqa: E402
from pfc.kernel import bpf, bpf_attach  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
DPDK = "dpdk-test-acl"
BPF_STATS_RUN_TIME = 0


# ----------------------------------------------------------------------------- DPDK

def dpdk_available(install: bool) -> bool:
    if shutil.which(DPDK):
        return True
    if install:
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "install", "-y", "--no-install-recommends", "dpdk-dev"],
                       check=False, env=env, stdout=subprocess.DEVNULL)
    return shutil.which(DPDK) is not None


def dpdk_ns(rules: Path, trace: Path, flows: int, alg: str, step: int,
            packets: int = 3_000_000) -> dict:
    """One ``dpdk-test-acl`` run: ns per packet (1e9 / its pkt/sec) and cycles."""
    iters = max(1, packets // flows)
    eal = ["--no-pci", "--no-huge", "-l", "1", "--log-level=lib.eal:error",
           "--file-prefix", f"pfcbench{os.getpid()}"]
    if alg.startswith("avx512"):
        eal.append("--force-max-simd-bitwidth=512")
    cmd = [DPDK, *eal, "--", f"--rulesf={rules}", f"--tracef={trace}",
           f"--tracenum={flows}", f"--tracestep={step}", f"--iter={iters}",
           f"--alg={alg}", "--verbose=0"]
    if shutil.which("chrt") and os.geteuid() == 0:
        cmd = ["chrt", "-f", "50", *cmd]
    # stdout is line-buffered by hand: test-acl may crash in rte_acl_free at exit
    # (DPDK 22.11 without hugepages) after it printed its result.
    proc = subprocess.run(["stdbuf", "-oL", *cmd], capture_output=True, text=True,
                          check=False)
    m = re.search(r"([\d.]+) cycles/pkt, ([\d.]+) pkt/sec", proc.stdout)
    if not m:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-3:]
        return {"status": f"failed ({proc.returncode}): {' | '.join(tail)[:200]}"}
    return {"ns": round(1e9 / float(m.group(2)), 1), "cycles": float(m.group(1))}


# ------------------------------------------------------------------------------ pfc

@contextlib.contextmanager
def bpf_stats():
    """Run-time statistics of every BPF program, while the fd is open."""
    lib = bpf.lib()
    lib.bpf_enable_stats.restype = ctypes.c_int
    lib.bpf_enable_stats.argtypes = [ctypes.c_int]
    fd = lib.bpf_enable_stats(BPF_STATS_RUN_TIME)
    if fd < 0:
        raise OSError(-fd, "BPF_ENABLE_STATS")
    try:
        yield
    finally:
        os.close(fd)


def run_stats(prog_fd: int) -> tuple[int, int]:
    info = fdinfo(prog_fd)
    return int(info.get("run_time_ns", 0)), int(info.get("run_cnt", 0))


@contextlib.contextmanager
def attached(lab, hook: str, prog_fd: int):
    if hook == "xdp":
        bpf_attach.xdp_attach(lab.dut_index, prog_fd, "native")
        try:
            yield
        finally:
            bpf_attach.xdp_detach(lab.dut_index, "native")
    else:
        bpf_attach.tc_hook_create(lab.dut_index)
        bpf_attach.tc_attach(lab.dut_index, prog_fd, 1, 1, False)
        try:
            yield
        finally:
            bpf_attach.tc_hook_destroy(lab.dut_index)


def replay(lab, hook: str, prog_fd: int, frames: list[bytes], seconds: float) -> dict:
    """The frames, cycled for ``seconds`` through the lab's veth into the program."""
    with attached(lab, hook, prog_fd):
        t0, n0 = run_stats(prog_fd)
        tr = bench_traffic.blast(lab.inj, bench_measure.DUT_MAC, frames, seconds, None,
                                 bench_traffic.delivered, probes=False)
        t1, n1 = run_stats(prog_fd)
    runs = n1 - n0
    return {"ns": round((t1 - t0) / runs, 1) if runs else None, "runs": runs,
            "cpu_ns": round(tr.cpu_ns / tr.sent, 1) if tr.sent else None,
            "sent": tr.sent, "lost": tr.lost}


def cold_ns(progs: dict[str, object], frames: list[bytes]) -> dict[str, list[int]]:
    """Each frame run once (``BPF_PROG_TEST_RUN``, repeat 1) by every program in turn,
    the order rotated frame by frame: name -> the runs' durations (ns, kernel-measured,
    including the two clock reads and the test-run's own setup: see the empty program)."""
    names = list(progs)
    out: dict[str, list[int]] = {n: [] for n in names}
    for i, f in enumerate(frames):
        for k in range(len(names)):
            n = names[(i + k) % len(names)]
            out[n].append(progs[n].test_run(f, repeat=1).duration)
    return out


def percentiles(vals: list[int]) -> dict:
    v = sorted(vals)
    return {"median": float(statistics.median(v)), "p99": float(v[min(len(v) - 1,
                                                                      int(0.99 * len(v)))]),
            "n": len(v)}


def hot_ns(prog, frames: list[bytes], repeat: int) -> float:
    runs = [prog.test_run(f, repeat=repeat).duration for f in frames]
    return round(sum(runs) / len(runs), 1)


def traffic_of(traffic: dict[str, list[bytes]], flows: str) -> list[bytes]:
    """``new``, ``repeat``, ``zipf``, or ``new@N``: the first N distinct flows cycled
    (N above the flow cache's 4,096 slots: every packet a miss; below: the working set
    of the lookups shrinks with N)."""
    if flows.startswith("new@"):
        return traffic["new"][:int(flows[4:])]
    return traffic[flows]


def zipf_frames(frames: list[bytes], packets: int, s: float, seed: int = 7) -> list[bytes]:
    rng = random.Random(seed)
    weights = [1 / (k + 1) ** s for k in range(len(frames))]
    return [frames[k] for k in rng.choices(range(len(frames)), weights, k=packets)]


# ---------------------------------------------------------------------------- a set

def one_set(name: str, args, work: Path) -> dict:
    filters = cbsets.rules(name, args.rules)
    headers = cbsets.trace(name)
    rules_file, trace_file = work / f"{name}.rules", work / f"{name}.trace"
    rules_file.write_text(cbsets.rules_text(name, args.rules))
    trace_file.write_text(cbsets.trace_text(headers))
    paths = {"pfc": work / f"{name}.pf", "1-rule": work / f"{name}-1.pf",
             "empty": work / "empty.pf"}
    paths["pfc"].write_text(cbsets.policy_text(name, filters))
    paths["1-rule"].write_text(cbsets.policy_text(name, filters[:1]))
    paths["empty"].write_text("default drop\n")
    frames = [cbsets.frame(h) for h in headers]
    traffic = {"new": frames, "repeat": frames[:256],
               "zipf": zipf_frames(frames, args.zipf_packets, args.zipf_s)}
    out: dict = {"set": name, "rules": len(filters), "flows": len(headers),
                 "load_average": [os.getloadavg()[0]], "dpdk": {}, "pfc": {}}
    loaded: dict[tuple[str, str], Loaded] = {}
    samples: dict[str, list] = {}
    cold: dict[str, list[int]] = {}
    try:
        for hook in args.hooks:
            for key, path in paths.items():
                loaded[(hook, key)] = Loaded(path, hook)
            loaded[(hook, "miss")] = Loaded(paths["pfc"], hook, cache="miss")
            for label, tuning in args.variant:
                loaded[(hook, f"pfc[{label}]")] = Loaded(paths["pfc"], hook, tuning=tuning)
                loaded[(hook, f"miss[{label}]")] = Loaded(paths["pfc"], hook, cache="miss",
                                                          tuning=tuning)
        out["facts"] = {f"{hook} {key}": v.facts() for (hook, key), v in loaded.items()
                        if key.startswith("pfc")}
        with bpf_stats(), bench_measure.bench_lab() as lab:
            for hook in args.hooks:  # a warm-up replay of each, not recorded
                for key in ("pfc", *(f"pfc[{label}]" for label, _ in args.variant)):
                    replay(lab, hook, loaded[(hook, key)].prog.fd, traffic["new"],
                           min(args.seconds, 0.5))
            for rnd in range(args.rounds):
                for alg in args.algs if args.dpdk else ():
                    samples.setdefault(f"dpdk {alg}", []).append(dpdk_ns(
                        rules_file, trace_file, len(headers), alg, args.tracestep))
                for hook in args.hooks:
                    for flows in args.flows:
                        keys = ["pfc", "1-rule", "empty",
                                *(f"pfc[{label}]" for label, _ in args.variant)]
                        for key in keys[rnd % len(keys):] + keys[:rnd % len(keys)]:
                            prog = loaded[(hook, key)].prog
                            samples.setdefault(f"{hook} {flows} {key}", []).append(
                                replay(lab, hook, prog.fd, traffic_of(traffic, flows),
                                       args.seconds))
                    if args.cold:
                        keys = ["miss", "1-rule", "empty",
                                *(f"miss[{label}]" for label, _ in args.variant)]
                        runs = cold_ns({k: loaded[(hook, k)].prog for k in keys},
                                       frames[:args.cold])
                        for k, vals in runs.items():
                            cold.setdefault(f"{hook} cold {k}", []).extend(vals)
                    view = [f for f in frames[:64]]
                    for key in ("miss", "1-rule"):
                        samples.setdefault(f"{hook} hot {key}", []).append(
                            {"ns": hot_ns(loaded[(hook, key)].prog, view, args.repeat)})
                out["load_average"].append(os.getloadavg()[0])
                print(f"  {name}: round done, load {os.getloadavg()[0]:.1f}",
                      file=sys.stderr)
    finally:
        for v in loaded.values():
            v.close()
    out["samples"] = samples
    out["median"] = {k: _median(v) for k, v in samples.items()}
    out["cold"] = {k: percentiles(v) for k, v in cold.items()}
    return out


def _median(rows: list[dict]) -> dict:
    out = {}
    for key in ("ns", "cpu_ns", "cycles"):
        vals = [r[key] for r in rows if r.get(key) is not None]
        if vals:
            out[key] = round(statistics.median(vals), 1)
    fails = [r["status"] for r in rows if "status" in r]
    if fails:
        out["status"] = fails[0]
    return out


def table(points: list[dict]) -> str:
    lines = ["| set | flows | peer | ns/packet (median) | CPU ns/packet of the receiving CPU |",
             "|---|--:|---|--:|--:|"]
    for p in points:
        for key, m in p["median"].items():
            ns = f"{m['ns']:,.1f}" if "ns" in m else m.get("status", "—")
            cpu = f"{m['cpu_ns']:,.0f}" if "cpu_ns" in m else ""
            lines.append(f"| {p['set']} | {p['flows']:,} | {key} | {ns} | {cpu} |")
    return "\n".join(lines)


def ratios(p: dict, variants=()) -> dict:
    """pfc XDP new flows against rte_acl AVX2 and the 1-rule policy; tc against XDP."""
    m = p["median"]

    def get(key: str) -> float | None:
        return m.get(key, {}).get("ns")

    out = {}
    pairs = {"xdp new / dpdk avx2": ("xdp new pfc", "dpdk avx2"),
             "xdp new / dpdk avx512x16": ("xdp new pfc", "dpdk avx512x16"),
             "xdp new / 1-rule": ("xdp new pfc", "xdp new 1-rule"),
             "xdp repeat / 1-rule": ("xdp repeat pfc", "xdp repeat 1-rule"),
             "xdp zipf / 1-rule": ("xdp zipf pfc", "xdp zipf 1-rule"),
             "tc new / xdp new": ("tc new pfc", "xdp new pfc"),
             "tc repeat / 1-rule": ("tc repeat pfc", "tc repeat 1-rule"),
             "tc zipf / 1-rule": ("tc zipf pfc", "tc zipf 1-rule"),
             "xdp hot / 1-rule": ("xdp hot miss", "xdp hot 1-rule")}
    for label, _tuning in variants:
        pairs[f"xdp new [{label}] / pfc"] = (f"xdp new pfc[{label}]", "xdp new pfc")
        pairs[f"xdp new [{label}] / dpdk avx2"] = (f"xdp new pfc[{label}]", "dpdk avx2")
    for label, (a, b) in pairs.items():
        if get(a) and get(b):
            out[label] = round(get(a) / get(b), 2)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", default=",".join(cbsets.SETS))
    ap.add_argument("--rules", type=int, default=8000)
    ap.add_argument("--hooks", default="xdp,tc")
    ap.add_argument("--flows", default="new,repeat,zipf")
    ap.add_argument("--algs", default="avx2,scalar,avx512x16")
    ap.add_argument("--no-dpdk", dest="dpdk", action="store_false")
    ap.add_argument("--install", action="store_true", help="apt-get install dpdk-dev "
                    "when dpdk-test-acl is missing")
    ap.add_argument("--tracestep", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=1.5)
    ap.add_argument("--repeat", type=int, default=2000)
    ap.add_argument("--cold", type=int, default=2000, help="per-flow figures: this many "
                    "distinct flows, each run once per round by each program (0: none)")
    ap.add_argument("--zipf-packets", type=int, default=200_000)
    ap.add_argument("--zipf-s", type=float, default=1.0)
    ap.add_argument("--variant", action="append", default=[], metavar="LABEL=JSON",
                    help="also pfc built with extra['classify_tuning'] = JSON (measured "
                    "beside it as pfc[LABEL]; experiments)")
    ap.add_argument("--out", type=Path, default=RESULTS / "newflow.json")
    args = ap.parse_args(argv)
    args.hooks = args.hooks.split(",")
    args.flows = args.flows.split(",")
    args.algs = args.algs.split(",") if args.algs else []
    args.variant = [(v.split("=", 1)[0], json.loads(v.split("=", 1)[1])) for v in args.variant]
    why = bench_measure.missing_privileges()
    if why:
        ap.error(why)
    if args.dpdk and not dpdk_available(args.install):
        ap.error(f"{DPDK} not found: apt-get install dpdk-dev (or --install, --no-dpdk)")
    points = []
    with tempfile.TemporaryDirectory(prefix="pfc-newflow-") as tmp:
        for name in args.sets.split(","):
            t0 = time.monotonic()
            point = one_set(name, args, Path(tmp))
            point["ratios"] = ratios(point, args.variant)
            point["seconds"] = round(time.monotonic() - t0)
            points.append(point)
            args.out.write_text(json.dumps(points, indent=1))
            print(f"{name}: {point['seconds']} s {point['ratios']}", file=sys.stderr)
    print(table(points))
    for p in points:
        print(p["set"], json.dumps(p["ratios"]))
        for k, v in p["cold"].items():
            print(f"  {k}: median {v['median']:.0f} ns, p99 {v['p99']:.0f} ns ({v['n']} runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
