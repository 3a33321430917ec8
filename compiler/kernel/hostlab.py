"""The host lab: the host of a whole firewall (``pfc.oracle.path.host.Host``) built in
two throw-away network namespaces, for ``pfc verify`` of v2 files and the tests.

- the *host* namespace holds one veth end per interface of the model, named as the
  model names it (``eth0``), with its MAC and addresses, the default route through
  the gateway, forwarding as the model says, and permanent neighbour entries (no ARP,
  no ND: every next hop's MAC is the peer's);
- the *peers* namespace holds the other ends (``p1``, ``p2`` ...): nothing configured,
  IPv6 off, so its own stack never answers. Frames are injected there (the host
  receives them on the port) and captured there (what the host forwarded or sent out
  of the port);
- an observer table ``inet pfcobs`` in the host namespace logs every delivered packet
  (input, priority 1000: after pfc's filter and srcnat chains) to NFLOG group
  ``DELIVERED_GROUP``, and keeps the host's own stack quiet: its TCP resets and
  echo replies (no
  connection attached yet, unlike a ``reject``'s, which ``nf_ct_attach`` gives the
  rejected packet's) and neighbour discovery are dropped at output priority -400,
  before conntrack or pfc's chains see them; packets the tests send from the host
  carry ``SO_PRIORITY`` ``SEND_PRIORITY`` and are never dropped. The one case this
  cannot tell apart: a ``tcp-reset`` reply to a packet conntrack calls invalid or
  untracked has no connection either, so it is dropped too (callers know: the
  interpreter's reading of the rejected packet says so);
- ICMP rate limits are off (``icmp_ratelimit``, ``icmp_msgs_per_sec``), so every
  ``reject`` reply is sent;
- no connection expires during a run (every ``nf_conntrack_*_timeout`` of the host
  namespace at least ``CT_TIMEOUT``): the interpreter has no clock, and under load a
  run outlasts the kernel's shortest ones (TCP CLOSE 10 s, UDP and ICMP 30 s), so a
  later packet of a connection found expired in one lab and alive in another was
  ``new`` in one and ``established`` in the other (``pfc verify --against``'s
  unsteadiness under load: a reject reply or an ICMP error in one lab only).

Ordering: frames are sent from one CPU (``netns.one_cpu``); after each item, a marker
sent into every port and seen by a tap in the host namespace means the host has
finished with everything before it, and a second marker sent out of every port and
captured at its peer means every frame the host sent before it has been captured.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import select
import socket
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

from pyroute2 import IPRoute
from pyroute2 import netns as _netns

from pfc.kernel import netns, nftlib
from pfc.kernel.nflog import Listener
from pfc.oracle.path.host import Host, Port

DELIVERED_GROUP = 21
SEND_PRIORITY = 0x7FC1
MARKER_SRC = bytes.fromhex("027066630009")
SOL_PACKET, PACKET_AUXDATA, PACKET_QDISC_BYPASS, TP_STATUS_CSUMNOTREADY = 263, 8, 20, 8
PREFIX = "pfch"
WAIT = 30.0  # seconds a marker may take on a machine under load before it is a failure
_OBSERVER = """
table inet pfcobs {{
  chain delivered {{
    type filter hook input priority 1000; policy accept;
    log group {group} prefix "pfcobs"
  }}
  chain quiet {{
    type filter hook output priority -400; policy accept;
    meta priority {prio} accept
    meta l4proto tcp tcp flags & rst == rst ct state invalid drop
    icmp type echo-reply ct state invalid drop
    icmpv6 type echo-reply ct state invalid drop
    icmpv6 type {{ nd-router-solicit, nd-neighbor-solicit, nd-neighbor-advert,
                  mld-listener-report, mld2-listener-report }} drop
  }}
}}
"""
_HOST_SYSCTLS = {"ipv4/icmp_ratelimit": "0", "ipv4/icmp_msgs_per_sec": "1000000",
                 "ipv4/icmp_msgs_burst": "1000000", "ipv6/icmp/ratelimit": "0",
                 "ipv4/conf/all/rp_filter": "0", "ipv4/conf/default/rp_filter": "0",
                 "ipv4/conf/all/send_redirects": "0",
                 "ipv4/conf/default/send_redirects": "0",
                 "ipv6/conf/all/accept_dad": "0", "ipv6/conf/default/accept_dad": "0",
                 "ipv6/conf/all/router_solicitations": "0",
                 "ipv6/conf/default/router_solicitations": "0"}


@dataclass
class HostLab:
    host: Host
    host_ns: str
    peer_ns: str
    peers: dict[str, str] = field(default_factory=dict)  # port name -> peer ifname

    @contextlib.contextmanager
    def inside_host(self) -> Iterator[None]:
        with netns.inside(self.host_ns):
            yield

    def ports(self) -> list[Port]:
        return [p for p in self.host.ports if p.name in self.peers]


@contextlib.contextmanager
def host_lab(host: Host, observe: bool = True) -> Iterator[HostLab]:
    """The lab for ``host``; both namespaces are removed afterwards, whatever happens.
    ``observe=False``: no observer table (benchmarks: it logs every delivered packet)."""
    netns.cleanup_stale(PREFIX)
    tag = f"{os.getpid()}-{secrets.token_hex(3)}"
    lab = HostLab(host, f"{PREFIX}-{tag}", f"{PREFIX}p-{tag}")
    try:
        _netns.create(lab.host_ns)
        _netns.create(lab.peer_ns)
    except OSError as exc:
        raise netns.NamespaceError(f"cannot create network namespace: {exc}") from exc
    try:
        _build(lab, observe)
        yield lab
    finally:
        for name in (lab.host_ns, lab.peer_ns):
            with contextlib.suppress(OSError):
                _netns.remove(name)


def _build(lab: HostLab, observe: bool = True) -> None:
    ports = [p for p in lab.host.ports if p.name != "lo"]
    with netns.inside(lab.host_ns):
        for key, value in _HOST_SYSCTLS.items():
            _sysctl(key, value)
        forward = "1" if lab.host.forwards else "0"
        _sysctl("ipv4/ip_forward", forward)
        _sysctl("ipv6/conf/all/forwarding", forward)
        with IPRoute() as ipr:
            for n, port in enumerate(ports, 1):
                lab.peers[port.name] = f"p{n}"
                ipr.link("add", ifname=port.name, kind="veth", peer=f"p{n}")
                peer = ipr.link_lookup(ifname=f"p{n}")[0]
                ipr.link("set", index=peer, address=_mac(port.peer_mac))
                ipr.link("set", index=peer, net_ns_fd=lab.peer_ns)
                _configure_port(ipr, port)
            ipr.link("set", index=ipr.link_lookup(ifname="lo")[0], state="up")
        if observe:
            _observer()
        _long_conntrack_timeouts()
    with netns.inside(lab.peer_ns):
        with IPRoute() as ipr:
            for name in lab.peers.values():
                _sysctl(f"ipv6/conf/{name}/disable_ipv6", "1")
                ipr.link("set", index=ipr.link_lookup(ifname=name)[0], state="up")
    with netns.inside(lab.host_ns):
        for port in ports:
            _routes(port)


def _configure_port(ipr: IPRoute, port: Port) -> None:
    index = ipr.link_lookup(ifname=port.name)[0]
    ipr.link("set", index=index, address=_mac(port.mac))
    for key in ("accept_dad", "router_solicitations", "accept_ra"):
        _sysctl(f"ipv6/conf/{port.name}/{key}", "0")
    _sysctl(f"ipv4/conf/{port.name}/rp_filter", "0")
    ipr.link("set", index=index, state="up")
    for address in port.addresses:
        family = socket.AF_INET if address.version == 4 else socket.AF_INET6
        ipr.addr("add", index=index, address=str(address.ip), prefixlen=address.network.prefixlen,
                 family=family, flags=0x80 if address.version == 6 else 0)  # IFA_F_NODAD


def _routes(port: Port) -> None:
    """The default route through the port's gateway (``onlink``: the gateway need not be
    in a subnet of the port)."""
    if port.gateway is None:
        return
    with IPRoute() as ipr:
        index = ipr.link_lookup(ifname=port.name)[0]
        family = socket.AF_INET if port.gateway.version == 4 else socket.AF_INET6
        ipr.route("add", dst="default", gateway=str(port.gateway), oif=index, family=family,
                  flags=4)  # RTNH_F_ONLINK


def neighbour(lab: HostLab, port: str, address) -> None:
    """A permanent neighbour entry: ``address`` on ``port`` is the port's peer."""
    with netns.inside(lab.host_ns), IPRoute() as ipr:
        index = ipr.link_lookup(ifname=port)[0]
        family = socket.AF_INET if address.version == 4 else socket.AF_INET6
        mac = _mac(lab.host.port(port).peer_mac)
        ipr.neigh("replace", dst=str(address), lladdr=mac, ifindex=index, family=family,
                  state=0x80)  # NUD_PERMANENT


