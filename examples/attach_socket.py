"""Attach examples/edge-drop.pf to a packet socket, as an application would.

    sudo .venv/bin/python examples/attach_socket.py --dev eth0 [--target socket|cbpf]
         [--count N] [--timeout S]

Compiles the policy for the ``socket`` target (eBPF, ``SO_ATTACH_BPF``) or ``cbpf``
(classic BPF, ``SO_ATTACH_FILTER``), attaches it to an ``AF_PACKET`` socket on the
device with ``pfc.deploy.socket.attach_socket`` (``pfc.attach_socket``), and prints one line
per frame the socket receives: frames the policy drops (UDP to 192.168.0.79 port 12345)
never arrive. Stops after N frames (default: never) or S seconds without a frame.
"""

from __future__ import annotations

import argparse
import select
import socket
import sys
from pathlib import Path

from pfc.build import build_artifact
from pfc.cli.common import print_diagnostics
from pfc.deploy.socket import attach_socket
from pfc.frontend.pipeline import compile_path

POLICY = Path(__file__).with_name("edge-drop.pf")
ETH_P_ALL = 0x0003
SOL_PACKET, PACKET_IGNORE_OUTGOING = 263, 23  # linux/socket.h, if_packet.h (4.20)


def open_filtered(dev: str, target: str):
    """A packet socket on ``dev`` with the policy attached (socket, filter handle)."""
    compiled = compile_path(POLICY)
    artifact, diags = build_artifact(compiled, target)
    if artifact is None:
        print_diagnostics(diags, compiled.sources)
        raise SystemExit(1)
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    # Only frames the device receives: an ETH_P_ALL socket also sees the host's own
    # outgoing frames (an MLD report, say), which a receive filter has no say on.
    sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
    sock.bind((dev, ETH_P_ALL))
    return sock, attach_socket(sock, artifact)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dev", required=True)
    p.add_argument("--target", choices=("socket", "cbpf"), default="socket")
    p.add_argument("--count", type=int, default=0, help="stop after N frames")
    p.add_argument("--timeout", type=float, default=0, help="stop after S idle seconds")
    args = p.parse_args(argv)
    sock, filt = open_filtered(args.dev, args.target)
    print(f"attached {POLICY.name} ({args.target}) to a packet socket on {args.dev}",
          flush=True)
    seen = 0
    while not args.count or seen < args.count:
        ready, _, _ = select.select([sock], [], [], args.timeout or None)
        if not ready:
            break
        frame = sock.recv(65536)
        seen += 1
        print(f"{len(frame)} bytes, EtherType 0x{frame[12:14].hex()}", flush=True)
    counters = filt.counters()
    if counters is not None:
        print(f"count rules: {counters}")
    filt.detach()
    sock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
