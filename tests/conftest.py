"""Shared test options: ``--update-golden`` rewrites every golden file."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.paths import ROOT

# Test files that touch nothing shared on this host (QEMU guests of the kernel lab,
# install roots, venvs and images, BPF_PROG_TEST_RUN only, namespaces with their own
# state directories): scripts/test runs them as a second
# lane beside the rest (``-m side`` / ``-m "not side"``), so a full run uses both cores.
SIDE_LANE = (
    "tests/kernel/test_matrix.py",
    "tests/kernel/test_lab.py",
    "tests/backends/test_nfmod.py",
    "tests/backends/test_u32.py",
    "tests/backends/test_ebpf_classify_shapes.py",
    "tests/tools/test_install.py",
    "tests/tools/test_install_deb.py",
    "tests/tools/test_install_nftables.py",
    "tests/tools/test_fleet_image.py",
    "tests/deploy/test_fleet.py",
    "tests/kernel/test_queue_nft.py",
    "tests/prove/test_prove_firewall_generated.py",
    "tests/kernel/test_modular_load.py",
)


def pytest_configure(config: pytest.Config) -> None:
    # A shell starts a background job (scripts/test's side lane, `nohup ... &`) with
    # SIGINT ignored, and every child inherits that: the Ctrl-C tests (pfc prove's 130)
    # would then see no interrupt. Tests run with Python's own Ctrl-C.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    config.addinivalue_line("markers", "side: runs in scripts/test's second lane "
                            "(tests/conftest.py SIDE_LANE)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(item.path).relative_to(ROOT).as_posix() in SIDE_LANE:
            item.add_marker(pytest.mark.side)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true",
                     help="rewrite golden files from the current output")


@pytest.fixture
def golden(request: pytest.FixtureRequest):
    """``golden(path, actual)``: compare with a golden file. A missing or different
    file fails and writes ``PATH.actual`` beside it; ``--update-golden`` rewrites."""
    update = request.config.getoption("--update-golden")

    def check(path: Path, actual: str) -> None:
        actual_path = path.with_name(path.name + ".actual")
        if update:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(actual)
            actual_path.unlink(missing_ok=True)
            return
        if not path.exists() or path.read_text() != actual:
            actual_path.parent.mkdir(parents=True, exist_ok=True)
            actual_path.write_text(actual)
            what = "missing" if not path.exists() else "differs"
            pytest.fail(f"golden file {path.relative_to(ROOT)} {what}; wrote "
                        f"{actual_path.relative_to(ROOT)} (run pytest --update-golden "
                        "to accept)")
        actual_path.unlink(missing_ok=True)

    return check
