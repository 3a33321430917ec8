"""``pfc bench``: what each hook costs per packet for one policy, on this machine.

For every target (xdp, tc, cbpf and socket on a packet socket, nft, iptables; nfmod
and u32 where the kernel loads modules: ``pfc bench --kernel 6.1`` runs in the kernel
lab; the user-space filter without and with a connection table:
:mod:`pfc.bench.userspace`) and baseline (none, nft-naive, iptables-naive, xdp-filter)
the policy is attached in a fresh throw-away namespace (:func:`pfc.kernel.netns.lab`,
the ``dut`` end of a veth pair, configured by :func:`pfc.kernel.iplab.configure`) and
measured the same way (docs/bench.md):

- eBPF targets: ``BPF_PROG_TEST_RUN`` with ``repeat`` on each frame (kernel-reported
  ns/packet);
- every target and baseline: real traffic through the veth
  (:mod:`pfc.bench.traffic`): packets/s, dropped by the policy, CPU ns per packet
  (softirq included) and latency of passing probes.

The frames: one the policy drops and one it passes (from :func:`pfc.oracle.gen.sample`, the
interpreter's verdict, each checked to reach the local stack when nothing filters), or
the user's ``--pcap``. The report is a plain dict (``to_json``); printing, JSON and the
chart live in :mod:`pfc.bench.report`.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pfc.backends.base import Artifact
from pfc.bench import naive as bench_naive
from pfc.bench import traffic as bench_traffic
from pfc.deploy.base import LoadError
from pfc.frontend import ir
from pfc.frontend.pipeline import Compiled
from pfc.oracle import interp

TARGETS = ("xdp", "tc", "cbpf", "socket", "nft", "iptables", "nfmod", "u32", "userspace",
           "userspace+ct")
EBPF = ("xdp", "tc", "socket")
USERSPACE = ("userspace", "userspace+ct")  # pfc.bench.userspace: the cbpf program
PACKET_SOCKET = ("cbpf", "socket", *USERSPACE)  # rows whose filter feeds a packet socket
BASELINES = ("none", "nft-naive", "iptables-naive", "xdp-filter")
DUT_MAC = bytes.fromhex("027066630010")
SEND_MAC = bytes.fromhex("027066630002")
DEV = "dut"
CAP_NET_ADMIN, CAP_NET_RAW, CAP_SYS_ADMIN, CAP_BPF = 12, 13, 21, 39
PACKET_IGNORE_OUTGOING = 23

Tick = Callable[[str, float], None]


class BenchError(Exception):
    """Bench cannot run here (privileges) or with these arguments."""


@dataclass
class Request:
    path: str
    compiled: Compiled
    targets: list[str]
    baselines: list[str]
    duration: float = 2.0
    packets: int | None = None
    repeat: int = 100_000
    seed: int = 0
    frames: list[bytes] | None = None  # the user's (--pcap); else picked from the policy
    artifacts: dict[str, Artifact] = field(default_factory=dict)


@dataclass
class Row:
    name: str
    kind: str  # target | baseline
    hook: str
    status: str = "ok"  # ok | not installed | refused: ... | error: ...
    test_run_ns: dict[str, float] | None = None
    traffic: dict | None = None
    expected_dropped: int | None = None

    def to_json(self) -> dict:
        return {"name": self.name, "kind": self.kind, "hook": self.hook,
                "status": self.status, "test_run_ns": self.test_run_ns,
                "traffic": self.traffic, "expected_dropped": self.expected_dropped}


# ------------------------------------------------------------------------ privileges

def missing_privileges() -> str | None:
    """Which capability bench lacks, or None."""
    from pfc.deploy.base import effective_caps

    caps = effective_caps()
    need = {CAP_SYS_ADMIN: "CAP_SYS_ADMIN (network namespaces)",
            CAP_NET_ADMIN: "CAP_NET_ADMIN (attaching filters)",
            CAP_NET_RAW: "CAP_NET_RAW (the packet injector)"}
    missing = [text for cap, text in need.items() if cap not in caps]
    if not caps & {CAP_BPF, CAP_SYS_ADMIN}:
        missing.append("CAP_BPF (loading eBPF programs)")
    if missing:
        return "needs " + ", ".join(missing) + ": run it as root"
    return None


# ---------------------------------------------------------------------------- frames

def verdicts(policy: ir.Policy, frames: list[bytes]) -> list[ir.Verdict]:
    return [interp.evaluate(policy, f).verdict for f in frames]


def pick_frames(policy: ir.Policy, seed: int = 0, tries: int = 400) -> list[bytes]:
    """One frame the policy drops and one it passes (the ones that exist), UDP first,
    each one the local stack delivers when nothing filters it."""
    from pfc.oracle import gen

    candidates = gen.sample(policy, tries, seed, malformed=False, fragments=False,
                            eth_dst=DUT_MAC, eth_src=SEND_MAC)
    candidates.sort(key=lambda f: (0 if _proto(f) == 17 else 1 if _proto(f) == 6 else 2))
    chosen: dict[ir.Verdict, bytes] = {}
    with bench_lab() as lab:
        for frame in candidates:
            verdict = interp.evaluate(policy, frame).verdict
            if verdict in chosen or verdict not in (ir.Verdict.DROP, ir.Verdict.PASS):
                continue
            if _reaches_stack(lab, frame):
                chosen[verdict] = frame
            if len(chosen) == 2:
                break
    if not chosen:
        raise BenchError("no generated frame reaches the local stack; give frames with "
                         "--pcap")
    return [chosen[v] for v in (ir.Verdict.DROP, ir.Verdict.PASS) if v in chosen]


def _proto(frame: bytes) -> int | None:
    if frame[12:14] == b"\x08\x00" and len(frame) > 23:
        return frame[23]
    if frame[12:14] == b"\x86\xdd" and len(frame) > 20:
        return frame[20]
    return None


def _reaches_stack(lab, frame: bytes) -> bool:
    traffic = bench_traffic.blast(lab.inj, DUT_MAC, [frame], 1.0, 1,
                                  bench_traffic.delivered, probes=False)
    return traffic.passed == 1


@contextlib.contextmanager
def bench_lab() -> Iterator:
    """A lab whose ``dut`` has the fixed MAC :data:`DUT_MAC`, configured for IP input,
    with GRO on (veth then receives through NAPI, the path an attached XDP program
    switches on anyway: every row is measured on the same path)."""
    from pyroute2 import IPRoute

    from pfc.kernel import iplab, netns

    with netns.lab() as lab:
        with IPRoute() as ipr:
            ipr.link("set", index=lab.dut_index, address=iplab.mac_text(DUT_MAC))
        iplab.configure(lab)
        for key in ("icmp_msgs_per_sec", "icmp_msgs_burst"):  # no ICMP errors back
            iplab.sysctl(f"ipv4/{key}", "0")
        with IPRoute() as ipr:  # configure's MTU 65535 is too large for native XDP
            for index in (lab.dut_index, ipr.link_lookup(ifname=lab.inj)[0]):
                ipr.link("set", index=index, mtu=1500)
        bench_traffic.set_gro(lab.dut)  # NAPI on dut: every row takes the same path
        yield lab


# --------------------------------------------------------------------------- compile

def compile_targets(req: Request, explicit: bool) -> list[str]:
    """Compile each target into ``req.artifacts``; the messages of targets that cannot
    express the policy (BenchError for a named one, skipped with ``all``)."""
    from pfc.build import build_artifact

    notes = []
    for target in list(req.targets):
        why = _kernel_lacks(target)
        if why:
            if explicit:
                raise BenchError(f"target `{target}`: {why} (`pfc bench --kernel 6.1` "
                                 "runs it in the kernel lab, docs/bench.md)")
            notes.append(f"{target}: skipped: {why}")
            req.targets.remove(target)
            continue
        backend = "cbpf" if target in ("cbpf", *USERSPACE) else target
        options = {"dev": DEV} if target in ("nft", "u32") else \
            {"hook": "socket"} if backend == "cbpf" else {}
        artifact, diags = build_artifact(req.compiled, backend, **options)
        if artifact is None:
            msg = "; ".join(d.message for d in diags)
            if explicit:
                raise BenchError(f"{req.path}: {msg}")
            notes.append(f"{target}: not expressible: {msg}")
            continue
        req.artifacts[target] = artifact
    req.targets = [t for t in req.targets if t in req.artifacts]
    return notes


def _kernel_lacks(target: str) -> str | None:
    """Why the running kernel cannot take nfmod or u32 (None: it can, or another
    target)."""
    if target not in ("nfmod", "u32"):
        return None
    from pfc.backends.nfmod import kmod

    return kmod.modules_unavailable() if target == "nfmod" else kmod.u32_unavailable()


# ------------------------------------------------------------------------------- run

def run(req: Request, tick: Tick | None = None) -> dict:
    """Measure every target and baseline; the report as a dict (see to_json)."""
    why = missing_privileges()
    if why:
        raise BenchError(why)
    policy = req.compiled.require()
    frames = req.frames or pick_frames(policy, req.seed)
    judged = verdicts(policy, frames)
    entries = [("baseline", "none")] if "none" in req.baselines else []
    entries += [("target", t) for t in req.targets]
    entries += [("baseline", b) for b in req.baselines if b != "none"]
    rows = []
    for i, (kind, name) in enumerate(entries):
        def step(fraction: float, name=name, i=i) -> None:
            if tick:
                tick(name, (i + fraction) / len(entries))
        rows.append(measure(req, kind, name, frames, judged, step))
    if tick:
        tick("done", 1.0)
    return report(req, frames, judged, rows)


def measure(req: Request, kind: str, name: str, frames: list[bytes],
            judged: list[ir.Verdict], step: Callable[[float], None]) -> Row:
    """One row: test runs (eBPF) and real traffic, or the reason there are none."""
    row = Row(name, kind, _hook(req, name))
    try:
        if name in EBPF:
            row.test_run_ns = test_run_ns(req.artifacts[name], frames, judged, req.repeat)
        with bench_lab() as lab, attached(req, name, lab) as counting:
            traffic = bench_traffic.blast(lab.inj, DUT_MAC, frames, req.duration,
                                          req.packets, probes=name not in PACKET_SOCKET,
                                          progress=step, **counting)
    except bench_naive.Refused as exc:
        row.status = f"refused: {exc}"
        return row
    except _NotInstalled:
        row.status = "not installed"
        return row
    except (RuntimeError, OSError, LoadError) as exc:  # (UserspaceError too)
        row.status = f"error: {exc}"
        return row
    row.traffic = traffic.to_json()
    expected = sum(n for n, v in zip(traffic.per_frame, judged, strict=True)
                   if v is ir.Verdict.DROP)
    row.expected_dropped = 0 if name == "none" else expected
    return row


def _hook(req: Request, name: str) -> str:
    if name in req.artifacts:
        art = req.artifacts[name]
        if name in USERSPACE:
            return "AF_PACKET ring, user space"
        return f"{name} {art.hook}" if art.hook != name else name
    return {"none": "-", "nft-naive": "nft ingress", "iptables-naive": "iptables prerouting",
            "xdp-filter": "xdp"}.get(name, "-")


def test_run_ns(artifact: Artifact, frames: list[bytes], judged: list[ir.Verdict],
                repeat: int) -> dict[str, float]:
    """ns/packet of ``BPF_PROG_TEST_RUN`` per frame (keyed by verdict) and their mean."""
    from pfc.backends.ebpf import run as ebpf_run

    obj = ebpf_run.loaded(artifact)
    prog = obj.programs[artifact.meta["program"]]
    out: dict[str, float] = {}
    for frame, verdict in zip(frames, judged, strict=True):
        data = ebpf_run.PSEUDO_LINK + frame if artifact.hook == "socket" else frame
        if artifact.hook == "tc" and ebpf_run.tc_refuses(frame):
            continue
        out[verdict.value] = float(prog.test_run(data, repeat=repeat).duration)
    if out:
        out["mean"] = round(sum(out.values()) / len(out), 1)
    return out


class _NotInstalled(Exception):
    pass


@contextlib.contextmanager
def attached(req: Request, name: str, lab) -> Iterator[dict]:
    """Attach target or baseline ``name`` to the lab's dut; yield how ``blast`` counts
    what passed it (``passed``; for the user-space rows ``elsewhere`` and ``settle`` too).
    pfc targets are unloaded again (their state records go)."""
    policy = req.compiled.require()
    delivered = {"passed": bench_traffic.delivered}
    if name in USERSPACE:
        from pfc.bench.userspace import Runner

        with Runner(DEV, req.artifacts[name].meta["insns"], ct=name.endswith("+ct")) as r:
            yield {"passed": r.passed, "elsewhere": r.elsewhere, "settle": r.settle}
    elif name in ("cbpf", "socket"):
        with _socket_filter(req.artifacts[name]) as passed:
            yield {"passed": passed}
    elif name in req.artifacts:
        from pfc.deploy import load

        art = req.artifacts[name]
        load.load(art, req.path, req.compiled.source.text, [], DEV, netns=lab.name)
        try:
            yield delivered
        finally:
            load.unload(name, DEV, netns=lab.name)
    elif name == "none":
        yield delivered
    elif name == "nft-naive":
        bench_naive.load_nft(policy, DEV)
        yield delivered
    elif name == "iptables-naive":
        bench_naive.load_iptables(policy)
        yield delivered
    elif name == "xdp-filter":
        if not bench_naive.xdp_filter_available():
            raise _NotInstalled
        bench_naive.xdp_filter_commands(policy, DEV, "native")  # Refused before loading
        try:
            bench_naive.load_xdp_filter(policy, DEV)
            yield delivered
        finally:
            bench_naive.unload_xdp_filter(DEV)
    else:
        raise BenchError(f"unknown baseline `{name}`")


@contextlib.contextmanager
def _socket_filter(artifact: Artifact) -> Iterator[Callable[[], int]]:
    """The socket program (eBPF, ``SO_ATTACH_BPF``) or the cbpf program
    (``SO_ATTACH_FILTER``) attached to a packet socket on dut: what passed is the
    socket's tp_packets (its queue may overflow; the filter ran on every frame)."""
    from pfc.kernel import netns

    sock = netns.packet_socket(DEV)
    sock.setsockopt(bench_traffic.SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)  # dut's own MLD
    if artifact.target == "cbpf":
        netns.attach_cbpf(sock, artifact.meta["insns"])
    else:
        from pfc.backends.ebpf import run as ebpf_run

        prog = ebpf_run.loaded(artifact).programs[artifact.meta["program"]]
        sock.setsockopt(socket.SOL_SOCKET, netns.SO_ATTACH_BPF, prog.fd)
    bench_traffic.packet_stats(sock)  # reset
    total = [0]

    def passed() -> int:
        total[0] += bench_traffic.packet_stats(sock)
        return total[0]

    try:
        yield passed
    finally:
        sock.close()


# ---------------------------------------------------------------------------- report

def report(req: Request, frames: list[bytes], judged: list[ir.Verdict],
           rows: list[Row]) -> dict:
    base = next((r for r in rows if r.name == "none" and r.traffic), None)
    out = []
    for r in rows:
        data = r.to_json()
        data["ratio_to_none"] = _ratios(r, base) if base and r.traffic else None
        out.append(data)
    return {"file": str(Path(req.path)), "duration": req.duration, "repeat": req.repeat,
            "frames": [{"hex": f.hex(), "verdict": v.value} for f, v in zip(
                frames, judged, strict=True)],
            "rows": out}


def _ratios(row: Row, base: Row) -> dict:
    t, b = row.traffic, base.traffic
    out = {}
    for key in ("cpu_ns_per_packet", "pps"):
        if t.get(key) and b.get(key):
            out[key] = round(t[key] / b[key], 3)
    if t.get("latency_us") and b.get("latency_us"):
        out["latency_median"] = round(t["latency_us"]["median"] / b["latency_us"]["median"], 3)
    return out
