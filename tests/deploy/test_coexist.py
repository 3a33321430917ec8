"""pfc's whole firewall beside Docker's iptables rules and a firewalld-like nft table
(docs/operate.md "Beside Docker and firewalld"): a load, a reload and an unload leave
their rules as they were, and a packet meets both as the priorities say."""

from __future__ import annotations

import ipaddress
import re

import pytest

from pfc.deploy.firewall import commit
from pfc.kernel import hostlab, netns
from pfc.oracle import framebuild as fb
from pfc.oracle.path.host import host_of
from tests.deploy.fw_lab import host_firewall, load, router, run
from tests.deploy.test_load import ROOT_REASON

pytestmark = [pytest.mark.kernel,
              pytest.mark.skipif(ROOT_REASON is not None, reason=ROOT_REASON or "")]

DOCKER = """*filter
:DOCKER - [0:0]
:DOCKER-USER - [0:0]
-A FORWARD -j DOCKER-USER
-A FORWARD -o docker0 -j DOCKER
-A DOCKER-USER -p udp -m udp --dport 9999 -j DROP
-A DOCKER-USER -j RETURN
COMMIT
*nat
:DOCKER - [0:0]
-A PREROUTING -m addrtype --dst-type LOCAL -j DOCKER
-A POSTROUTING -s 172.17.0.0/16 ! -o docker0 -j MASQUERADE
COMMIT
"""
FIREWALLD = """table inet firewalld {
  chain filter_INPUT {
    type filter hook input priority filter + 10; policy accept;
    udp dport 53 counter
  }
}
"""


def others(ns: str) -> str:
    """Docker's rules and the firewalld table, as the tools print them (counters and
    pfc's lines removed)."""
    text = run(ns, "iptables-save; nft list table inet firewalld")
    lines = [ln for ln in text.splitlines() if "PFC" not in ln and not ln.startswith("#")]
    return re.sub(r"\[\d+:\d+\]|packets \d+ bytes \d+", "", "\n".join(lines))


def udp(lab, port: str, src: str, dst: str, dport: int) -> bytes:
    s, d = ipaddress.ip_address(src).packed, ipaddress.ip_address(dst).packed
    p = lab.host.port(port)
    return fb.ethernet(p.mac, p.peer_mac, 0x0800,
                       fb.ipv4(s, d, 17, fb.udp(s, d, 4000, dport, b"pfc-coexist")))


def exchange(lab, frames: list[tuple[str, bytes]]) -> dict[str, list[bytes]]:
    hostlab.neighbour(lab, "eth0", ipaddress.ip_address("203.0.113.1"))
    with netns.one_cpu():
        wire = hostlab.Wire(lab)
        try:
            for port, frame in frames:
                wire.inject(port, frame)
            captured, _ = wire.settle()
        finally:
            wire.close()
    return captured


def docker_drops(ns: str) -> int:
    text = run(ns, "iptables-save -c -t filter")
    return int(re.search(r"^\[(\d+):\d+\] -A DOCKER-USER -p udp .*9999", text, re.M)[1])


def firewalld_counted(ns: str) -> int:
    return int(re.search(r"counter packets (\d+)",
                         run(ns, "nft list chain inet firewalld filter_INPUT"))[1])


@pytest.mark.parametrize("target", ["iptables", "nft"])
def test_docker_and_firewalld_rules_stay_and_see_what_pfc_passes(target):
    with hostlab.host_lab(host_of(router())) as lab:
        ns = lab.host_ns
        run(ns, f"iptables-restore --noflush <<'EOF'\n{DOCKER}EOF")
        run(ns, f"nft -f - <<'EOF'\n{FIREWALLD}EOF")
        before = others(ns)
        load(router(), target, ns)
        assert others(ns) == before
        if target == "iptables":  # pfc's jump first: its chain runs before Docker's
            forward = [ln for ln in run(ns, "iptables-save -t filter").splitlines()
                       if ln.startswith("-A FORWARD")]
            assert forward[0] == "-A FORWARD -j PFC-FORWARD", forward
        seen = exchange(lab, [
            ("eth1", udp(lab, "eth1", "10.0.0.5", "192.0.2.80", 9999)),  # pfc ok, Docker no
            ("eth1", udp(lab, "eth1", "10.0.0.5", "192.0.2.80", 9998)),  # both pass
            ("eth0", udp(lab, "eth0", "198.51.100.7", "10.0.0.5", 9999)),  # pfc drops
            ("eth1", udp(lab, "eth1", "10.0.0.5", "10.0.0.1", 53)),  # pfc input passes
            ("eth1", udp(lab, "eth1", "10.0.0.5", "10.0.0.1", 5353))])  # pfc input drops
        out = [f for f in seen["eth0"] if f[23] == 17]
        assert len(out) == 1 and int.from_bytes(out[0][36:38], "big") == 9998
        assert out[0][26:30] == ipaddress.ip_address("203.0.113.2").packed  # masqueraded
        assert not [f for f in seen["eth1"] if len(f) > 23 and f[23] == 17]
        if target == "iptables":  # pfc's drop came first: Docker never saw that one
            assert docker_drops(ns) == 1
        assert firewalld_counted(ns) == 1  # after pfc's input (priority 0 < 10)
        load(host_firewall(), target, ns)
        assert others(ns) == before
        commit.unload(ns)
        assert others(ns) == before
        assert "table inet pfc\n" not in run(ns, "nft list tables")
        assert "PFC" not in run(ns, "iptables-save")
