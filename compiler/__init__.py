"""pfc: a packet-filter policy compiler.

``pfc.attach_socket(sock, artifact)`` attaches a compiled ``socket`` or ``cbpf``
policy to an application's packet socket (see :mod:`pfc.attach`).
"""

from __future__ import annotations

__all__ = ["attach_socket"]


def __getattr__(name: str):
    # Lazy: `import pfc` stays cheap for the CLI; the BPF helpers load on first use.
    if name == "attach_socket":
        from pfc.attach import attach_socket
        return attach_socket
    raise AttributeError(f"module 'pfc' has no attribute {name!r}")
