"""Whole firewalls (v2) loaded, replaced, inspected and unloaded: every part or none
(docs/load.md "Whole firewalls")."""

from __future__ import annotations

import json

import pytest

from pfc.deploy import load as deploying
from pfc.deploy import state
from pfc.deploy.base import LoadError, device_index, in_netns
from pfc.deploy.firewall import commit, ipt, nft
from pfc.deploy.firewall.loader import DEV, TARGET
from tests.deploy import fw_lab
from tests.deploy.fw_lab import edge, host_firewall, load, router, run, snapshot
from tests.deploy.test_load import ROOT_REASON

pytestmark = [pytest.mark.kernel,
              pytest.mark.skipif(ROOT_REASON is not None, reason=ROOT_REASON or "")]


def entry(ns: str) -> deploying.Status:
    (found,) = deploying.report(None, ns).entries
    return found


@pytest.mark.parametrize("target", ["nft", "iptables"])
def test_load_replace_and_unload_leave_nothing_behind(target):
    with fw_lab.lab() as lab:
        ns = lab.host_ns
        clean = snapshot(ns)
        rs = router()
        masquerade = rs.blocks("nat postrouting")[0].rules[0].index
        load(rs, target, ns, "/etc/pfc/router.pf")
        s = entry(ns)
        assert (s.record.target, s.record.dev, s.inspection.health) == (TARGET, DEV, "ok")
        blocks = {row.block for row in s.record.rules}
        assert blocks == {"nat prerouting", "input", "forward", "nat postrouting"}
        assert {"default input", "default forward", masquerade} <= set(s.inspection.counters)
        listed = run(ns, "nft list ruleset" if target == "nft" else "iptables-save")
        assert "dnat" in listed.lower() and "masquerade" in listed.lower()
        load(host_firewall(), target, ns, "/etc/pfc/host.pf")
        s = entry(ns)
        assert s.inspection.health == "ok" and s.record.policy == "/etc/pfc/host.pf"
        listed = run(ns, "nft list ruleset" if target == "nft" else "iptables-save -t nat")
        assert "dnat" not in listed.lower() and "PFC-PREROUTING" not in listed  # retired
        load(router(), target, ns)
        assert entry(ns).inspection.health == "ok"
        result = commit.unload(ns)
        assert result.messages
        assert snapshot(ns) == clean
        assert deploying.report(None, ns).entries == []
        assert commit.unload(ns).messages[0].startswith("nothing loaded")


def test_nft_replace_keeps_the_base_chains_hooked():
    """A replace flushes each base chain that stays (its handle stays): a packet meets
    the old rules or the new ones, never both (docs/load.md)."""
    with fw_lab.lab() as lab:
        ns = lab.host_ns
        load(router(), "nft", ns)
        before = json.loads(run(ns, "nft -j -a list chain inet pfc input"))
        load(host_firewall(), "nft", ns)
        after = json.loads(run(ns, "nft -j -a list chain inet pfc input"))
        handle = [next(i["chain"]["handle"] for i in d["nftables"] if "chain" in i)
                  for d in (before, after)]
        assert handle[0] == handle[1]
        assert "nat_prerouting" not in run(ns, "nft list table inet pfc")


def _corrupt_ipv6(monkeypatch) -> None:
    """The switch's IPv6 restore refers to a chain that does not exist: IPv4 switches,
    then IPv6 fails (a later step failing on purpose)."""
    real = ipt.switch

    def broken(flavour, texts):
        texts = dict(texts)
        if 6 in texts:
            texts[6] = texts[6].replace("COMMIT", "-A PFC-NOSUCH -j DROP\nCOMMIT", 1)
        return real(flavour, texts)
    monkeypatch.setattr(ipt, "switch", broken)


def test_iptables_switch_failing_in_ipv6_puts_ipv4_back(monkeypatch):
    with fw_lab.lab() as lab:
        ns = lab.host_ns
        load(router(), "iptables", ns, "/etc/pfc/router.pf")
        before = snapshot(ns)
        with monkeypatch.context() as m, pytest.raises(LoadError) as err:
            _corrupt_ipv6(m)
            load(host_firewall(), "iptables", ns, "/etc/pfc/host.pf")
        assert "the kernel holds what it held before" in err.value.cause, err.value.cause
        assert snapshot(ns) == before
        s = entry(ns)
        assert s.inspection.health == "ok" and s.record.policy == "/etc/pfc/router.pf"
        load(host_firewall(), "iptables", ns)
        assert entry(ns).inspection.health == "ok"


def test_a_later_nft_part_failing_puts_iptables_back(monkeypatch):
    """``--target iptables,nft``: the netfilter blocks in iptables, ``ingress`` in an nft
    netdev table. The nft transaction is refused: iptables is switched back."""
    with fw_lab.lab() as lab:
        ns = lab.host_ns
        load(edge(7), "iptables,nft", ns, "/etc/pfc/p1.pf")
        assert "netdev pfc" in run(ns, "nft list tables")
        before = snapshot(ns)

        def refused(doc):
            raise LoadError("nftables refused the ruleset: (on purpose)")
        with monkeypatch.context() as m, pytest.raises(LoadError) as err:
            m.setattr(nft, "commit", refused)
            load(edge(8), "iptables,nft", ns, "/etc/pfc/p2.pf")
        assert "held before" in err.value.cause
        assert snapshot(ns) == before
        assert entry(ns).record.policy == "/etc/pfc/p1.pf"


