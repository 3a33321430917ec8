"""Run an ``iptables`` artifact in the kernel: a throw-away namespace, the restore files
loaded with the artifact's flavour (``iptables-nft-*`` or ``iptables-legacy-*``), frames
injected on the veth peer, verdicts observed after the hook, counters read back.

Observer (measured on Linux 6.18, iptables 1.8.9; docs/iptables.md):

- pfc's ``pass`` is ``RETURN`` to the base chain, so a rule appended to the base chain
  after pfc's jump, ``-j NFLOG``, sees exactly the packets the policy passed, with their
  bytes (from the IP header, as the hook saw them). A dropped packet never gets there.
- Batch ends are marked by an IPv4 frame from a reserved source MAC, logged and dropped
  by two rules inserted before pfc's jump (``-m mac``): NFLOG messages of one group
  arrive in the order the packets were processed, one softirq after the other, so when
  the marker's message arrives every frame sent before it has been judged. Frames are
  sent from one CPU (the thread is pinned) so the veth backlog keeps their order.
- Each logged packet is matched to the next injected frame with the same bytes (the
  verdict depends on those bytes only); one that matches no frame is an error.
- Only what the runner injected reaches pfc's chain: a gate before the jump (chain
  ``lab-gate``: lower case, so never one of pfc's) returns packets that arrived on the
  lab's device from ``SEND_MAC`` and drops the rest. Without it pfc's counters move for
  packets nobody injected, measured: replies and ICMP errors the lab's stack generated
  while the tables were being replaced, looped back through ``lo``; an IPv6 packet with
  a routing header, which passes INPUT a second time after the header is processed
  (without a valid MAC header, so ``-m mac`` cannot name it). The markers are taken
  before the gate.
- Nothing in the lab may enable conntrack: with conntrack on, nf_defrag_ipv4 (priority
  -400) reassembles IPv4 fragments before raw PREROUTING (-300) sees them (measured).
  ``CT --notrack`` does not enable it. The lab drops every locally generated packet
  (raw OUTPUT), so replies (ICMP errors, RSTs) never loop back into the hooks.

Speed (measured here): a load, counters included, is about 10 subprocesses, 20 ms with
iptables-legacy and 70 ms with iptables-nft; frames are judged at about 30 000 per
second (tests/backends/test_iptables.py ``test_runner_is_fast``). ``session()`` keeps one lab for
many runs; ``run`` outside one makes a lab per call.
"""

from __future__ import annotations

import contextlib
import re
import struct
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field

from pfc.backends.base import DEFAULT_COUNTER, Artifact, counters_since
from pfc.kernel import iplab, netns
from pfc.kernel.nflog import flush_conntrack
from pfc.kernel.observation import KernelUnavailable, Observation

MARK_MAC, SEND_MAC = iplab.MARK_MAC, iplab.SEND_MAC
Nflog = iplab.Nflog
NFLOG_GROUP = 4711
GATE = "lab-gate"  # the observer's chain (lower case: pfc's chains are upper case)
CHUNK = 200  # frames per marker: bounds what waits in the netlink socket
TOOLS = {4: "iptables", 6: "ip6tables"}
_COUNTER = re.compile(r"^\[(\d+):(\d+)\] -A (\S+)")


# ------------------------------------------------------------------------ tools

def _tool(family: int, flavour: str, what: str = "restore") -> str:
    return f"{TOOLS[family]}-{flavour}-{what}"


def _call(argv: list[str], text: str | None = None) -> str:
    result = subprocess.run(argv, input=text, capture_output=True, text=True)
    if result.returncode:
        raise RuntimeError(f"`{' '.join(argv)}` failed: {result.stderr.strip()}")
    return result.stdout


marker = iplab.ip_marker
_mac = iplab.mac_text


# ------------------------------------------------------------------------ session

