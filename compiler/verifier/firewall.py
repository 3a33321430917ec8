"""``pfc verify`` of a whole firewall (v2): the compiled ruleset in the host lab
(``pfc.kernel.hostlab``) against the path interpreter (``pfc.oracle.path``), packet by
packet, on the topology the file describes (docs/verify.md "Whole firewalls").

Traffic (``traffic``): frames biased to the file's constants and the host's addresses,
received on each interface in turn, some sent by the host itself, and connections
across the host (an opener, the answer the walker's prediction implies, and one more
packet each way) so that conntrack, NAT in both directions and ``ct state`` rules are
exercised. Every item is sent alone, then the lab settles (two markers); what came out
is compared with what the walker predicts for it:

- a packet delivered locally: the packet the observer logged after ``input``;
- forwarded or sent: the frame captured at the peer of the leaving interface, byte for
  byte (TTL, NAT rewrites and checksums included);
- ``reject``: its reply, byte for byte except the IPv4 ID of an ICMP error and the
  header checksum over it (``ip_select_ident``) and an ICMPv6 error's flow label;
- nothing else: dropped, rejected, unrouted packets leave no trace but their replies.

What the host's own stack sends and the interpreter does not model is not compared:
ARP, neighbour discovery, and ICMP errors from the host (a UDP port with no socket, a
TTL that ran out). Fragments are not sent (conntrack reassembles them first), nor is
a ``tcp-reset`` of a packet conntrack calls invalid observable (``hostlab``).
"""

from __future__ import annotations

import contextlib
import ipaddress
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from pfc.build import build_ruleset
from pfc.frontend import ir
from pfc.frontend.firewall.ruleset import Ruleset
from pfc.kernel import hostlab, netns, nftlib
from pfc.oracle import sequences
from pfc.oracle.packets import ETH_HLEN, read_frame
from pfc.oracle.path.host import Host, host_of
from pfc.oracle.path.walk import Journey, Walker
from pfc.verifier.traffic import Item, answer, conversations, follow_up, traffic


@dataclass(frozen=True)
class Difference:
    item: int
    what: str
    expected: str
    got: str

    def describe(self) -> str:
        return f"packet {self.item + 1}: {self.what}: expected {self.expected}, got {self.got}"


@dataclass
class Report:
    target: str
    items: int = 0
    agree: int = 0
    differences: list[Difference] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.differences


# --------------------------------------------------------------------------- traffic

# ------------------------------------------------------------------------ verifying

def verify_ruleset(ruleset: Ruleset, target: str | list[str], n: int = 300, seed: int = 0,
                   tick: Callable[[int], None] = lambda _: None) -> Report:
    """Compile ``ruleset`` for ``target`` (nft or iptables, or a list of them as
    ``pfc compile --target`` takes it: each block to the first that carries it), load
    it in a host lab and compare every item's fate with the walker's."""
    ruleset = slowed(ruleset)
    artifacts = _compiled(ruleset, target)
    host = host_of(ruleset)
    items = traffic(ruleset, host, n, seed) + conversations(host, ruleset, seed)
    report = Report(target if isinstance(target, str) else ",".join(target))
    runs = _drive(host, lambda lab: _load(lab, artifacts), Walker(ruleset, host), items, tick)
    for number, (item, journey, seen) in enumerate(runs):
        found = compare(number, journey, seen.captured, seen.delivered, host)
        if (seen.refused is not None) != _refused(item, journey):
            found.append(Difference(number, "sending", journey.fate if _refused(item, journey)
                                    else "sent", seen.refused or "sent"))
        _tally(report, found)
    return report


def _refused(item: Item, journey: Journey) -> bool:
    """Whether the socket that sent ``item`` gets an error: no route (ENETUNREACH), or a
    drop before the packet left the host (``ip_local_out``'s NF_DROP is EPERM)."""
    if item.port is not None:
        return False
    return journey.fate == "unrouted" or journey.fate in ("dropped", "rejected") and \
        journey.where in _SENDING_BLOCKS


_SENDING_BLOCKS = ("raw output", "nat output", "output", "postrouting", "nat postrouting")


