"""Whole firewalls: per-packet cost of pfc's compiled host firewall against the same
rules written by hand, in one run (issue 25: pfc's nft within 1.1x of hand-written nft).

The host of tests/kernel/test_verify_firewall.py's ``host_firewall`` (examples/host-
firewall.pf's meaning: ct states, an SSH allow-list, web ports, ICMP limits, reject) is
built in a host lab without the observer (``hostlab.host_lab(observe=False)``); frames
are blasted from the peer side from one pinned CPU (the host's receive path runs in
that CPU's softirq), and the CPU time of that CPU (system + irq + softirq) per frame is
the cost. Each workload runs against: no ruleset, the hand-written nft ruleset
(tests/corpus/handwritten/host-firewall.nft), pfc's nft and pfc's iptables, in turn,
``--rounds`` times interleaved; the median is reported with the ratio to hand-written.

Workloads: ``established`` (TCP data on an open connection to port 443, the common
case), ``new`` (SYNs to 443 from 4,096 source ports: a new connection each),
``rejected`` (UDP to a closed port: reject with port-unreachable, the reply through
output), ``denied-ssh`` (TCP SYN to 22 from outside the allow-list: a TCP reset).

    .venv/bin/python benchmarks/firewall.py [--seconds 3] [--rounds 3] [--json OUT]
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pfc.bench import traffic as bt  # noqa: E402
from pfc.build import build_ruleset  # noqa: E402
from pfc.kernel import hostlab, netns  # noqa: E402
from pfc.oracle import framebuild as fb  # noqa: E402
from pfc.oracle.path.host import host_of  # noqa: E402
from pfc.verifier import firewall as fwv  # noqa: E402
from tests.kernel.test_verify_firewall import host_firewall  # noqa: E402

HAND = ROOT / "tests" / "corpus" / "handwritten" / "host-firewall.nft"
CLIENT = ipaddress.ip_address("198.51.100.77")
SERVER = ipaddress.ip_address("198.51.100.10")


def workloads(port) -> dict[str, list[bytes]]:
    s, d = CLIENT.packed, SERVER.packed

    def eth(ip: bytes) -> bytes:
        return port.mac + port.peer_mac + b"\x08\x00" + ip

    def tcp(sport: int, dport: int, flags: int, payload: bytes = b"") -> bytes:
        return eth(fb.ipv4(s, d, 6, fb.tcp(s, d, sport, dport, flags, payload, seq=1001,
                                           ack=5001), ident=1))
    return {
        "established": [tcp(40000, 443, 0x18, b"x" * 64)],
        "new": [tcp(20000 + i, 443, 0x02) for i in range(4096)],
        "rejected": [eth(fb.ipv4(s, d, 17, fb.udp(s, d, 40001, 9, b"q"), ident=1))],
        "denied-ssh": [tcp(40002, 22, 0x02)],
    }


def opening(port, lab, wire) -> None:
    """The established workload's connection: SYN in, the host's SYN+ACK out (sent as
    the host), the ACK in."""
    s, d = CLIENT.packed, SERVER.packed
    eth = port.mac + port.peer_mac + b"\x08\x00"
    wire.inject(port.name, eth + fb.ipv4(s, d, 6, fb.tcp(s, d, 40000, 443, 0x02, b"",
                                                              seq=1000), ident=1))
    wire.send_local(fb.ipv4(d, s, 6, fb.tcp(d, s, 443, 40000, 0x12, b"", seq=5000,
                                            ack=1001), ident=1))
    wire.inject(port.name, eth + fb.ipv4(s, d, 6, fb.tcp(s, d, 40000, 443, 0x10, b"",
                                                              seq=1001, ack=5001), ident=1))
    wire.settle()


def run(loader, host, frames_by_load, seconds: float) -> dict[str, float]:
    """ns of CPU per frame, per workload, for one ruleset (``loader`` loads it)."""
    out = {}
    port = host.port("eth0")
    for name, frames in frames_by_load.items():
        with hostlab.host_lab(host, observe=name == "established") as lab:
            hostlab.neighbour(lab, "eth0", CLIENT)
            with lab.inside_host():
                loader()
            if name == "established":
                with netns.one_cpu():
                    wire = hostlab.Wire(lab)
                    opening(port, lab, wire)
                    wire.close()
            with netns.inside(lab.peer_ns):
                result = bt.blast(lab.peers["eth0"], port.mac, frames, seconds, None,
                                  lambda: 0, False)
        out[name] = result.cpu_ns / max(1, result.sent)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    ruleset = fwv.slowed(host_firewall())
    host = host_of(ruleset)
    hand = HAND.read_text().replace("10/second", "1/minute")
    arts = {t: build_ruleset(ruleset, [t])[0] for t in ("nft", "iptables")}
    loaders = {"none": lambda: None, "hand-nft": lambda: fwv._nft(hand),
               "pfc-nft": lambda: fwv._load_here(arts["nft"]),
               "pfc-iptables": lambda: fwv._load_here(arts["iptables"])}
    frames = workloads(host.port("eth0"))
    samples: dict[str, dict[str, list[float]]] = {k: {w: [] for w in frames} for k in loaders}
    started = time.time()
    for _ in range(args.rounds):
        for name, loader in loaders.items():
            for work, ns in run(loader, host, frames, args.seconds).items():
                samples[name][work].append(ns)
    table = {name: {w: statistics.median(v) for w, v in works.items()}
             for name, works in samples.items()}
    print(f"{'ruleset':14}" + "".join(f"{w:>14}" for w in frames))
    for name, works in table.items():
        print(f"{name:14}" + "".join(f"{works[w]:>11.0f} ns" for w in frames))
    for name in ("pfc-nft", "pfc-iptables"):
        print(f"{name + ' / hand':14}" + "".join(
            f"{table[name][w] / table['hand-nft'][w]:>13.2f}x" for w in frames))
    if args.json:
        args.json.write_text(json.dumps({"ns_per_packet": table, "rounds": args.rounds,
                                         "seconds": args.seconds,
                                         "duration": round(time.time() - started)},
                                        indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