@pytest.mark.parametrize("bpf", ["tc", "xdp"])
def test_an_ebpf_part_failing_puts_the_others_back(monkeypatch, bpf):
    """``--target tc,iptables`` / ``xdp,nft``: the program's attach fails after the
    iptables switch (or the nft transaction): they are put back, the program too."""
    other = "iptables" if bpf == "tc" else "nft"
    with fw_lab.lab() as lab:
        ns = lab.host_ns
        load(edge(7), f"{bpf},{other}", ns, "/etc/pfc/p1.pf", mode="generic"
             if bpf == "xdp" else None)
        before = snapshot(ns)
        s = entry(ns)
        assert s.inspection.health == "ok" and f"{bpf}:eth1" in s.record.attach["parts"]
        from pfc.kernel import bpf_attach

        def failing(*args, **kwargs):
            raise OSError(1, "on purpose")
        name = "tc_attach" if bpf == "tc" else "xdp_attach"
        with monkeypatch.context() as m, pytest.raises(LoadError) as err:
            m.setattr(bpf_attach, name, failing)
            load(edge(8), f"{bpf},{other}", ns, "/etc/pfc/p2.pf")
        assert "held before" in err.value.cause, err.value.cause
        assert snapshot(ns) == before
        assert entry(ns).inspection.health == "ok"
        commit.unload(ns)
        assert run(ns, "nft list ruleset; tc filter show dev eth1 ingress") == ""
        assert "PFC" not in run(ns, "iptables-save") and "xdp" not in run(ns, "ip link")


def test_a_v1_table_of_the_same_name_is_not_taken(monkeypatch):
    with fw_lab.lab() as lab:
        ns = lab.host_ns
        from pfc.deploy.nft import list_table  # noqa: F401 - the module loads
        record = state.Record("nft", "ingress", "eth0", ns, "/x.pf", "", "", [], "pass",
                              {"family": "netdev", "table": "pfc"})
        state.write(record)
        with pytest.raises(LoadError) as err:
            load(router(), "nft", ns)
        assert "holds pfc's nft policy for eth0" in err.value.cause
        state.remove(record)


def test_status_shows_each_hook_with_its_rules_default_and_counters():
    from tests.deploy.test_load import pfc

    with fw_lab.lab() as lab:
        ns = lab.host_ns
        load(router(), "nft", ns, "/etc/pfc/router.pf")
        code, out, err = pfc("status", "--netns", ns)
        assert code == 0, err
        assert f"firewall (nft) (namespace {ns}): ok" in out
        at = [out.index(f"{b}:") for b in ("nat prerouting", "input", "forward",
                                            "nat postrouting", "output")]
        assert at == sorted(at)
        assert out.count("default drop") == 2 and out.count("default pass") == 1
        code, out, _ = pfc("status", "--netns", ns, "--format", "json")
        (e,) = json.loads(out)["loaded"]
        assert {r["block"] for r in e["rules"]} == {"nat prerouting", "input", "forward",
                                                     "nat postrouting"}
        assert [b["block"] for b in e["blocks"]][:2] == ["nat prerouting", "input"]
        assert all(b["packets"] is not None for b in e["blocks"] if b["default"])
        run(ns, "nft delete table inet pfc")
        code, out, _ = pfc("status", "--netns", ns)
        assert code == 3 and "VANISHED" in out and "was deleted" in out


def test_pfc_unload_without_dev_removes_the_whole_firewall():
    from tests.deploy.test_load import pfc

    with fw_lab.lab() as lab:
        ns = lab.host_ns
        clean = snapshot(ns)
        load(edge(7), "tc,iptables", ns)
        code, _, err = pfc("unload", "--target", "nft", "--netns", ns)
        assert code == 2 and "uses tc, iptables, not nft" in err
        code, out, err = pfc("unload", "--target", "iptables", "--netns", ns)
        assert code == 0, err
        assert "removed the tc filter" in out and "PFC-INPUT" not in run(ns, "iptables-save")
        assert snapshot(ns) == clean
        code, out, _ = pfc("unload", "--target", "iptables", "--netns", ns)
        assert code == 0 and out.startswith("nothing loaded")


def test_tc_ingress_and_egress_blocks_sit_where_they_say():
    """``ingress eth1`` and ``egress eth1`` on tc: two filters on one device, each in its
    direction (an egress block was once attached at ingress), the egress one judging
    what the host sends; unload removes both and the clsact qdisc pfc created."""
    from pfc.frontend import ir
    from pfc.frontend.firewall.ruleset import Ruleset
    from pfc.kernel import bpf_attach
    from tests.deploy.test_load import pfc
    from tests.oracle.path_build import rule

    base = edge(7)
    egress = ir.Policy((rule("drop", "udp", dport=9),), ir.Verdict.PASS,
                       hook=ir.Hook("egress", ("eth1",)))
    rs = Ruleset(base.lists + (egress,), (), base.interfaces, "<edge+egress>")
    with fw_lab.lab() as lab:
        ns = lab.host_ns
        clean = snapshot(ns)
        load(rs, "tc,nft", ns)
        with in_netns(ns):
            index = device_index("eth1")
            names = {way: bpf_attach.prog_info_by_id(
                bpf_attach.tc_query(index, 0x7066, 1, egress=way == "egress")).name
                for way in ("ingress", "egress")}
        assert names == {"ingress": "pfc_tc", "egress": "pfc_tc_egress"}
        run(ns, "ip neigh replace 10.0.0.2 lladdr 02:00:00:00:00:02 dev eth1")
        for port in (9, 9, 10):
            run(ns, f"python3 -c \"import socket; socket.socket(socket.AF_INET, "
                    f"socket.SOCK_DGRAM).sendto(b'x', ('10.0.0.2', {port}))\"")
        code, out, err = pfc("status", "--netns", ns, "--format", "json")
        assert code == 0, err
        (e,) = json.loads(out)["loaded"]
        (dropped,) = [r for r in e["rules"] if r["block"] == "egress"]
        assert dropped["packets"] == 2, e["rules"]
        commit.unload(ns)
        assert snapshot(ns) == clean
