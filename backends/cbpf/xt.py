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
PREROUTING before anything else. The lab, the batches, the markers and the matching of
logged packets to frames are the iptables runner's (``backends/iptables/run.py``);
only frames the runner injected reach the chain (``-m mac --mac-source``).

What xt_bpf shows the program (Linux 6.18; measured by tests/backends/test_cbpf_xt.py):
the packet from its IP header (``skb->data`` at the network header in netfilter), as
``ip_rcv``/``ipv6_rcv`` left it: trimmed to the IP length, no Ethernet header, no VLAN
tag, no non-IP packet; ``bpf_mt`` matches when the program returns nonzero. iptables
1.8.9 takes ``--bytecode`` in both flavours (``iptables-nft`` through nft_compat,
``iptables-legacy``); it cannot be negated (``! --bytecode``: "cannot be inverted"),
hence the chain above; it holds at most 64 instructions (``XT_BPF_MAX_NUM_INSTR``:
``cbpf.backend.LIMITS``).
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator

from pfc.backends.iptables import run as iptables_run
from pfc.kernel import iplab
from pfc.kernel.observation import Observation

Insn = tuple[int, int, int, int]
CHAINS = {"filter-input": ("filter", "INPUT"), "raw-prerouting": ("raw", "PREROUTING")}
TOOLS = iptables_run.TOOLS


def bytecode(program: list[Insn]) -> str:
    """The program as ``--bytecode`` takes it: the ``ddd`` form with commas."""
    return ",".join([str(len(program))] + [f"{c} {jt} {jf} {k}" for c, jt, jf, k in program])


def rules(chain: str, dut: str) -> str:
    """iptables-restore text for the chains around the program (module doc): only
    frames the runner injected (from ``SEND_MAC``) are judged and logged."""
    table, base = CHAINS[chain]
    sent = f"-i {dut} -m mac --mac-source {iplab.mac_text(iplab.SEND_MAC)}"
    log = f"-j NFLOG --nflog-group {iptables_run.NFLOG_GROUP} --nflog-prefix pass"
    return (f"*{table}\n:PFC - [0:0]\n-A PFC -j DROP\n-A {base} {sent} -j PFC\n"
            f"-A {base} {sent} {log}\nCOMMIT\n")


def insert(program: list[Insn], chain: str, family: int, flavour: str) -> None:
    """``iptables -I PFC 1 -m bpf --bytecode "..." -j RETURN``: as a command, since
    iptables-restore takes no parameter longer than 1023 characters ("Parameter too
    long!", iptables 1.8.9), which a 64-instruction program can pass."""
    _command([f"{TOOLS[family]}-{flavour}", "-t", CHAINS[chain][0], "-I", "PFC", "1",
              "-m", "bpf", "--bytecode", bytecode(program), "-j", "RETURN"])


def _command(argv: list[str], text: str | None = None) -> None:
    result = subprocess.run(argv, input=text, capture_output=True, text=True)
    if result.returncode:
        raise RuntimeError(f"`{argv[0]}` refused: {result.stderr.strip()}")


class Session(iptables_run.Session):
    """The iptables runner's lab, judge and markers, with a program in place of an
    iptables artifact: ``install`` replaces whatever was loaded before."""

    def install(self, program: list[Insn], chain: str, flavour: str) -> None:
        self.flavours.update(("nft", "legacy"))
        self.reset()
        self.flavours.add(flavour)
        mark = f"-m mac --mac-source {iplab.mac_text(iplab.MARK_MAC)}"
        _command([f"iptables-{flavour}-restore", "-w", "--noflush"], (
            f"*raw\n-A PREROUTING {mark} -j NFLOG --nflog-group {iptables_run.NFLOG_GROUP} "
            f"--nflog-prefix mark\n-A PREROUTING {mark} -j DROP\nCOMMIT\n"))
        for family in TOOLS:
            _command([f"{TOOLS[family]}-{flavour}-restore", "-w", "--noflush"],
                     "*raw\n-A OUTPUT -j DROP\nCOMMIT\n" + rules(chain, self.lab.dut))
            insert(program, chain, family, flavour)


_current: Session | None = None


@contextlib.contextmanager
def session() -> Iterator[Session]:
    """The iptables runner's lab (``iptables_run.session``), kept for every ``run``
    inside the block."""
    global _current
    previous = _current
    with iptables_run.session() as lab:
        _current = Session(lab.lab, lab.log, lab.inj)
        try:
            yield _current
        finally:
            _current = previous


def run(program: list[Insn], frames: list[bytes], chain: str = "filter-input",
        flavour: str = "nft") -> Observation:
    """Verdicts of ``program`` in an ``iptables -m bpf`` rule on ``chain`` for frames
    as that hook sees them (``iplab.hook_view``), in the current session or a new one."""
    if _current is None:
        with session():
            return run(program, frames, chain, flavour)
    _current.install(program, chain, flavour)
    return iplab.observation(frames, _current.judge(frames), None)
