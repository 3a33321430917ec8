"""``solver.check()`` in a worker thread, so that Ctrl-C stops a long search at once.

z3 releases the GIL while it solves; the main thread waits in Python, notes SIGINT,
interrupts z3, joins the worker and raises KeyboardInterrupt (the CLI: "pfc:
interrupted", exit 130). No worker is ever left solving: one z3 context must never
solve in two threads at once (a segfault).
"""

from __future__ import annotations

import gc
import signal
import threading
from contextlib import contextmanager

import z3


def check(solver) -> z3.CheckSatResult:
    """``solver.check()`` that Ctrl-C stops at once: z3 runs in a worker thread (z3
    releases the GIL) while the main thread waits in Python, where SIGINT raises
    KeyboardInterrupt; z3 is then interrupted, the worker joined and the
    KeyboardInterrupt goes on (the CLI: "pfc: interrupted", exit 130). z3's own
    handler, which a long bit-blasting search did not heed (the first Ctrl-C was
    lost, the second ended in "interrupted from keyboard"), is switched off.

    Python's cyclic garbage collector is off while z3 runs: a collection in the
    waiting thread frees z3 terms (``Z3_dec_ref``) in the context z3 is solving in,
    which is not thread-safe (a test run once ended in SIGABRT in the worker)."""
    if threading.current_thread() is not threading.main_thread():
        return solver.check()
    with sigint_watched():
        _raise_if_interrupted()
        solver.set("ctrl_c", False)
        collecting = gc.isenabled()
        gc.disable()
        try:
            return _check_in_worker(solver)
        finally:
            if collecting:
                gc.enable()


_SEEN = threading.Event()  # a SIGINT came since the outermost sigint_watched() began


def _on_sigint(signum: int, _frame) -> None:
    _SEEN.set()
    raise KeyboardInterrupt


def _raise_if_interrupted() -> None:
    """A Ctrl-C whose KeyboardInterrupt Python dropped is raised here."""
    if _SEEN.is_set():
        raise KeyboardInterrupt


@contextmanager
def sigint_watched():
    """Ctrl-C raises KeyboardInterrupt as usual and is also remembered: one raised
    inside a ``__del__`` (z3 frees its terms and parameter sets there, all the time)
    is printed and dropped by Python, and the Ctrl-C was lost (CI: the solver ran
    on). :func:`check` raises a remembered one before and while z3 runs. ``pfc
    prove`` and ``pfc diff`` run whole in this region. Only Python's own handler is
    replaced (an ignored SIGINT stays ignored); nested regions share the outer one."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield
        return
    _SEEN.clear()
    signal.signal(signal.SIGINT, _on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


# Workers whose caller stopped waiting (an exception other than Ctrl-C, e.g. a test's
# timeout): one z3 context must never solve in two threads at once (a segfault).
_WORKERS: list[tuple[threading.Thread, object]] = []


def _stop(worker: threading.Thread, solver) -> None:
    """Interrupt ``solver`` until its worker has ended (z3 may not have begun yet)."""
    while worker.is_alive():
        solver.ctx.interrupt()
        worker.join(0.05)


def _check_in_worker(solver) -> z3.CheckSatResult:
    found: list = []
    failed: list = []
    cancelled = threading.Event()

    def run() -> None:
        if cancelled.is_set():  # Ctrl-C came while the thread was starting
            return
        try:
            found.append(solver.check())
        except BaseException as exc:  # noqa: BLE001 (re-raised in the caller's thread)
            failed.append(exc)

    for orphan, its_solver in _WORKERS:
        _stop(orphan, its_solver)
    _WORKERS.clear()
    worker = threading.Thread(target=run, name="pfc-z3", daemon=True)
    _WORKERS.append((worker, solver))
    try:
        worker.start()
        while worker.is_alive():
            _raise_if_interrupted()
            worker.join(0.05)
        _raise_if_interrupted()
    except BaseException:  # Ctrl-C (then "pfc: interrupted", 130), or anything else
        cancelled.set()
        _stop(worker, solver)
        raise
    if failed:
        raise failed[0]
    return found[0]
