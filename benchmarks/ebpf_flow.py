"""``log ... rate`` and ``limit ... per src`` on the eBPF hooks, on the real clock.

1. **Log under a flood.** ``log udp dport 53 rate 10/second`` before ``drop udp dport
   53``, against ``count udp dport 53`` there (the same rule counting instead of
   logging) and the ``drop`` rule alone, on XDP and tc: ``BPF_PROG_TEST_RUN``
   with ``repeat`` on a frame both rules hold on (the kernel reports the mean ns per
   run; the programs' runs alternate A B A B ... for several rounds, so drift hits
   all alike). The log program's ring buffer is read at the end: a bucket of 10/s
   holding C tokens (``Rate.capacity``) may send at most ``C + 10 T`` events in a flood
   of T seconds.
2. **limit per source.** ``drop udp limit rate 1000/second per src`` on XDP under a
   flood from 100 sources, each sending 3,000 frames a second at jittered times: one
   test run per frame at its time (written to the program's clock map, ``pfc_clock``:
   an XDP test run with ``repeat`` > 1 costs 20-40 ms of wall time whatever the count,
   measured, so a real-time flood of single runs from Python cannot offer 100 × 1,000
   frames a second). Each source's passes are counted after a 0.75 s warm-up (the
   initial tokens, at most 1,005, are gone after 0.5 s) over a one-second window.

    sudo .venv/bin/python benchmarks/ebpf_flow.py [--repeat N] [--rounds R] [--seconds S]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import struct
import subprocess
import tempfile
import time
from pathlib import Path

from pfc.backends.ebpf import maps as ebpf_maps
from pfc.backends.ebpf.run import CLOCK_BASE, XDP_PASS
from pfc.build import build_artifact
from pfc.frontend.pipeline import compile_text
from pfc.kernel.ringbuf import RingBuffer

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "ebpf_flow.json"
LOGGED = "log udp dport 53 rate 10/second\ndrop udp dport 53\n"
PLAIN = "drop udp dport 53\n"
COUNTED = "count udp dport 53\ndrop udp dport 53\n"
CAPACITY = compile_text(LOGGED, "bench.pf").require().rules[0].action.rate.capacity
LIMITED = "drop udp limit rate 1000/second per src\n"
NSEC = 1_000_000_000


def udp_frame(src: bytes, dport: int = 53) -> bytes:
    payload = b"pfc-bench-payload!"
    udp = struct.pack("!HHHH", 40000, dport, 8 + len(payload), 0) + payload
    header = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 1, 0, 64, 17, 0, src,
                         bytes([192, 168, 0, 79]))
    return bytes.fromhex("020000000002020000000001") + b"\x08\x00" + header + udp


def loaded(text: str, hook: str):
    artifact, diags = build_artifact(compile_text(text, "bench.pf"), hook, "o")
    if artifact is None:
        raise SystemExit(f"cannot compile for {hook}: {diags}")
    obj = ebpf_maps.open_filled(artifact)
    return artifact, obj, obj.programs[artifact.meta["program"]]


# ------------------------------------------------------------------ log under a flood

def log_flood(hook: str, repeat: int, rounds: int) -> dict:
    """ns per packet of the drop rule alone, with a count rule of the same matches
    before it, and with the log rule before it; the log program's events."""
    objs = {k: loaded(text, hook)[1:] for k, text in
            (("plain", PLAIN), ("count", COUNTED), ("log", LOGGED))}
    frame = udp_frame(bytes([10, 0, 0, 1]))
    ns: dict[str, list[int]] = {k: [] for k in objs}
    start = time.monotonic()
    for _ in range(rounds):
        for k, (_, prog) in objs.items():
            ns[k].append(prog.test_run(frame, repeat=repeat).duration)
    seconds = time.monotonic() - start
    with RingBuffer(objs["log"][0].maps["pfc_events"].fd) as ring:
        events = len(ring.drain())
    for obj, _ in objs.values():
        obj.close()
    mean = {k: statistics.mean(v) for k, v in ns.items()}
    return {"hook": hook, **{f"ns_{k}": round(v, 2) for k, v in mean.items()},
            "ratio_to_count": round(mean["log"] / mean["count"], 3),
            "ratio_to_plain": round(mean["log"] / mean["plain"], 3),
            "log_packets": repeat * rounds, "seconds": round(seconds, 3),
            "events": events, "bucket": CAPACITY,
            "events_bound": int(CAPACITY + 10 * seconds)}


# ----------------------------------------------------------------- limit per source

