"""What the whole-firewall deploy tests share: the firewalls (built in Python, as the
path interpreter's tests build them), a host lab whose devices carry the names the
firewalls use (``eth0``, ``eth1``), loading through :mod:`pfc.deploy.firewall`, and
what a namespace holds, as the tools print it."""

from __future__ import annotations

import contextlib
import re
import subprocess
from collections.abc import Iterator

from pfc.backends.describe import describe
from pfc.deploy.base import in_netns
from pfc.deploy.firewall import commit
from pfc.frontend import ir
from pfc.frontend.firewall.ruleset import Ruleset
from pfc.kernel import hostlab
from pfc.oracle.path.host import host_of
from tests.kernel.test_verify_firewall import host_firewall
from tests.oracle.path_build import rule, ruleset
from tests.oracle.test_path import router

__all__ = ["host_firewall", "router"]


def edge(port: int = 7) -> Ruleset:
    """A firewall with an ``ingress eth1`` block (for xdp or tc, or nft netdev) and an
    ``input`` block: ``port`` tells two versions apart in every part."""
    ingress = ir.Policy((rule("drop", "udp", dport=port),), ir.Verdict.PASS,
                        hook=ir.Hook("ingress", ("eth1",)))
    rs = ruleset({"input": [rule("drop", "tcp", dport=port), rule("pass", "tcp", dport=22)]},
                 interfaces=[("eth0", ["203.0.113.2/24"], "203.0.113.1"),
                             ("eth1", ["10.0.0.1/24"], None)])
    return Ruleset((ingress,) + rs.lists, (), rs.interfaces, "<edge>")


@contextlib.contextmanager
def lab() -> Iterator[hostlab.HostLab]:
    """A namespace with ``eth0`` and ``eth1`` (the router's host), no observer."""
    with hostlab.host_lab(host_of(router()), observe=False) as made:
        yield made


def load(rs: Ruleset, targets: str, ns: str, path: str = "/etc/pfc/fw.pf", **kw):
    artifacts, diags = commit.build(rs, targets.split(","))
    assert not diags, [d.message for d in diags]
    return commit.load_ruleset(artifacts, rs, path, path, describe, netns=ns, **kw)


def snapshot(ns: str) -> dict[str, str]:
    """What namespace ``ns`` holds (comments, dates and counters removed)."""
    cmds = {"nft": "nft list ruleset", "ipt4": "iptables-save", "ipt6": "ip6tables-save",
            "link": "ip -d link show", "ipset": "ipset list -n",
            "tc": "tc filter show dev eth1 ingress; tc filter show dev eth1 egress; "
                  "tc qdisc show dev eth1"}
    out = {}
    with in_netns(ns):
        for key, cmd in cmds.items():
            text = subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout
            text = re.sub(r"^#.*\n", "", text, flags=re.MULTILINE)
            out[key] = re.sub(r"\[\d+:\d+\]|packets \d+ bytes \d+", "", text)
    # a veth's carrier comes up on its own time (NO-CARRIER, state DOWN → UP): the
    # link's operational state is the kernel's, not something a load leaves behind
    out["link"] = re.sub(r"<[A-Z_,-]*>|state \S+", "", out["link"])
    return out


def run(ns: str, cmd: str) -> str:
    with in_netns(ns):
        return subprocess.run(cmd, shell=True, capture_output=True, text=True,
                              check=True).stdout
