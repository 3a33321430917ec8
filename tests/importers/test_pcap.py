"""pcap-filter expressions: libpcap's grammar and meanings, what is refused and why,
and libpcap's own verdicts (``pcap_compile`` + ``bpf_filter``) against pfc's compile
of the import on generated frames, for every Ethernet expression of libpcap's TESTrun
pfc can express (the corpus, tests/importers/corpus.py)."""

from __future__ import annotations

import re

import pytest

from pfc.backends.cbpf import pcaplib
from pfc.build import build_ruleset
from pfc.oracle import gen, interp
from pfc.oracle.packets import l2_input_view
from tests.importers.corpus import CORPUS, needs_corpus
from tests.importers.helpers import body, imported, reasons


def pcap(expr: str):
    return imported(expr, fmt="pcap-filter", names=("<expr>",))


@pytest.mark.parametrize("expr, rules", [
    ("ip and tcp port 80", ["pass tcp src 0.0.0.0/0 sport 80",
                            "pass tcp src 0.0.0.0/0 dport 80"]),
    ("udp dst portrange 1000-2000 or icmp", ["pass udp dport 1000-2000", "pass icmp"]),
    ("ip6 host ::1 or ether broadcast", ["pass ip6 src ::1", "pass ip6 dst ::1",
                                         "pass ether-dst ff:ff:ff:ff:ff:ff"]),
    ("ip src net 10/8 and not ip proto 17", ["pass ip src 10.0.0.0/8 !proto 17"]),
    ("not ip6", ["pass !ether-type ip6"]),
    ("arp or rarp", ["pass ether-type arp", "pass ether-type 0x8035"]),
    ("tcp dst port 22 or 80", ["pass tcp dport 22", "pass tcp dport 80"]),
    ("", ["pass"]),
    # the issue's own example: beside `tcp`, libpcap's ARP and RARP parts of `net`
    # cannot hold, and `tcp port` reads the fixed IPv6 header as pfc does
    ("tcp port 80 and not src net 10/8", ["pass tcp !src 10.0.0.0/8 src 0.0.0.0/0 sport 80",
                                          "pass tcp !src 10.0.0.0/8 src 0.0.0.0/0 dport 80",
                                          "pass tcp src ::/0 sport 80",
                                          "pass tcp src ::/0 dport 80"]),
    ("ip and host 10.0.0.1", ["pass ip src 10.0.0.1", "pass ip dst 10.0.0.1"]),
    # numbers as libpcap's scanner reads them (0x hex, a leading 0 octal); a range of one
    ("ip proto 017 or udp dst portrange 0x50", ["pass ip proto 15", "pass udp dport 80"]),
    ("ether proto \\ip6 or \\arp", ["pass ip6", "pass ether-type arp"]),  # `\\ID`: no keyword
])
def test_expressions(expr, rules):
    r = pcap(expr)
    assert r.complete, reasons(r)
    assert body(r) == ["ingress {", "default drop", *rules, "}"]


@pytest.mark.parametrize("expr, reason", [
    ("host 10.0.0.1", "libpcap's `host`/`net` of an IPv4 address also matches ARP"),
    ("not host 10.0.0.1", "libpcap's `host`/`net` of an IPv4 address also matches ARP"),
    ("arp and not host 10.0.0.1", "libpcap's `host`/`net` of an IPv4 address also"),
    ("port 53", "libpcap's `port` without `tcp` or `udp` also matches SCTP"),
    ("tcp", "libpcap's `tcp` also reads behind one IPv6 fragment header"),
    ("ip and not tcp port 22", "`not` of a port"),
    ("tcp[13] & 2 != 0", "byte tests"),
    ("vlan 10 and ip", "`vlan 10`: frame lengths, VLAN, MPLS"),
    ("isis proto 0x1a", "`isis proto`: pfc reads the protocols of IPv4 and IPv6 only"),
    ("ip host example.com", "`ip host example.com`: a host name"),
])
def test_what_pfc_cannot_say_is_refused_by_name(expr, reason):
    r = pcap(expr)
    assert not r.complete and reasons(r)[0].startswith(reason), reasons(r)


def test_and_and_or_bind_alike_from_the_left():
    """libpcap: `a or b and c` is `(a or b) and c`."""
    assert body(pcap("arp or ip and ip proto 6")) == body(pcap("(arp or ip) and ip proto 6"))


def well_formed(view: bytes) -> bool:
    """An IP header the kernel would take (pfc reads transport fields only behind one;
    libpcap reads wherever IHL points): docs/import.md "pcap-filter"."""
    kind, payload = int.from_bytes(view[12:14], "big"), view[14:]
    if kind == 0x0800:
        if len(payload) < 20 or payload[0] >> 4 != 4 or payload[0] & 15 < 5:
            return False
        return (payload[0] & 15) * 4 <= int.from_bytes(payload[2:4], "big") <= len(payload)
    if kind == 0x86DD:
        return len(payload) >= 40 and payload[0] >> 4 == 6 and \
            40 + int.from_bytes(payload[4:6], "big") <= len(payload)
    return True


def _testrun() -> list[str]:
    """The expressions of libpcap's testprogs/TESTrun for Ethernet (DLT EN10MB) with
    no special compile options."""
    path = CORPUS / "libpcap" / "TESTrun"
    if not path.exists():
        return []
    text = path.read_text()
    out = []
    for block in re.split(r"\n\t\{\n", text[text.index("my @filter_accept_blocks"):])[1:]:
        if "DLT => 'EN10MB'" not in block or re.search(
                r"skip => '[^']|linuxext|netmask|snaplen|generate_offline", block):
            continue
        aliases = re.search(r"aliases => \[(.*?)\]", block, re.S)
        if aliases:
            out += re.findall(r"'((?:[^'\\]|\\.)*)'", aliases.group(1))
    return out


@needs_corpus
def test_libpcaps_own_expressions_give_libpcaps_verdicts():
    seen = {"agree": 0, "refused": 0, "libpcap refuses": 0}
    differ = []
    base = gen.sample(None, 300, seed=7)
    for expr in _testrun():
        try:
            reference = pcaplib.Program(pcaplib.compile_filter(expr))
        except pcaplib.PcapError:  # a name this machine cannot resolve, a DLT's word
            seen["libpcap refuses"] += 1
            continue
        result = pcap(expr)
        if not result.complete:
            seen["refused"] += 1
            continue
        ruleset = result.compiled.ruleset
        policy = ruleset.lists[0]
        artifacts, diags = build_ruleset(ruleset, ["cbpf"])
        if diags:  # ether-type, MAC addresses: cbpf has no words for them, the oracle
            def judge(view, policy=policy):
                return interp.evaluate(policy, view, skip_tag=False).verdict == "pass"
        else:
            program = pcaplib.Program(list(artifacts[0].meta["insns"]))

            def judge(view, program=program):
                return program.run(view) != 0
        for frame in gen.sample(policy, 300, seed=1) + base:
            view = l2_input_view(frame)
            if view is None or not well_formed(view):
                continue
            if (reference.run(view) != 0) != judge(view):
                differ.append((expr, view.hex()))
                break
        seen["agree"] += 1
    assert differ == []
    assert seen["agree"] >= 148 and seen["refused"] <= 128, seen