def limit_per_source(sources: int, offered: int, warmup: float, seconds: float,
                     seed: int = 7) -> dict:
    """A flood from ``sources`` addresses, each sending ``offered`` frames a second at
    jittered times, through XDP test runs at those times (the clock map): each source's
    passes in the window after ``warmup`` seconds, per second."""
    artifact, obj, prog = loaded(LIMITED, "xdp")
    clock = obj.maps["pfc_clock"]
    frames = [udp_frame(bytes([10, 1, i // 256, i % 256])) for i in range(sources)]
    rng = random.Random(seed)
    gap = NSEC // offered
    arrivals = sorted((n * gap + rng.randrange(gap), i)
                      for i in range(sources) for n in range(int(offered * (warmup + seconds))))
    passes = [0] * sources
    start = time.monotonic()
    for t, i in arrivals:
        clock.update(0, (CLOCK_BASE + t).to_bytes(8, "little"))
        passed = prog.test_run(frames[i]).retval == XDP_PASS
        if passed and t >= warmup * NSEC:
            passes[i] += 1
    wall = time.monotonic() - start
    obj.close()
    rates = sorted(p / seconds for p in passes)
    within = sum(1 for r in rates if abs(r - 1000) <= 50)
    return {"sources": sources, "offered_pps_per_source": offered, "window_s": seconds,
            "frames": len(arrivals), "wall_s": round(wall, 1),
            "passed_pps_min": round(rates[0], 1),
            "passed_pps_median": round(statistics.median(rates), 1),
            "passed_pps_max": round(rates[-1], 1), "within_5_percent": within}


def limit_real_time(sources: int, rounds: int, warmup: float, seconds: float) -> dict:
    """The same flood as real traffic on the real clock: frames sent on a veth pair in a
    throw-away namespace by benchmarks/handwritten/flood.c (``rounds`` rounds a second,
    one frame per source each), pfc's XDP program on the receiving end, and behind it
    a tc program (count_by_src_tc.c) counting what got through, per source."""
    from pfc.deploy.tc import TC_HANDLE, TC_PRIORITY
    from pfc.kernel import bpf, bpf_attach, netns, toolchain

    flood = Path(tempfile.mkdtemp(prefix="pfc-flood-")) / "flood"
    subprocess.run(["cc", "-O2", "-o", str(flood), str(HERE / "handwritten" / "flood.c")],
                   check=True)
    counter_c = (HERE / "handwritten" / "count_by_src_tc.c").read_text()
    keys = [int.from_bytes(bytes([10, 1, i // 256, i % 256]), "little")
            for i in range(sources)]
    with netns.lab() as lab:
        artifact, obj, prog = loaded(LIMITED, "xdp")
        mode = _attach_xdp(lab.dut_index, prog.fd)
        counter = bpf.Object(toolchain.compile_c(counter_c, "count_by_src_tc").obj, "cnt")
        bpf_attach.tc_hook_create(lab.dut_index)
        bpf_attach.tc_attach(lab.dut_index, counter.programs["count_by_src"].fd, TC_HANDLE,
                             TC_PRIORITY, False)
        mac = ":".join(f"{b:02x}" for b in lab.dut_mac)
        proc = subprocess.Popen([str(flood), lab.inj, mac, str(sources), str(rounds),
                                 str(warmup + seconds + 0.5)], stdout=subprocess.PIPE, text=True)
        time.sleep(warmup)
        first, t1 = _by_source(counter.maps["by_src"], keys), time.monotonic()
        time.sleep(seconds)
        second, t2 = _by_source(counter.maps["by_src"], keys), time.monotonic()
        sent, flood_s = proc.communicate()[0].split()
        counter.close()
        obj.close()
    rates = sorted((b - a) / (t2 - t1) for a, b in zip(first, second, strict=True))
    within = sum(1 for r in rates if abs(r - 1000) <= 50)
    return {"sources": sources, "xdp_mode": mode, "window_s": round(t2 - t1, 3),
            "offered_pps_per_source": round(int(sent) / float(flood_s) / sources),
            "passed_pps_min": round(rates[0], 1),
            "passed_pps_median": round(statistics.median(rates), 1),
            "passed_pps_max": round(rates[-1], 1), "within_5_percent": within}


def _attach_xdp(index: int, fd: int) -> str:
    from pfc.kernel import bpf_attach

    try:
        bpf_attach.xdp_attach(index, fd, "native")
        return "native"
    except OSError:
        bpf_attach.xdp_attach(index, fd, "generic")
        return "generic"


def _by_source(table, keys: list[int]) -> list[int]:
    out = []
    for key in keys:
        try:
            out.append(table.sum_u64(key)[0])
        except OSError:  # no frame from this source got through yet
            out.append(0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--offered", type=int, default=3000)
    args = ap.parse_args()
    load = os.getloadavg()
    logs = [log_flood(hook, args.repeat, args.rounds) for hook in ("xdp", "tc")]
    limit = limit_per_source(100, args.offered, 0.75, args.seconds)
    real = limit_real_time(100, args.offered, 1.5, 2.0)
    result = {"loadavg": [round(x, 2) for x in load], "log_flood": logs,
              "limit_per_src": limit, "limit_per_src_veth": real}
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print("log rate 10/second under a flood (BPF_PROG_TEST_RUN, real clock): ns/packet")
    print(f"{'hook':5} {'drop':>6} {'count+drop':>11} {'log+drop':>9} {'log/count':>10} "
          f"{'log/drop':>9} {'packets':>9} {'seconds':>8} {'events':>7} {'bound':>6}"
          f"  (a bucket of {CAPACITY})")
    for r in logs:
        print(f"{r['hook']:5} {r['ns_plain']:6.2f} {r['ns_count']:11.2f} {r['ns_log']:9.2f} "
              f"{r['ratio_to_count']:10.3f} {r['ratio_to_plain']:9.3f} "
              f"{r['log_packets']:9} {r['seconds']:8.2f} {r['events']:7} "
              f"{r['events_bound']:6}")
    print(f"limit rate 1000/second per src, XDP, {limit['sources']} sources, "
          f"{limit['offered_pps_per_source']} pps offered each, {limit['frames']} test "
          f"runs at controlled times, window {limit['window_s']} s: "
          f"passed min {limit['passed_pps_min']} median {limit['passed_pps_median']} max "
          f"{limit['passed_pps_max']} pps; {limit['within_5_percent']} of "
          f"{limit['sources']} within 1000 ± 5%")
    print(f"the same on a veth pair, real clock, XDP {real['xdp_mode']}: "
          f"{real['offered_pps_per_source']} pps offered each, window {real['window_s']} s: "
          f"passed min {real['passed_pps_min']} median {real['passed_pps_median']} max "
          f"{real['passed_pps_max']} pps; {real['within_5_percent']} of "
          f"{real['sources']} within 1000 ± 5%")
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
