"""The backend registry: target name → Backend.

A new backend is one module here that defines ``BACKENDS`` (a tuple of Backend), one
template and its golden files: modules are discovered, so nothing else changes. The CLI,
the language server and the test matrix read ``registry()``.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache

from pfc.backends.base import Backend

# Targets in the order users read them (lowest hook first); others follow by name.
ORDER = ("cbpf", "socket", "tc", "xdp", "nft", "iptables", "ir")


@lru_cache(maxsize=1)
def registry() -> dict[str, Backend]:
    found: dict[str, Backend] = {}
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
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
