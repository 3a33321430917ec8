"""The kernel side of `queue` tests: a policy loaded by iptables-restore into the server
namespace of a `pfc.decide.pair`, `pfc decide` as a process there, a TCP echo server,
clients, a capture of what arrives at the server, and the rule counters."""

from __future__ import annotations

import contextlib
import select
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

from pfc.build import build_artifact
from pfc.decide.pair import SERVER_ADDR, Pair
from pfc.frontend.pipeline import compile_text
from pfc.kernel.netns import inside, packet_socket

PORT = 5201
PACKET_OUTGOING = 4


def load_iptables(p: Pair, text: str) -> None:
    artifact, diags = build_artifact(compile_text(text, "q.pf"), "iptables",
                                     hook="filter-input")
    assert not diags, diags
    for name in ("q.iptables.init", "q.iptables.restore"):
        p.run(p.server, ["iptables-restore", "--noflush"], input=artifact.files[name].decode())


def counters(p: Pair) -> list[tuple[int, str]]:
    """(packets, the rule's line) of each rule of chain PFC, in order."""
    out = []
    for line in p.run(p.server, ["iptables-save", "-c", "-t", "filter"]).stdout.splitlines():
        if line.startswith("[") and " -A PFC " in line:
            head, rule = line.split("] ", 1)
            out.append((int(head[1:].split(":")[0]), rule))
    return out


@contextlib.contextmanager
def decider(p: Pair, policy: Path, spec: str) -> Iterator[subprocess.Popen]:
    """``pfc decide`` in the server namespace, ready (bound) when entered."""
    proc = p.popen(p.server, [sys.executable, "-m", "pfc", "decide", str(policy),
                              "--decider", spec], stdout=subprocess.PIPE,
                   stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        assert line.startswith("pfc decide: queue"), line + proc.stderr.read()
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait()


def stats(proc: subprocess.Popen) -> dict:
    import json
    proc.terminate()
    out, err = proc.communicate()
    assert proc.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


class Server:
    """A TCP echo server in the server namespace (a thread of this process)."""

    def __init__(self, p: Pair) -> None:
        with inside(p.server):
            self.sock = socket.create_server((SERVER_ADDR, PORT))
            self.capture = packet_socket("veth1")
        self.received: list[bytes] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    def _echo(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):  # a client's RST ends it
            while data := conn.recv(65536):
                self.received.append(data)
                conn.sendall(data)

    def arrived(self) -> list[bytes]:
        """Frames that arrived on the server's veth so far (not those it sent)."""
        out = []
        while select.select([self.capture], [], [], 0)[0]:
            frame, addr = self.capture.recvfrom(65536)
            if addr[2] != PACKET_OUTGOING:
                out.append(frame)
        return out

    def close(self) -> None:
        self.sock.close()
        self.capture.close()


def connect(p: Pair, timeout: float) -> socket.socket:
    with inside(p.client):
        s = socket.socket()
    s.settimeout(timeout)
    s.connect((SERVER_ADDR, PORT))
    return s


def echo(s: socket.socket, data: bytes) -> bool:
    """Send ``data``; True when all of it came back before the socket's timeout."""
    s.sendall(data)
    got = b""
    try:
        while len(got) < len(data):
            chunk = s.recv(65536)
            if not chunk:
                return False
            got += chunk
    except TimeoutError:
        return False
    return got == data