def against(ruleset: Ruleset, target: str, load_other: Callable[[], None],
            n: int = 300, seed: int = 0,
            keep: Callable[[Item], bool] = lambda _: True) -> Report:
    """The same traffic (the items ``keep`` keeps) through pfc's ruleset compiled for
    ``target`` and through another ruleset (``load_other`` loads it, run inside the
    lab's host namespace), each in a host lab of its own: what arrives, packet by
    packet, compared (``_differ``)."""
    ruleset = slowed(ruleset)
    artifacts = _compiled(ruleset, target)
    host = host_of(ruleset)
    items = [i for i in traffic(ruleset, host, n, seed) + conversations(host, ruleset, seed)
             if keep(i)]
    ours = _drive(host, lambda lab: _load(lab, artifacts), Walker(ruleset, host), items)
    fixed = [(item, journey) for item, journey, _ in ours]
    theirs = _replay(host, load_other, fixed)
    report = Report(target)
    for number, ((_, _, a), b) in enumerate(zip(ours, theirs, strict=True)):
        _tally(report, _differ(number, a, b))
    return report


def _compiled(ruleset: Ruleset, target: str | list[str]):
    artifacts, diags = build_ruleset(ruleset, [target] if isinstance(target, str) else target)
    if diags:
        raise ValueError("; ".join(d.message for d in diags))
    return artifacts


def _tally(report: Report, found: list[Difference]) -> None:
    report.items += 1
    report.differences += found
    report.agree += not found


@dataclass(frozen=True)
class Seen:
    """What came out of the lab for one item."""

    captured: dict[str, list[bytes]]
    delivered: list[bytes]
    refused: str | None  # the socket's error for a packet the host sent


def _drive(host: Host, load: Callable, walker: Walker, items: list[Item],
           tick: Callable[[int], None] = lambda _: None) -> list[tuple[Item, Journey, Seen]]:
    """Every item through a fresh lab holding what ``load`` loads (answers made from
    the walker's prediction of the packet answered), with the walker's journey."""
    out = []
    with _lab(host, load) as (lab, wire):
        last = None
        for number, item in enumerate(items):
            item = _concrete(item, last, walker.host)
            if item is None:
                continue
            journey = walker.receive(item.data, item.port) if item.port else \
                walker.send(item.data)
            last = journey
            out.append((item, journey, _exchange(lab, wire, item, journey)))
            tick(number)
    return out


def _replay(host: Host, load: Callable, fixed: list[tuple[Item, Journey]]) -> list[Seen]:
    with _lab(host, lambda lab: _in_host(lab, load)) as (lab, wire):
        return [_exchange(lab, wire, item, journey) for item, journey in fixed]


@contextlib.contextmanager
def _lab(host: Host, load: Callable):
    with hostlab.host_lab(host) as lab:
        load(lab)
        with netns.one_cpu():
            wire = hostlab.Wire(lab)
            try:
                yield lab, wire
            finally:
                wire.close()


def _in_host(lab: hostlab.HostLab, load: Callable[[], None]) -> None:
    with lab.inside_host():
        load()


def _concrete(item: Item, last: Journey | None, host: Host) -> Item | None:
    """An answer item made from the journey it answers; a follow-up made concrete."""
    if item.answer is not None and not item.data:
        return answer(last, item.answer, host) if last is not None else None
    if item.answer is not None:
        return follow_up(item)
    return item


def _exchange(lab, wire, item: Item, journey: Journey) -> Seen:
    _neighbours(lab, lab.host, journey)
    refused = None
    if item.port:
        wire.inject(item.port, item.data)
    else:
        refused = wire.send_local(item.data)
    captured, delivered = wire.settle()
    return Seen(captured, delivered, refused)


