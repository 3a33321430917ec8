"""tc egress against tc ingress: the per-packet cost of one block's program on each.

One block of rules that mean the same on both hooks (the edge-drop rule, a count per
TCP port, `mark`, `ether-type`, `vlan-id` and `icmp-code` matches, a `pass ... limit`)
compiled for `tc` (clsact ingress, `pfc_tc`) and `tc-egress` (clsact egress,
`pfc_tc_egress`; `iif` becomes `oif`). Each program runs in the kernel through
``BPF_PROG_TEST_RUN`` with ``repeat`` (the kernel reports the mean ns per run) on a
frame every rule reads to the end (it passes) and one the edge-drop rule drops; the
programs alternate for several rounds so drift hits both alike. What this measures is
the programs' own cost: the code each hook gets (the egress program reads a VLAN tag
in the data where the ingress one reads ``skb->vlan_tci`` first), not the cost of the
hook around it (a test run of either is the same call).

    sudo .venv/bin/python benchmarks/tc_egress_vs_ingress.py [--repeat N] [--rounds R] \\
        [--json benchmarks/results/tc_egress_vs_ingress.json]
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import statistics
import sys
from pathlib import Path

from pfc.backends.ebpf import maps as ebpf_maps
from pfc.build import build_policy
from pfc.frontend import ir
from pfc.kernel import bpf
from pfc.oracle import framebuild as fb

HOOKS = {"tc": "ingress", "tc-egress": "egress"}
TC_ACT = {0: "pass", 2: "drop"}
SRC, DST = bytes([10, 0, 0, 1]), bytes([192, 168, 0, 79])
ETH = (bytes.fromhex("020000000002"), bytes.fromhex("020000000001"))


def block(hook: str) -> ir.Policy:
    device = "iif" if hook == "tc" else "oif"

    def rule(n, action, proto, *matches, limit=None):
        number, family = ir.PROTOCOLS[proto]
        return ir.Rule(n, action, family, number, matches, proto_name=proto, line=n,
                       limit=limit)
    rules = (
        rule(1, ir.Drop(), "udp", ir.AddrMatch("dst", (ipaddress.ip_network("192.168.0.79/32"),)),
             ir.IntMatch("dport", ((12345, 12345),))),
        rule(2, ir.Count(), "tcp", ir.IntMatch("dport", ((22, 22), (80, 80), (443, 443)))),
        rule(3, ir.Drop(), "all", ir.IntMatch("mark", ((7, 7),))),
        rule(4, ir.Drop(), "all", ir.IntMatch("vlan-id", ((100, 200),))),
        rule(5, ir.Drop(), "icmp", ir.IntMatch("icmp-code", ((1, 3),))),
        rule(6, ir.Count(), "all", ir.IntMatch("ether-type", ((0x86DD, 0x86DD),)),
             ir.IfaceMatch(device, ("eth*", "wan0"), True)),
        rule(7, ir.Pass(), "udp", ir.IntMatch("dport", ((53, 53),)),
             limit=ir.Limit(ir.Rate(1_000_000, "second", 1_000_000), None)),
    )
    return ir.Policy(rules, ir.Verdict.PASS, hook=ir.Hook(HOOKS[hook]), source="bench.pf")


def frames() -> dict[str, bytes]:
    def udp(dport):
        seg = fb.udp(SRC, DST, 40000, dport, b"pfc-bench-payload!")
        return fb.ethernet(*ETH, 0x0800, fb.ipv4(SRC, DST, 17, seg))
    return {"every rule (pass)": udp(12346), "first rule (drop)": udp(12345)}


def programs() -> dict[str, tuple[bpf.Object, bpf.Program]]:
    out = {}
    for hook in HOOKS:
        art, diags = build_policy(block(hook), "tc", "o", hook=hook)
        if art is None:
            raise SystemExit(f"pfc could not compile the block for {hook}: {diags}")
        obj = ebpf_maps.open_filled(art)  # pfc_ifaces filled from this namespace
        out[hook] = obj, obj.programs[art.meta["program"]]
    return out


def measure(progs, repeat: int, rounds: int) -> dict[tuple[str, str], list[int]]:
    times: dict[tuple[str, str], list[int]] = {}
    for kind, frame in frames().items():
        for hook, (_, prog) in progs.items():  # the meaning first
            got = TC_ACT.get(prog.test_run(frame).retval)
            if got != kind.split("(")[1][:-1]:
                raise SystemExit(f"{hook} gives {got} on the frame of {kind}")
    for _ in range(rounds):
        for kind, frame in frames().items():
            for hook, (_, prog) in progs.items():
                times.setdefault((hook, kind), []).append(
                    prog.test_run(frame, repeat=repeat).duration)
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    args = parser.parse_args(argv)
    progs = programs()
    try:
        times = measure(progs, args.repeat, args.rounds)
    finally:
        for obj, _ in progs.values():
            obj.close()
    rows = []
    print(f"tc egress vs ingress, BPF_PROG_TEST_RUN repeat={args.repeat}, {args.rounds} "
          f"alternating rounds, mean ns per packet (kernel-reported); load "
          f"{os.getloadavg()[0]:.2f}")
    print(f"{'frame':<20} {'ingress ns':>11} {'egress ns':>10} {'egress/ingress':>15}")
    for kind in frames():
        ing = statistics.mean(times["tc", kind])
        egr = statistics.mean(times["tc-egress", kind])
        rows.append({"frame": kind, "ingress_ns": ing, "egress_ns": egr,
                     "ratio": egr / ing if ing else float("nan"),
                     "ingress_runs": times["tc", kind], "egress_runs": times["tc-egress", kind]})
        print(f"{kind:<20} {ing:>11.2f} {egr:>10.2f} {rows[-1]['ratio']:>15.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"loadavg": list(os.getloadavg()), "repeat": args.repeat, "rounds": args.rounds,
             "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
