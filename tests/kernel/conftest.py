"""The kernel lab's fixtures: one guest per kernel for the whole test session."""

from __future__ import annotations

import pytest

from pfc.kernel import lab
from tests.kernel.labs import Guests

LAB_REASON = lab.available()
needs_lab = pytest.mark.skipif(LAB_REASON is not None,
                               reason=f"the kernel lab cannot run here: {LAB_REASON}")


@pytest.fixture(scope="session")
def guests():
    """Lab kernels booted on first use (``guests.get("6.1")``), closed at the end."""
    booted = Guests()
    yield booted
    booted.close()


@pytest.fixture(scope="session")
def matrix(guests, tmp_path_factory):
    """Every kernel's matrix batch (tests/kernel/labs.py), run once per session."""
    from tests.kernel.labs import run_matrix

    return run_matrix(guests, tmp_path_factory.mktemp("matrix"))
