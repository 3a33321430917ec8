"""Run a ``u32`` artifact in the kernel: its ``tc -batch`` file loaded on the device
of the nft runner's throw-away namespace (the artifact compiled with ``--dev dut``),
each frame injected on the veth peer and followed by a marker frame.

tc ingress runs before netfilter's netdev ingress (``__netif_receive_skb_core``), so
an nft netdev chain on the device logs what tc let through: the frames pfc's filters
passed, then the marker, which a tc filter placed before pfc's (preference 1, its
source MAC ``iplab.MARK_MAC`` read at offset -8 from the network header) always
passes. Between two markers, a logged frame means "passed", none means "dropped".
Counters are the gact actions' statistics (``tc -s -j filter show``).

cls_u32, act_gact and cls_matchall are modules: this runs in a lab guest (the host
of this project has neither act_gact nor cls_matchall, nor module loading);
elsewhere ``KernelUnavailable`` names what is missing (``nfmod.kmod.u32_unavailable``).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path

from pfc.backends.base import DEFAULT_COUNTER, Artifact, counters_since
from pfc.backends.nfmod.kmod import u32_unavailable
from pfc.backends.nft import run as nftrun
from pfc.kernel import iplab
from pfc.kernel.observation import KernelUnavailable, Observation

MARKER_PREF = 1


def observer(dev: str) -> str:
    log = f"log group {nftrun.NFLOG_GROUP} prefix"
    return (f"table netdev pfc_observer {{\n"
            f"  chain tc {{ type filter hook ingress device \"{dev}\" priority 0; "
            "policy accept;\n"
            f"    ether saddr {iplab.mac_text(iplab.MARK_MAC)} {log} \"mark\" drop\n"
            f"    ether saddr {iplab.mac_text(iplab.SEND_MAC)} {log} \"pass\" drop\n"
            "    drop\n  }\n}\n"
            "table inet pfc_quiet {\n"
            "  chain out { type filter hook output priority -400; policy drop; }\n}\n")


def marker_filter(dev: str) -> str:
    mac = iplab.MARK_MAC
    return (f"filter add dev {dev} ingress pref {MARKER_PREF} protocol all u32 "
            f"match u32 0x{mac[:4].hex()} 0xffffffff at -8 "
            f"match u32 0x{mac[4:].hex()}0000 0xffff0000 at -4 action gact pass")


def tc(args: list[str], stdin: str | None = None) -> str:
    if shutil.which("tc") is None:
        raise KernelUnavailable("target `u32`: tc is not installed (iproute2)")
    done = subprocess.run(["tc", *args], input=stdin, capture_output=True, text=True)
    if done.returncode != 0:
        raise KernelUnavailable(f"target `u32`: tc {' '.join(args[:3])}: "
                                f"{done.stderr.strip()}")
    return done.stdout


def load(artifact: Artifact, dev: str) -> None:
    subprocess.run(["tc", "qdisc", "del", "dev", dev, "clsact"], capture_output=True)
    with tempfile.NamedTemporaryFile("w", suffix=".tc", delete=False) as f:
        f.write(artifact.text + marker_filter(dev) + "\n")
    try:
        tc(["-batch", f.name])
    finally:
        Path(f.name).unlink()


def read_counters(artifact: Artifact, dev: str) -> dict[int | str, tuple[int, int]]:
    """(packets, bytes) per rule and for the default: the sums of the gact actions of
    the filters at the rule's preferences."""
    listed = json.loads(tc(["-s", "-j", "filter", "show", "dev", dev, "ingress"]) or "[]")
    by_pref: dict[int, tuple[int, int]] = {}
    for item in listed:
        for action in item.get("options", {}).get("actions", []):
            stats = action.get("stats", {})
            p, b = by_pref.get(item["pref"], (0, 0))
            by_pref[item["pref"]] = (p + stats.get("packets", 0), b + stats.get("bytes", 0))
    out: dict[int | str, tuple[int, int]] = {}
    for key, prefs in artifact.meta["prefs"].items():
        counts = [by_pref.get(p, (0, 0)) for p in prefs]
        index = DEFAULT_COUNTER if key == "default" else int(key)
        out[index] = (sum(c[0] for c in counts), sum(c[1] for c in counts))
    return out


def judge(session: nftrun.Session, frames: list[bytes]) -> list[bytes | None]:
    out: list[bytes | None] = []
    for frame in frames:
        session.inj.send(nftrun.wire(session.lab.dut_mac, frame))
        session.seq += 1
        session.inj.send(iplab.ip_marker(session.seq, session.lab.dut_mac))
        passed = _until_marker(session)
        if len(passed) > 1:
            raise RuntimeError(f"{len(passed)} packets logged for one frame")
        out.append(passed[0] if passed else None)
    return out


def _until_marker(session: nftrun.Session) -> list[bytes]:
    logged = []
    while True:
        for prefix, packet in session.log.packets(timeout=5.0):
            if prefix == "mark" and iplab.marker_seq(packet) == session.seq:
                return logged
            if prefix == "pass":
                logged.append(packet)


def run(artifact: Artifact, frames: list[bytes]) -> Observation:
    """``Backend.run`` for u32: in the nft runner's current session, or a fresh one."""
    why = u32_unavailable()
    if why:
        raise KernelUnavailable(f"target `u32`: {why}")
    if nftrun._current is None:
        with nftrun.session():
            return _run(nftrun._current, artifact, frames)
    return _run(nftrun._current, artifact, frames)


def _run(session: nftrun.Session, artifact: Artifact, frames: list[bytes]) -> Observation:
    dev = session.lab.dut
    if artifact.meta["dev"] != dev:
        raise ValueError(f"compile the artifact with dev={dev!r} (it has "
                         f"{artifact.meta['dev']!r})")
    nftrun.nft_cmd(session.ctx, "flush ruleset")
    nftrun.nft_cmd(session.ctx, observer(dev))
    load(artifact, dev)
    try:
        before = read_counters(artifact, dev)
        seen = judge(session, frames)
        after = read_counters(artifact, dev)
    finally:
        subprocess.run(["tc", "qdisc", "del", "dev", dev, "clsact"], capture_output=True)
    return iplab.observation(frames, seen, counters_since(after, before))
