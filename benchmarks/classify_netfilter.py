"""Large heterogeneous policies on nft, iptables and cbpf (issue 16, the netfilter half):
per-packet cost, compile and load seconds, beside pfc's 1-rule policy, pfc's ordered
chain ("linear": the classification lowering switched off) and a naive chain written
by hand (``pfc.bench.naive``).

:func:`measure` is the one measurement (``benchmarks/classify.py`` imports it):

- ``compile_s``: ``build_artifact`` of the checked policy (the front end's parse and
  check are not included: ``check_s`` apart);
- ``load_s``: ``pfc.deploy.load.load`` into a throw-away namespace (``nft``: the table
  in one libnftables transaction; ``iptables``: iptables-restore, both families);
- ``cpu_ns_per_packet``: CPU ns of the injecting CPU per frame (softirq included, the
  hook runs there) for ``seconds`` of veth traffic of ``trace_frames`` into the
  namespace (``pfc.bench.traffic.blast``), the lower of two runs;
- ``cbpf``: compile only (a classic BPF program is not attached to a veth here):
  ``compile_s`` and ``instructions``, or ``refused`` with pfc's message.

Run as root: ``.venv/bin/python benchmarks/classify_netfilter.py`` (all points, writes
``benchmarks/results/classify_netfilter.json``); ``--flavours acl --rules 8000`` for
one point, ``--targets iptables`` for one target (iptables: "pfc" is the tree of
chains, ``pfc.backends.iptables.ipt_tree``; "linear" the ordered chain).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import classbench  # noqa: E402
from pfc.bench import measure as bench  # noqa: E402
from pfc.bench import naive, traffic  # noqa: E402
from pfc.build import build_artifact  # noqa: E402
from pfc.frontend.pipeline import compile_path  # noqa: E402
from pfc.passes import classify  # noqa: E402

TARGETS = ("nft", "iptables", "cbpf")
VARIANTS = ("pfc", "linear", "naive")
RESULTS = ROOT / "benchmarks" / "results" / "classify_netfilter.json"


@contextlib.contextmanager
def linear() -> object:
    """pfc with the classification lowering off: today's ordered chain."""
    saved = classify.MIN_RULES
    classify.MIN_RULES = 1 << 62
    try:
        yield
    finally:
        classify.MIN_RULES = saved


def compile_target(target: str, policy_path: Path, variant: str = "pfc"):
    """(checked policy, artifact or None, diagnostics, check seconds, compile seconds)."""
    t0 = time.perf_counter()
    compiled = compile_path(policy_path)
    t1 = time.perf_counter()
    options = {"dev": bench.DEV} if target == "nft" else {}
    with linear() if variant == "linear" else contextlib.nullcontext():
        art, diags = build_artifact(compiled, target, **options)
    return compiled, art, diags, t1 - t0, time.perf_counter() - t1


def measure(target: str, policy_path: Path | str, trace_frames: list[bytes], *,
            variant: str = "pfc", seconds: float = 1.0, lab=None) -> dict:
    """One point (module doc). ``variant``: ``pfc``, ``linear`` or ``naive`` (nft,
    iptables). ``lab``: a ``pfc.bench.measure.bench_lab()`` to reuse."""
    path = Path(policy_path)
    if lab is None:
        with bench.bench_lab() as fresh:
            return measure(target, path, trace_frames, variant=variant, seconds=seconds,
                           lab=fresh)
    compiled, art, diags, check_s, compile_s = compile_target(
        target, path, "linear" if variant == "naive" else variant)
    row: dict = {"target": target, "variant": variant, "check_s": round(check_s, 2),
                 "compile_s": round(compile_s, 2)}
    if art is None:
        return row | {"refused": "; ".join(d.message for d in diags)[:400]}
    if target == "cbpf":
        return row | {"instructions": len(art.text.splitlines())}
    frames = [bench.DUT_MAC + bench.SEND_MAC + f[12:] for f in trace_frames]
    with _attached(target, variant, art, compiled, path, lab) as load_s:
        runs = [traffic.blast(lab.inj, bench.DUT_MAC, frames, seconds, None,
                              traffic.delivered, probes=False) for _ in range(2)]
    best = min(runs, key=lambda t: t.cpu_ns / max(1, t.sent))
    return row | {"load_s": round(load_s, 3), "bytes": len(art.text or ""),
                  "cpu_ns_per_packet": round(best.cpu_ns / max(1, best.sent)),
                  "pps": round(best.sent / best.seconds), "passed": best.passed}