CT_TIMEOUT = 3600  # seconds: longer than any run, however loaded the machine


def _long_conntrack_timeouts() -> None:
    """Connection tracking's timeouts in this namespace raised to ``CT_TIMEOUT`` (module
    docstring); loads nf_conntrack first, whose sysctls exist only once it is in."""
    with contextlib.suppress(OSError):
        nftlib.load().Nftables().cmd("table inet pfcct { chain c { ct state new } }; "
                                     "delete table inet pfcct")
    base = "/proc/sys/net/netfilter"
    for name in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        if name.startswith("nf_conntrack_") and "timeout" in name and "frag" not in name:
            with open(f"{base}/{name}") as f:
                value = int(f.read().split()[0])
            if value < CT_TIMEOUT:
                _sysctl(f"netfilter/{name}", str(CT_TIMEOUT))


def _observer() -> None:
    nft = nftlib.load().Nftables()
    rc, _, err = nft.cmd(_OBSERVER.format(group=DELIVERED_GROUP, prio=_priority_text()))
    if rc != 0:
        raise netns.NamespaceError(f"cannot load the lab's observer table: {err.strip()}")


def _priority_text() -> str:
    return f"{SEND_PRIORITY >> 16:x}:{SEND_PRIORITY & 0xFFFF:x}"


