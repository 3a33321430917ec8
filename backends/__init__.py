"""The backend registry: target name → Backend.

A new backend is one subpackage here whose ``backend`` module defines ``BACKENDS`` (a
tuple of Backend), plus its template and golden files (a single-module target such as
``irjson`` defines ``BACKENDS`` itself): targets are discovered, so nothing else changes. The CLI,
the language server and the test matrix read ``registry()``.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
from functools import lru_cache

from pfc.backends.base import Backend

# Targets in the order users read them (lowest hook first); others follow by name.
ORDER = ("cbpf", "socket", "tc", "xdp", "nft", "iptables", "ir")


@lru_cache(maxsize=1)
def registry() -> dict[str, Backend]:
    found: dict[str, Backend] = {}
    for info in pkgutil.iter_modules(__path__):
        name = f"{__name__}.{info.name}" + (".backend" if info.ispkg else "")
        if info.ispkg and importlib.util.find_spec(name) is None:
            continue
        module = importlib.import_module(name)
        for backend in getattr(module, "BACKENDS", ()):
            found[backend.name] = backend
    ranked = sorted(found, key=lambda n: (ORDER.index(n) if n in ORDER else len(ORDER), n))
    return {name: found[name] for name in ranked}


def get(target: str) -> Backend:
    """The backend for a target; KeyError with the known names otherwise."""
    backends = registry()
    if target not in backends:
        raise KeyError(f"unknown target `{target}`; known targets: {', '.join(backends)}")
    return backends[target]
