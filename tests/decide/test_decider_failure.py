"""A killed or stuck decider (docs/queue.md "When the decider fails"): the queue fails
closed — new flows dropped — or open with `bypass`, and verdicts already kept in
connection marks go on. Killed: SIGKILL of the worker (what the OOM killer does) or of
`pfc decide` itself (its worker dies with it); stuck: SIGSTOP of the worker, which the
watchdog (`--stall`) turns into a kill once a new flow's packet has waited. iptables'
NFQUEUE in two namespaces on this host (its kernel has xt_NFQUEUE, not nft_queue).
About 20 s."""

from __future__ import annotations

import os
import signal

import pytest

from pfc.decide.watch import STUCK, supervise
from pfc.kernel import netns
from tests.decide.queue_lab import FAILURES, failure_scenario

ROOT_REASON = netns.missing_privileges()
needs_root = pytest.mark.skipif(ROOT_REASON is not None, reason=ROOT_REASON or "")


def check_failure(got: dict, how: str, bypass: bool) -> None:
    """What tests/decide/queue_lab.py's `failure_scenario` must have seen (the nft
    form in the kernel lab is judged by the same function)."""
    assert got["decided"] and got["old_after"] and got["old_end"], got
    assert got.get("gone_first", True) and got["gone"], got
    assert got["new"] == ("echoed" if bypass else "refused"), got
    whom = FAILURES[how][1]
    assert got["code"] == (-signal.SIGKILL if whom == "pfc decide" else STUCK), got
    if whom == "worker":
        assert ("answered nothing for 0.5 s" if how == "stop" else "killed (SIGKILL)") \
            in got["said"], got
    assert not got["bound"], got  # no program on the queue: NFQUEUE drops or bypasses
    assert got["later"] == ("-" if bypass else "refused"), got  # and it stays closed


@needs_root
@pytest.mark.parametrize("bypass", [False, True], ids=["closed", "bypass"])
@pytest.mark.parametrize("how", list(FAILURES))
def test_a_killed_or_stuck_decider(how: str, bypass: bool) -> None:
    check_failure(failure_scenario("iptables", how, bypass), how, bypass)


def test_the_watchdog_returns_the_worker_status_or_stuck() -> None:
    """Without a queue (nothing waits) the watchdog never kills; a worker's own exit
    status comes back, a signal's death is STUCK."""
    assert supervise(lambda heart: 5, num=65535, stall=0.1, say=lambda m: None) == 5
    said: list[str] = []
    assert supervise(lambda heart: os.kill(os.getpid(), signal.SIGKILL), num=65535,
                     stall=0.1, say=said.append) == STUCK
    assert "SIGKILL" in said[0]
