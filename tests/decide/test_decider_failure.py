"""A killed or stuck decider (docs/queue.md "When the decider fails"): the queue fails
closed — new flows dropped — or open with `bypass`, and verdicts already kept in
connection marks go on. Killed: SIGKILL of the worker (what the OOM killer does) or of
`pfc decide` itself (its worker dies with it); stuck: SIGSTOP of the worker, which the
watchdog (`--stall`) turns into a kill once a new flow's packet has waited. iptables'
NFQUEUE in two namespaces on this host (its kernel has xt_NFQUEUE, not nft_queue).
About 20 s."""

from __future__ import annotations

import os
import select
import signal

import pytest

from pfc.decide.pair import pair
from pfc.decide.watch import STUCK, supervise
from pfc.kernel import netns
from tests.decide.queue_lab import (
    NEGATIVE,
    POSITIVE,
    Server,
    bound,
    connect,
    decider,
    echo,
    load_iptables,
    reset,
)

ROOT_REASON = netns.missing_privileges()
needs_root = pytest.mark.skipif(ROOT_REASON is not None, reason=ROOT_REASON or "")
HOW = {"kill": (signal.SIGKILL, "worker"), "stop": (signal.SIGSTOP, "worker"),
       "kill-pfc-decide": (signal.SIGKILL, "pfc decide")}


def gone(pidfd: int) -> bool:
    """Whether the process ended (its pidfd readable) within POSITIVE seconds."""
    return bool(select.select([pidfd], [], [], POSITIVE)[0])


@needs_root
@pytest.mark.parametrize("bypass", [False, True], ids=["closed", "bypass"])
@pytest.mark.parametrize("how", list(HOW))
def test_a_killed_or_stuck_decider(tmp_path, how: str, bypass: bool) -> None:
    text = f"queue tcp dport 5201 first 3{' bypass' if bypass else ''}\npass all\n"
    policy = tmp_path / "q.pf"
    policy.write_text(text)
    sig, whom = HOW[how]
    with pair() as p:
        load_iptables(p, text)
        server = Server(p)
        with decider(p, policy, "pattern:abc", "--stall", "0.5") as proc:
            old = connect(p, POSITIVE)
            assert echo(old, b"one") and echo(old, b"two")  # SYN, ACK, one: decided
            worker = os.pidfd_open(proc.worker)
            os.kill(proc.worker if whom == "worker" else proc.pid, sig)
            assert echo(old, b"three abc")  # kept in its mark: the decider never sees it
            if sig == signal.SIGKILL:  # gone (its socket closed) before the next flow
                assert gone(worker)
            if bypass:  # (stuck: the SYN waits, the watchdog kills, the retry passes)
                new = connect(p, POSITIVE)
                assert echo(new, b"four abc")  # nobody looks: fail open
                reset(new)
            else:
                with pytest.raises(TimeoutError):
                    connect(p, NEGATIVE)
            assert gone(worker)  # (stuck: the watchdog killed it)
            os.close(worker)
            code = proc.wait()
            said = proc.stderr.read()
        assert code == (-signal.SIGKILL if whom == "pfc decide" else STUCK), said
        if whom == "worker":
            assert ("answered nothing for 0.5 s" if how == "stop" else "killed (SIGKILL)") \
                in said, said
        assert not bound(p)  # no program on the queue: NFQUEUE itself drops or bypasses
        if not bypass:
            with pytest.raises(TimeoutError):
                connect(p, NEGATIVE)  # and it stays closed
        assert echo(old, b"five")
        reset(old)
        server.close()


def test_the_watchdog_returns_the_worker_status_or_stuck() -> None:
    """Without a queue (nothing waits) the watchdog never kills; a worker's own exit
    status comes back, a signal's death is STUCK."""
    assert supervise(lambda heart: 5, num=65535, stall=0.1, say=lambda m: None) == 5
    said: list[str] = []
    assert supervise(lambda heart: os.kill(os.getpid(), signal.SIGKILL), num=65535,
                     stall=0.1, say=said.append) == STUCK
    assert "SIGKILL" in said[0]
