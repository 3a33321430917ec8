"""Log events: one shape for the interpreter, every backend and ``pfc log``.

A ``log`` rule that holds (within its rate) and every audited drop send one event:
the rule's source line (0: the default), the verdict so far, whether it is an audit
event (a would-be drop), the rule's prefix, the interface index the packet came in on
(0 when unknown, as in the interpreter) and the first ``snap`` bytes of the packet as
the hook sees it: from the Ethernet header (``link``, XDP/tc/socket) or from the IP
header (nft and iptables deliver the network header on, through NFLOG).

"The verdict so far" is what the packet would get if evaluation stopped at the rule:
the policy's default for a ``log`` rule (no terminal rule has decided yet: the
packet reached a later rule), ``drop`` for an audit event.

On nft and iptables the line, verdict and kind travel in the NFLOG prefix:
``pfc L<line> <pass|drop|audit> <prefix>`` (``nflog_prefix`` / ``parse_prefix``).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from pfc.oracle.packets import ICMP, ICMP6, TCP, UDP, read_frame


@dataclass(frozen=True)
class LogEvent:
    line: int  # the rule's source line; 0 for the default
    verdict: str  # "pass" | "drop": the verdict so far
    audit: bool  # a would-be drop, not a `log` rule
    prefix: str
    data: bytes  # the first snap bytes
    link: bool = True  # data starts at the Ethernet header (else at the IP header)
    ifindex: int = 0

    def network(self) -> bytes:
        """``data`` from the IP header on (the Ethernet header and one tag skipped)."""
        if not self.link:
            return self.data
        view = read_frame(self.data)
        return self.data[view.l3:] if view.l3 is not None else b""


def nflog_prefix(line: int, verdict: str, audit: bool, prefix: str) -> str:
    """The NFLOG prefix of an event: ``pfc L7 drop web`` (``prefix`` already checked
    against the language's allow-list; the whole is at most 18 + 32 characters)."""
    kind = "audit" if audit else verdict
    return f"pfc L{line} {kind} {prefix}".rstrip() if prefix else f"pfc L{line} {kind}"


_PREFIX = re.compile(r"pfc L([0-9]+) (pass|drop|audit)(?: (.*))?\Z", re.S)


def parse_prefix(text: str) -> tuple[int, str, bool, str] | None:
    """(line, verdict, audit, prefix) from an NFLOG prefix pfc wrote; None otherwise."""
    m = _PREFIX.match(text.rstrip("\0"))
    if m is None:
        return None
    audit = m.group(2) == "audit"
    return int(m.group(1)), "drop" if audit else m.group(2), audit, m.group(3) or ""


def _endpoints(ip: bytes) -> tuple[str, str, str] | None:
    """(protocol word, source, destination) of an IP packet's first bytes (cut short
    by ``snap``: lengths are not checked against the total length)."""
    version = ip[0] >> 4 if ip else None
    if version == 4 and len(ip) >= 20 and ip[0] & 0x0F >= 5:
        raw, proto = (ip[12:16], ip[16:20]), ip[9]
        at = (ip[0] & 0x0F) * 4 if not int.from_bytes(ip[6:8], "big") & 0x1FFF else None
    elif version == 6 and len(ip) >= 40:
        raw, proto, at = (ip[8:24], ip[24:40]), ip[6], 40
    else:
        return None
    src, dst = (ipaddress.ip_address(a) for a in raw)
    names = {TCP: "tcp", UDP: "udp", ICMP: "icmp", ICMP6: "icmp6"}
    word = names.get(proto, f"proto {proto}")
    if proto in (TCP, UDP) and at is not None and at + 4 <= len(ip):
        sport, dport = (int.from_bytes(ip[at + i:at + i + 2], "big") for i in (0, 2))
        return word, _join(src, sport), _join(dst, dport)
    if proto in (ICMP, ICMP6) and at is not None and at < len(ip):
        word += f" type {ip[at]}"
    return word, str(src), str(dst)


def _join(address: ipaddress.IPv4Address | ipaddress.IPv6Address, port: int) -> str:
    return f"[{address}]:{port}" if address.version == 6 else f"{address}:{port}"


def describe(event: LogEvent) -> str:
    """``line 7 drop udp 10.0.0.1:5353 → 192.168.0.79:12345`` (+ `` audit``,
    `` "prefix"``); ``default`` for line 0; ``non-IP`` when the bytes are not IP."""
    where = f"line {event.line}" if event.line else "default"
    head = f"{where} {'audit drop' if event.audit else event.verdict}"
    ends = _endpoints(event.network())
    body = "non-IP" if ends is None else f"{ends[0]} {ends[1]} \u2192 {ends[2]}"
    tail = f" [{event.prefix}]" if event.prefix else ""
    return f"{head} {body}{tail}"


def to_json(event: LogEvent) -> dict:
    """The event as JSON (``pfc log --format json``)."""
    ends = _endpoints(event.network())
    out = {"line": event.line, "verdict": event.verdict, "audit": event.audit,
           "prefix": event.prefix, "ifindex": event.ifindex,
           "bytes": event.data.hex(), "link": event.link}
    if ends is not None:
        out.update(protocol=ends[0], src=ends[1], dst=ends[2])
    return out
