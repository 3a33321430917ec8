"""``pfc bench`` of a whole firewall (v2): what the firewall costs the host per packet,
loaded by each target (or list of targets), beside no firewall, in one run.

The host the file describes (its ``interface`` lines: addresses, routes, forwarding) is
built in a host lab without the observer (:func:`pfc.kernel.hostlab.host_lab`,
``observe=False``); the firewall is loaded into it through ``pfc load``'s own path
(:func:`pfc.deploy.firewall.commit.load_ruleset`) and unloaded before the lab goes.
Frames are what ``pfc verify`` sends (:mod:`pfc.verifier.traffic`: frames biased to
the file's constants and the host's addresses, and the openers of connections across
the host), sent from the peer side of each interface in turn from one pinned CPU; the
CPU time of that CPU (system + irq + softirq: the host's whole receive path, forwarding
and replies included) per frame is the cost. Rounds interleave the loads; the median
of the rounds is reported, with the ratio to no firewall (docs/bench.md).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

from pfc import backends
from pfc.bench import traffic as bench_traffic
from pfc.deploy.base import LoadError
from pfc.deploy.firewall import commit
from pfc.frontend import ir
from pfc.frontend.firewall.ruleset import Ruleset
from pfc.kernel import hostlab, netns
from pfc.oracle.path.host import Host, host_of
from pfc.verifier import traffic as vt

NONE = "none"
ENGINES = ("nft", "iptables")  # carry every block but the device ones (iptables)
FRONT = ("xdp", "tc")  # carry `ingress` in front of an engine

Tick = Callable[[str, float], None]


@dataclass
class Request:
    ruleset: Ruleset
    path: str
    source_text: str
    text_of: Callable[[ir.Rule], str]
    loads: list[list[str]]  # each a target list, as `pfc compile --target A,B` takes it
    seconds: float = 2.0
    rounds: int = 3
    frames: int = 256  # per interface
    seed: int = 0


@dataclass
class Row:
    name: str  # `none`, or the target list joined by `+`
    status: str = "ok"  # ok | refused: ... | error: ...
    samples: dict[str, list[float]] = field(default_factory=dict)  # port -> ns/frame

    def median(self) -> dict[str, float]:
        return {p: statistics.median(v) for p, v in self.samples.items() if v}


def default_loads(ruleset: Ruleset) -> list[list[str]]:
    """nft and iptables alone, and each eBPF front (xdp, tc) before nft when the file
    has an ``ingress`` block."""
    loads = [[e] for e in ENGINES]
    if ruleset.blocks("ingress"):
        loads += [[f, "nft"] for f in FRONT]
    return loads


def parse_loads(spec: str) -> list[list[str]]:
    """``nft,iptables,xdp+nft`` → ``[["nft"], ["iptables"], ["xdp", "nft"]]``;
    ValueError naming an unknown target."""
    known = backends.registry()
    loads = []
    for item in (s.strip() for s in spec.split(",")):
        names = [n.strip() for n in item.split("+")]
        bad = [n for n in names if n not in known]
        if not item or bad:
            raise ValueError(f"unknown target `{bad[0] if bad else item}`; known: "
                             + ", ".join(known))
        loads.append(names)
    return loads


def frames_by_port(ruleset: Ruleset, host: Host, per_port: int,
                   seed: int) -> dict[str, list[bytes]]:
    """What ``pfc verify`` would send, received on each interface (``lo`` aside)."""
    ports = [p.name for p in host.ports if p.name != "lo"]
    items = vt.conversations(host, ruleset, seed) + vt.traffic(
        ruleset, host, per_port * max(1, len(ports)) * 2, seed)
    out: dict[str, list[bytes]] = {p: [] for p in ports}
    for item in items:
        if item.port in out and item.answer is None and item.data \
                and len(out[item.port]) < per_port and item.data not in out[item.port]:
            out[item.port].append(item.data)
    return {p: f for p, f in out.items() if f}


def run(req: Request, tick: Tick | None = None) -> dict:
    """The report (a plain dict, docs/json.md ``pfc bench`` of a whole firewall)."""
    host = host_of(req.ruleset)
    frames = frames_by_port(req.ruleset, host, req.frames, req.seed)
    rows = [Row(NONE)] + [Row("+".join(load)) for load in req.loads]
    artifacts = {row.name: _build(req, load, row)
                 for row, load in zip(rows[1:], req.loads, strict=True)}
    steps = req.rounds * len(rows) * max(1, len(frames))
    done = 0
    for _ in range(req.rounds):
        for row in rows:
            if row.status != "ok":
                continue
            for port, sent in frames.items():
                try:
                    ns = _measure(req, host, artifacts.get(row.name), port, sent)
                except (LoadError, OSError, RuntimeError) as exc:
                    row.status = f"error: {exc}"
                    break
                row.samples.setdefault(port, []).append(ns)
                done += 1
                if tick:
                    tick(f"{row.name} on {port}", done / steps)
    return _report(req, rows, frames)


def _build(req: Request, load: list[str], row: Row) -> list | None:
    """The artifacts ``pfc load`` attaches for ``load``, or None (``row`` says why)."""
    try:
        arts, diags = commit.build(req.ruleset, load)
    except LoadError as exc:
        row.status = f"refused: {exc}"
        return None
    errors = [d for d in diags if d.severity == "error"]
    if errors:
        row.status = f"refused: {errors[0].message}" + (
            f" (and {len(errors) - 1} more)" if len(errors) > 1 else "")
        return None
    return arts


def _measure(req: Request, host: Host, artifacts: list | None, port: str,
             frames: list[bytes]) -> float:
    """CPU ns per frame of ``frames`` received on ``port``, with ``artifacts`` loaded
    (None: no firewall)."""
    mac = host.port(port).mac
    with hostlab.host_lab(host, observe=False) as lab:
        if artifacts is not None:
            commit.load_ruleset(artifacts, req.ruleset, req.path, req.source_text,
                                req.text_of, netns=lab.host_ns)
        try:
            with netns.inside(lab.peer_ns):
                result = bench_traffic.blast(lab.peers[port], mac, frames, req.seconds,
                                             None, lambda: 0, False)
        finally:
            if artifacts is not None:
                commit.unload(netns=lab.host_ns, force=True)
    return result.cpu_ns / max(1, result.sent)


def _report(req: Request, rows: list[Row], frames: dict[str, list[bytes]]) -> dict:
    base = rows[0].median()
    out = []
    for row in rows:
        ns = row.median()
        out.append({"name": row.name, "status": row.status, "ns_per_frame": ns,
                    "to_none": {p: round(v / base[p], 3) for p, v in ns.items()
                                if base.get(p)}})
    return {"file": req.path, "kind": "firewall", "seconds": req.seconds,
            "rounds": req.rounds, "frames": {p: len(f) for p, f in frames.items()},
            "rows": out}


def table_rows(report: dict) -> tuple[list[str], list[list[str]]]:
    """Columns (``load``, then per interface ns/frame and × none) and rows of text."""
    ports = list(report["frames"])
    columns = ["load"] + [c for p in ports for c in (f"{p} ns/frame", f"{p} × none")]
    rows = []
    for row in report["rows"]:
        cells = [row["name"]]
        for p in ports:
            ns, ratio = row["ns_per_frame"].get(p), row["to_none"].get(p)
            cells += [f"{ns:,.0f}" if ns is not None else "—",
                      f"{ratio:.2f}×" if ratio is not None else "—"]
        rows.append(cells)
    return columns, rows