@contextlib.contextmanager
def _attached(target, variant, art, compiled, path, lab):
    from pfc.deploy import load

    t0 = time.perf_counter()
    if variant == "naive":
        if target == "nft":
            naive.load_nft(compiled.require(), bench.DEV)
        else:
            naive.load_iptables(compiled.require())
        try:
            yield time.perf_counter() - t0
        finally:
            _clear_naive(target)
        return
    load.load(art, str(path), compiled.source.text, [], bench.DEV, netns=lab.name)
    try:
        yield time.perf_counter() - t0
    finally:
        load.unload(target, bench.DEV, netns=lab.name)


def _clear_naive(target: str) -> None:
    import subprocess
    if target == "nft":
        subprocess.run(["nft", "delete", "table", "netdev", "pfcnaive"], check=True)
    else:
        for tool in ("iptables", "ip6tables"):
            subprocess.run([tool, "-t", "raw", "-F", "PREROUTING"], check=True)
            subprocess.run([tool, "-t", "raw", "-P", "PREROUTING", "ACCEPT"], check=True)


def point(flavour: str, n: int, workdir: Path, lab, seconds: float,
          targets: tuple[str, ...] = TARGETS) -> dict:
    """Every target and variant at one (flavour, rule count); ``-naive`` rows and cbpf
    on the policy without negations and count rules (``-plain``)."""
    rules = classbench.generate(flavour, n, seed=1)
    path = workdir / f"{flavour}-{n}.pf"
    path.write_text(rules.text())
    # the naive chains and cbpf take no negations, cbpf no count rules: the same
    # generator without them, beside the full policy (same sizes, same trace)
    plain = workdir / f"{flavour}-{n}-plain.pf"
    plain.write_text(classbench.generate(flavour, n, seed=1, negated=0, count=0).text())
    frames = classbench.trace(rules, 64, seed=1)
    out = {}
    for target in targets:
        for variant in VARIANTS if target != "cbpf" else ("pfc",):
            if variant == "linear" and n < classify.MIN_RULES:
                continue  # the same ruleset as pfc's
            key = f"{target}-{variant}"
            where = plain if variant == "naive" or target == "cbpf" else path
            try:
                out[key] = measure(target, where, frames, variant=variant,
                                   seconds=seconds, lab=lab)
            except Exception as exc:  # a baseline that cannot load is a result too
                out[key] = {"error": f"{type(exc).__name__}: {exc}"[:400]}
            print(flavour, n, key, out[key], file=sys.stderr, flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--flavours", default="acl,fw,ipc")
    ap.add_argument("--rules", default="1,32,150,1000,8000")
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--targets", default=",".join(TARGETS))
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    reason = bench.missing_privileges()
    if reason:
        print(reason, file=sys.stderr)
        return 1
    report = {"load_average": os.getloadavg(), "started": time.strftime("%F %T"),
              "points": {}}
    workdir = Path(os.environ.get("TMPDIR", "/tmp")) / f"pfc-classify-nf-{os.getpid()}"
    workdir.mkdir(exist_ok=True)
    with bench.bench_lab() as lab:
        for flavour in args.flavours.split(","):
            for n in map(int, args.rules.split(",")):
                report["points"][f"{flavour}-{n}"] = point(
                    flavour, n, workdir, lab, args.seconds, tuple(args.targets.split(",")))
    report["load_average_end"] = os.getloadavg()
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
