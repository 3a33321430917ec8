"""libnftables' Python binding, ``nftables``, found from a virtualenv too.

The binding comes with nftables itself, not from PyPI: Debian ships it as
``python3-nftables`` in /usr/lib/python3/dist-packages, which a virtualenv (pip, pipx)
does not see. :func:`load` imports ``nftables`` from ``sys.path``; failing that, it loads
that one package from Debian's directory (the directory is not added to ``sys.path``, so
nothing else there can shadow a package of the venv) and registers it as ``nftables``.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from types import ModuleType

from pfc.kernel.observation import KernelUnavailable

DEBIAN_DIST_PACKAGES = "/usr/lib/python3/dist-packages"
HINT_ABSENT = "apt install python3-nftables (Debian, Ubuntu), or nftables' own py/ binding"
HINT_BROKEN = "apt install --reinstall python3-nftables libnftables1"


class NftablesMissing(KernelUnavailable):
    """No loadable ``nftables`` module; the message says what was tried, ``hint`` what
    to do."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


def load(debian_dir: str = DEBIAN_DIST_PACKAGES) -> ModuleType:
    """The ``nftables`` module: from ``sys.path``, else Debian's copy in ``debian_dir``.

    Raises :class:`NftablesMissing` naming both attempts."""
    try:
        import nftables
        return nftables
    except ImportError as exc:
        first = f"`import nftables` failed ({exc})"
    spec = importlib.machinery.PathFinder.find_spec("nftables", [debian_dir])
    if spec is None or spec.loader is None:
        raise NftablesMissing(f"python3-nftables is not importable: {first}, and "
                              f"{debian_dir} has no nftables package", HINT_ABSENT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["nftables"] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - any failure of a foreign module is reported
        for name in [n for n in sys.modules if n == "nftables" or n.startswith("nftables.")]:
            del sys.modules[name]
        raise NftablesMissing(f"python3-nftables is not importable: {first}, and "
                              f"{spec.origin} failed to load: "
                              f"{type(exc).__name__}: {exc}", HINT_BROKEN) from None
    return module
