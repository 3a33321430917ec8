"""Hypothesis strategies for policy *texts*: valid policies of every construct.

Used by the front-end property tests and by every backend's differential tests
("hundreds of generated policies"). ``policies(...)`` switches features off for
targets that cannot express them (e.g. ``count=False, redirect=False`` for cbpf).
"""

from __future__ import annotations

from hypothesis import strategies as st

V4 = ["192.168.0.79", "192.168.50.0/24", "10.0.0.0/8", "10.1.2.3", "172.16.0.0/12",
      "192.168.64.2", "0.0.0.0/0", "198.51.100.128/25"]
V6 = ["2001:db8::1", "2001:db8::/32", "fe80::/10", "::1", "2001:db8:0:1::/64", "::/0"]
PORTS = ["53", "80", "443", "8080", "12345", "1-1023", "8000-8080", "0", "65535"]
FLAGS = ["syn", "ack", "rst", "fin", "psh", "urg", "ece", "cwr"]
ICMP = ["echo-request", "echo-reply", "0", "8", "3-5", "destination-unreachable"]
ICMP6 = ["echo-request", "echo-reply", "128", "135-136", "packet-too-big"]
PROTOS = ["6", "17", "1", "58", "tcp", "udp", "47", "0-5"]


def _one_or_list(items: list[str]) -> st.SearchStrategy[str]:
    single = st.sampled_from(items)
    many = st.lists(st.sampled_from(items), min_size=1, max_size=3, unique=True).map(
        lambda xs: "{ " + ", ".join(xs) + " }")
    return st.one_of(single, many)


def _neg() -> st.SearchStrategy[str]:
    return st.sampled_from(["", "", "", "!"])


@st.composite
def _addr_match(draw, versions: frozenset[int]) -> str:
    pool = (V4 if 4 in versions else []) + (V6 if 6 in versions else [])
    field = draw(st.sampled_from(["src", "dst"]))
    return f"{draw(_neg())}{field} {draw(_one_or_list(pool))}"


@st.composite
def _transport_matches(draw, proto: str, payload: bool) -> list[str]:
    out = []
    if proto in ("tcp", "udp"):
        for field in draw(st.lists(st.sampled_from(["sport", "dport"]), max_size=2, unique=True)):
            out.append(f"{draw(_neg())}{field} {draw(_one_or_list(PORTS))}")
        if payload and draw(st.booleans()):
            out.append(draw(_payload()))
    if proto == "tcp" and draw(st.booleans()):
        flags = draw(st.lists(st.sampled_from(FLAGS), min_size=1, max_size=3, unique=True))
        marks = [("!" if draw(st.booleans()) else "") + f for f in flags]
        out.append(f"{draw(_neg())}flags {','.join(marks)}")
    if proto in ("icmp", "icmp6") and draw(st.booleans()):
        pool = ICMP if proto == "icmp" else ICMP6
        out.append(f"{draw(_neg())}icmp-type {draw(_one_or_list(pool))}")
    return out


@st.composite
def _payload(draw) -> str:
    offset = draw(st.integers(0, 12))
    if draw(st.booleans()):
        byte = draw(st.sampled_from(['"X"', "0x58", "0", "255", '"\\x00"']))
        return f"{draw(_neg())}payload[{offset}] == {byte}"
    data = draw(st.binary(min_size=1, max_size=4))
    return f"{draw(_neg())}payload[{offset}:{len(data)}] == 0x{data.hex()}"


@st.composite
def _ip_matches(draw, versions: frozenset[int], proto: str) -> list[str]:
    out = []
    if draw(st.booleans()):
        out.append(draw(_addr_match(versions)))
    if draw(st.integers(0, 4)) == 0:
        out.append(f"{draw(_neg())}ttl {draw(st.sampled_from(['1', '64', '1-10', '255']))}")
    if draw(st.integers(0, 4)) == 0:
        out.append(f"{draw(_neg())}len {draw(st.sampled_from(['20-60', '40', '100-1500']))}")
    if proto in ("", "ip", "ip6") and draw(st.integers(0, 3)) == 0:
        out.append(f"{draw(_neg())}proto {draw(_one_or_list(PROTOS))}")
    if versions == {4} and draw(st.integers(0, 4)) == 0:
        out.append(f"{draw(_neg())}frag")
    return out


@st.composite
def rule_text(draw, *, count: bool = True, redirect: bool = True, ipv6: bool = True,
              payload: bool = True, non_ip: bool = True) -> str:
    actions = ["drop", "pass"] + ["count"] * count + ["redirect"] * redirect
    action = draw(st.sampled_from(actions))
    protos = ["", "ip", "tcp", "udp", "icmp"] + (["ip6", "icmp6"] if ipv6 else [])
    if action == "redirect":
        protos = ["tcp", "udp", "ip"] + (["ip6"] if ipv6 else [])
    proto = draw(st.sampled_from(protos))
    fixed = {"ip": {4}, "icmp": {4}, "ip6": {6}, "icmp6": {6}}.get(proto)
    choices = [{4}, {6}, {4, 6}] if ipv6 else [{4}]
    if action == "redirect":
        choices = [{4}, {6}] if ipv6 else [{4}]
    versions = frozenset(fixed or draw(st.sampled_from(choices)))
    matches = draw(_ip_matches(versions, proto)) + draw(_transport_matches(proto, payload))
    has_addr = any(m.lstrip("!").startswith(("src", "dst")) for m in matches)
    # The chosen family must be what the rule says: a one-family tcp/udp/all rule needs
    # an address of that family, and a bare `drop` matches non-IP frames too.
    if proto in ("", "tcp", "udp") and not has_addr and (
            versions != {4, 6} or (proto == "" and not matches and not non_ip)):
        matches.append(draw(_addr_match(versions)))
    words = [action] + ([proto] if proto else []) + draw(st.permutations(matches))
    if action == "redirect":
        words.append("to " + draw(_target(proto, versions)))
    return " ".join(words)


@st.composite
def _target(draw, proto: str, versions: frozenset[int]) -> str:
    version = 6 if versions == {6} else 4
    address = "10.0.1.2" if version == 4 else "2001:db8::99"
    if proto in ("tcp", "udp") and draw(st.booleans()):
        port = draw(st.sampled_from(["8083", "53", "1"]))
        return f"[{address}]:{port}" if version == 6 else f"{address}:{port}"
    return address


@st.composite
def policies(draw, *, min_rules: int = 1, max_rules: int = 6, **features) -> str:
    """A valid policy text: an optional default and some rules."""
    lines = []
    if draw(st.booleans()):
        lines.append(f"default {draw(st.sampled_from(['pass', 'drop']))}")
    lines += draw(st.lists(rule_text(**features), min_size=min_rules, max_size=max_rules))
    return "\n".join(lines) + "\n"
