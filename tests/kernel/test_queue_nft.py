"""`queue` on nft, end to end, in the kernel lab: this host's kernel has no nft_queue
(CONFIG_NFT_QUEUE is not set), Debian's 6.1 has it. The same scenario as the iptables
test (tests/decide/queue_lab.py `cached_scenario`): the kernel's counters of the queue
rule's three nft rules must be the interpreter's on the frames that arrived."""

from __future__ import annotations

import json
import sys

import pytest

from pfc.verifier import kernels as vk
from tests.kernel.conftest import needs_lab
from tests.paths import ROOT

RUN = ("import json; from tests.decide.queue_lab import cached_scenario; "
       "print(json.dumps(cached_scenario('nft')))")


@pytest.mark.lab
@needs_lab
@pytest.mark.timeout(1800)
def test_nft_queue_and_its_cache_agree_with_the_interpreter(guests) -> None:
    vm = guests.get("6.1")
    done = vm.run([sys.executable, "-c", RUN], cwd=ROOT, env=vk._env())
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["echoed"] == [True] * 9 + [False] and not got["abc_delivered"]
    d = got["decider"]  # packets queued before their flow's mark was there: `late`
    late = [-d["late_pass"], -d["late_drop"], d["late_pass"] + d["late_drop"]]
    assert got["kernel"] == [o + n for o, n in zip(got["oracle"], late, strict=True)], got
    passed, dropped, queued = got["kernel"]
    assert d["packets"] == queued and d["marks"] == 2, got
    assert passed > 0 and dropped > 0


FAILURES = [("kill", False), ("kill", True), ("stop", False), ("stop", True)]
RUN_FAILURES = ("import json; from tests.decide.queue_lab import failure_scenario; "
                f"print(json.dumps([failure_scenario('nft', h, b) for h, b in {FAILURES!r}]))")


@pytest.mark.lab
@needs_lab
@pytest.mark.timeout(1800)
def test_nft_queue_fails_closed_or_open_when_the_decider_dies_or_sticks(guests) -> None:
    """tests/decide/test_decider_failure.py's scenarios with nft's `queue ... [bypass]`:
    the worker killed or stopped (the watchdog kills it), closed and with bypass."""
    from tests.decide.test_decider_failure import check_failure

    vm = guests.get("6.1")
    done = vm.run([sys.executable, "-c", RUN_FAILURES], cwd=ROOT, env=vk._env())
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    for (how, bypass), seen in zip(FAILURES, got, strict=True):
        check_failure(seen, how, bypass)
