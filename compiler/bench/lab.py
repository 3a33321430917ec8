"""``pfc bench --kernel SERIES``: the same bench, run inside a kernel-lab guest.

The host fetches the kernel (:mod:`pfc.kernel.lab`), builds the nfmod module the guest's
bench will insert (building under emulation takes minutes; the guest finds the
``.ko`` in pfc's module cache, which it sees read-only, as it sees the whole host), boots
the guest once and runs ``pfc bench ... --format json`` in it ``rounds`` times. The
report is the first round's, with each row's CPU ns per packet replaced by the median
over the rounds (``rounds_cpu_ns``: every round's value), its ``× none`` recomputed, and
``cost_to_xdp``: each row's median over the xdp row's.

Under TCG (no usable KVM: docs/kernels.md) every instruction is emulated, the JITed
eBPF programs' as much as the kernel's own C, so absolute numbers say nothing about
hardware; rows of one run in one guest are compared with each other only
(docs/bench.md "In a lab kernel").
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from collections.abc import Callable

from pfc.bench.measure import BenchError
from pfc.frontend.pipeline import Compiled

KEEP_ENV = ("HOME", "XDG_CACHE_HOME", "PATH", "TMPDIR")


def prebuild(compiled: Compiled, release: str) -> str | None:
    """The ``.ko`` the guest's nfmod row inserts, built here for ``release`` (cached);
    None, or why not (the guest's row then says what it could not do)."""
    from pfc.backends.nfmod import build
    from pfc.build import build_artifact
    from pfc.deploy.modular import nfmod as load_nfmod

    artifact, diags = build_artifact(compiled, "nfmod")
    if artifact is None:
        return "; ".join(d.message for d in diags)
    module = artifact.meta["module"]
    try:
        build.build(load_nfmod.module_files(artifact, module), module, release)
    except build.BuildError as exc:
        return str(exc).splitlines()[0]
    return None


def run(compiled: Compiled, path: str, series: str, argv: list[str], rounds: int,
        targets: list[str], tick: Callable[[str, float], None] | None = None) -> dict:
    """``pfc bench PATH ARGV`` in a guest running ``series``, ``rounds`` times
    (``targets``: those ARGV names, for what to prepare)."""
    from pfc.kernel import lab

    try:
        kernel = lab.fetch(series)
    except lab.LabError as exc:
        raise BenchError(f"the kernel lab cannot fetch {series}: {exc}") from None
    if "nfmod" in targets:
        why = prebuild(compiled, kernel.release)
        if why and tick:
            tick(f"nfmod not prebuilt: {why}", 0.0)
    env = {k: os.environ[k] for k in KEEP_ENV if k in os.environ}
    reports = []
    try:
        with lab.boot(kernel) as vm:
            for i in range(rounds):
                if tick:
                    tick(f"{kernel.release} round {i + 1}/{rounds}", i / rounds)
                done = vm.run([sys.executable, "-m", "pfc", "bench", path, *argv,
                               "--format", "json"], cwd=os.getcwd(), env=env)
                if done.returncode != 0 or not done.stdout.lstrip().startswith("{"):
                    last = (done.stderr.strip().splitlines() or ["no output"])[-1]
                    raise BenchError(f"pfc bench in {kernel.release} exited "
                                     f"{done.returncode}: {last}")
                reports.append(json.loads(done.stdout))
            accel = vm.accel
    except lab.LabError as exc:
        raise BenchError(f"the kernel lab: {exc}") from None
    if tick:
        tick("done", 1.0)
    return combine(reports, kernel.release, accel)


def _cpu(row: dict) -> float | None:
    return (row.get("traffic") or {}).get("cpu_ns_per_packet")


def combine(reports: list[dict], release: str, accel: str) -> dict:
    """The first report with every row's CPU ns/packet the median over the reports
    (module doc)."""
    out = dict(reports[0], lab={"kernel": release, "accel": accel, "rounds": len(reports)})
    rows = []
    for i, row in enumerate(out["rows"]):
        values = [v for r in reports if (v := _cpu(r["rows"][i])) is not None]
        row = dict(row, rounds_cpu_ns=values)
        if values and row.get("traffic"):
            row["traffic"] = dict(row["traffic"], cpu_ns_per_packet=statistics.median(values))
        rows.append(row)
    by_name = {r["name"]: _cpu(r) for r in rows}
    for row in rows:
        if _cpu(row) and by_name.get("none"):
            row["ratio_to_none"] = dict(row.get("ratio_to_none") or {},
                                        cpu_ns_per_packet=round(_cpu(row) / by_name["none"],
                                                                3))
    out["rows"] = rows
    xdp = by_name.get("xdp")
    out["cost_to_xdp"] = {n: round(v / xdp, 3) for n, v in by_name.items()
                          if v is not None and xdp} or None
    return out