def _sysctl(key: str, value: str) -> None:
    with contextlib.suppress(FileNotFoundError), open(f"/proc/sys/net/{key}", "w") as f:
        f.write(value)


def _mac(mac: bytes) -> str:
    return ":".join(f"{b:02x}" for b in mac)


# ------------------------------------------------------------------------ the wire

class Wire:
    """Sockets on both sides: peers (inject, capture), host taps (marker arrival), the
    host's raw IP sockets (packets the host sends) and the delivered-packet log."""

    def __init__(self, lab: HostLab):
        self.lab = lab
        self.peer: dict[str, socket.socket] = {}
        self.tap: dict[str, socket.socket] = {}
        self.seq = 0
        with netns.inside(lab.peer_ns):
            for port, name in lab.peers.items():
                self.peer[port] = _capture(name)
        with netns.inside(lab.host_ns):
            for port in list(lab.peers) + ["lo"]:
                self.tap[port] = _capture(port)
                # markers leave straight to the device: no tc or netfilter egress hook
                self.tap[port].setsockopt(SOL_PACKET, PACKET_QDISC_BYPASS, 1)
            self.raw = {4: _raw(socket.AF_INET), 6: _raw(socket.AF_INET6)}
            self.log = Listener(DELIVERED_GROUP)

    def close(self) -> None:
        for sock in [*self.peer.values(), *self.tap.values(), *self.raw.values()]:
            sock.close()
        self.log.close()

    def inject(self, port: str, frame: bytes) -> None:
        self.peer[port].send(frame)

    def send_local(self, packet: bytes) -> str | None:
        """Send an IP packet as the host (through output and postrouting); the error
        the socket gave (``ENETUNREACH``: no route), or None."""
        version = packet[0] >> 4
        dst = socket.inet_ntop(socket.AF_INET if version == 4 else socket.AF_INET6,
                               packet[16:20] if version == 4 else packet[24:40])
        try:
            self.raw[version].sendto(packet, (dst, 0))
        except OSError as exc:
            return os.strerror(exc.errno) if exc.errno else str(exc)
        return None

    def settle(self) -> tuple[dict[str, list[bytes]], list[bytes]]:
        """Wait until the host has finished with everything sent so far; what each
        peer captured since the last call (markers removed) and the packets delivered."""
        self.seq += 1
        mark = netns.marker_frame(b"\xff" * 6, MARKER_SRC, self.seq)
        for port in self.peer:
            self.peer[port].send(mark)
        _until_marker(self.tap, self.seq, set(self.peer))
        self.seq += 1
        back = netns.marker_frame(b"\xff" * 6, MARKER_SRC, self.seq)
        for port in self.peer:
            self.tap[port].send(back)
        captured = _until_marker(self.peer, self.seq, set(self.peer))
        delivered = [m.payload for m in self._log_now()]
        return captured, delivered

    def _log_now(self):
        out = []
        while True:
            try:
                out += self.log.receive(0)
            except (BlockingIOError, TimeoutError):
                return out


