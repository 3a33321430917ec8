"""Two throw-away network namespaces joined by a veth pair: a client and a server
(``SERVER_ADDR``) whose INPUT hook holds the policy and whose NFQUEUE the decider
serves. For ``pfc decide``'s kernel tests and ``benchmarks/queue.py``; removed on exit
(failures, Ctrl-C and SIGTERM too, as ``pfc.kernel.netns.lab`` does)."""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

from pyroute2 import IPRoute, netns

from pfc.kernel.netns import cleanup_stale, inside

CLIENT_ADDR, SERVER_ADDR, PREFIX_LEN = "10.199.0.1", "10.199.0.2", 24
PREFIX = "pfcq"


@dataclass(frozen=True)
class Pair:
    client: str  # namespace names
    server: str

    def run(self, where: str, argv: list[str], **kw) -> subprocess.CompletedProcess:
        """``argv`` in namespace ``where`` (``ip netns exec``)."""
        return subprocess.run(["ip", "netns", "exec", where, *argv], check=True,
                              capture_output=True, text=True, **kw)

    def popen(self, where: str, argv: list[str], **kw) -> subprocess.Popen:
        return subprocess.Popen(["ip", "netns", "exec", where, *argv], **kw)


@contextlib.contextmanager
def pair() -> Iterator[Pair]:
    cleanup_stale(PREFIX)
    tag = f"{os.getpid()}-{secrets.token_hex(3)}"
    p = Pair(f"{PREFIX}-{tag}-c", f"{PREFIX}-{tag}-s")
    try:
        for name in (p.client, p.server):
            netns.create(name)
        with inside(p.client):
            with IPRoute() as ipr:
                ipr.link("add", ifname="veth0", kind="veth", peer={"ifname": "veth1",
                                                                    "net_ns_fd": p.server})
        _configure(p.client, "veth0", CLIENT_ADDR)
        _configure(p.server, "veth1", SERVER_ADDR)
        yield p
    finally:
        for name in (p.client, p.server):
            with contextlib.suppress(OSError):
                netns.remove(name)


def _configure(name: str, ifname: str, address: str) -> None:
    with inside(name), IPRoute() as ipr:
        for dev in ("lo", ifname):
            index = ipr.link_lookup(ifname=dev)[0]
            ipr.link("set", index=index, state="up")
        ipr.addr("add", index=ipr.link_lookup(ifname=ifname)[0], address=address,
                 prefixlen=PREFIX_LEN)
