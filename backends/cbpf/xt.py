"""Run a ``--link ip`` classic BPF program in the kernel: ``iptables -m bpf`` (xt_bpf).

In a throw-away namespace set up as the IP-input lab (``pfc.kernel.iplab``: every
unicast address local, no reverse-path filter, no conntrack), the program goes into
the rules docs/cbpf.md recommends, for iptables and ip6tables alike, the same bytecode
in both (the program tells the families apart by the version nibble)::

    -N PFC
    -A PFC -m bpf --bytecode "N,c t f k,..." -j RETURN   # the policy passes it
    -A PFC -j DROP                                       # the policy drops it
    -A INPUT -i DUT -j PFC                               # (or raw PREROUTING)

and an observer after the jump, ``-A INPUT -i DUT -j NFLOG``, logs every packet the
policy passed, with its bytes, in the order packets were processed; batch ends are
marked by an IPv4 frame from a reserved source MAC, logged and dropped in raw
PREROUTING before anything else (``iplab.ip_marker``, as the iptables runner does).

What xt_bpf shows the program (Linux 6.18; measured by tests/backends/test_cbpf_xt.py):
the packet from its IP header (``skb->data`` at the network header in netfilter), as
``ip_rcv``/``ipv6_rcv`` left it: trimmed to the IP length, no Ethernet header, no VLAN
tag, no non-IP packet; ``bpf_mt`` matches when the program returns nonzero. iptables
1.8.9 takes ``--bytecode`` in both flavours (``iptables-nft`` through nft_compat,
``iptables-legacy``); it cannot be negated (``! --bytecode``: "cannot be inverted"),
hence the chain above.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

from pfc.kernel import iplab, netns
from pfc.kernel.observation import KernelUnavailable, Observation

Insn = tuple[int, int, int, int]
NFLOG_GROUP = 4712
CHUNK = 200  # frames per marker
CHAINS = {"filter-input": ("filter", "INPUT"), "raw-prerouting": ("raw", "PREROUTING")}
TOOLS = {4: "iptables", 6: "ip6tables"}


def bytecode(program: list[Insn]) -> str:
    """The program as ``--bytecode`` takes it: the ``ddd`` form with commas."""
    return ",".join([str(len(program))] + [f"{c} {jt} {jf} {k}" for c, jt, jf, k in program])


def rules(chain: str, dut: str) -> str:
    """iptables-restore text for the chains around the program (module doc)."""
    table, base = CHAINS[chain]
    log = f"-j NFLOG --nflog-group {NFLOG_GROUP} --nflog-prefix pass"
    return (f"*{table}\n:PFC - [0:0]\n-A PFC -j DROP\n-A {base} -i {dut} -j PFC\n"
            f"-A {base} -i {dut} {log}\nCOMMIT\n")


def insert(program: list[Insn], chain: str, family: int, flavour: str) -> None:
    """``iptables -I PFC 1 -m bpf --bytecode "..." -j RETURN``: as a command, since
    iptables-restore takes no parameter longer than 1023 characters ("Parameter too
    long!", iptables 1.8.9), which a 64-instruction program can pass."""
    table = CHAINS[chain][0]
    argv = [f"{TOOLS[family]}-{flavour}", "-t", table, "-I", "PFC", "1", "-m", "bpf",
            "--bytecode", bytecode(program), "-j", "RETURN"]
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode:
        raise RuntimeError(f"{argv[0]} refused the program: {result.stderr.strip()}")


def _restore(family: int, flavour: str, text: str, noflush: bool = True) -> None:
    argv = [f"{TOOLS[family]}-{flavour}-restore"] + (["--noflush"] if noflush else [])
    result = subprocess.run(argv, input=text, capture_output=True, text=True)
    if result.returncode:
        raise RuntimeError(f"`{' '.join(argv)}` refused the rules: {result.stderr.strip()}")


@dataclass
class Session:
    """One lab for many programs: ``load`` replaces whatever was there before."""

    lab: netns.Lab
    log: iplab.Nflog
    inj: netns.Injector
    seq: int = 0

    def load(self, program: list[Insn], chain: str, flavour: str) -> None:
        mark = f"-m mac --mac-source {iplab.mac_text(iplab.MARK_MAC)}"
        for other in ("nft", "legacy"):  # a restore without --noflush empties the tables
            for family in TOOLS:
                _restore(family, other, "*raw\nCOMMIT\n*filter\nCOMMIT\n", noflush=False)
        _restore(4, flavour, f"*raw\n-A PREROUTING {mark} -j NFLOG --nflog-group "
                 f"{NFLOG_GROUP} --nflog-prefix mark\n-A PREROUTING {mark} -j DROP\nCOMMIT\n")
        for family in TOOLS:
            _restore(family, flavour, "*raw\n-A OUTPUT -j DROP\nCOMMIT\n")
            _restore(family, flavour, rules(chain, self.lab.dut))
            insert(program, chain, family, flavour)

    def judge(self, frames: list[bytes]) -> list[bytes | None]:
        """For each frame (as the hook sees it), the IP packet logged after the hook,
        or None when the program did not match it."""
        out: list[bytes | None] = []
        for i in range(0, len(frames), CHUNK):
            out += self._batch(frames[i:i + CHUNK])
        return out

    def _batch(self, frames: list[bytes]) -> list[bytes | None]:
        for frame in frames:
            self.inj.send(self.lab.dut_mac + iplab.SEND_MAC + frame[12:])
        self.seq += 1
        self.inj.send(iplab.ip_marker(self.seq, self.lab.dut_mac))
        logged = self._until_marker()
        out: list[bytes | None] = []
        for frame in frames:
            out.append(logged.pop(0) if logged and logged[0] == frame[14:] else None)
        if logged:
            raise RuntimeError(f"{len(logged)} packets passed that match no injected "
                               f"frame, e.g. {logged[0].hex()}")
        return out

    def _until_marker(self) -> list[bytes]:
        logged = []
        while True:
            for prefix, packet in self.log.packets(timeout=5.0):
                if prefix == "mark" and iplab.marker_seq(packet) == self.seq:
                    return logged
                if prefix == "pass":
                    logged.append(packet)


_current: Session | None = None


@contextlib.contextmanager
def session() -> Iterator[Session]:
    """A lab kept for every ``run`` inside the block."""
    global _current
    reason = netns.missing_privileges()
    if reason:
        raise KernelUnavailable(reason)
    previous = _current
    with netns.lab() as lab, netns.one_cpu():
        iplab.configure(lab)
        log, inj = iplab.Nflog(NFLOG_GROUP), netns.Injector(lab.inj)
        _current = Session(lab, log, inj)
        try:
            yield _current
        finally:
            _current = previous
            log.close()
            inj.close()


def run(program: list[Insn], frames: list[bytes], chain: str = "filter-input",
        flavour: str = "nft") -> Observation:
    """Verdicts of ``program`` in an ``iptables -m bpf`` rule on ``chain`` for frames
    as that hook sees them (``iplab.hook_view``), in the current session or a new one."""
    if _current is None:
        with session():
            return run(program, frames, chain, flavour)
    _current.load(program, chain, flavour)
    return iplab.observation(frames, _current.judge(frames), None)