def _differ(number: int, a: Seen, b: Seen) -> list[Difference]:
    """Two labs' outputs for one packet. The host's own ICMP errors are compared too:
    both hosts send them for the same delivered packets, and a ``reject``'s reply is
    one; only ARP, neighbour discovery and MLD (their timing is the kernel's) are not."""
    out = []
    for port in sorted(set(a.captured) | set(b.captured)):
        mine = sorted(_norm(f) for f in a.captured.get(port, []) if not _chatter(f))
        other = sorted(_norm(f) for f in b.captured.get(port, []) if not _chatter(f))
        if mine != other:
            out.append(Difference(number, f"out of {port}", _hex(mine), _hex(other)))
    mine_in = [_norm(f) for f in map(_framed, a.delivered) if not _chatter(f)]
    other_in = [_norm(f) for f in map(_framed, b.delivered) if not _chatter(f)]
    if mine_in != other_in:
        out.append(Difference(number, "delivered", _hex(mine_in), _hex(other_in)))
    if (a.refused is None) != (b.refused is None):
        out.append(Difference(number, "sending", a.refused or "sent", b.refused or "sent"))
    return out


def slowed(ruleset: Ruleset) -> Ruleset:
    """Every rate 1/minute (``sequences.slowed``): the lab takes seconds, the walker none."""
    chains = tuple(replace(c, rules=sequences.slowed(ir.Policy(c.rules)).rules)
                   for c in ruleset.chains)
    lists = tuple(replace(sequences.slowed(p), chains=chains) for p in ruleset.lists)
    return replace(ruleset, lists=lists, chains=chains)


def _load(lab: hostlab.HostLab, artifacts) -> None:
    """The artifacts into the lab's host namespace, as ``pfc load`` would put them."""
    with lab.inside_host():
        _load_here(artifacts)


def _load_here(artifacts) -> None:
    for artifact in artifacts:
        if artifact.target == "nft":
            _nft(artifact.text)
        elif artifact.target == "iptables":
            _iptables(artifact)
        elif artifact.target in EBPF:
            _ebpf(artifact)
        else:
            raise ValueError(f"`pfc verify` of a whole firewall runs nft, iptables, xdp "
                             f"and tc artifacts, not {artifact.target}")


EBPF = ("xdp", "tc")  # an ``ingress`` block's program, attached to each of its devices
TC_HANDLE, TC_PRIORITY = 0x7066, 1  # pfc.deploy.tc's


def _ebpf(artifact) -> None:
    """An ``ingress`` block's XDP or tc program, maps filled, on each of the block's
    devices in the current namespace (XDP: the kernel's mode, native on a veth; tc:
    clsact ingress), as ``pfc load`` attaches it; the device keeps it until the lab
    goes."""
    import socket

    from pfc.backends.ebpf import maps
    from pfc.kernel import bpf_attach

    obj = maps.open_filled(artifact)
    try:
        prog = next(iter(obj.programs.values()))
        for dev in artifact.policy.hook.devices:
            index = socket.if_nametoindex(dev)
            if artifact.target == "xdp":
                bpf_attach.xdp_attach(index, prog.fd, None)
            else:
                bpf_attach.tc_hook_create(index)
                bpf_attach.tc_attach(index, prog.fd, TC_HANDLE, TC_PRIORITY, False)
    finally:
        obj.close()


def _nft(text: str) -> None:
    rc, _, err = nftlib.load().Nftables().cmd(text)
    if rc != 0:
        raise RuntimeError(f"nft refused the ruleset: {err.strip()}")


def _iptables(artifact) -> None:
    files, names = artifact.files, artifact.meta["files"]
    if names["ipset"]:
        _call(["ipset", "restore"], files[names["ipset"]])
    for tool, init, main in (("iptables", "init4", "ipv4"), ("ip6tables", "init6", "ipv6")):
        for name in (init, main):
            _call([f"{tool}-nft-restore", "-w", "--noflush"], files[names[name]])


def _call(argv: list[str], data: bytes) -> None:
    import subprocess
    result = subprocess.run(argv, input=data, capture_output=True)
    if result.returncode:
        raise RuntimeError(f"`{' '.join(argv)}` failed: {result.stderr.decode().strip()}")


def _neighbours(lab, host: Host, journey: Journey) -> None:
    """Permanent neighbour entries for every next hop the journey and its replies
    leave by (the peers answer no ARP)."""
    for j in [journey, *journey.replies]:
        if j.fate in ("forwarded", "sent") and j.oif and j.frame:
            view = read_frame(j.frame, skip_tag=False)
            if view.version is None:
                continue
            at = view.l3 + (16 if view.version == 4 else 24)
            dst = ipaddress.ip_address(j.frame[at:at + (4 if view.version == 4 else 16)])
            hop = host.route(dst).next_hop or dst
            hostlab.neighbour(lab, j.oif, hop)


