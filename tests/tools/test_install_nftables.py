"""Debian's python3-nftables is found from a virtualenv that cannot see it (m4).

pfc.kernel.nftlib imports ``nftables`` from sys.path, else that one package from Debian's
/usr/lib/python3/dist-packages. Here a fake Debian directory stands in for the real one
(tests/tools/test_install.py runs the real one from a fresh venv); ``sys.modules``
holding None for ``nftables`` makes the plain import fail as it does in such a venv.
"""

from __future__ import annotations

import ast
import sys

import pytest

from pfc.deploy import nft as deploy_nft
from pfc.deploy.base import LoadError
from pfc.kernel import nftlib
from tests.paths import ROOT


@pytest.fixture
def no_nftables(monkeypatch):
    """``import nftables`` fails; whatever load() registers is undone afterwards."""
    for name in [n for n in sys.modules if n == "nftables" or n.startswith("nftables.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "nftables", None)
    yield
    for name in [n for n in sys.modules if n.startswith("nftables.")]:
        del sys.modules[name]


def _debian_dir(tmp_path, body: str = "class Nftables:\n    pass\n"):
    pkg = tmp_path / "nftables"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from .nftables import *\n")
    (pkg / "nftables.py").write_text(body)
    (tmp_path / "pfc_sibling_of_nftables.py").write_text("X = 1\n")
    return str(tmp_path)


def test_debian_copy_is_loaded_alone(no_nftables, tmp_path):
    debian = _debian_dir(tmp_path)
    module = nftlib.load(debian)
    assert module.__file__ == f"{debian}/nftables/__init__.py"
    assert sys.modules["nftables"] is module
    assert hasattr(module, "Nftables")
    assert debian not in sys.path
    with pytest.raises(ImportError):
        import pfc_sibling_of_nftables  # noqa: F401 - the rest of the directory stays unseen


def test_the_path_wins_over_debian(monkeypatch, tmp_path):
    mine = type(sys)("nftables")
    monkeypatch.setitem(sys.modules, "nftables", mine)
    assert nftlib.load(_debian_dir(tmp_path)) is mine


def test_absent_names_both_attempts(no_nftables, tmp_path):
    with pytest.raises(nftlib.NftablesMissing) as caught:
        nftlib.load(str(tmp_path))
    message = str(caught.value)
    assert "`import nftables` failed" in message
    assert f"{tmp_path} has no nftables package" in message
    assert caught.value.hint.startswith("apt install python3-nftables")


def test_broken_copy_says_so_and_leaves_nothing_behind(no_nftables, tmp_path):
    debian = _debian_dir(tmp_path, body="raise OSError('libnftables.so.1: cannot open')\n")
    with pytest.raises(nftlib.NftablesMissing) as caught:
        nftlib.load(debian)
    assert f"{debian}/nftables/__init__.py failed to load: OSError: libnftables.so.1" in str(
        caught.value)
    assert "--reinstall" in caught.value.hint
    assert sys.modules.get("nftables") is None
    assert not [n for n in sys.modules if n.startswith("nftables.")]


def test_load_error_carries_what_was_tried(no_nftables, monkeypatch, tmp_path):
    monkeypatch.setattr(nftlib.load, "__defaults__", (str(tmp_path),))
    with pytest.raises(LoadError) as caught:
        deploy_nft._nft()
    assert "has no nftables package" in str(caught.value)
    assert caught.value.hint == nftlib.HINT_ABSENT


def test_nothing_imports_nftables_but_nftlib():
    """Every use goes through nftlib.load(), so a venv finds Debian's copy everywhere."""
    direct = []
    for folder in (ROOT / "compiler", ROOT / "backends"):
        for path in folder.rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                         else [node.module] if isinstance(node, ast.ImportFrom) else [])
                if "nftables" in names and path.name != "nftlib.py":
                    direct.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert direct == []
