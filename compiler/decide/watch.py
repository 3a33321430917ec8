"""A stuck decider fails as a killed one does: ``pfc decide`` runs its loop in a child
process (the worker) and watches it from the parent (the watchdog).

What the kernel does on its own: when the worker dies (a crash, SIGKILL, the OOM
killer) its netlink socket is released, the kernel destroys the queue instance and
drops the packets it held (``nfqnl_rcv_nl_event`` → ``instance_destroy``:
``nfqnl_flush(..., NF_DROP)``), and from then on NFQUEUE drops what reaches it, or
accepts it with ``--queue-bypass`` / nft's ``bypass``. Verdicts kept in connection marks
are read by rules before the queue rule: they hold. What the kernel does not do is
notice a worker that is alive but answers nothing (a plug-in in an endless loop, a
deadlock, SIGSTOP): it holds each new flow's packets until the queue is full
(``NFQA_CFG_QUEUE_MAXLEN``), so `bypass` never applies. The watchdog closes that gap:
when packets have waited in the queue (``queue_total`` of
/proc/net/netfilter/nfnetlink_queue) for ``stall`` seconds while the worker answered
none, it kills the worker — and the kernel does the rest, as above.

The worker dies with the watchdog (``PR_SET_PDEATHSIG``): one SIGKILL of ``pfc decide``
unbinds the queue too. The heartbeat is a counter of packets answered, in a page the
two processes share.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import select
import signal
import struct
import sys
import time
from collections.abc import Callable
from pathlib import Path

PR_SET_PDEATHSIG = 1
STUCK = 3  # the exit status when the watchdog killed the worker, or something else did
QUEUES = Path("/proc/net/netfilter/nfnetlink_queue")


class Heartbeat:
    """A counter in a shared anonymous page (created before the fork)."""

    def __init__(self) -> None:
        self.page = mmap.mmap(-1, 8)

    def beat(self, count: int) -> None:
        struct.pack_into("=Q", self.page, 0, count)

    @property
    def count(self) -> int:
        return struct.unpack_from("=Q", self.page, 0)[0]


def waiting(num: int, path: Path = QUEUES) -> int:
    """Packets queue ``num`` of this network namespace holds for its program (0 when it
    has no instance). The columns: queue number, peer port id, queue_total, ..."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return 0
    for line in text.splitlines():
        cols = line.split()
        if len(cols) >= 3 and int(cols[0]) == num:
            return int(cols[2])
    return 0


def supervise(work: Callable[[Heartbeat], int], num: int, stall: float,
              release: Callable[[], None] = lambda: None,
              say: Callable[[str], None] = lambda m: print(m, file=sys.stderr, flush=True),
              ) -> int:
    """Run ``work(heartbeat)`` in a child process and return its exit status; SIGTERM or
    SIGINT to this process is passed on as SIGTERM. When queue ``num`` holds packets
    and the heartbeat has not moved for ``stall`` seconds, kill the child (SIGKILL) and
    return ``STUCK``; likewise when a signal killed it. ``release`` runs in this process
    after the fork: it closes this side's copies of the worker's sockets (a netlink
    socket is released when its last copy closes)."""
    heart = Heartbeat()
    parent = os.getpid()
    child = os.fork()
    if child == 0:
        _worker(work, heart, parent)
    release()
    stopping: list[float] = []

    def stop(*_: object) -> None:
        stopping.append(time.monotonic())
        _signal(child, signal.SIGTERM)
    old = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        return _watch(child, heart, num, stall, stopping, say)
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


def _worker(work: Callable[[Heartbeat], int], heart: Heartbeat, parent: int) -> None:
    code = 1
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the watchdog died before prctl
            os._exit(1)
        code = work(heart)
    except BaseException as exc:  # noqa: BLE001 - a child must never return to the caller
        if not isinstance(exc, SystemExit):
            print(f"pfc decide: worker: {exc!r}", file=sys.stderr)
        code = exc.code if isinstance(exc, SystemExit) and isinstance(exc.code, int) else 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _watch(child: int, heart: Heartbeat, num: int, stall: float, stopping: list[float],
           say: Callable[[str], None]) -> int:
    pidfd = os.pidfd_open(child)
    tick = max(0.01, min(0.2, stall / 4))
    last, since = heart.count, None
    try:
        while True:
            try:
                select.select([pidfd], [], [], tick)
            except InterruptedError:
                pass
            pid, status = os.waitpid(child, os.WNOHANG)
            if pid:
                return _status(status, say)
            now, beat = time.monotonic(), heart.count
            if beat != last or not waiting(num):
                last, since = beat, None
            elif since is None:
                since = now
            elif now - since >= stall and not stopping:
                os.kill(child, signal.SIGKILL)
                os.waitpid(child, 0)
                say(f"pfc decide: the decider answered nothing for {stall:g} s while "
                    f"queue {num} held {waiting(num)} packets: killed it; the queue fails "
                    "as with no decider (closed, or open with bypass)")
                return STUCK
            if stopping and now - stopping[0] >= max(stall, 1.0):
                _signal(child, signal.SIGKILL)  # asked to stop, and it does not
    finally:
        os.close(pidfd)


def _status(status: int, say: Callable[[str], None]) -> int:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        say(f"pfc decide: the decider was killed ({signal.Signals(sig).name}); the queue "
            "fails as with no decider (closed, or open with bypass)")
        return STUCK
    return os.waitstatus_to_exitcode(status)
