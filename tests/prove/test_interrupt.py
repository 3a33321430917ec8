"""Ctrl-C stops ``pfc prove`` while z3 is searching (issue 29, M3): the first SIGINT
interrupts the solver, the command says ``pfc: interrupted`` and exits 130.

The proof interrupted is a hard one: two forms of one checksum update (the RFC 1624
form the policy's formula uses and the kernel's ``csum_replace4``) compared over a
16-bit checksum and a 32-bit address, which bit-blasting takes about half a minute
to settle. The tests wait until the solver runs (a line the driver prints, or z3's
worker thread), then send SIGINT and wait for the end; they time nothing.
"""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys

import pytest
import z3

from pfc.prove import worker
from pfc.prove.rewrite import csum_add, csum_fold, csum_update
from tests.paths import ROOT

HARD = """
import z3
from pfc.prove.rewrite import csum_add, csum_fold, csum_update
hc, old = z3.BitVec("hc", 16), z3.BitVec("old", 32)
new = z3.BitVecVal(0x0A630035, 32)
HARD = csum_update(hc, old, new) != csum_fold(csum_add(csum_add(~z3.ZeroExt(16, hc), ~old), new))
"""


def hard_query() -> z3.BoolRef:
    hc, old = z3.BitVec("hc", 16), z3.BitVec("old", 32)
    new = z3.BitVecVal(0x0A630035, 32)
    return csum_update(hc, old, new) != csum_fold(
        csum_add(csum_add(~z3.ZeroExt(16, hc), ~old), new))


DRIVER = HARD + """
import sys
from pfc.cli.main import main
from pfc.prove import frame, run

def slow_prove(*args, **kwargs):
    solver = frame.solver()
    solver.add(HARD)
    print("solving", flush=True)
    solver.check()
    raise AssertionError("the solver was not interrupted")

run.prove = slow_prove
sys.exit(main(["prove", sys.argv[1], "--targets", "tc"]))
"""


def test_ctrl_c_ends_pfc_prove_with_130(tmp_path) -> None:
    policy = tmp_path / "rd.pf"
    policy.write_text("redirect udp dport 53 to 10.99.0.53\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    child = subprocess.Popen([sys.executable, "-c", DRIVER, str(policy)], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = child.stdout.readline()
        while line not in ("solving\n", ""):  # the redirect's note comes first
            line = child.stdout.readline()
        assert line == "solving\n"
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=120)  # a safety net, not a measure
    finally:
        child.kill()
    assert child.returncode == 130, err
    assert err.strip() == "pfc: interrupted", err


def test_no_garbage_collection_while_z3_runs_in_its_worker() -> None:
    """The waiting thread must not free z3 terms (a collection calls ``Z3_dec_ref``
    in the context the worker solves in; not thread-safe: a test run once ended in
    SIGABRT in the worker). The collector is off while z3 runs, on again after."""
    seen: list[bool] = []

    class Watched:
        ctx = z3.main_ctx()

        def set(self, *args) -> None:
            pass

        def check(self) -> z3.CheckSatResult:
            seen.append(gc.isenabled())
            return z3.sat

    assert gc.isenabled()
    assert worker.check(Watched()) == z3.sat
    assert seen == [False] and gc.isenabled()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_ctrl_c_python_dropped_in_a_del_still_stops_the_next_check() -> None:
    """SIGINT landing in a ``__del__`` (z3 frees terms there all the time): Python prints
    "Exception ignored" and drops the KeyboardInterrupt; the next check raises it."""
    class Freed:
        def __del__(self) -> None:
            os.kill(os.getpid(), signal.SIGINT)
            sum(range(1000))  # the handler runs here, inside __del__

    class NeverRun:
        ctx = z3.main_ctx()

        def set(self, *args) -> None:
            pass

        def check(self) -> z3.CheckSatResult:
            raise AssertionError("z3 ran after Ctrl-C")

    with worker.sigint_watched():
        Freed()  # dropped at once: its __del__ gets the KeyboardInterrupt
        try:
            worker.check(NeverRun())
        except KeyboardInterrupt:
            pass
        else:
            raise AssertionError("the Ctrl-C was lost")
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert worker.check(Answers()) == z3.unsat  # remembered only inside the region


class Answers:
    ctx = z3.main_ctx()

    def set(self, *args) -> None:
        pass

    def check(self) -> z3.CheckSatResult:
        return z3.unsat
