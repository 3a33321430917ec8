"""The filters pfc's classic BPF is measured on: each a pfc policy and the same meaning
as a pcap-filter expression, written rule by rule.

A pcap-filter expression says which frames to keep, so a first-match policy becomes one
boolean "pass" expression: a ``pass`` rule r in front of the rest R is ``(r) or (R)``,
a ``drop`` rule ``not (r) and (R)``, and ``default`` is R at the end.

Each rule is written as libpcap needs it for pfc's meaning (semantics.md):

- ``guards``: the frame is long enough for every load the rule makes (``len >= N``),
  because a load beyond the frame ends a classic BPF program with 0 (drop) even under
  ``not`` (kernel fact 9);
- ``valid``: for transport fields, a header the kernel accepts and the first fragment
  (``VALID4``/``VALID6``, semantics.md's clauses);
- the rule's own tests (``tests``), with primitives that mean exactly pfc's fields:
  ``ip dst net``, ``ip[9]``/``ip6[6]`` for the protocol (libpcap's ``ip6 proto`` also
  looks behind a fragment header, and ``host`` also matches ARP), ``udp[2:2]`` on IPv4,
  ``ip6[40 + n]`` on IPv6 (libpcap's ``tcp[n]`` computes an IPv4 header length).

``plain`` leaves out guards and validity: what a tcpdump user would write, to show what
the checks cost; ``clauses`` leaves out only the guards (``len >=``).
"""

from __future__ import annotations

from dataclasses import dataclass

VALID4 = ("(ip[0] & 0xf0 = 0x40)", "(ip[0] & 0xf >= 5)", "(ip[2:2] >= (ip[0] & 0xf) * 4)",
          "(ip[2:2] + 14 <= len)", "(ip[6:2] & 0x1fff = 0)")
VALID6 = ("(ip6[0] & 0xf0 = 0x60)", "(ip6[4:2] + 54 <= len)")
TCP_DOFF = "((tcp[12] & 0xf0) >> 2)"


@dataclass(frozen=True)
class Rule:
    """One rule as pcap clauses. ``family`` 4 or 6; ``reach`` is one past the farthest
    byte at a fixed offset the rule reads; ``l4_end`` one past the farthest IPv4
    transport byte (0: no transport field); ``extra`` more guards (payload)."""

    action: str
    family: int
    reach: int
    tests: tuple[str, ...]
    l4_end: int = 0
    extra: tuple[str, ...] = ()

    def clauses(self, kind: str) -> list[str]:
        head = ["ip" if self.family == 4 else "ip6"]
        transport = self.l4_end > 0 or (self.family == 6 and self.reach > 54)
        guards = [f"len >= {self.reach}"] if self.reach > 14 else []
        if self.family == 4 and self.l4_end:
            guards.append(f"len >= {14 + self.l4_end} + (ip[0] & 0xf) * 4")
        guards += list(self.extra)
        valid = list(VALID4 if self.family == 4 else VALID6) if transport else []
        if kind == "plain":
            return head + list(self.tests)
        if kind == "clauses":
            return head + valid + list(self.tests)
        first = 1 if self.reach > 14 else 0
        return head + guards[:first] + valid + guards[first:] + list(self.tests)

    def expression(self, kind: str) -> str:
        return " and ".join(self.clauses(kind))


@dataclass(frozen=True)
class Case:
    name: str
    policy: str  # pfc source
    rules: tuple[Rule, ...]
    default: str = "pass"

    def expression(self, kind: str = "exact") -> str:
        """The policy's "pass" expression (module doc)."""
        acc: str | bool = self.default == "pass"
        for rule in reversed(self.rules):
            cond = rule.expression(kind)
            if rule.action == "pass":
                acc = True if acc is True else cond if acc is False else \
                    f"({cond}) or ({acc})"
            else:
                acc = False if acc is False else f"not ({cond})" if acc is True else \
                    f"not ({cond}) and ({acc})"
        if isinstance(acc, bool):
            raise ValueError(f"{self.name}: the policy passes all or nothing")
        return acc

    @property
    def transport(self) -> bool:
        return any(r.l4_end or (r.family == 6 and r.reach > 54) for r in self.rules)


def r4(action: str, reach: int, *tests: str, l4: int = 0, extra: tuple[str, ...] = ()):
    return Rule(action, 4, reach, tests, l4, extra)


def r6(action: str, reach: int, *tests: str):
    return Rule(action, 6, reach, tests)


