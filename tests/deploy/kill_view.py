"""What the kernel holds of the kill tests' policies, read from the kernel itself.

``P1`` and ``P2`` drop the sources of ``set bl`` and differ in a port (P1 drops UDP
1111; P2 passes it and drops 2222). :func:`view` says which policy a target's hook holds
("p1", "p2", "none", "mix": the two iptables families differ) and, per probe address,
whether the policy drops it as a source (is it in the set):

- xdp, tc: the attached program (found by the device, not by pfc's record), run by
  ``BPF_PROG_TEST_RUN`` on frames from the probe addresses and to the two ports;
- nft: ``nft list chain`` and ``nft get element`` of the sets ``bl4`` / ``bl6``;
- iptables: per family, the generation chain the switch chain goes to
  (``iptables-save``), its ports and its ipset (``ipset test``) or ``-s`` prefixes.

Call inside the lab's namespace.
"""

from __future__ import annotations

import ipaddress
import random
import re
import subprocess

from pfc.kernel import bpf, bpf_attach
from pfc.oracle import framebuild as fb

P1 = 'set bl = file "bl.txt"\ndrop src $bl\ndrop udp dport 1111\n'
P2 = 'set bl = file "bl.txt"\ndrop src $bl\npass udp dport 1111\ndrop udp dport 2222\n'
X4, X6, Z4 = "10.77.0.1", "2001:db8:77::1", "10.88.0.1"  # probes: not in any set file
PROBES = (X4, X6, Z4)
INNOCENT = "10.66.0.9"


def set_file(kind: str) -> str:
    """``small``: two addresses a family (compiled into eBPF code; nft sets, ipsets);
    ``big``: forty a family (eBPF set maps); ``one``: one prefix a family (iptables
    ``-s``: a change reloads)."""
    if kind == "one":
        return "10.1.1.4/30\n2001:db8:1::/64\n"
    n = 2 if kind == "small" else 40
    rng = random.Random(29)
    v4 = {f"10.{rng.randrange(2, 60)}.{rng.randrange(256)}.{rng.randrange(1, 255)}"
          for _ in range(n)}
    v6 = {f"2001:db8:{rng.randrange(1, 60):x}::{rng.randrange(1, 65535):x}" for _ in range(n)}
    return "".join(f"{a}\n" for a in sorted(v4) + sorted(v6))


def _frame(src: str, dport: int) -> bytes:
    a = ipaddress.ip_address(src)
    if a.version == 4:
        d = bytes([10, 1, 0, 1])
        ip = fb.ipv4(a.packed, d, 17, fb.udp(a.packed, d, 9, dport, b"pfc-kill"))
        return fb.ethernet(b"\x02" * 6, b"\x04" * 6, fb.ETH_IP4, ip)
    d = ipaddress.ip_address("2001:db8:ffff::1").packed
    ip = fb.ipv6(a.packed, d, 17, fb.udp(a.packed, d, 9, dport, b"pfc-kill"))
    return fb.ethernet(b"\x02" * 6, b"\x04" * 6, fb.ETH_IP6, ip)


class _Attached:
    """An attached program by fd, run with :meth:`pfc.kernel.bpf.Program.test_run`."""

    name = "attached"
    test_run = bpf.Program.test_run

    def __init__(self, fd: int):
        self.fd = fd


def _bpf(target: str, ifindex: int) -> dict:
    prog = bpf_attach.xdp_query(ifindex).prog_id if target == "xdp" else \
        bpf_attach.tc_query(ifindex, 0x7066, 1)
    if not prog:
        return {"policy": "none"}
    import os

    fd = bpf_attach.prog_fd_by_id(prog)
    try:
        run = _Attached(fd)
        dropped = {"xdp": 1, "tc": 2}[target]  # XDP_DROP, TC_ACT_SHOT

        def drops(src: str, dport: int = 9) -> bool:
            return run.test_run(_frame(src, dport)).retval == dropped

        out = {a: drops(a) for a in PROBES}
        out["policy"] = _ports(drops(INNOCENT, 1111), drops(INNOCENT, 2222))
        return out
    finally:
        os.close(fd)


def _ports(drop1111: bool, drop2222: bool) -> str:
    return {(True, False): "p1", (False, True): "p2"}.get((drop1111, drop2222), "mix")


def _run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True)


def _nft() -> dict:
    chain = _run("nft", "list", "chain", "netdev", "pfc", "ingress")
    if chain.returncode:
        return {"policy": "none"}
    text = chain.stdout
    out = {"policy": _ports(re.search(r"dport 1111 counter .* drop ", text) is not None,
                            "dport 2222" in text)}
    for a in PROBES:
        v = ipaddress.ip_address(a).version
        if _run("nft", "list", "set", "netdev", "pfc", f"bl{v}").returncode:
            out[a] = _inline(a, re.findall(r"saddr ([0-9a-f.:]+/\d+) counter .* drop ", text))
        else:
            out[a] = _run("nft", "get", "element", "netdev", "pfc", f"bl{v}",
                          f"{{ {a} }}").returncode == 0
    return out


def _inline(address: str, prefixes: list[str]) -> bool:
    a = ipaddress.ip_address(address)
    return any(a in ipaddress.ip_network(p, strict=False) for p in prefixes
               if ipaddress.ip_network(p, strict=False).version == a.version
               and ipaddress.ip_network(p, strict=False).prefixlen)


def _iptables() -> dict:
    out: dict = {}
    policies = []
    for v, tool in ((4, "iptables-save"), (6, "ip6tables-save")):
        text = _run(tool, "-t", "raw").stdout
        goto = re.search(r"^-A PFC -g (\S+)$", text, re.MULTILINE)
        if goto is None:
            policies.append("none")
            continue
        rules = [ln for ln in text.splitlines() if ln.startswith(f"-A {goto.group(1)} ")]
        body = "\n".join(rules)
        policies.append(_ports(any("0x457" in r and "DROP" in r for r in rules),
                               "0x8ae" in body))
        sets = re.findall(r"--match-set (\S+) src", body)
        for a in PROBES:
            if ipaddress.ip_address(a).version != v:
                continue
            out[a] = any(_run("ipset", "test", s, a).returncode == 0 for s in sets) or \
                _inline(a, re.findall(r"-s (\S+) .*-j DROP", body))
    out["policy"] = policies[0] if len(set(policies)) == 1 else "mix"
    return out


def view(target: str, ifindex: int) -> dict:
    """{"policy": p1|p2|none|mix, probe address: dropped as a source?}."""
    if target in ("xdp", "tc"):
        return _bpf(target, ifindex)
    return _nft() if target == "nft" else _iptables()
