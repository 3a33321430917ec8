"""Issue 20 on nft (netdev ingress): does `limit ... per src` hold its rate under a
flood, and does `log ... rate` keep its events and its cost down?

1. `drop udp limit rate R/second per src`, a flood from 100 sources (UDP, cycled
   evenly) through the veth for a few seconds: packets passed per source per second,
   per source (an observer table after pfc's chain counts them by source address), to
   compare with R; the first `burst` packets of each source are taken off first.
2. `log udp dport 7000 rate 10/second` + `drop udp dport 7000` beside the same rule
   without `log`: NFLOG events per second (`pfc log`'s listener, group 20) and CPU ns
   per packet of both, side by side in one run (the ratio is the number).

Measured with pfc.bench's own traffic code (AF_PACKET sendmmsg from one pinned CPU,
CPU time of that CPU). Run as root: ``.venv/bin/python benchmarks/nf_limits_logs.py
[--seconds S] [--out benchmarks/results/nf_limits_logs.json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import threading
import time
from pathlib import Path

from pfc.bench import measure, traffic
from pfc.build import build_artifact
from pfc.frontend.pipeline import compile_text
from pfc.kernel.nflog import Listener
from pfc.oracle import framebuild as fb

DST = bytes((192, 168, 0, 79))
OBSERVER = """table netdev pfc_obs {
  set seen {
    type ipv4_addr
    size 4096
    flags dynamic
    counter
  }
  chain c {
    type filter hook ingress device "dut" priority 10; policy accept;
    ip protocol udp update @seen { ip saddr }
  }
}
"""


def _nft(text: str) -> str:
    import nftables
    ctx = nftables.Nftables()
    rc, out, err = ctx.cmd(text)
    if rc:
        raise RuntimeError(err)
    return out


def _frames(sources: int, dport: int) -> list[bytes]:
    out = []
    for i in range(sources):
        src = bytes((10, 1, i // 250, 1 + i % 250))
        ip = fb.ipv4(src, DST, 17, fb.udp(src, DST, 40000, dport, b"x" * 18))
        out.append(fb.ethernet(measure.DUT_MAC, b"\x02\0\0\0\0\x07", 0x0800, ip))
    return out


def _load(text: str) -> None:
    art, diags = build_artifact(compile_text(text, "b.pf"), "nft", dev="dut")
    assert art is not None, diags
    _nft("flush ruleset")
    _nft(art.text)


def limit_run(lab, rate: int, burst: int, seconds: float) -> dict:
    _load(f"drop udp limit rate {rate}/second burst {burst} per src\n")
    _nft(OBSERVER)
    frames = _frames(100, 7000)
    run = traffic.blast(lab.inj, measure.DUT_MAC, frames, seconds, None,
                        traffic.delivered, probes=False)
    listed = _nft("list set netdev pfc_obs seen")
    per = [int(n) for n in re.findall(r"counter packets (\d+)", listed)]
    rates = [(n - burst) / run.seconds for n in per]
    return {"rate": rate, "burst": burst, "sources": len(per), "offered_pps": round(
        run.sent / run.seconds), "seconds": round(run.seconds, 3),
        "per_source_per_s": {"mean": round(statistics.mean(rates), 1),
                             "min": round(min(rates), 1), "max": round(max(rates), 1)},
        "within_5pc": sum(abs(r - rate) <= 0.05 * rate for r in rates)}


def log_run(lab, seconds: float) -> dict:
    frames = _frames(100, 7000)
    out = {}
    for name, text in (("without log", "drop udp dport 7000\n"),
                       ("with log rate 10/second",
                        'log udp dport 7000 prefix "flood" rate 10/second\n'
                        "drop udp dport 7000\n")):
        _load(text)
        events, stop = [], threading.Event()
        listener = Listener(20)

        def read(listener=listener, events=events, stop=stop) -> None:
            while not stop.is_set():
                try:
                    events.extend(time.monotonic() for _ in listener.receive(0.2))
                except TimeoutError:
                    continue

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        run = traffic.blast(lab.inj, measure.DUT_MAC, frames, seconds, None,
                            traffic.delivered, probes=False)
        time.sleep(0.1)  # the last NFLOG flush (10 ms timer)
        stop.set()
        reader.join()
        listener.close()
        per_second = max(0, len(events) - 5) / run.seconds  # the first 5: the burst
        out[name] = {"pps": round(run.sent / run.seconds),
                     "cpu_ns_per_packet": round(run.cpu_ns / run.sent, 1),
                     "events": len(events), "events_per_s_after_burst": round(per_second, 2)}
    base, logged = out["without log"], out["with log rate 10/second"]
    out["ratio_cpu_ns"] = round(logged["cpu_ns_per_packet"] / base["cpu_ns_per_packet"], 3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    with measure.bench_lab() as lab:
        result = {"load_average": os.getloadavg(),
                  "limit": [limit_run(lab, 1000, 5, args.seconds),
                            limit_run(lab, 1000, 50, args.seconds),
                            limit_run(lab, 200, 5, args.seconds)],
                  "log": log_run(lab, args.seconds)}
        result["load_average_after"] = os.getloadavg()
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