def tcp_payload4(offset: int, data: bytes) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Tests and guard for TCP payload bytes over IPv4 (data offset honoured)."""
    tests = ["tcp[12] >= 0x50"] + [
        f"tcp[{TCP_DOFF} + {offset + i}] = {b:#x}" for i, b in enumerate(data)]
    guard = (f"len >= {14 + offset + len(data)} + (ip[0] & 0xf) * 4 + {TCP_DOFF}",)
    return tuple(tests), guard


_T, _G = tcp_payload4(1, b"X")

CASES: tuple[Case, ...] = (
    Case("seed: drop udp dst dport", "drop udp dst 192.168.0.79 dport 12345\n",
         (r4("drop", 34, "ip[9] = 17", "ip dst host 192.168.0.79", "udp[2:2] = 12345", l4=4),)),
    Case("seed as a capture filter", "default drop\npass udp dst 192.168.0.79 dport 12345\n",
         (r4("pass", 34, "ip[9] = 17", "ip dst host 192.168.0.79", "udp[2:2] = 12345",
             l4=4),), "drop"),
    Case("ddos: tcp to subnet", "drop tcp dst 192.168.50.0/24\n",
         (r4("drop", 34, "ip[9] = 6", "ip dst net 192.168.50.0/24"),)),
    Case("ddos: udp to subnet", "drop udp dst 192.168.50.0/24\n",
         (r4("drop", 34, "ip[9] = 17", "ip dst net 192.168.50.0/24"),)),
    Case("ddos: syn+rst to subnet", "drop tcp dst 192.168.50.0/24 flags syn,rst\n",
         (r4("drop", 34, "ip[9] = 6", "ip dst net 192.168.50.0/24",
             "tcp[13] & 0x06 = 0x06", l4=14),)),
    Case("ddos: payload marker", "drop tcp dst 192.168.50.0/24 payload[1] == \"X\"\n",
         (r4("drop", 34, "ip[9] = 6", "ip dst net 192.168.50.0/24", *_T, l4=13,
             extra=_G),)),
    Case("port list", "drop udp dst 10.0.0.0/8 dport { 53, 123, 161 }\n",
         (r4("drop", 34, "ip[9] = 17", "ip dst net 10.0.0.0/8",
             "(udp[2:2] = 53 or udp[2:2] = 123 or udp[2:2] = 161)", l4=4),)),
    Case("port range", "drop tcp dst 10.0.0.0/8 dport 1-1023\n",
         (r4("drop", 34, "ip[9] = 6", "ip dst net 10.0.0.0/8",
             "tcp[2:2] >= 1", "tcp[2:2] <= 1023", l4=4),)),
    Case("negated port", "drop udp src 10.0.0.0/8 !dport 53\n",
         (r4("drop", 30, "ip[9] = 17", "ip src net 10.0.0.0/8", "udp[2:2] != 53", l4=4),)),
    Case("private sources", "drop src { 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16 }\n",
         (r4("drop", 30, "(ip src net 10.0.0.0/8 or ip src net 172.16.0.0/12 or "
             "ip src net 192.168.0.0/16)"),)),
    Case("ttl 1", "drop ip ttl 1\n", (r4("drop", 23, "ip[8] = 1"),)),
    Case("big packets", "drop ip len 1400-65535\n", (r4("drop", 18, "ip[2:2] >= 1400"),)),
    Case("fragments", "drop ip frag\n", (r4("drop", 22, "ip[6:2] & 0x3fff != 0"),)),
    Case("pings only", "default drop\npass icmp icmp-type { echo-request, echo-reply }\n",
         (r4("pass", 24, "ip[9] = 1", "(icmp[0] = 8 or icmp[0] = 0)", l4=1),), "drop"),
    Case("syn without ack", "drop tcp dst 192.168.50.0/24 flags syn,!ack\n",
         (r4("drop", 34, "ip[9] = 6", "ip dst net 192.168.50.0/24",
             "tcp[13] & 0x12 = 0x02", l4=14),)),
    Case("udp payload word",
         "drop udp dst 10.0.0.0/8 dport 53 payload[2:2] == 0x0100\n",
         (r4("drop", 34, "ip[9] = 17", "ip dst net 10.0.0.0/8", "udp[2:2] = 53",
             "udp[10:2] = 0x0100", l4=12),)),
    Case("ipv6 subnet", "drop ip6 dst 2001:db8::/32\n",
         (r6("drop", 54, "ip6 dst net 2001:db8::/32"),)),
    Case("ipv6 ssh", "drop tcp dst 2001:db8::1 dport 22\n",
         (r6("drop", 58, "ip6[6] = 6", "ip6 dst host 2001:db8::1", "ip6[42:2] = 22"),)),
    Case("ipv6 pings", "default drop\npass icmp6 icmp-type { 128, 129 }\n",
         (r6("pass", 55, "ip6[6] = 58", "(ip6[40] = 128 or ip6[40] = 129)"),), "drop"),
    Case("ipv6 neighbour discovery", "default drop\npass icmp6 icmp-type 133-136\n",
         (r6("pass", 55, "ip6[6] = 58", "ip6[40] >= 133", "ip6[40] <= 136"),), "drop"),
    Case("telnet, both families", "drop tcp dport 23\n",
         (r4("drop", 24, "ip[9] = 6", "tcp[2:2] = 23", l4=4),
          r6("drop", 58, "ip6[6] = 6", "ip6[42:2] = 23"))),
    Case("ntp amplification", "drop udp sport 123 len 400-65535\n",
         (r4("drop", 24, "ip[9] = 17", "ip[2:2] >= 400", "udp[0:2] = 123", l4=2),
          r6("drop", 56, "ip6[6] = 17", "ip6[4:2] >= 360", "ip6[4:2] <= 65495",
             "ip6[40:2] = 123"))),
    Case("web server",
         "default drop\npass tcp dst 198.51.100.10 dport { 80, 443 }\n"
         "pass tcp dst 198.51.100.10 src 198.51.100.0/24 dport 22\n"
         "pass icmp icmp-type echo-request\n",
         (r4("pass", 34, "ip[9] = 6", "ip dst host 198.51.100.10",
             "(tcp[2:2] = 80 or tcp[2:2] = 443)", l4=4),
          r4("pass", 34, "ip[9] = 6", "ip dst host 198.51.100.10",
             "ip src net 198.51.100.0/24", "tcp[2:2] = 22", l4=4),
          r4("pass", 24, "ip[9] = 1", "icmp[0] = 8", l4=1)), "drop"),
    Case("dns server",
         "default drop\npass udp dst 192.0.2.53 dport 53\npass tcp dst 192.0.2.53 dport 53\n",
         (r4("pass", 34, "ip[9] = 17", "ip dst host 192.0.2.53", "udp[2:2] = 53", l4=4),
          r4("pass", 34, "ip[9] = 6", "ip dst host 192.0.2.53", "tcp[2:2] = 53", l4=4)),
         "drop"),
    Case("edge firewall",
         "drop src { 10.0.0.0/8, 172.16.0.0/12 }\ndrop tcp dst 192.168.50.0/24 flags syn,rst\n"
         "drop udp dst 192.168.0.79 dport 12345\npass tcp dst 192.168.50.0/24 dport 443\n"
         "drop tcp dst 192.168.50.0/24 dport 1-1023\n",
         (r4("drop", 30, "(ip src net 10.0.0.0/8 or ip src net 172.16.0.0/12)"),
          r4("drop", 34, "ip[9] = 6", "ip dst net 192.168.50.0/24",
             "tcp[13] & 0x06 = 0x06", l4=14),
          r4("drop", 34, "ip[9] = 17", "ip dst host 192.168.0.79", "udp[2:2] = 12345", l4=4),
          r4("pass", 34, "ip[9] = 6", "ip dst net 192.168.50.0/24", "tcp[2:2] = 443", l4=4),
          r4("drop", 34, "ip[9] = 6", "ip dst net 192.168.50.0/24", "tcp[2:2] >= 1",
             "tcp[2:2] <= 1023", l4=4))),
    Case("blocklist then https",
         "default drop\ndrop src { 203.0.113.0/24, 198.51.100.0/24 }\n"
         "pass tcp dst 192.0.2.10 dport 443\n",
         (r4("drop", 30, "(ip src net 203.0.113.0/24 or ip src net 198.51.100.0/24)"),
          r4("pass", 34, "ip[9] = 6", "ip dst host 192.0.2.10", "tcp[2:2] = 443", l4=4)),
         "drop"),
    Case("dual-stack ssh",
         "default drop\npass tcp dst 192.0.2.22 dport 22\npass tcp dst 2001:db8::22 dport 22\n",
         (r4("pass", 34, "ip[9] = 6", "ip dst host 192.0.2.22", "tcp[2:2] = 22", l4=4),
          r6("pass", 58, "ip6[6] = 6", "ip6 dst host 2001:db8::22", "ip6[42:2] = 22")),
         "drop"),
    Case("ip only, no ip6", "drop ip6\ndrop ip ttl 0-1\n",
         (r6("drop", 14), r4("drop", 23, "ip[8] <= 1"))),
    Case("syn flood with marker",
         "drop tcp dst 192.168.50.0/24 dport 80 flags syn,!ack payload[1] == \"X\"\n",
         (r4("drop", 34, "ip[9] = 6", "ip dst net 192.168.50.0/24", "tcp[2:2] = 80",
             "tcp[13] & 0x12 = 0x02", *_T, l4=14, extra=_G),)),
)
