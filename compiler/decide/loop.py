"""``pfc decide``'s loop: read a batch from the queue, decide each packet, answer the
batch, keep decided flows' verdicts in the kernel (``first K``).

The decision is ``pfc.oracle.queue.QueueState.verdict``, the interpreter's own model of
the decider, run here on the real packets: the oracle and this loop cannot disagree on
what the decider says, so a kernel test compares the kernel's rules and cache with the
interpreter. A decided flow's mark is written before the verdict of the packet that
decided it, so the flow's next packet meets it in the kernel; a connection not yet
confirmed (the packet is its first) has no entry to mark: for a pass the mark is
written after the batch's verdicts (the kernel confirms the connection while it
re-injects the packet), a dropped first packet leaves no connection (its retries come
back here and get the same answer from the decider's table).
"""

from __future__ import annotations

import select
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from pfc.decide.ctmark import Marks
from pfc.decide.nfqueue import Queue
from pfc.frontend import ir
from pfc.frontend.ir import Verdict
from pfc.oracle.packets import read_frame
from pfc.oracle.queue import Decider, QueueState, flow_key

_ETHER = {4: bytes(12) + b"\x08\x00", 6: bytes(12) + b"\x86\xdd"}


@dataclass
class Stats:
    packets: int = 0
    passed: int = 0
    dropped: int = 0
    marks: int = 0  # verdicts written into connections
    unmarked: int = 0  # writes that found no (confirmed) connection yet
    errors: int = 0  # decider exceptions (the flow failed closed, or open with bypass)
    late_pass: int = 0  # packets of flows already decided (queued before their mark was
    late_drop: int = 0  # written, or their connection had none yet): answered alike
    flows: set = field(default_factory=set)

    def as_dict(self) -> dict:
        return {"packets": self.packets, "passed": self.passed, "dropped": self.dropped,
                "flows": len(self.flows), "marks": self.marks, "unmarked": self.unmarked,
                "errors": self.errors, "late_pass": self.late_pass,
                "late_drop": self.late_drop}


class Loop:
    """One queue: ``action`` says ``first`` and ``bypass``; ``decider`` decides;
    ``beat(count)`` is called after each packet decided (the watchdog's heartbeat,
    ``pfc.decide.watch``)."""

    def __init__(self, queue: Queue, action: ir.Queue, decider: Decider,
                 marks: Marks | None = None,
                 beat: Callable[[int], None] = lambda count: None) -> None:
        self.queue, self.action, self.beat = queue, action, beat
        self.state = QueueState(decider=self._guarded(decider))
        self.marks = marks if marks is not None else (
            Marks() if action.first is not None else None)
        self.stats = Stats()
        self._unmarked: set = set()  # decided flows whose mark could not be written yet

    def _guarded(self, decider: Decider) -> Decider:
        def call(num, key, packet):
            try:
                return decider(num, key, packet)
            except Exception as exc:  # a plug-in's bug must not stop the queue
                self.stats.errors += 1
                print(f"pfc decide: the decider failed: {exc!r}", file=sys.stderr)
                return Verdict.PASS if self.action.bypass else Verdict.DROP
        return call

    def decide(self, packet: bytes) -> tuple[bool, bool]:
        """(accept, write the flow's mark) for one packet (an IP packet)."""
        view = read_frame(_ETHER.get(packet[0] >> 4 if packet else 4, _ETHER[4]) + packet)
        key = flow_key(view)
        before = key in self.state.cache
        verdict, seen = self.state.verdict(self.action, view)
        self.stats.flows.add(key)
        if not seen:  # the kernel's cache would have decided it, had the mark been there
            self.stats.late_pass += verdict is Verdict.PASS
            self.stats.late_drop += verdict is Verdict.DROP
        return verdict is Verdict.PASS, key in self.state.cache and self.marks is not None \
            and (not before or key in self._unmarked)

    def batch(self, packets: list[tuple[int, bytes]]) -> None:
        answers, after = [], []
        for pid, packet in packets:
            ok, mark = self.decide(packet)
            self.stats.packets += 1
            self.stats.passed += ok
            self.stats.dropped += not ok
            self.beat(self.stats.packets)
            answers.append((pid, ok))
            if mark and not self._mark(packet, ok) and ok:
                after.append(packet)
        self.queue.verdicts(answers)
        for packet in after:
            self._mark(packet, True)

    def _mark(self, packet: bytes, passed: bool) -> bool:
        """Write the flow's verdict into its connection; False when there is none yet."""
        key = flow_key(read_frame(_ETHER.get(packet[0] >> 4, _ETHER[4]) + packet))
        if self.marks.write(packet, passed):
            self.stats.marks += 1
            self._unmarked.discard(key)
            return True
        self.stats.unmarked += 1
        self._unmarked.add(key)
        return False

    def run(self, stop: Callable[[], bool] = lambda: False, tick: float = 0.2) -> Stats:
        """Until ``stop()`` is true (checked at least every ``tick`` seconds)."""
        while not stop():
            ready, _, _ = select.select([self.queue], [], [], tick)
            if ready:
                self.batch(self.queue.read())
        return self.stats