@dataclass
class Session:
    """One lab, reused for many loads: ``load`` resets everything pfc or the observer
    put there before."""

    lab: netns.Lab
    log: Nflog
    inj: netns.Injector
    flavours: set[str] = field(default_factory=set)
    seq: int = 0

    def reset(self) -> None:
        for flavour in sorted(self.flavours):
            for family in TOOLS:  # a restore without --noflush empties these tables
                _call([_tool(family, flavour)], "*raw\nCOMMIT\n*filter\nCOMMIT\n")
        _call(["ipset", "destroy"])
        self.flavours.clear()

    def load(self, artifact: Artifact) -> None:
        self.reset()
        flush_conntrack()  # a previous run's connections must not decide this one's
        meta, files = artifact.meta, artifact.files
        flavour = meta["flavour"]
        self.flavours.add(flavour)
        if meta["files"]["ipset"]:
            _call(["ipset", "restore"], files[meta["files"]["ipset"]].decode())
        for family, init, main in ((4, "init4", "ipv4"), (6, "init6", "ipv6")):
            _call([_tool(family, flavour), "-w", "--noflush"], files[meta["files"][init]].decode())
            _call([_tool(family, flavour), "-w", "--noflush"], files[meta["files"][main]].decode())
        self._observe(meta)

    def _observe(self, meta: dict) -> None:
        flavour, log = meta["flavour"], f"-j NFLOG --nflog-group {NFLOG_GROUP}"
        mark = f"-m mac --mac-source {_mac(MARK_MAC)}"
        sent = f"-i {self.lab.dut} -m mac --mac-source {_mac(SEND_MAC)}"
        for family in TOOLS:
            _call([_tool(family, flavour), "-w", "--noflush"],
                  f"*raw\n-A OUTPUT -j DROP\nCOMMIT\n"
                  f"*{meta['table']}\n:{GATE} - [0:0]\n-A {GATE} {sent} -j RETURN\n"
                  f"-A {GATE} -j DROP\n-I {meta['base']} 1 -j {GATE}\n"
                  f"-A {meta['base']} -i {self.lab.dut} {log} --nflog-prefix pass\nCOMMIT\n")
        _call([_tool(4, flavour), "--noflush"],  # above the gate
              f"*raw\n-I PREROUTING 1 {mark} -j DROP\n"
              f"-I PREROUTING 1 {mark} {log} --nflog-prefix mark\nCOMMIT\n")

    def judge(self, frames: list[bytes]) -> list[bytes | None]:
        """For each frame (as the hook sees it), the packet logged after the hook, or
        None when the policy dropped it."""
        out: list[bytes | None] = []
        for i in range(0, len(frames), CHUNK):
            out += self._batch(frames[i:i + CHUNK])
        return out

    def _batch(self, frames: list[bytes]) -> list[bytes | None]:
        for frame in frames:
            self.inj.send(self.lab.dut_mac + SEND_MAC + frame[12:])
        self.seq += 1
        self.inj.send(marker(self.seq, self.lab.dut_mac))
        logged = self._until_marker()
        out: list[bytes | None] = []
        for frame in frames:
            if logged and logged[0] == frame[14:]:
                out.append(logged.pop(0))
            else:
                out.append(None)
        if logged:
            raise RuntimeError(f"{len(logged)} packets passed the hook that match no "
                               f"injected frame, e.g. {logged[0].hex()}")
        return out

    def _until_marker(self) -> list[bytes]:
        logged = []
        while True:
            for prefix, packet in self.log.packets(timeout=5.0):
                if prefix == "mark" and struct.unpack("!Q", packet[28:36])[0] == self.seq:
                    return logged
                if prefix == "pass":
                    logged.append(packet)

    def counters(self, artifact: Artifact) -> dict[int | str, tuple[int, int]]:
        """(packets, bytes) of every rule and of the default (the chain's last line):
        the sum over the rule's lines in both families (a rule left out of a family
        has none there)."""
        meta, policy = artifact.meta, artifact.policy
        totals: dict[int | str, tuple[int, int]] = {r.index: (0, 0) for r in policy.rules}
        totals[DEFAULT_COUNTER] = (0, 0)
        for family, name in ((4, "IPv4"), (6, "IPv6")):
            text = _call([_tool(family, meta["flavour"], "save"), "-c", "-t", meta["table"]])
            lines = [m for m in map(_COUNTER.match, text.splitlines()) if m]
            subs = meta.get("chains", {}).get(name, {})
            found, owners = [], []
            for chain, own in [(meta["chain"], meta["lines"][name]), *subs.items()]:
                found += [m for m in lines if m.group(3) == chain]
                owners += own
            if len(found) != len(owners):
                raise RuntimeError(f"{name}: {len(found)} rules in {meta['chain']}, "
                                   f"expected {len(owners)}")
            for owner, m in zip(owners, found, strict=True):
                if owner == "log":
                    continue  # an audited drop's NFLOG line: its rule's pass line counts
                key = DEFAULT_COUNTER if owner is None else owner
                p, b = totals[key]
                totals[key] = (p + int(m.group(1)), b + int(m.group(2)))
        return totals


@contextlib.contextmanager
def session() -> Iterator[Session]:
    """A lab for the iptables runner; ``run`` uses it while the block lasts."""
    global _current
    reason = netns.missing_privileges()
    if reason:
        raise KernelUnavailable(reason)
    previous = _current
    with netns.lab() as lab, netns.one_cpu():
        iplab.configure(lab)
        log, inj = Nflog(NFLOG_GROUP), netns.Injector(lab.inj)
        _current = Session(lab, log, inj)
        try:
            yield _current
        finally:
            _current = previous
            log.close()
            inj.close()


_current: Session | None = None


def run(artifact: Artifact, frames: list[bytes]) -> Observation:
    """``Backend.run`` for iptables: in the current ``session()``, or a fresh one."""
    if _current is None:
        with session():
            return run(artifact, frames)
    _current.load(artifact)
    before = _current.counters(artifact)  # what arrived before the observer was in place
    verdicts = _current.judge(frames)
    return iplab.observation(frames, verdicts,
                             counters_since(_current.counters(artifact), before))


# -------------------------------------------------------------------------- view

def view(hook: str, frame: bytes) -> bytes | None:
    """What the hook sees of a frame: the IP packet as ``ip_rcv``/``ipv6_rcv`` leave it
    (``packets.ip_input_view``; none for non-IP frames or packets they drop), and for
    ``filter-input`` only packets the lab delivers locally (``iplab.delivered``)."""
    return iplab.hook_view(hook == "filter-input", frame)


delivered = iplab.delivered
