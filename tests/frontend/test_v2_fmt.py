"""``pfc fmt`` of whole firewalls: blocks indented by 4 spaces, one blank line between
a top-level block and its neighbours, comments kept (and indented with their block),
idempotent and keeping the meaning (the Ruleset, spans aside)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pfc.backends.irjson import to_jsonable
from pfc.frontend.fmt import format_source
from pfc.frontend.pipeline import compile_text
from pfc.frontend.source import SourceFile
from tests.frontend.firewalls import firewalls
from tests.paths import FIREWALLS


def fmt(text: str) -> str:
    out, diags = format_source(SourceFile("f.pf", text))
    assert out is not None, [d.message for d in diags]
    return out


def meaning(text: str):
    compiled = compile_text(text, "f.pf")
    assert compiled.ok, [d.message for d in compiled.diagnostics]
    return _strip(to_jsonable(compiled.ruleset))


def _strip(obj):
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items()
                if k not in ("span", "default_span", "line")}
    if isinstance(obj, list):
        return [_strip(x) for x in obj]
    return obj


def test_canonical_form() -> None:
    messy = ("# the router\ninterface eth0   address {10.0.0.1/24,FD00::1/64} # LAN\n"
             "define web = {80,443}\n# web chain\nchain web {\n\n  accept tcp dport $web\n"
             "    # nothing else\n\n}\ninput {\ndefault drop\n   jump web\n"
             "reject tcp with tcp-reset\n}\noutput { }\nnat prerouting {\n"
             "  redirect tcp dport 80 to :8080\n}\ningress eth0,\"e.1\" {\n"
             "   drop ether-src AA:BB:CC:DD:EE:FF\n}\n")
    assert fmt(messy) == (
        "# the router\n"
        "interface eth0 address { 10.0.0.1/24, fd00::1/64 }  # LAN\n"
        "define web = { 80, 443 }\n"
        "\n"
        "# web chain\n"
        "chain web {\n"
        "    pass tcp dport $web\n"
        "    # nothing else\n"
        "}\n"
        "\n"
        "input {\n"
        "    default drop\n"
        "    jump web\n"
        "    reject tcp with tcp-reset\n"
        "}\n"
        "\n"
        "output { }\n"
        "\n"
        "nat prerouting {\n"
        "    redirect tcp dport 80 to :8080\n"
        "}\n"
        "\n"
        'ingress eth0, "e.1" {\n'
        "    drop ether-src aa:bb:cc:dd:ee:ff\n"
        "}\n")
    assert meaning(fmt(messy)) == meaning(messy)


def test_every_v2_form_prints_back() -> None:
    text = ("chain c {\n    pass\n}\n\nforward {\n    pass !iif { lo, eth* } oif \"x.1\" "
            "ct status dnat,snat ct mark 0x10 mark 1-2 dst-type local\n"
            "    mark tcp dport 22 to 0x10\n    goto c udp\n    pass icmp icmp-code 3 limit "
            "rate 10/second burst 5\n    reject udp limit rate 1/second with no-route\n}\n\n"
            "nat prerouting {\n    dnat udp dport 53 to [2001:db8::53]:5353\n}\n")
    assert fmt(text) == text


@pytest.mark.parametrize("path", FIREWALLS, ids=[p.stem for p in FIREWALLS])
def test_firewall_examples_are_clean_and_formatted(path) -> None:
    text = path.read_text()
    compiled = compile_text(text, str(path))
    assert compiled.ok and compiled.ruleset is not None, compiled.diagnostics
    assert not [d for d in compiled.diagnostics if d.severity == "warning"]
    assert fmt(text) == text


def test_a_file_with_an_unclosed_block_is_not_formatted() -> None:
    out, diags = format_source(SourceFile("f.pf", "input {\n    pass\n"))
    assert out is None and [d.code for d in diags] == ["unclosed"]


def _mess(text: str, data: st.DataObject) -> str:
    """Spaces, tabs, blank lines, comments and CRLF where they mean nothing."""
    out = []
    for line in text.splitlines():
        indent = data.draw(st.sampled_from(["", " ", "\t", "        "]))
        line = indent + line.strip().replace(" ", data.draw(st.sampled_from([" ", "  ", " \t"])))
        if line.strip() and data.draw(st.booleans()):
            line += "  # note"
        out.append(line)
        out += [""] * data.draw(st.integers(0, 2))
    newline = data.draw(st.sampled_from(["\n", "\r\n"]))
    return newline.join(out) + newline


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(firewalls(), st.data())
def test_fmt_is_idempotent_and_keeps_the_meaning(text: str, data) -> None:
    messy = _mess(text, data)
    formatted = fmt(messy)
    assert fmt(formatted) == formatted
    assert meaning(formatted) == meaning(text)
    assert "\n\n\n" not in formatted and not formatted.startswith("\n")
    for line in formatted.splitlines():
        assert line == line.rstrip() and (len(line) - len(line.lstrip(" "))) in (0, 4)
