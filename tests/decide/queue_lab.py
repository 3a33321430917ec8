"""The kernel side of `queue` tests: a policy loaded (iptables-restore, or nft -f) into
the server namespace of a `pfc.decide.pair` at its INPUT hook, `pfc decide` as a
process there, a TCP echo server, clients, a capture of what arrives at the server,
and the rule counters; `cached_scenario` is the whole first-K test, run on this host
for iptables and in the kernel lab for nft (this host's kernel has no nft_queue)."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from pfc.build import build_artifact
from pfc.decide.analyse import PatternDecider
from pfc.decide.pair import SERVER_ADDR, Pair, pair
from pfc.frontend.ir import Verdict
from pfc.frontend.pipeline import compile_text
from pfc.kernel.netns import inside, packet_socket
from pfc.oracle import interp

PORT = 5201
PACKET_OUTGOING = 4


HOOKS = {"iptables": "filter-input", "nft": "input"}


def load(p: Pair, text: str, target: str = "iptables") -> None:
    artifact, diags = build_artifact(compile_text(text, "q.pf"), target,
                                     hook=HOOKS[target])
    assert not diags, diags
    if target == "nft":
        p.run(p.server, ["nft", "-f", "-"], input=artifact.text)
        return
    for name in ("q.iptables.init", "q.iptables.restore"):
        p.run(p.server, ["iptables-restore", "--noflush"], input=artifact.files[name].decode())


def load_iptables(p: Pair, text: str) -> None:
    load(p, text, "iptables")


def counters(p: Pair, target: str = "iptables") -> list[tuple[int, str]]:
    """(packets, the rule's text) of each rule of pfc's chain, in order."""
    if target == "nft":
        found = json.loads(p.run(p.server, ["nft", "-j", "list", "chain", "inet", "pfc",
                                            "input"]).stdout)["nftables"]
        return [(next(e["counter"]["packets"] for e in r["rule"]["expr"] if "counter" in e),
                 json.dumps(r["rule"]["expr"])) for r in found if "rule" in r]
    out = []
    for line in p.run(p.server, ["iptables-save", "-c", "-t", "filter"]).stdout.splitlines():
        if line.startswith("[") and " -A PFC " in line:
            head, rule = line.split("] ", 1)
            out.append((int(head[1:].split(":")[0]), rule))
    return out


@contextlib.contextmanager
def decider(p: Pair, policy: Path, spec: str, *more: str) -> Iterator[subprocess.Popen]:
    """``pfc decide`` in the server namespace, ready (bound) when entered; its
    ``worker`` attribute is the pid of the process that decides (the watchdog's child)."""
    proc = p.popen(p.server, [sys.executable, "-m", "pfc", "decide", str(policy),
                              "--decider", spec, *more], stdout=subprocess.PIPE,
                   stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        assert line.startswith("pfc decide: queue"), line + proc.stderr.read()
        proc.worker = int(line.rsplit("pid ", 1)[1])
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait()


def bound(p: Pair, num: int = 0) -> bool:
    """Whether a program is bound to NFQUEUE queue ``num`` in the server namespace."""
    text = p.run(p.server, ["cat", "/proc/net/netfilter/nfnetlink_queue"]).stdout
    return any(line.split()[0] == str(num) for line in text.splitlines())


def stats(proc: subprocess.Popen) -> dict:
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


def echo(s: socket.socket, data: bytes, timeout: float = 120.0) -> bool:
    """Send ``data``; True when all of it came back within ``timeout`` seconds."""
    s.settimeout(timeout)
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


CACHED = "queue tcp dport 5201 first 6\npass all\n"
NEGATIVE = 1.0  # seconds a client waits for what must not come (a dropped packet)
POSITIVE = 120.0  # ... and for what must come: no deadline on a busy machine


def reset(s: socket.socket) -> None:
    """Close with a RST: the client sends nothing more (no FIN, no retransmissions)."""
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()


def _to_port(frame: bytes) -> bool:
    return frame[12:14] == b"\x08\x00" and frame[23] == 6 and \
        frame[14 + (frame[14] & 0xF) * 4 + 2:][:2] == PORT.to_bytes(2, "big")


def settled(p: Pair, server: Server, frames: list[bytes], target: str,
            tries: int = 50) -> list[tuple[int, str]]:
    """The counters once every frame captured so far has been counted by pfc's chain
    (the queue rule's lines are the first three)."""
    for _ in range(tries):
        frames += server.arrived()
        found = counters(p, target)
        if sum(n for n, _ in found[:3]) >= sum(1 for f in frames if _to_port(f)):
            return found
        time.sleep(0.05)
    return counters(p, target)


def cached_scenario(target: str) -> dict:
    """`queue tcp dport 5201 first 6` and `pfc decide --decider pattern:abc`: a clean
    connection (8 echoes) and one that sends "abc" in its second message; then the
    kernel's counters of the three lines of the queue rule (cache pass, cache drop,
    queue), the interpreter's on the frames that arrived, and the decider's counters."""
    with tempfile.TemporaryDirectory() as tmp, pair() as p:
        policy = Path(tmp) / "q.pf"
        policy.write_text(CACHED)
        load(p, CACHED, target)
        server = Server(p)
        with decider(p, policy, "pattern:abc") as proc:
            clean = connect(p, POSITIVE)
            echoed = [echo(clean, b"hello %d" % i) for i in range(8)]
            bad = connect(p, POSITIVE)
            echoed += [echo(bad, b"hi"), echo(bad, b"xxabcxx", NEGATIVE)]
            reset(clean)
            reset(bad)
            frames: list[bytes] = []
            found = settled(p, server, frames, target)
            got = stats(proc)
        server.close()
    outs, _ = interp.run(compile_text(CACHED).require(), frames,
                         decider=PatternDecider(b"abc"))
    oracle = [sum(1 for o in outs if o.rule == 0 and not o.queued and o.verdict is v)
              for v in (Verdict.PASS, Verdict.DROP)] + [sum(o.queued for o in outs)]
    return {"echoed": echoed, "kernel": [n for n, _ in found[:3]], "oracle": oracle,
            "decider": got, "abc_delivered": b"xxabcxx" in b"".join(server.received)}


FAILURES = {"kill": (signal.SIGKILL, "worker"), "stop": (signal.SIGSTOP, "worker"),
            "kill-pfc-decide": (signal.SIGKILL, "pfc decide")}


def _gone(pidfd: int) -> bool:
    """Whether the process ended (its pidfd readable) within POSITIVE seconds."""
    return bool(select.select([pidfd], [], [], POSITIVE)[0])


def _refused(p: Pair) -> bool:
    try:
        reset(connect(p, NEGATIVE))
    except TimeoutError:
        return True
    return False


def failure_scenario(target: str, how: str, bypass: bool) -> dict:
    """`queue tcp dport 5201 first 3 [bypass]` served by `pfc decide --stall 0.5`: an
    established connection is decided (its verdict kept in its mark), then the worker
    is killed or stopped, or `pfc decide` itself killed (``FAILURES``). What happened:
    the old connection's echoes, a new connection (refused, or its echo with "abc",
    which no decider sees), `pfc decide`'s exit status and message, whether the queue
    is still bound, a second new connection after the end."""
    text = f"queue tcp dport 5201 first 3{' bypass' if bypass else ''}\npass all\n"
    sig, whom = FAILURES[how]
    out: dict = {}
    with tempfile.TemporaryDirectory() as tmp, pair() as p:
        policy = Path(tmp) / "q.pf"
        policy.write_text(text)
        load(p, text, target)
        server = Server(p)
        with decider(p, policy, "pattern:abc", "--stall", "0.5") as proc:
            old = connect(p, POSITIVE)
            out["decided"] = echo(old, b"one") and echo(old, b"two")  # SYN, ACK, one
            worker = os.pidfd_open(proc.worker)
            os.kill(proc.worker if whom == "worker" else proc.pid, sig)
            out["old_after"] = echo(old, b"three abc")  # kept: no decider sees it
            if sig == signal.SIGKILL:  # gone (its socket closed) before the next flow
                out["gone_first"] = _gone(worker)
            if bypass:  # (stuck: the SYN waits, the watchdog kills, the retry passes)
                new = connect(p, POSITIVE)
                out["new"] = "echoed" if echo(new, b"four abc") else "lost"
                reset(new)
            else:
                out["new"] = "refused" if _refused(p) else "connected"
            out["gone"] = _gone(worker)  # (stuck: the watchdog killed it)
            os.close(worker)
            out["code"] = proc.wait()
            out["said"] = proc.stderr.read()
        out["bound"] = bound(p)
        out["later"] = "refused" if not bypass and _refused(p) else "-"
        out["old_end"] = echo(old, b"five")
        reset(old)
        server.close()
    return out
