"""cbpf on ClassBench-style policies (issue 16): how many rules fit in 4,096
instructions as one chain (before) and as worlds, searches and chains
(``backends/cbpf/tree.py``), the compile time, and the instructions a packet runs.

The chain is measured by raising ``tree.MIN_RULES`` past the policy (today's
``cbpf_cfg.build``). Policies come from ``benchmarks/classbench.py`` without
negations and count rules (cbpf cannot count). Instructions per packet: the mean
number of instructions the program executes on a trace (``classbench.trace``: corner
and uniform headers), counted by :func:`steps` (a classic BPF interpreter for the
opcodes pfc emits). Refused programs are reported with the compile time it took to
say so. Usage: ``python benchmarks/cbpf_tree.py --rules 150,500,1000``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import classbench  # noqa: E402

from pfc.backends.cbpf import backend as cbpf  # noqa: E402
from pfc.backends.cbpf import tree  # noqa: E402
from pfc.frontend.diagnostics import CompileError  # noqa: E402
from pfc.frontend.pipeline import compile_text  # noqa: E402

SIZES = {0x00: 4, 0x08: 2, 0x10: 1}


def steps(insns: list[tuple[int, int, int, int]], pkt: bytes) -> int:
    """How many instructions the program runs on ``pkt`` (to its ``ret``, or to a
    load beyond the packet, which ends it)."""
    return execute(insns, pkt)[0]


def execute(insns: list[tuple[int, int, int, int]], pkt: bytes) -> tuple[int, int]:
    """(instructions run, return value) of the program on ``pkt``."""
    a = x = pc = n = 0
    while True:
        code, jt, jf, k = insns[pc]
        n += 1
        cls = code & 0x07
        if cls == 0x06:
            return n, k
        if code in (0x20, 0x28, 0x30, 0x40, 0x48, 0x50):
            size, at = SIZES[code & 0x18], k + (x if code & 0x40 else 0)
            if at + size > len(pkt):
                return n, 0
            a = int.from_bytes(pkt[at:at + size], "big")
        elif code == 0x80:
            a = len(pkt)
        elif code == 0x81:
            x = len(pkt)
        elif code == 0xB1:
            if k >= len(pkt):
                return n, 0
            x = 4 * (pkt[k] & 0xF)
        elif code == 0x07:
            x = a
        elif code == 0x87:
            a = x
        elif cls == 0x04:
            v = x if code & 0x08 else k
            op = code & 0xF0
            a = (a + v if op == 0x00 else a - v if op == 0x10 else a & v if op == 0x50
                 else a << (v & 31) if op == 0x60 else a >> (v & 31)) & 0xFFFFFFFF
        elif code == 0x05:
            pc += k
        elif cls == 0x05:
            v = x if code & 0x08 else k
            op = code & 0xF0
            hit = {0x10: a == v, 0x20: a > v, 0x30: a >= v, 0x40: a & v != 0}[op]
            pc += jt if hit else jf
        else:
            raise ValueError(f"opcode {code:#x}")
        pc += 1


def point(flavour: str, n: int, chain: bool) -> dict:
    rules = classbench.generate(flavour, n, seed=1, negated=0, count=0)
    policy = compile_text(rules.text(), f"{flavour}.pf").require()
    minimum = tree.MIN_RULES
    with contextlib.ExitStack() as stack:
        if chain:
            tree.MIN_RULES = 10**9
            stack.callback(setattr, tree, "MIN_RULES", minimum)
        t0 = time.process_time()
        try:
            insns = cbpf.compile_policy(policy)
        except CompileError as exc:
            return {"refused": exc.diagnostics[0].message,
                    "compile_s": round(time.process_time() - t0, 2)}
        seconds = time.process_time() - t0
    frames = classbench.trace(rules, 400, seed=2)
    mean = sum(steps(insns, f) for f in frames) / len(frames)
    return {"instructions": len(insns), "compile_s": round(seconds, 2),
            "per_packet": round(mean, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--flavours", default="acl,fw,ipc")
    ap.add_argument("--rules", default="32,150,300,500,700,1000,8000")
    ap.add_argument("--chain-up-to", type=int, default=1000,
                    help="measure the chain (before) up to this many rules")
    args = ap.parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.1f}")
    print("| flavour | rules | chain: insns | chain: compile s | chain: insns/packet "
          "| tree: insns | tree: compile s | tree: insns/packet |")
    print("|---|--:|--:|--:|--:|--:|--:|--:|")
    for flavour in args.flavours.split(","):
        for n in (int(v) for v in args.rules.split(",")):
            cells = []
            for chain in (True, False):
                if chain and n > args.chain_up_to:
                    cells += ["", "", ""]
                    continue
                p = point(flavour, n, chain)
                if "refused" in p:
                    size = p["refused"].split("need ")[1].split(" instructions")[0]
                    cells += [f"refused ({size})", str(p["compile_s"]), ""]
                else:
                    cells += [f"{p['instructions']:,}", str(p["compile_s"]),
                              str(p["per_packet"])]
            print(f"| {flavour} | {n:,} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