# ------------------------------------------------------------------------ comparing

def compare(number: int, journey: Journey, captured: dict[str, list[bytes]],
            delivered: list[bytes], host: Host) -> list[Difference]:
    want_out, want_in = _expected(journey)
    out = []
    where = f"{journey.fate}{' at ' + journey.where if journey.where else ''}"
    for port in sorted(set(captured) | set(want_out)):
        got = Counter(_norm(f) for f in captured.get(port, []))
        want = Counter(_norm(f) for f in want_out.get(port, []))
        missing = list((want - got).elements())
        extra = [f for f in (got - want).elements() if not _noise(f)]
        if missing or extra:
            out.append(Difference(number, f"out of {port} ({where})",
                                  _hex(want_out.get(port, [])),
                                  _hex(captured.get(port, []))))
    got_in = [p for p in delivered if p in want_in or not _noise(_framed(p))]
    if got_in != want_in:
        out.append(Difference(number, f"delivered ({where})", _hex(want_in),
                              _hex(delivered)))
    return out


def _expected(journey: Journey) -> tuple[dict[str, list[bytes]], list[bytes]]:
    out: dict[str, list[bytes]] = {}
    delivered: list[bytes] = []
    for j in [journey, *journey.replies]:
        if j.fate in ("forwarded", "sent") and j.oif:
            out.setdefault(j.oif, []).append(j.frame)
        elif j.fate == "delivered":
            delivered.append(j.frame[ETH_HLEN:])
    return out, delivered


def _framed(packet: bytes) -> bytes:
    """A delivered IP packet behind an Ethernet header, for the frame readers."""
    kind = b"\x86\xdd" if packet and packet[0] >> 4 == 6 else b"\x08\x00"
    return bytes(12) + kind + packet


def _chatter(frame: bytes) -> bool:
    """ARP, neighbour discovery and MLD: the host's own, timed by the kernel."""
    view = read_frame(frame, skip_tag=False)
    if view.version is None:
        return True
    if view.version != 6 or view.l4proto != 58 or view.l4 is None or view.l4 >= len(frame):
        return False
    return 130 <= frame[view.l4] <= 137 or frame[view.l4] == 143


def _noise(frame: bytes) -> bool:
    """What the host's own stack sends that the interpreter does not model: non-IP
    frames (ARP), ICMP errors (a UDP port with no socket, a TTL that ran out, an
    unknown protocol, a neighbour that never answered), redirects, neighbour discovery
    and MLD. A ``reject``'s reply is predicted: only an extra one
    is noise."""
    view = read_frame(frame, skip_tag=False)
    if view.version is None:
        return True
    if view.l4 is None or view.l4 >= len(frame):
        return False
    kind = frame[view.l4]
    if view.version == 4 and view.l4proto == 1:
        return kind in (3, 5, 11, 12)
    return view.version == 6 and view.l4proto == 58 and (
        kind < 128 or 130 <= kind <= 137 or kind == 143)


def _norm(frame: bytes) -> bytes:
    """What the kernel chooses for an ICMP error and the interpreter cannot: its IPv4
    ID and the header checksum over it (``ip_select_ident``), its IPv6 flow label
    (``auto_flowlabels``: a hash), zeroed."""
    view = read_frame(frame, skip_tag=False)
    data = bytearray(frame)
    if view.version == 4 and view.l4proto == 1 and view.l4 is not None:
        data[view.l3 + 4:view.l3 + 6] = b"\0\0"
        data[view.l3 + 10:view.l3 + 12] = b"\0\0"
    elif view.version == 6 and view.l4proto == 58 and view.l4 is not None:
        data[view.l3 + 1] &= 0xF0
        data[view.l3 + 2:view.l3 + 4] = b"\0\0"
    return bytes(data)


def _hex(frames: list[bytes]) -> str:
    return "[" + ", ".join(f.hex() for f in frames) + "]" if frames else "nothing"
