"""pfc: a packet-filter policy compiler. One policy language, every Linux hook.

The library API (docs/api.md; the ``pfc`` command is built on it)::

    import pfc
    diags = pfc.check("drop udp dport 53")                 # list of Diagnostic
    artifact = pfc.compile("drop udp dport 53", target="nft")
    print(artifact.text)
    outcomes, counters = pfc.run("drop udp dport 53", frames)   # the reference interpreter
    results = pfc.verify("edge.pf", targets=["xdp", "nft"])     # in the kernel
    pfc.load("edge.pf", target="xdp", dev="eth0"); pfc.status(); pfc.unload("xdp", "eth0")
    pfc.attach_socket(sock, pfc.compile("edge.pf", target="socket"))

Names load on first use: ``import pfc`` costs nothing, and nothing here imports the CLI.
"""

from __future__ import annotations

import importlib

# public name -> the module that defines it
_EXPORTS = {
    "front": "pfc.api", "check": "pfc.api", "compile": "pfc.api", "frames": "pfc.api",
    "run": "pfc.api",
    "verify": "pfc.api", "load": "pfc.api", "unload": "pfc.api", "status": "pfc.api",
    "walk": "pfc.api", "verify_firewall": "pfc.api", "load_firewall": "pfc.api",
    "unload_firewall": "pfc.api",
    "attach_socket": "pfc.deploy.socket",
    "Artifact": "pfc.backends.base",
    "Compiled": "pfc.frontend.pipeline",
    "CompileError": "pfc.frontend.diagnostics",
    "Diagnostic": "pfc.frontend.diagnostics",
    "LoadError": "pfc.deploy.base",
    "OptionError": "pfc.build",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'pfc' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
