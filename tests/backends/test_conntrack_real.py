"""`ct state` with real TCP: two namespaces joined by a veth pair, a server behind pfc's
input hook, a client that connects, sends and closes. The connection works only when
the policy lets `new` in, and every packet of it is judged as the interpreter's model
says: the SYN `new`, everything after it `established` (the rules' counters)."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from pfc.build import build_artifact
from pfc.frontend.pipeline import compile_text
from pfc.kernel import netns

pytestmark = pytest.mark.kernel
PORT = 2222
SERVER, CLIENT = "10.20.0.1", "10.20.0.2"
POLICY = (f"pass tcp dport {PORT} ct state new\npass ct state established,related\n"
          "default drop\n")
HOOKS = {"nft": "input", "iptables": "filter-input"}


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@contextmanager
def pair() -> Iterator[tuple[str, str]]:
    """Namespaces (server, client), unique to this process, removed afterwards."""
    reason = netns.missing_privileges()
    if reason:
        pytest.skip(reason)
    tag = f"pfc20-{os.getpid()}-{secrets.token_hex(2)}"
    server, client = f"{tag}-s", f"{tag}-c"
    try:
        _ip("netns", "add", server)
        _ip("netns", "add", client)
        _ip("link", "add", f"{tag[-9:]}s", "netns", server, "type", "veth", "peer", "name",
            f"{tag[-9:]}c", "netns", client)
        for ns, dev, addr in ((server, f"{tag[-9:]}s", SERVER), (client, f"{tag[-9:]}c", CLIENT)):
            _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        yield server, client
    finally:
        for ns in (server, client):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def _load(server: str, target: str, text: str) -> dict:
    art, diags = build_artifact(compile_text(text, "t.pf"), target, hook=HOOKS[target])
    assert art is not None, diags
    if target == "nft":
        subprocess.run(["ip", "netns", "exec", server, "nft", "-f", "-"], input=art.text,
                       text=True, check=True)
        return art.meta
    files, meta = art.files, art.meta
    for init, main, tool in (("init4", "ipv4", "iptables"), ("init6", "ipv6", "ip6tables")):
        for key in (init, main):
            subprocess.run(["ip", "netns", "exec", server, f"{tool}-nft-restore", "--noflush"],
                           input=files[meta["files"][key]].decode(), text=True, check=True)
    return meta


SERVE = f"""
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("{SERVER}", {PORT})); s.listen(); s.settimeout(5)
print("ready", flush=True)
c, _ = s.accept(); c.sendall(c.recv(100).upper()); c.close()
"""
CONNECT = f"""
import socket, sys
try:
    c = socket.create_connection(("{SERVER}", {PORT}), timeout=1)
    c.sendall(b"ping"); print(c.recv(100).decode()); c.close()
except OSError as e:
    print("failed", e); sys.exit(1)
"""


def _exchange(server: str, client: str) -> subprocess.CompletedProcess:
    srv = subprocess.Popen(["ip", "netns", "exec", server, sys.executable, "-c", SERVE],
                           stdout=subprocess.PIPE, text=True)
    try:
        assert srv.stdout.readline().strip() == "ready"  # listening: the client may go
        got = subprocess.run(["ip", "netns", "exec", client, sys.executable, "-c", CONNECT],
                             capture_output=True, text=True, timeout=20)
    finally:
        srv.kill()
        srv.wait()
    return got


def _counters(server: str, target: str, meta: dict) -> dict:
    if target == "nft":
        out = subprocess.run(["ip", "netns", "exec", server, "nft", "list", "chain",
                              meta["family"], meta["table"], meta["chain"]],
                             capture_output=True, text=True, check=True).stdout
        found = {}
        for line in out.splitlines():
            if "comment" in line and "packets" in line:
                n = int(line.split("packets ")[1].split()[0])
                key = line.rsplit('comment "', 1)[1].rstrip('"')
                found[key] = found.get(key, 0) + n
        return found
    out = subprocess.run(["ip", "netns", "exec", server, "iptables-nft-save", "-c", "-t",
                          meta["table"]], capture_output=True, text=True, check=True).stdout
    lines = [ln for ln in out.splitlines() if ln.startswith("[") and f"-A {meta['chain']}" in ln]
    owners = meta["lines"]["IPv4"]
    found = {}
    for owner, line in zip(owners, lines, strict=True):
        key = "pfc default" if owner is None else f"pfc rule {owner}"
        found[key] = found.get(key, 0) + int(line[1:].split(":")[0])
    return found


@pytest.mark.parametrize("target", list(HOOKS))
def test_a_real_connection_is_new_then_established(target: str) -> None:
    with pair() as (server, client):
        meta = _load(server, target, POLICY)
        got = _exchange(server, client)
        assert got.returncode == 0 and got.stdout.strip() == "PING", got
        counters = _counters(server, target, meta)
        assert counters["pfc rule 0"] == 1  # the SYN, once (a retry would count twice)
        assert counters["pfc rule 1"] >= 3  # ACK, data, FIN ...: established
        assert counters["pfc default"] == 0


@pytest.mark.parametrize("target", list(HOOKS))
def test_without_new_nothing_connects(target: str) -> None:
    with pair() as (server, client):
        _load(server, target, "pass ct state established,related\ndefault drop\n")
        got = _exchange(server, client)
        assert got.returncode == 1 and "failed" in got.stdout
