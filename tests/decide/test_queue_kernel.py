"""`queue` end to end (docs/queue.md): iptables' NFQUEUE and its verdict cache in the
connection's mark, `pfc decide` with seed 002's pattern decider, real TCP connections
between two namespaces, judged against the interpreter run on the frames that arrived
with the same decider. Fail closed without a decider, open with `bypass`; cached
verdicts outlive the decider. About 10 s on the 2-core VM."""

from __future__ import annotations

import pytest

from pfc.decide.pair import pair
from pfc.kernel import netns
from tests.decide.queue_lab import (
    NEGATIVE,
    POSITIVE,
    Server,
    cached_scenario,
    connect,
    decider,
    echo,
    load_iptables,
    reset,
    stats,
)

ROOT_REASON = netns.missing_privileges()
pytestmark = pytest.mark.skipif(ROOT_REASON is not None, reason=ROOT_REASON or "")


def test_first_packets_go_to_user_space_the_rest_are_cached() -> None:
    got = cached_scenario("iptables")
    assert got["echoed"] == [True] * 9 + [False]  # "xxabcxx" dropped by the decider
    assert not got["abc_delivered"]
    d = got["decider"]  # packets queued before their flow's mark was there: `late`
    late = [-d["late_pass"], -d["late_drop"], d["late_pass"] + d["late_drop"]]
    assert got["kernel"] == [o + n for o, n in zip(got["oracle"], late, strict=True)], got
    passed, dropped, queued = got["kernel"]
    assert d["packets"] == queued and d["marks"] == 2, got
    assert queued <= 2 * 6 and passed > 0 and dropped > 0


@pytest.mark.parametrize("bypass", [False, True])
def test_no_decider_fails_closed_or_open_with_bypass(bypass: bool) -> None:
    text = f"queue tcp dport 5201{' bypass' if bypass else ''}\npass all\n"
    with pair() as p:
        load_iptables(p, text)
        server = Server(p)
        try:
            s = connect(p, POSITIVE if bypass else NEGATIVE)
            assert bypass and echo(s, b"x")
            reset(s)
        except TimeoutError:
            assert not bypass
        finally:
            server.close()


def test_cached_verdicts_outlive_the_decider(tmp_path) -> None:
    policy = tmp_path / "q.pf"
    text = "queue tcp dport 5201 first 3\npass all\n"
    policy.write_text(text)
    with pair() as p:
        load_iptables(p, text)
        server = Server(p)
        with decider(p, policy, "pattern:abc") as proc:
            old = connect(p, POSITIVE)
            assert echo(old, b"one") and echo(old, b"two")  # SYN, ACK, one: decided
            stats(proc)  # the decider is gone
        assert echo(old, b"three abc")  # cached pass: the decider never sees it
        with pytest.raises(TimeoutError):
            connect(p, NEGATIVE)  # a new flow: fail closed
        reset(old)
        server.close()


def test_pfc_verify_agrees_on_a_fail_closed_queue_policy(tmp_path) -> None:
    """No decider in verify's lab: every queued packet is dropped, as the interpreter
    says without one; `first` turns conntrack on, which holds IPv6 fragments for
    reassembly (left out as for `ct state`)."""
    from pfc.cli.main import main
    policy = tmp_path / "q.pf"
    policy.write_text("queue tcp dport 5201 first 4\npass all\n")
    assert main(["verify", "--targets", "iptables", "--frames", "200", "--pcap-out",
                 str(tmp_path / "out"), str(policy)]) == 0


def test_pfc_verify_on_nft_says_when_the_kernel_has_no_nft_queue(tmp_path, capsys) -> None:
    """This host's kernel has no nft_queue: the target is compiled only, with the reason
    (exit 2), not an internal error; a kernel with it runs and agrees (exit 0)."""
    from pfc.cli.main import main
    policy = tmp_path / "q.pf"
    policy.write_text("queue tcp dport 5201 first 4\npass all\n")
    code = main(["verify", "--targets", "nft", "--frames", "50", "--pcap-out",
                 str(tmp_path / "out"), str(policy)])
    assert code in (0, 2)
    if code == 2:
        assert "this kernel has no nft_queue (CONFIG_NFT_QUEUE)" in capsys.readouterr().err
