"""Issue 28: seed 002's experiment with pfc's user-space verdicts. iperf3 (Debian's)
from a client namespace to a server namespace through a veth pair, the policy in the
server's INPUT hook (iptables, ``--hook filter-input``), ``pfc decide`` serving the
queue:

  (a) no filter;
  (b) pfc allow-all (``pass all``); (b2) the same with conntrack on, as (e) has it;
  (c) every packet to user space (``queue tcp dport 5201``, decider ``pass``);
  (d) every packet to user space with the payload analyser (seed 002's pattern search;
      a pattern the traffic does not hold, so the flow lives);
  (e) flow-cached verdicts: ``queue tcp dport 5201 first 8`` with the analyser on each
      flow's first 8 packets, the rest decided by the connection's mark in the kernel;
  (c') (d') as (c) (d) with ``pfc decide --segment``: wire-size packets, as the seed's
      ring buffer carried them (by default NFQUEUE hands over whole GSO packets).

Each row: throughput (receiver), TCP retransmissions, the round-trip time of a 1-byte
TCP echo on an established connection (median of N: the cached-verdict path in (e)),
the average ICMP ping (iputils, N/2 echoes 10 ms apart: not queued by any row), the
decider's memory (the worker's RSS; the PSS of ``pfc decide``'s watchdog and worker
together) and counters.
Ratios against (b) are of one run; ``--repeat N`` runs every row N times, interleaved,
and shows medians (the 2-core machine is shared: single rounds vary by ±40 %). Run as
root: ``.venv/bin/python benchmarks/queue_verdicts.py [--seconds S] [--repeat N]
[--out benchmarks/results/queue.json]`` (not ``queue.py``: a script there would
shadow the standard library's ``queue``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import select
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from pfc.build import build_artifact
from pfc.decide.pair import SERVER_ADDR, Pair, pair
from pfc.frontend.pipeline import compile_text
from pfc.kernel.netns import inside

PORT = 5201
PATTERN = "pfc-no-such-pattern-in-iperf3-data"
QUEUE_ALL = f"queue tcp dport {PORT}\npass all\n"
ROWS = (
    ("a", "no filter", None, None),
    ("b", "pfc allow-all", "pass all\n", None),
    ("b2", "pfc allow-all, conntrack on (as (e) has it)",
     f"pass tcp dport {PORT} ct state established\npass all\n", None),
    ("c", "every packet to user space", QUEUE_ALL, "pass"),
    ("d", "every packet to user space + analyser", QUEUE_ALL, f"pattern:{PATTERN}"),
    ("e", "flow-cached verdicts (first 8) + analyser",
     f"queue tcp dport {PORT} first 8\npass all\n", f"pattern:{PATTERN}"),
    # the seed's ring buffer carried wire-size packets: the same rows, segmented
    ("c'", "(c), GSO packets segmented", QUEUE_ALL, "pass --segment"),
    ("d'", "(d), GSO packets segmented", QUEUE_ALL, f"pattern:{PATTERN} --segment"),
)


def load(p: Pair, text: str) -> None:
    artifact, diags = build_artifact(compile_text(text, "q.pf"), "iptables",
                                     hook="filter-input")
    if diags:
        raise SystemExit(f"policy: {diags}")
    for name in ("q.iptables.init", "q.iptables.restore"):
        p.run(p.server, ["iptables-restore", "--noflush"], input=artifact.files[name].decode())


@contextlib.contextmanager
def decider(p: Pair, text: str | None, spec: str | None):
    if spec is None:
        yield None
        return
    with tempfile.NamedTemporaryFile("w", suffix=".pf") as f:
        f.write(text)
        f.flush()
        proc = p.popen(p.server, [sys.executable, "-m", "pfc", "decide", f.name,
                                  "--decider", *spec.split()], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
        line = proc.stderr.readline()
        if not line.startswith("pfc decide: queue"):
            raise SystemExit(line + proc.stderr.read())
        try:
            yield proc
        finally:
            proc.terminate()
            proc.wait()


def memory_kib(proc: subprocess.Popen) -> tuple[int, int]:
    """(RSS of the worker, PSS of ``pfc decide``'s two processes together): the worker
    is the watchdog's child, forked after the policy was compiled, so most pages are
    shared (copy on write) and counted in both RSSes; the PSS sum counts them once."""
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    pss = rss = 0
    for pid in [proc.pid, *map(int, children)]:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                pss += int(line.split()[1])
            if line.startswith("Rss:") and pid != proc.pid:
                rss = int(line.split()[1])
    return rss, pss


def iperf(p: Pair, seconds: float) -> dict:
    server = p.popen(p.server, ["iperf3", "-s", "-1", "-B", SERVER_ADDR, "--forceflush"],
                     stdout=subprocess.PIPE, text=True)
    try:
        while "listening" not in (line := server.stdout.readline()):
            if not line:
                raise SystemExit("iperf3 -s ended before listening")
        out = p.run(p.client, ["iperf3", "-c", SERVER_ADDR, "-t", str(seconds), "-J"],
                    timeout=seconds + 60).stdout
    finally:
        server.wait(timeout=30)
    end = json.loads(out)["end"]
    return {"mbit_s": round(end["sum_received"]["bits_per_second"] / 1e6, 1),
            "retransmits": end["sum_sent"].get("retransmits", 0)}


def rtt_us(p: Pair, rounds: int) -> float:
    """Median round trip of a 1-byte TCP echo on one established connection."""
    with inside(p.server):
        listener = socket.create_server((SERVER_ADDR, PORT))
    stop = threading.Event()

    def serve() -> None:
        conn, _ = listener.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with conn:
            while not stop.is_set() and select.select([conn], [], [], 0.5)[0]:
                data = conn.recv(64)
                if not data:
                    return
                conn.sendall(data)
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    with inside(p.client):
        s = socket.socket()
    s.connect((SERVER_ADDR, PORT))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    times = []
    for _ in range(rounds):
        start = time.perf_counter_ns()
        s.sendall(b"x")
        s.recv(64)
        times.append(time.perf_counter_ns() - start)
    s.close()
    stop.set()
    t.join()
    listener.close()
    return round(statistics.median(times[10:]) / 1000, 1)


def ping_us(p: Pair, count: int) -> float:
    """Average ICMP echo round trip (iputils ``ping``, 10 ms apart) from the client: ICMP
    never matches a ``queue tcp`` rule, so it shows what the rules and conntrack add to
    packets that are not queued (seed 002 copied every packet, ICMP too)."""
    out = p.run(p.client, ["ping", "-q", "-n", "-c", str(count), "-i", "0.01", SERVER_ADDR],
                timeout=count + 30).stdout
    return round(float(out.rsplit("=", 1)[1].split("/")[1]) * 1000, 1)


def row(key: str, name: str, text: str | None, spec: str | None, seconds: float,
        rounds: int) -> dict:
    with pair() as p:
        if text is not None:
            load(p, text)
        with decider(p, text, spec) as proc:
            out = {"row": key, "setup": name, **iperf(p, seconds), "rtt_us": rtt_us(p, rounds),
                   "ping_us": ping_us(p, rounds // 2)}
            if proc is not None:
                rss, pss = memory_kib(proc)
                out["decider_rss_mib"] = round(rss / 1024, 1)
                out["decider_pss_mib"] = round(pss / 1024, 1)
                proc.terminate()
                stdout, _ = proc.communicate()
                out["decider"] = json.loads(stdout.strip().splitlines()[-1])
    return out


def merged(runs: list[dict]) -> dict:
    """One row of several rounds: the medians, and every round's throughput."""
    out = dict(runs[-1])
    for key in ("mbit_s", "rtt_us", "ping_us", "retransmits"):
        out[key] = round(statistics.median(r[key] for r in runs), 1)
    out["mbit_s_rounds"] = [r["mbit_s"] for r in runs]
    return out


def table(rows: list[dict]) -> str:
    base = next(r for r in rows if r["row"] == "b")
    lines = ["| row | setup | Mbit/s | × (b) | retransmits | RTT µs | RTT − (b) µs | "
             "ping µs | ping − (b) µs | decider RSS / PSS MiB | packets to user space |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        d = r.get("decider", {})
        lines.append(f"| {r['row']} | {r['setup']} | {r['mbit_s']:,} | "
                     f"{r['mbit_s'] / base['mbit_s']:.2f} | {r['retransmits']} | "
                     f"{r['rtt_us']} | {r['rtt_us'] - base['rtt_us']:+.1f} | "
                     f"{r['ping_us']} | {r['ping_us'] - base['ping_us']:+.1f} | "
                     f"{_memory(r)} | {d.get('packets', '—')} |")
    return "\n".join(lines)


def _memory(r: dict) -> str:
    if "decider_rss_mib" not in r:
        return "—"
    return f"{r['decider_rss_mib']} / {r['decider_pss_mib']}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rounds", type=int, default=500)
    ap.add_argument("--rows", default="a,b,b2,c,d,e,c',d'")
    ap.add_argument("--repeat", type=int, default=1,
                    help="rounds over every row (interleaved); the table shows medians")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    wanted = args.rows.split(",")
    runs: dict[str, list[dict]] = {}
    for _ in range(args.repeat):
        for r in ROWS:
            if r[0] in wanted:
                runs.setdefault(r[0], []).append(row(*r, args.seconds, args.rounds))
    rows = [merged(v) for v in runs.values()]
    print(table(rows))
    if args.out:
        args.out.write_text(json.dumps({"seconds": args.seconds, "repeat": args.repeat,
                                        "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
