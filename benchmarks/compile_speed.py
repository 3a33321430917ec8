"""Compile time at scale (issue 9): `pfc compile` of generated policies, every target.

Workloads (``--sizes``): a ``set block = file`` of N IPv4 entries (a third /24s, the
rest hosts; ``drop src $block`` and ``count udp dport 53``), and N separate rules
``drop src A`` (the parser, the checker and ``group_runs``, which merges them into one
set; cbpf, which cannot count, gets the policies without the count rule). Each
compile is a fresh ``pfc compile FILE --target T --dev eth0 -o DIR/``
process, timed wall-clock as a user sees it (imports included); the best of
``--repeat`` runs. A target that refuses the policy (cbpf beyond BPF_MAXINSNS) counts
by how long it took to say so. Budget: 5 s per compile on the 2-core CI machine.

    python benchmarks/compile_speed.py                   # sets 1..100k, rules 1k, 10k
    python benchmarks/compile_speed.py --rules 100000    # also 100k separate rules (slow)
    python benchmarks/compile_speed.py --format json     # and --output FILE

Results go to benchmarks/results/compile_speed.json (``--output``). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "compile_speed.json"
BUDGET = 5.0
SET_SIZES = (1, 1_000, 10_000, 100_000)
RULE_SIZES = (1_000, 10_000)


@dataclass
class Result:
    workload: str  # "set" | "rules"
    entries: int
    target: str
    seconds: float
    ok: bool
    note: str = ""  # the first line of the error, for a refused compile

    @property
    def ratio(self) -> float:
        return self.seconds / BUDGET


# ----------------------------------------------------------------------- workloads

def entries(n: int, seed: int = 9) -> list[str]:
    """``n`` distinct IPv4 entries, every third a /24 (the issue's measurement)."""
    rng = random.Random(seed)
    out: dict[str, None] = {}
    while len(out) < n:
        i = len(out)
        address = rng.getrandbits(32) & 0xDFFFFFFF | 0x01000000
        text = ".".join(str(address >> s & 255) for s in (24, 16, 8, 0))
        out[f"{text.rsplit('.', 1)[0]}.0/24" if i % 3 == 0 else text] = None
    return list(out)


def write_workload(directory: Path, workload: str, n: int, count: bool = True) -> Path:
    """The policy file; ``count=False`` leaves out the count rule (for cbpf, which
    cannot count: the issue's ``big2.pf``)."""
    path = directory / f"{workload}-{n}{'' if count else '-nocount'}.pf"
    tail = "count udp dport 53\n" if count else ""
    if workload == "set":
        (directory / f"block-{n}.txt").write_text("\n".join(entries(n)) + "\n")
        path.write_text(f'set block = file "block-{n}.txt"\ndefault pass\n'
                        f"drop src $block\n{tail}")
    else:
        path.write_text("default pass\n" + "".join(f"drop src {e}\n" for e in entries(n))
                        + tail)
    return path


# ------------------------------------------------------------------------ measuring

def targets() -> dict[str, bool]:
    """Every target, and whether it can count."""
    from pfc import backends

    return {name: "count" in b.supports for name, b in backends.registry().items()}


def compile_once(path: Path, target: str, out: Path,
                 timeout: float) -> tuple[float, bool, str]:
    command = [sys.executable, "-m", "pfc.cli", "compile", str(path), "--target", target,
               "--dev", "eth0", "-o", f"{out}/"]
    start = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, cwd=path.parent,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return time.perf_counter() - start, False, f"timed out after {timeout:.0f} s"
    seconds = time.perf_counter() - start
    note = "" if done.returncode == 0 else _first_error(done.stderr)
    return seconds, done.returncode == 0, note


def _first_error(stderr: str) -> str:
    for line in stderr.splitlines():
        if "error" in line:
            return line.split("error: ", 1)[-1][:160]
    return stderr.strip().splitlines()[-1][:160] if stderr.strip() else "failed"


def measure(workloads: list[tuple[str, int]], names: dict[str, bool], repeat: int,
            timeout: float, progress: bool) -> list[Result]:
    results = []
    with tempfile.TemporaryDirectory(prefix="pfc-compile-speed-") as tmp:
        directory = Path(tmp)
        for workload, n in workloads:
            for target, counts in names.items():
                path = write_workload(directory, workload, n, counts)
                runs = [compile_once(path, target, directory / "out", timeout)]
                while len(runs) < repeat and not runs[0][2].startswith("timed out"):
                    runs.append(compile_once(path, target, directory / "out", timeout))
                seconds, ok, note = min(runs)
                results.append(Result(workload, n, target, round(seconds, 3), ok, note))
                if progress:
                    print(f"{workload:5} {n:>7} {target:9} {seconds:7.2f} s"
                          f"{'' if ok else '  refused: ' + note}", file=sys.stderr)
    return results


# ------------------------------------------------------------------------ reporting

def rich_table(results: list[Result], names: list[str]):
    from rich.table import Table

    table = Table(title=f"pfc compile wall seconds (budget {BUDGET:.0f} s; "
                        "in brackets: share of it; * = refused)")
    table.add_column("workload")
    table.add_column("entries", justify="right")
    for name in names:
        table.add_column(name, justify="right")
    rows: dict[tuple[str, int], dict[str, Result]] = {}
    for r in results:
        rows.setdefault((r.workload, r.entries), {})[r.target] = r
    for (workload, n), by_target in rows.items():
        cells = []
        for name in names:
            r = by_target.get(name)
            if r is None:
                cells.append("")
                continue
            style = "red" if r.seconds > BUDGET else ""
            text = f"{r.seconds:.2f}{'' if r.ok else '*'} ({r.ratio:.2f})"
            cells.append(f"[{style}]{text}[/]" if style else text)
        table.add_row(workload, f"{n:,}", *cells)
    return table


def machine() -> dict:
    return {"python": platform.python_version(), "cpus": os.cpu_count(),
            "kernel": platform.release(), "date": time.strftime("%Y-%m-%d")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=list(SET_SIZES),
                        help="set-file sizes (default 1 1000 10000 100000)")
    parser.add_argument("--rules", type=int, nargs="*", default=list(RULE_SIZES),
                        help="separate-rule counts (default 1000 10000)")
    parser.add_argument("--targets", nargs="*", help="targets (default: every one)")
    parser.add_argument("--repeat", type=int, default=1, help="best of N runs (default 1)")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="give up on one compile after this many seconds (default 120)")
    parser.add_argument("--format", choices=("table", "json"), default="table")
    parser.add_argument("--output", type=Path, default=RESULTS,
                        help=f"JSON results file (default {RESULTS.relative_to(ROOT)})")
    args = parser.parse_args(argv)
    known = targets()
    names = {t: known[t] for t in args.targets} if args.targets else known
    workloads = [("set", n) for n in args.sizes] + [("rules", n) for n in args.rules]
    results = measure(workloads, names, args.repeat, args.timeout,
                      progress=args.format == "table")
    doc = {"budget_seconds": BUDGET, "machine": machine(),
           "results": [asdict(r) | {"ratio": round(r.ratio, 3)} for r in results]}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(doc, indent=1) + "\n")
    if args.format == "json":
        print(json.dumps(doc, indent=1))
    else:
        from rich.console import Console

        Console(width=160).print(rich_table(results, list(names)))
        over = [r for r in results if r.seconds > BUDGET]
        print(f"{len(results)} compiles, {len(over)} over the {BUDGET:.0f} s budget; "
              f"results in {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
