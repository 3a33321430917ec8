"""`pfc run` of a whole firewall (v2): each frame of a capture through the path of a
packet as received on --iif (text and JSON: fate, blocks, NAT, reject replies), its
usage errors; and two fixes the whole-firewall examples found in the traffic and the
walker `pfc verify` uses (a directed broadcast sent by the host, masquerade by lo)."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path

import pytest

from pfc.cli.main import main
from pfc.frontend.pipeline import compile_path
from pfc.oracle import framebuild as fb
from pfc.oracle.path.host import host_of, mac_of
from pfc.oracle.path.walk import Walker
from pfc.oracle.pcap import write_pcap
from pfc.verifier.traffic import traffic
from tests.paths import ROOT

ROUTER = str(ROOT / "examples" / "home-router.pf")
HOST = str(ROOT / "examples" / "host-firewall.pf")


def _frame(port: int, src: str, dst: str, proto: int, dport: int) -> bytes:
    s, d = ipaddress.ip_address(src).packed, ipaddress.ip_address(dst).packed
    l4 = fb.tcp(s, d, 40000, dport, 0x02, b"") if proto == 6 else \
        fb.udp(s, d, 4000, dport, b"q")
    return mac_of(port) + mac_of(port, True) + b"\x08\x00" + fb.ipv4(s, d, proto, l4)


@pytest.fixture
def capture(tmp_path: Path) -> str:
    """From the WAN (eth0): the port forward, ssh (dropped), a UDP query (dropped)."""
    path = str(tmp_path / "wan.pcap")
    write_pcap(path, [_frame(1, "198.51.100.7", "203.0.113.2", 6, 8080),
                      _frame(1, "198.51.100.7", "203.0.113.2", 6, 22),
                      _frame(1, "198.51.100.7", "203.0.113.2", 17, 53)])
    return path


def test_each_frame_goes_the_path_of_a_packet(capsys, capture):
    assert main(["run", ROUTER, capture, "--iif", "eth0"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert "forwarded out of eth1" in lines[0] and "as 198.51.100.7:40000 → 10.0.0.2:80" \
        in lines[0]
    assert lines[1].split() == ["nat", "prerouting:", "dnat", "(line", "25)", "→", "forward:",
                                "pass", "(line", "21)", "→", "nat", "postrouting:", "pass",
                                "(default)"]
    assert "dropped at input" in lines[2] and "input: drop (default)" in lines[3]
    assert "3 packets: 2 dropped, 1 forwarded" in out


def test_the_json_report(capsys, capture):
    assert main(["run", ROUTER, capture, "--iif", "eth0", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["firewall"] and doc["iif"] == "eth0"
    assert doc["fates"] == {"forwarded": 1, "dropped": 2}
    first = doc["packets"][0]
    assert (first["fate"], first["oif"]) == ("forwarded", "eth1")
    assert [(s["block"], s["nat"], s["line"]) for s in first["steps"]] == [
        ("nat prerouting", "dnat", 25), ("forward", None, 21), ("nat postrouting", None, None)]
    assert bytes.fromhex(first["frame"])[30:34] == bytes([10, 0, 0, 2])
    decided = {(r["block"], r["line"]): r["decided"] for r in doc["rules"]}
    assert decided[("input", None)] == 2 and decided[("nat prerouting", 25)] == 1


def test_a_reject_shows_its_reply(capsys, tmp_path: Path):
    path = str(tmp_path / "in.pcap")
    write_pcap(path, [_frame(1, "198.51.100.7", "192.0.2.10", 6, 25)])
    assert main(["run", HOST, path]) == 0  # its one interface: eth0
    lines = capsys.readouterr().out.splitlines()
    assert "rejected at input" in lines[0] and "input: reject (line 16)" in lines[1]
    assert lines[2].split()[:4] == ["reply:", "sent", "out", "of"]
    assert "192.0.2.10:25 → 198.51.100.7:40000 tcp" in lines[2]


@pytest.mark.parametrize("args, message", [
    ([ROUTER], "--iif DEV names the one the frames arrive on"),
    ([ROUTER, "--iif", "eth7"], "no such interface (it has lo, eth0, eth1)"),
    ([str(ROOT / "examples" / "edge-drop.pf"), "--iif", "eth0"],
     "--iif is for whole firewalls"),
])
def test_usage_errors_exit_2(capsys, capture, args, message):
    assert main(["run", args[0], capture, *args[1:]]) == 2
    assert message in capsys.readouterr().err


def test_a_firewall_with_lo_only_needs_iif(capsys, tmp_path: Path, capture):
    fw = tmp_path / "fw.pf"
    fw.write_text("input {\n    pass\n}\n")
    assert main(["run", str(fw), capture]) == 2
    assert "no interface besides lo" in capsys.readouterr().err
    assert main(["run", str(fw), capture, "--iif", "lo"]) == 0


DOCKER = compile_path(ROOT / "examples" / "docker-host.pf").ruleset


def test_masquerade_leaving_by_lo_takes_the_first_interface_address():
    """The host sends from a container subnet's address to its own eth0 address: the
    kernel masquerades it (``inet_select_addr`` on lo falls to eth0's address)."""
    walker = Walker(DOCKER)
    s, d = bytes([172, 17, 0, 1]), bytes([198, 51, 100, 20])
    journey = walker.send(fb.ipv4(s, d, 17, fb.udp(s, d, 4000, 53, b"q")))
    assert journey.fate == "delivered"
    assert journey.frame[14 + 12:14 + 16] == d  # the source is now eth0's


def test_the_host_sends_no_directed_broadcast():
    """A raw socket refuses a subnet's broadcast without SO_BROADCAST (EACCES): the
    verifier's traffic must not hold one (docker0's 172.17.255.255 did)."""
    host = host_of(DOCKER)
    broadcasts = {a.network.broadcast_address for p in host.ports for a in p.addresses}
    for seed in range(3):
        sent = [i.data for i in traffic(DOCKER, host, 400, seed) if i.port is None]
        assert sent
        assert not [p for p in sent if p[0] >> 4 == 4 and
                    ipaddress.ip_address(p[16:20]) in broadcasts]


def test_a_rule_list_is_still_judged_at_one_hook(capsys, capture):
    assert main(["run", str(ROOT / "examples" / "edge-drop.pf"), capture]) == 0
    assert "default pass" in capsys.readouterr().out


def test_outgoing_frames_are_sent_by_the_host(capsys, tmp_path: Path):
    """A cooked capture (`tcpdump -i any`): the packet the host sent goes through
    output (and postrouting) and out of eth0; the one it received, through input."""
    from tests.tools.test_cli import _pcap, _sll
    s, d = bytes([192, 0, 2, 10]), bytes([198, 51, 100, 7])
    sent = fb.ipv4(s, d, 6, fb.tcp(s, d, 443, 40000, 0x12, b""))
    received = fb.ipv4(d, s, 6, fb.tcp(d, s, 40001, 25, 0x02, b""))
    cap = tmp_path / "any.pcap"
    cap.write_bytes(_pcap(113, [_sll(4, sent), _sll(0, received)]))
    assert main(["run", HOST, str(cap), "--format", "json"]) == 0
    first, second = json.loads(capsys.readouterr().out)["packets"]
    assert first["outgoing"] and (first["fate"], first["oif"]) == ("sent", "eth0")
    assert [s["block"] for s in first["steps"]] == ["output"]
    assert (second["fate"], second["where"]) == ("rejected", "input")
