"""``pfc verify`` of whole firewalls in the host lab: nft and iptables against the path
interpreter, packet by packet (delivered, forwarded and sent bytes, reject replies),
on a router (port forward, masquerade, forward policy) and a host (reject, ICMP
limits, ct states), both as the examples' files say and the host also built in Python
(with an IPv6 address, which the example has not); the other whole-firewall examples
(a Docker host, a DDoS edge) on nft, the one target that carries all of each. A broken
artifact is caught."""

from __future__ import annotations

import ipaddress

import pytest

from pfc.frontend import ir
from pfc.frontend.pipeline import compile_path, compile_text
from pfc.kernel.netns import missing_privileges
from pfc.verifier import firewall as fwv
from pfc.verifier import traffic
from tests.oracle.path_build import rule, ruleset
from tests.oracle.test_path import router
from tests.paths import FIREWALLS, ROOT

pytestmark = [pytest.mark.kernel,
              pytest.mark.skipif(missing_privileges() is not None,
                                 reason=missing_privileges() or "")]


def host_firewall():
    """examples/host-firewall.pf's meaning, built by hand."""
    return ruleset({
        "input": [rule("pass", iif="lo"), rule("pass", ct_state=("established", "related")),
                  rule("drop", ct_state=("invalid",)),
                  rule("pass", "tcp", src="192.0.2.0/24", dport=22),
                  rule("pass", "tcp", dport=((80, 80), (443, 443))),
                  rule("pass", "icmp", icmp_type=8, limit=(10, "second", 10)),
                  rule("pass", "icmp6", icmp_type=128, limit=(10, "second", 10)),
                  rule("pass", "icmp6", icmp_type=((133, 137),)),
                  rule(ir.Reject("tcp-reset"), "tcp"),
                  rule(ir.Reject("port-unreachable"), "udp"),
                  rule(ir.Reject("admin-prohibited"))],
        "output": []},
        interfaces=[("eth0", ["198.51.100.10/24", "2001:db8:1::10/64"], "198.51.100.1")],
        defaults={"input": "drop"})


def example(name: str):
    """A whole-firewall example, as the front end reads it."""
    return compile_path(ROOT / "examples" / f"{name}.pf").require_ruleset()


# (example, targets, generated packets); nft carries every example, iptables all but the
# Docker host's negated oif list and the DDoS edge's ingress block
EXAMPLES = [("home-router", ("nft", "iptables"), 400),
            ("host-firewall", ("nft", "iptables"), 200),
            ("docker-host", ("nft",), 150), ("ddos-edge", ("nft",), 150)]


def test_every_whole_firewall_example_is_verified_here():
    assert {f"{name}.pf" for name, *_ in EXAMPLES} == {p.name for p in FIREWALLS}


@pytest.mark.parametrize("name, target, n", [(name, t, n) for name, targets, n in EXAMPLES
                                             for t in targets])
def test_the_examples_agree_with_the_path_interpreter(name, target, n):
    report = fwv.verify_ruleset(example(name), target, n=n, seed=1)
    assert report.items > 0.9 * n  # generated ones a raw socket cannot send are left out
    assert report.ok, "\n".join(d.describe() for d in report.differences[:5])


@pytest.mark.parametrize("target", ["nft", "iptables"])
def test_a_host_with_ipv6_agrees_with_the_path_interpreter(target):
    report = fwv.verify_ruleset(host_firewall(), target, n=400, seed=1)
    assert report.items > 300
    assert report.ok, "\n".join(d.describe() for d in report.differences[:5])


@pytest.mark.parametrize("target", ["nft", "iptables"])
def test_the_replies_of_one_family_agree_with_the_path_interpreter(target):
    """iptables' icmp-host-prohibited ... and ip6tables' icmp6-policy-fail ... (ICMP
    codes 10, 9, 2; ICMPv6 codes 5, 6) as the kernel sends them."""
    rs = ruleset({"input": [rule(ir.Reject("host-prohibited"), "tcp", src="0.0.0.0/0"),
                            rule(ir.Reject("net-prohibited"), "udp", src="0.0.0.0/0"),
                            rule(ir.Reject("proto-unreachable"), "ip"),
                            rule(ir.Reject("policy-fail"), "tcp", src="::/0"),
                            rule(ir.Reject("reject-route"), "ip6")],
                  "output": []},
                 interfaces=[("eth0", ["198.51.100.10/24", "2001:db8:1::10/64"],
                              "198.51.100.1")])
    report = fwv.verify_ruleset(rs, target, n=200, seed=3)
    assert report.items > 150
    assert report.ok, "\n".join(d.describe() for d in report.differences[:5])


