"""pfc's classic BPF against libpcap's ``pcap_compile`` (optimiser on), same meaning.

For every case of ``benchmarks/cbpf_corpus.py`` (a pfc policy and a pcap-filter
expression written to mean exactly the same, semantics.md) the table shows the
instruction counts side by side:

- ``pfc``: ``pfc compile --target cbpf``;
- ``libpcap``: the exact expression (length guards + validity clauses + tests);
- ``clauses``: without the length guards (semantics.md's clauses only: what libpcap
  gives when a short frame may end the program, i.e. be dropped, wrongly);
- ``plain``: without guards and validity (what a tcpdump user would write);
- ``eBPF``: what the kernel turns each program into (``cbpf_asm.kernel_size``, an
  estimate from measured per-instruction costs): the size ``SO_ATTACH_FILTER`` charges
  against ``net.core.optmem_max``.

and the verdicts on generated frames (``pfc.oracle.gen.sample``, malformed ones included, as
a packet socket sees them): pfc's program and libpcap's, both run by libpcap's
``bpf_filter()``, against the reference interpreter.

Targets (same meaning): pfc <= libpcap on every case, strictly fewer on every case
with a transport field, geometric mean of pfc / libpcap <= 0.85. Exit status 1 if a
target is missed or any verdict differs.

``--scale N,N,...`` is compile time against rule count (fuzz-and-faults.md §6): N
rules ``drop udp dport P sport P+1`` (P = 0..N-1, both families: the fuzzer's
``h3_cbpf_340_rules.pf`` is N = 340), pfc's whole
compile (parse, check, ``cbpf.compile_policy``) beside libpcap's ``pcap_compile`` of
the same meaning (``cbpf_corpus`` clauses), both in this process, CPU seconds (the
machine may be busy: CPU time is what each compiler costs), best of ``--repeat``; and
the slope of log(time) over log(rules) between the smallest and largest N (1: linear).
Nothing is asserted: it is a measurement.

    .venv/bin/python benchmarks/cbpf_vs_libpcap.py [--frames N] [--markdown]
    .venv/bin/python benchmarks/cbpf_vs_libpcap.py --scale 100,200,400,1000,2000
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cbpf_corpus import CASES, VALID4, Case, r4, r6  # noqa: E402

from pfc.backends.cbpf import asm as cbpf_asm
from pfc.backends.cbpf import backend as cbpf
from pfc.backends.cbpf import pcaplib
from pfc.frontend.diagnostics import CompileError
from pfc.frontend.ir import Verdict
from pfc.frontend.pipeline import compile_text
from pfc.oracle import gen
from pfc.oracle.interp import evaluate

TARGET_GEOMEAN = 0.85
# The seed rule with semantics.md's clauses, as the issue spells it (no length guards).
SEED_CLAUSES = ("not (udp and dst host 192.168.0.79 and " + " and ".join(VALID4[:4])
                + " and udp dst port 12345)")


@dataclass
class Row:
    case: Case
    pfc: int
    libpcap: int
    clauses: int
    plain: int
    frames: int
    pfc_agree: int
    libpcap_agree: int
    pfc_kernel: int  # eBPF instructions after the kernel's conversion (estimated)
    libpcap_kernel: int

    @property
    def ratio(self) -> float:
        return self.pfc / self.libpcap

    @property
    def meets(self) -> bool:
        return self.pfc < self.libpcap if self.case.transport else self.pfc <= self.libpcap


def measure(case: Case, nframes: int) -> Row:
    policy = compile_text(case.policy, case.name).require()
    ours = cbpf.compile_policy(policy)
    theirs = pcaplib.compile_filter(case.expression("exact"))
    frames = [v for f in gen.sample(policy, nframes, seed=zlib.crc32(case.name.encode()))
              if (v := cbpf.view("socket", f)) is not None]
    want = [evaluate(policy, f, skip_tag=False).verdict is Verdict.PASS for f in frames]
    got_ours = [r != 0 for r in pcaplib.Program(ours).run_all(frames)]
    got_theirs = [r != 0 for r in pcaplib.Program(theirs).run_all(frames)]
    return Row(case, len(ours), len(theirs), len(pcaplib.compile_filter(case.expression(
        "clauses"))), len(pcaplib.compile_filter(case.expression("plain"))), len(frames),
        sum(a == b for a, b in zip(want, got_ours, strict=True)),
        sum(a == b for a, b in zip(want, got_theirs, strict=True)),
        cbpf_asm.kernel_size(ours), cbpf_asm.kernel_size(theirs))


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def markdown(rows: list[Row]) -> str:
    lines = ["| case | pfc | libpcap | pfc / libpcap | clauses only | plain | "
             "in the kernel (eBPF) pfc · libpcap | verdicts pfc · libpcap |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r.case.name} | {r.pfc} | {r.libpcap} | {r.ratio:.2f} | "
                     f"{r.clauses} | {r.plain} | {r.pfc_kernel} · {r.libpcap_kernel} | "
                     f"{r.pfc_agree}/{r.frames} · {r.libpcap_agree}/{r.frames} |")
    return "\n".join(lines)


def rich_table(rows: list[Row]):
    from rich.table import Table

    table = Table(title="classic BPF instructions, same meaning (libpcap "
                  f"{pcaplib.version().split()[2]}, pcap_compile optimiser on)")
    for column in ("case", "pfc", "libpcap", "pfc/libpcap", "clauses only", "plain",
                   "eBPF pfc", "eBPF libpcap", "frames", "pfc ok", "libpcap ok"):
        table.add_column(column, justify="left" if column == "case" else "right")
    for r in rows:
        mark = "" if r.meets else " ✗"
        table.add_row(r.case.name, f"{r.pfc}{mark}", str(r.libpcap), f"{r.ratio:.2f}",
                      str(r.clauses), str(r.plain), str(r.pfc_kernel),
                      str(r.libpcap_kernel), str(r.frames), str(r.pfc_agree),
                      str(r.libpcap_agree))
    return table


# ----------------------------------------------------------- compile time vs rules

@dataclass
class ScaleRow:
    rules: int
    pfc_seconds: float
    libpcap_seconds: float
    pfc_insns: int | str  # "refused (N)" beyond BPF_MAXINSNS
    libpcap_insns: int

    @property
    def ratio(self) -> float:
        return self.pfc_seconds / self.libpcap_seconds


def _best(fn, repeat: int) -> tuple[float, object]:
    best, out = math.inf, None
    for _ in range(repeat):
        start = time.process_time()
        out = fn()
        best = min(best, time.process_time() - start)
    return best, out


def _pfc_compile(text: str) -> int | str:
    try:
        return len(cbpf.compile_policy(compile_text(text, "scale.pf").require()))
    except CompileError as exc:
        return f"refused: {exc.diagnostics[0].message.split(': ', 1)[1]}"


def scale_row(rules: int, repeat: int) -> ScaleRow:
    text = "".join(f"drop udp dport {p} sport {p + 1}\n" for p in range(rules))
    expression = Case("scale", text, tuple(rule for p in range(rules) for rule in (
        r4("drop", 24, "ip[9] = 17", f"udp[2:2] = {p}", f"udp[0:2] = {p + 1}", l4=4),
        r6("drop", 58, "ip6[6] = 17", f"ip6[42:2] = {p}", f"ip6[40:2] = {p + 1}"))
    )).expression("exact")
    pfc_s, ours = _best(lambda: _pfc_compile(text), repeat)
    lib_s, theirs = _best(lambda: pcaplib.compile_filter(expression), repeat)
    return ScaleRow(rules, pfc_s, lib_s, ours, len(theirs))


def scale_report(rows: list[ScaleRow]) -> str:
    lines = ["| rules | pfc compile (CPU s) | libpcap pcap_compile (CPU s) | pfc / libpcap | "
             "pfc instructions | libpcap instructions |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r.rules:,} | {r.pfc_seconds:.2f} | {r.libpcap_seconds:.2f} | "
                     f"{r.ratio:.1f} | {r.pfc_insns} | {r.libpcap_insns:,} |")
    first, last = rows[0], rows[-1]
    if len(rows) > 1:
        def slope(a: float, b: float) -> float:
            return math.log(b / a) / math.log(last.rules / first.rules)
        lines.append(f"\nslope of log(time) over log(rules), {first.rules:,} → "
                     f"{last.rules:,}: pfc {slope(first.pfc_seconds, last.pfc_seconds):.2f},"
                     f" libpcap {slope(first.libpcap_seconds, last.libpcap_seconds):.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=5000,
                        help="generated frames per case (default 5000)")
    parser.add_argument("--markdown", action="store_true", help="print a markdown table")
    parser.add_argument("--scale", metavar="N,N,...", help="only compile time against "
                        "rule count, for these rule counts (module doc)")
    parser.add_argument("--repeat", type=int, default=1, help="--scale: best of N runs")
    args = parser.parse_args(argv)
    if args.scale:
        counts = [int(n) for n in args.scale.split(",")]
        print(f"libpcap {pcaplib.version().split()[2]}")
        print(scale_report([scale_row(n, args.repeat) for n in counts]))
        return 0
    rows = [measure(case, args.frames) for case in CASES]
    mean = geomean([r.ratio for r in rows])
    kernel_mean = geomean([r.pfc_kernel / r.libpcap_kernel for r in rows])
    seed = len(pcaplib.compile_filter(SEED_CLAUSES))
    if args.markdown:
        print(markdown(rows))
    else:
        from rich.console import Console

        Console(width=150).print(rich_table(rows))
    missed = [r.case.name for r in rows if not r.meets]
    wrong = [r.case.name for r in rows if r.pfc_agree != r.frames]
    theirs_wrong = [r.case.name for r in rows if r.libpcap_agree != r.frames]
    print(f"\n{len(rows)} cases; geometric mean pfc / libpcap = {mean:.3f} "
          f"(target <= {TARGET_GEOMEAN}); seed rule with the issue's clauses and no "
          f"length guards: libpcap {seed}, pfc {rows[0].pfc}; in the kernel (eBPF), "
          f"geometric mean pfc / libpcap = {kernel_mean:.3f}")
    print(f"frames per case: {rows[0].frames} (as a packet socket sees them); pfc "
          f"disagrees with the interpreter on {len(wrong)} case(s), libpcap's program "
          f"on {len(theirs_wrong)}")
    for name in missed:
        print(f"target missed: {name}")
    for name in wrong + theirs_wrong:
        print(f"verdicts differ: {name}")
    return 1 if missed or wrong or theirs_wrong or mean > TARGET_GEOMEAN else 0


if __name__ == "__main__":
    sys.exit(main())
