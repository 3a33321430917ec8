"""Per-packet cost of the set maps' ``ARRAY_OF_MAPS`` slot (issue 18): this checkout's
eBPF set lookup against another checkout's (the one before the slot), side by side.

Each worker process imports one checkout's pfc, compiles the same policies for xdp and
tc (``drop src $bl``: 100k IPv4 addresses, the /24 bitmap; 500 IPv4 and 500 IPv6
addresses, LPM tries), fills the maps and times a member and a non-member frame with
``BPF_PROG_TEST_RUN`` (kernel-measured ns per run, mean of ``--repeat``). Workers of
the two checkouts alternate (``--rounds`` each); the table gives the median per case,
the ratio new/base and the load average.

    .venv/bin/python benchmarks/set_indirection.py --base /path/to/pkgroot [--rounds 3]

``--base`` is a directory holding a ``pfc`` package of the other checkout (its
``compiler`` with ``backends``, ``templates`` and ``grammar`` linked in).
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CASES = {"bitmap100k": (4, 100_000), "lpm4_500": (4, 500), "lpm6_500": (6, 500)}
HOOKS = ("xdp", "tc")


def _addresses(version: int, n: int, rng: random.Random) -> list[str]:
    out: set[str] = set()
    while len(out) < n:
        if version == 4:
            out.add(str(ipaddress.IPv4Address(rng.getrandbits(32) & 0xDFFFFFFF | 1 << 24)))
        else:
            out.add(str(ipaddress.IPv6Address((0x20010DB8 << 96) | rng.getrandbits(64))))
    return sorted(out)


def _frame(src: str) -> bytes:
    from pfc.oracle import framebuild as fb

    a = ipaddress.ip_address(src)
    mac = bytes(6)
    if a.version == 4:
        d = bytes([10, 1, 0, 1])
        return fb.ethernet(mac, mac, fb.ETH_IP4,
                           fb.ipv4(a.packed, d, 17, fb.udp(a.packed, d, 9, 99, b"x" * 8)))
    d = ipaddress.IPv6Address("2001:db8:ffff::1").packed
    return fb.ethernet(mac, mac, fb.ETH_IP6,
                       fb.ipv6(a.packed, d, 17, fb.udp(a.packed, d, 9, 99, b"x" * 8)))


def worker(repeat: int) -> dict:
    from pfc.backends.ebpf import maps as ebpf_maps
    from pfc.build import build_artifact
    from pfc.frontend.pipeline import compile_path

    out = {}
    tmp = Path(tempfile.mkdtemp())
    for case, (version, n) in CASES.items():
        members = _addresses(version, n, random.Random(n + version))
        (tmp / f"{case}.txt").write_text("\n".join(members) + "\n")
        (tmp / f"{case}.pf").write_text(f'set bl = file "{case}.txt"\ndrop src $bl\n')
        absent = "192.0.2.77" if version == 4 else "2001:db9::77"
        frames = {"hit": _frame(members[len(members) // 2]), "miss": _frame(absent)}
        for hook in HOOKS:
            art, diags = build_artifact(compile_path(tmp / f"{case}.pf"), hook)
            assert art is not None, diags
            with ebpf_maps.open_filled(art) as obj:
                prog = obj.programs[art.meta["program"]]
                for what, frame in frames.items():
                    prog.test_run(frame, repeat=1000)  # warm
                    out[f"{hook} {case} {what}"] = prog.test_run(frame, repeat=repeat).duration
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--base", required=True, help="PYTHONPATH root of the other checkout")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--repeat", type=int, default=200_000)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.repeat)))
        return 0
    runs: dict[str, list[dict]] = {"base": [], "new": []}
    loads = [os.getloadavg()[0]]
    for _ in range(args.rounds):
        for label in ("base", "new"):
            env = os.environ | ({"PYTHONPATH": args.base} if label == "base" else {})
            done = subprocess.run([sys.executable, __file__, "--worker", "--repeat",
                                   str(args.repeat), "--base", args.base], env=env,
                                  check=True, capture_output=True, text=True)
            runs[label].append(json.loads(done.stdout))
            loads.append(os.getloadavg()[0])
    print(f"load average {min(loads):.1f}-{max(loads):.1f}; ns per packet, median of "
          f"{args.rounds} alternating runs of {args.repeat:,}")
    print(f"{'case':28} {'base':>7} {'new':>7} {'new/base':>9}")
    for key in runs["new"][0]:
        b = statistics.median(r[key] for r in runs["base"])
        n = statistics.median(r[key] for r in runs["new"])
        print(f"{key:28} {b:7.1f} {n:7.1f} {n / b:9.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
