"""Attach a compiled ``socket`` or ``cbpf`` policy to the application's own socket.

Socket filters are not loaded onto a device: the application that owns the socket
attaches them (``pfc load`` handles xdp, tc, nft, iptables). ::

    import socket
    import pfc

    artifact = pfc.compile("edge-drop.pf", target="socket")
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
    sock.bind(("eth0", 3))
    filt = pfc.attach_socket(sock, artifact)   # frames the policy drops never arrive
    ...
    filt.counters()   # {rule index: (packets, bytes)} of the count rules (socket only)
    filt.detach()

Both targets' programs read the frame from its Ethernet header, as an ``AF_PACKET``
``SOCK_RAW`` socket shows it (docs/ebpf.md, docs/cbpf.md): other sockets are refused
with ``ValueError``, since the same program would read other bytes there.

- ``socket`` (eBPF, ``SO_ATTACH_BPF``): the artifact's ELF object (format ``o``) is
  loaded (the verifier runs; a refusal raises :class:`pfc.kernel.bpf.BpfError`), the maps of
  its large address sets filled from the artifact's maps file, and its program
  attached. The returned handle keeps the object open, so the counters of ``count``
  rules stay readable; the socket holds its own reference to the program, so the
  filter keeps working if the handle is dropped.
- ``cbpf`` (classic BPF, ``SO_ATTACH_FILTER``): the artifact's instructions, any
  format. Classic BPF cannot count: ``counters()`` returns None.

Attaching replaces a filter already on the socket, atomically (``sk_attach_filter``
swaps the socket's filter pointer under RCU). Needs CAP_BPF (or CAP_SYS_ADMIN) for an
eBPF program; a classic filter needs no privilege beyond owning the socket.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

from pfc.backends.base import Artifact

SOL_SOCKET = 1
SO_ATTACH_FILTER = 26
SO_DETACH_FILTER = 27
SO_ATTACH_BPF = 50


@dataclass
class SocketFilter:
    """A policy attached to a socket: read its counters, or detach it."""

    sock: socket.socket
    artifact: Artifact
    _object: object = None  # pfc.kernel.bpf.Object for the socket target

    def counters(self) -> dict[int, tuple[int, int]] | None:
        """(packets, bytes) of every ``count`` rule, summed over CPUs; None for cbpf."""
        if self.artifact.target == "cbpf" or self._object is None:
            return None
        from pfc.backends.ebpf import run as ebpf_run

        return ebpf_run.counters(self.artifact, self._object)

    def detach(self) -> None:
        """Remove the filter from the socket (``SO_DETACH_FILTER``) and free the object."""
        try:
            self.sock.setsockopt(SOL_SOCKET, SO_DETACH_FILTER, 0)
        except OSError:
            pass  # no filter (already detached) or the socket is closed
        if self._object is not None:
            self._object.close()
            self._object = None


def _check_socket(sock: socket.socket) -> None:
    if sock.family != socket.AF_PACKET or sock.type != socket.SOCK_RAW:
        raise ValueError("pfc's socket filters read frames from the Ethernet header: "
                         "attach them to an AF_PACKET SOCK_RAW socket")


def attach_socket(sock: socket.socket, artifact: Artifact) -> SocketFilter:
    """Attach a compiled ``socket`` (eBPF, format ``o``) or ``cbpf`` artifact to
    ``sock`` and return a handle (:class:`SocketFilter`). ValueError for another target,
    format or socket type; OSError (``pfc.kernel.bpf.BpfError``) if the kernel refuses."""
    _check_socket(sock)
    if artifact.target == "cbpf":
        from pfc.backends.cbpf import backend as cbpf
        from pfc.kernel import netns

        netns.attach_cbpf(sock, cbpf.program(artifact))
        return SocketFilter(sock, artifact)
    if artifact.target != "socket":
        raise ValueError(f"attach_socket takes a `socket` or `cbpf` artifact, not "
                         f"`{artifact.target}` (`pfc load` attaches that one)")
    if artifact.format != "o":
        raise ValueError("attach_socket needs the ELF object: compile with format `o`")
    from pfc.backends.ebpf import maps as ebpf_maps

    obj = ebpf_maps.open_filled(artifact)
    try:
        fd = obj.programs[artifact.meta["program"]].fd
        sock.setsockopt(SOL_SOCKET, SO_ATTACH_BPF, fd)
    except BaseException:
        obj.close()
        raise
    return SocketFilter(sock, artifact, obj)