def test_iif_after_routing_agrees_with_nft():
    """``iif`` in postrouting: a forwarded packet's input device; the host's own packets
    have none (``!iif`` holds on them, as nft's ``iifname != "eth1"``)."""
    text = ("interface eth0 address 198.51.100.10/24 gateway 198.51.100.1\n"
            "interface eth1 address 10.0.0.1/24\n"
            "forward {\n    default pass\n}\n"
            "postrouting {\n    drop udp !iif eth1\n    drop tcp iif eth1 oif eth0 dport 80\n}\n"
            "nat postrouting {\n    masquerade iif eth1 oif eth0\n}\n")
    compiled = compile_text(text, "post.pf")
    assert compiled.ok, [d.message for d in compiled.diagnostics]
    report = fwv.verify_ruleset(compiled.ruleset, "nft", n=300, seed=2)
    assert report.items > 250
    assert report.ok, "\n".join(d.describe() for d in report.differences[:5])


def test_no_connection_expires_in_a_lab_run():
    """The interpreter has no clock: a lab whose run outlasts the kernel's 10 s (TCP
    CLOSE) or 30 s (UDP, ICMP) timeouts, as runs do on a loaded machine, would find a
    connection expired that the interpreter still has (hostlab's docstring)."""
    from pathlib import Path

    from pfc.kernel import hostlab, netns
    from pfc.oracle.path.host import host_of
    with hostlab.host_lab(host_of(host_firewall()), observe=False) as lab, \
            netns.inside(lab.host_ns):
        found = {f.name: int(f.read_text()) for f in Path("/proc/sys/net/netfilter").glob(
            "nf_conntrack_*timeout*") if "frag" not in f.name}
    assert "nf_conntrack_udp_timeout" in found and "nf_conntrack_tcp_timeout_close" in found
    assert {k: v for k, v in found.items() if v < hostlab.CT_TIMEOUT} == {}


def test_the_built_router_is_the_example():
    """tests/oracle's router() (the path interpreter's and the deploy tests') means
    what examples/home-router.pf says: the same blocks, defaults and rules."""
    from pfc.backends.describe import describe

    def shape(rs):
        return sorted((p.hook.name, p.default.value, [describe(r) for r in p.rules])
                      for p in rs.lists), rs.interfaces
    built, read = shape(router()), shape(example("home-router"))
    assert built[0] == read[0]
    assert [(i.name, i.addresses, i.gateway) for i in built[1]] == \
        [(i.name, i.addresses, i.gateway) for i in read[1]]


def test_a_wrong_artifact_is_caught(monkeypatch):
    """The nft ruleset with the port forward's target changed: verify must see it."""
    real = fwv._nft

    def broken(text: str) -> None:
        real(text.replace("dnat ip to 10.0.0.2:80", "dnat ip to 10.0.0.3:80"))
    monkeypatch.setattr(fwv, "_nft", broken)
    report = fwv.verify_ruleset(example("home-router"), "nft", n=50, seed=1)
    assert not report.ok
    assert any("10.0.0.3" not in d.expected and "0a000003" in d.got
               for d in report.differences)


def test_conversations_cross_the_host_both_ways():
    from pfc.oracle.path.host import host_of
    rs = router()
    items = fwv.conversations(host_of(rs), rs)
    answers = [i for i in items if i.answer is not None and not i.data]
    assert answers and len(items) == 3 * len(answers)
    assert {i.port for i in items if i.port} == {"eth0", "eth1"}
    assert ipaddress.ip_address("10.0.0.2") in traffic._targets(host_of(rs), rs)
