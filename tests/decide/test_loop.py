"""`pfc decide`'s loop without a kernel: a fake queue and fake marks record what it
sends, in order. A decided flow's mark goes before the verdict of the packet that
decided it; a pass whose connection is not there yet is marked after the verdicts; a
decider that raises fails the flow closed (open with `bypass`)."""

from __future__ import annotations

from scapy.layers.inet import IP, TCP

from pfc.decide.analyse import PatternDecider
from pfc.decide.loop import Loop
from pfc.frontend import ir


class Log:
    def __init__(self, confirmed: bool = True) -> None:
        self.events: list[tuple] = []
        self.confirmed = confirmed

    def verdicts(self, answers):
        self.events.append(("verdicts", tuple(answers)))

    def write(self, packet: bytes, passed: bool) -> bool:
        self.events.append(("mark", passed, self.confirmed))
        return self.confirmed


def pkt(data: bytes = b"", sport: int = 40000) -> bytes:
    return bytes(IP(src="10.0.0.1", dst="10.0.0.2") / TCP(sport=sport, dport=80) / data)


def loop(action: ir.Queue, decider, log: Log) -> Loop:
    return Loop(log, action, decider, marks=log)


def test_a_drop_is_marked_before_its_verdict() -> None:
    log = Log()
    lp = loop(ir.Queue(0, 8), PatternDecider(b"abc"), log)
    lp.batch([(1, pkt(b"x")), (2, pkt(b"abc"))])
    assert log.events == [("mark", False, True), ("verdicts", ((1, True), (2, False)))]


def test_a_pass_on_an_unconfirmed_connection_is_marked_after_the_verdicts() -> None:
    log = Log(confirmed=False)
    lp = loop(ir.Queue(0, 1), PatternDecider(b"abc"), log)
    lp.batch([(7, pkt(b"hello"))])
    assert log.events == [("mark", True, False), ("verdicts", ((7, True),)),
                          ("mark", True, False)]
    log.events.clear()
    lp.batch([(8, pkt(b"again"))])  # still unmarked: the table answers, marks again
    assert log.events == [("mark", True, False), ("verdicts", ((8, True),)),
                          ("mark", True, False)]
    assert lp.stats.late_pass == 1 and lp.stats.unmarked == 4


def test_without_first_nothing_is_marked() -> None:
    log = Log()
    lp = Loop(log, ir.Queue(0), PatternDecider(b"abc"), marks=None)
    lp.batch([(1, pkt(b"abc")), (2, pkt(b"x"))])
    assert log.events == [("verdicts", ((1, False), (2, False)))]


def test_a_failing_decider_fails_closed_or_open() -> None:
    def broken(num, key, packet):
        raise RuntimeError("bug")
    for bypass in (False, True):
        log = Log()
        lp = Loop(log, ir.Queue(0, None, bypass), broken, marks=None)
        lp.batch([(1, pkt())])
        assert log.events == [("verdicts", ((1, bypass),))] and lp.stats.errors == 1