def _capture(ifname: str) -> socket.socket:
    sock = netns.packet_socket(ifname)
    sock.setsockopt(SOL_PACKET, PACKET_AUXDATA, 1)
    return sock


def _raw(family: int) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_RAW, socket.IPPROTO_RAW)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_PRIORITY, SEND_PRIORITY)
    return sock


def _until_marker(socks: dict[str, socket.socket], seq: int,
                  ports: set[str]) -> dict[str, list[bytes]]:
    """Frames received on each socket before marker ``seq`` arrived on all of them."""
    out: dict[str, list[bytes]] = {p: [] for p in socks}
    waiting = set(ports)
    by_fd = {s.fileno(): p for p, s in socks.items()}
    while waiting:
        ready, _, _ = select.select([socks[p] for p in socks], [], [], WAIT)
        if not ready:
            raise TimeoutError(f"marker {seq} did not arrive in {WAIT:.0f} s on "
                               + ", ".join(sorted(waiting)))
        for sock in ready:
            port = by_fd[sock.fileno()]
            frame = _receive(sock)
            if netns.is_marker(frame, seq):
                waiting.discard(port)
            elif frame[6:12] != MARKER_SRC:
                out[port].append(frame)
    return out


def _receive(sock: socket.socket) -> bytes:
    """One frame; a checksum the kernel left for the hardware to finish
    (``CHECKSUM_PARTIAL``: TP_STATUS_CSUMNOTREADY) is finished here."""
    data, ancillary, _, _ = sock.recvmsg(65536, socket.CMSG_SPACE(20))
    for level, kind, value in ancillary:
        if level == SOL_PACKET and kind == PACKET_AUXDATA and len(value) >= 4:
            status = struct.unpack_from("I", value)[0]
            if status & TP_STATUS_CSUMNOTREADY:
                return finish_checksum(data)
    return data


def finish_checksum(frame: bytes) -> bytes:
    """A TCP or UDP checksum holding only the pseudo-header's sum (``CHECKSUM_PARTIAL``)
    computed in full, as the device would have."""
    from pfc.oracle.packets import ones_sum, read_frame
    view = read_frame(frame, skip_tag=False)
    if view.l4 is None or view.l4proto not in (6, 17):
        return frame
    at = view.l4 + (16 if view.l4proto == 6 else 6)
    data = bytearray(frame)
    partial = int.from_bytes(data[at:at + 2], "big")
    data[at:at + 2] = b"\0\0"
    end = view.l3 + (int.from_bytes(frame[view.l3 + 2:view.l3 + 4], "big") if view.version == 4
                     else 40 + int.from_bytes(frame[view.l3 + 4:view.l3 + 6], "big"))
    total = ones_sum(bytes(data[view.l4:end]) + partial.to_bytes(2, "big"))
    value = ~total & 0xFFFF
    data[at:at + 2] = (value or (0xFFFF if view.l4proto == 17 else 0)).to_bytes(2, "big")
    return bytes(data)
