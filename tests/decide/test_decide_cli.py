"""`pfc decide`'s reading of the policy: which queue it serves, with which `first` and
`bypass`, and the usage errors (exit 2) and policy errors (exit 1) before any socket."""

from __future__ import annotations

import pytest

from pfc.cli.common import UsageError
from pfc.cli.decide import queue_action
from pfc.cli.main import main
from pfc.decide.analyse import PatternDecider, load
from pfc.frontend import ir
from pfc.frontend.pipeline import compile_text


def policy(text: str) -> ir.Policy:
    return compile_text(text).require()


def test_the_queue_and_its_settings_come_from_the_policy() -> None:
    got = queue_action(policy("queue tcp dport 80 num 2 first 5 bypass\n"), None)
    assert (got.num, got.first, got.bypass) == (2, 5, True)
    two = policy("queue tcp num 1\nqueue udp num 2 first 3\n")
    assert queue_action(two, 2).first == 3


@pytest.mark.parametrize("text,num,message", [
    ("pass all\n", None, "no `queue` rule"),
    ("queue tcp num 1\nqueue udp num 2\n", None, "uses queues 1, 2: pass --queue N"),
    ("queue tcp num 1\n", 4, "no `queue ... num 4` rule"),
    ("queue tcp first 2\nqueue udp first 3\n", None, "differ in `first`/`bypass`"),
])
def test_what_it_cannot_serve_is_a_usage_error(text: str, num: int | None,
                                               message: str) -> None:
    with pytest.raises(UsageError, match=message.replace("(", r"\(")):
        queue_action(policy(text), num)


def test_exit_codes_before_any_socket(tmp_path, capsys) -> None:
    bad = tmp_path / "bad.pf"
    bad.write_text("queue dport 80\n")
    assert main(["decide", str(bad)]) == 1
    assert "needs `tcp` or `udp`" in capsys.readouterr().err
    none = tmp_path / "none.pf"
    none.write_text("pass all\n")
    assert main(["decide", str(none)]) == 2
    good = tmp_path / "good.pf"
    good.write_text("queue tcp\n")
    assert main(["decide", str(good), "--decider", "nonsense"]) == 2
    assert main(["decide", str(good), "--stall", "-1"]) == 2
    assert "--stall: a number of seconds" in capsys.readouterr().err


def test_decider_specs() -> None:
    assert isinstance(load("pattern:a\\x62c"), PatternDecider)
    assert load("pattern:a\\x62c").pattern == b"abc"
    assert load("drop")(0, (), b"") is ir.Verdict.DROP
    assert load("pfc.decide.analyse:always") is not None
    with pytest.raises(ValueError):
        load("pattern:")


def test_pfc_run_takes_a_decider(tmp_path, capsys) -> None:
    """`pfc run --decider` judges a capture with the decider as the interpreter's input;
    without one, queued packets fail closed."""
    import json

    from scapy.layers.inet import IP, TCP
    from scapy.layers.l2 import Ether
    from scapy.utils import wrpcap

    pcap, pf = tmp_path / "q.pcap", tmp_path / "q.pf"
    wrpcap(str(pcap), [Ether() / IP(src="10.0.0.1", dst="10.0.0.2")
                       / TCP(sport=4000, dport=80, flags="PA") / d
                       for d in (b"x", b"abc", b"y")])
    pf.write_text("queue tcp dport 80 first 8\n")

    def verdicts(*extra: str) -> list[str]:
        assert main(["run", str(pf), str(pcap), "--format", "json", *extra]) == 0
        return [p["verdict"] for p in json.loads(capsys.readouterr().out)["packets"]]
    assert verdicts("--decider", "pattern:abc") == ["pass", "drop", "drop"]
    assert verdicts() == ["drop", "drop", "drop"]
    assert main(["run", str(pf), str(pcap), "--decider", "nonsense"]) == 2
