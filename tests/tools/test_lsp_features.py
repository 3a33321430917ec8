"""The language server's pure functions, without the LSP transport: positions,
completion contexts, hover text, the plain-English reading of rules, compiled forms,
target configuration, names, semantic tokens."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lsprotocol import types

import pfc.api
from pfc import backends
from pfc.backends.base import FEATURES, Artifact, Backend, Options
from pfc.frontend import ir
from pfc.frontend.fmt import format_source
from pfc.frontend.pipeline import compile_source, compile_text
from pfc.frontend.source import SourceFile
from pfc.lsp.analysis import (
    analyse,
    definitions,
    lsp_diagnostics,
    references,
    symbol_at,
    target_config,
)
from pfc.lsp.complete import context, fields_for, items
from pfc.lsp.forms import form, forms
from pfc.lsp.hover import field_doc, hover, support_line
from pfc.lsp.reading import reading
from pfc.lsp.text import UTF8, UTF32, LineIndex, lex
from pfc.lsp.tokens import decode, encode
from tests.paths import EXAMPLES
from tests.strategies import policies

TARGETS = [n for n in backends.registry() if n != "ir"]


# ---------------------------------------------------------------------- positions

def test_utf16_positions_count_surrogate_pairs() -> None:
    text = "# café ✓ 😀\ndrop udp dport 1  # 😀x\n"
    index = LineIndex(text)
    assert index.position(text.index("x")) == types.Position(1, 22)  # 😀 is 2 units
    assert index.position(text.index("✓")) == types.Position(0, 7)
    assert index.position(text.index("\n")) == types.Position(0, 11)
    for offset in range(len(text) + 1):
        assert index.offset(index.position(offset)) == offset


def test_other_encodings_and_clamping() -> None:
    text = "é😀x\nab"
    assert LineIndex(text, UTF8).position(2) == types.Position(0, 6)
    assert LineIndex(text, UTF32).position(2) == types.Position(0, 2)
    assert LineIndex(text, UTF8).offset(types.Position(0, 6)) == 2
    index = LineIndex(text)
    assert index.offset(types.Position(0, 99)) == 3  # past the end of the line
    assert index.offset(types.Position(9, 0)) == len(text)
    assert index.end() == types.Position(1, 2)


@settings(derandomize=True, max_examples=200, deadline=None)
@given(st.text(alphabet="drop tcp{}[]$!#\"\\,:=.-_x019 😀é\n", max_size=60))
def test_lexer_never_fails_and_stays_in_bounds(text: str) -> None:
    toks = lex(text)
    assert all(0 <= t.start < t.end <= len(text) for t in toks)
    assert [t.start for t in toks] == sorted(t.start for t in toks)
    assert all(text[t.start:t.end] == t.text for t in toks)


# --------------------------------------------------------------------- completion

def labels(prefix: str, names: dict[str, str] | None = None) -> list[str]:
    return [i.label for i in items(context(prefix, len(prefix)), names or {})]


@pytest.mark.parametrize("prefix,has,lacks", [
    ("", ["drop", "pass", "count", "redirect", "define", "set", "default"], ["tcp"]),
    ("dr", ["drop"], []),
    ("drop ", ["tcp", "udp", "icmp6", "src", "ttl", "frag"], ["dport", "flags"]),
    ("drop udp ", ["sport", "dport", "payload", "src"], ["flags", "icmp-type", "proto"]),
    ("drop tcp ", ["flags", "dport", "frag"], ["icmp-type", "proto"]),
    ("drop tcp d", ["dport", "dst"], []),
    ("drop icmp ", ["icmp-type", "src", "frag"], ["dport", "flags", "payload"]),
    ("drop icmp6 ", ["icmp-type"], ["frag", "dport"]),
    ("drop ip6 ", ["proto", "src"], ["frag", "dport"]),
    ("drop src 2001:db8::1 ", ["dst"], ["frag"]),
    ("drop tcp dport 80 ", ["flags", "sport"], ["dport"]),
    ("redirect udp dport 80 ", ["to"], ["dport"]),
    ("drop tcp !", ["flags", "dport"], []),
    ("drop tcp flags ", ["syn", "ack", "cwr"], ["dport"]),
    ("drop tcp flags syn,", ["ack", "rst"], ["syn"]),
    ("drop tcp flags syn, !a", ["ack"], ["syn"]),
    ("drop tcp flags syn ", ["dport"], ["ack"]),
    ("drop icmp icmp-type ", ["echo-request", "source-quench"], ["nd-neighbor-solicit"]),
    ("drop icmp6 icmp-type ", ["nd-neighbor-solicit", "echo-request"], ["source-quench"]),
    ("drop proto ", ["tcp", "gre", "sctp"], []),
    ("drop proto { tcp, ", ["udp"], []),
    ("default ", ["pass", "drop"], ["count"]),
    ("set big = ", ["file"], []),
    ("drop tcp dport 80 \\\n    ", ["flags"], ["dport"]),
    ("drop tcp payload[1] == \"X\" ", ["flags"], []),
    ("", ["log"], []),
    ("log tcp dport 80 ", ["prefix", "rate", "snap", "ct"], ["limit", "audit"]),
    ("drop udp ", ["limit", "audit", "ct"], ["prefix", "burst"]),
    ("drop udp limit ", ["rate"], ["audit"]),
    ("drop udp limit rate 10/", ["second", "minute"], []),
    ("drop udp limit rate 10/second ", ["burst", "per", "audit"], ["dport", "limit"]),
    ("drop udp limit rate 10/second per ", ["src", "dst"], []),
    ("pass tcp ct ", ["state"], []),
    ("pass tcp ct state new,", ["established", "related", "invalid"], ["new"]),
    ("pass tcp ct state new ", ["dport"], ["established"]),
])
def test_completion_by_context(prefix: str, has: list[str], lacks: list[str]) -> None:
    got = labels(prefix)
    assert set(has) <= set(got), got
    assert not set(lacks) & set(got), got


@pytest.mark.parametrize("prefix", [
    "drop tcp # dp", "drop tcp payload[", "drop tcp payload[1] == ", 'drop payload[0] == "a b',
    "define x", "garbage ", "redirect udp to 10.0.0.1:",
])
def test_no_completion_where_nothing_fits(prefix: str) -> None:
    assert labels(prefix) == []


def test_names_complete_after_dollar_and_replace_it() -> None:
    prefix = "drop src $we"
    ctx = context(prefix, len(prefix))
    assert (ctx.kind, ctx.partial, ctx.start) == ("name", "$we", prefix.index("$"))
    assert labels(prefix, {"web": "define web = 1", "lan": "define lan = 2"}) == ["$web", "$lan"]
    assert labels("drop tcp dport ", {"web": ""}) == ["$web"]


PROTOCOL_VALUES = {"src": "$both", "dst": "$both", "sport": "1", "dport": "1", "proto": "6",
                   "ttl": "1", "len": "1", "frag": "", "flags": "syn", "icmp-type": "0",
                   "payload": "[0] == 1", "ct": "state new",
                   # v2 fields: refused in a v1 file (tests/tools/test_lsp_v2.py: in blocks)
                   "icmp-code": "3", "iif": "eth0", "oif": "eth0", "mark": "1",
                   "dst-type": "local", "src-type": "local", "ether-src": "aa:bb:cc:dd:ee:ff",
                   "ether-dst": "aa:bb:cc:dd:ee:ff", "ether-type": "arp", "vlan-id": "10",
                   "ct-mark": "1", "ct-status": "dnat"}
WRITTEN = {"ct-mark": "ct mark", "ct-status": "ct status"}


@pytest.mark.parametrize("protocol", list(ir.PROTOCOLS))
def test_offered_fields_are_exactly_those_the_checker_accepts(protocol: str) -> None:
    """The completion's idea of a valid field agrees with the checker, field by field."""
    offered = fields_for(protocol)
    for name in ir.FIELDS:
        text = f"define both = {{ 10.0.0.1, ::1 }}\ndrop {protocol} {WRITTEN.get(name, name)}" \
               f"{'' if name == 'payload' else ' '}{PROTOCOL_VALUES[name]}\n"
        ok = compile_text(text).ok
        assert (name in offered) == ok, (protocol, name, compile_text(text).diagnostics)


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.stem for e in EXAMPLES])
def test_every_prefix_of_every_example_has_a_context(example) -> None:
    text = example.read_text()
    for end in range(len(text) + 1):
        ctx = context(text, end)
        assert ctx.start <= end
        items(ctx, {"x": "define x = 1"})


# -------------------------------------------------------------------------- hover

EDGE = """# pfc: targets xdp, iptables
define dut = 192.168.0.79
drop udp dst $dut dport 12345  # the flood
"""


def test_reading_of_rules() -> None:
    cases = {
        "drop udp dst 192.168.0.79 dport 12345":
            "drops UDP packets to 192.168.0.79 with destination port 12345",
        "drop": "drops all frames (IP or not)",
        "pass tcp src 10.0.0.0/8 !dport { 22, 80-90 }":
            "passes TCP packets from 10.0.0.0/8 with destination port other than 22 or 80-90",
        "count tcp flags syn,!ack": "counts TCP packets with SYN set and ACK clear, "
                                    "then goes on with the next rule",
        "drop icmp6 icmp-type echo-request": "drops ICMPv6 packets with ICMPv6 type "
                                             "echo-request",
        "drop frag": "drops IPv4 packets that are IPv4 fragments",
        'drop udp payload[2:2] == "ab"':
            'drops UDP packets with payload bytes 2-3 equal to "ab"',
        "redirect udp dport 80 to 10.0.0.2:8080":
            "redirects UDP packets with destination port 80, rewriting their destination "
            "to 10.0.0.2 port 8080",
        "drop src { 1.0.0.1, 1.0.0.2, 1.0.0.3, 1.0.0.4, 1.0.0.5, 1.0.0.6 }":
            "drops IPv4 packets from any of the 6 prefixes",
        'log tcp dport 80 prefix "web" rate 10/second':
            'logs TCP packets with destination port 80 with prefix "web" (the first 128 '
            "bytes, at most 10/second (bursts up to 5)), then goes on with the next rule",
        "drop udp limit rate 100/second burst 10 per src":
            "drops UDP packets beyond 100/second (bursts up to 10) per source address",
        "pass tcp ct state established,related":
            "passes TCP packets with connection state established or related",
        "drop udp audit": "drops UDP packets in audit mode: they pass, counted and logged "
                          "as would-be drops",
    }
    for text, expected in cases.items():
        assert reading(compile_text(text).require().rules[0]) == expected


def test_field_hover_says_what_and_where() -> None:
    text = field_doc("dport")
    assert ir.FIELDS["dport"].doc in text and "`tcp` or `udp`" in text
    payload = support_line({"payload"})
    for name in TARGETS:
        able = "payload" in backends.registry()[name].supports
        assert (name in payload.split(";")[0]) == able, payload


def test_rule_hover_reads_the_rule_and_compiles_it_for_the_comment_targets() -> None:
    analysis = analyse(SourceFile("/tmp/edge.pf", EDGE))
    text = hover(analysis, EDGE.index("drop"))
    assert "drops UDP packets to 192.168.0.79 with destination port 12345" in text
    for target in analysis.config.targets:
        assert f"**{target}**" in text
    assert "-A PFC" in text or "iptables" not in backends.registry()
    assert "not expressible" not in text


def test_rule_hover_says_why_a_target_cannot_express_it() -> None:
    text = "# pfc: targets socket\nredirect udp dport 80 to 10.0.0.2:8080\n"
    analysis = analyse(SourceFile("/tmp/r.pf", text))
    out = hover(analysis, text.index("redirect"))
    assert "**socket** (c): not expressible: target `socket` cannot express `redirect`" in out


def test_hover_on_names_values_and_broken_rules() -> None:
    text = "define web = { 80, 443 }\ndrop tcp dport $web flags syn\ndrop udp dport $nope\n"
    analysis = analyse(SourceFile("/tmp/h.pf", text))
    assert "define web = { 80, 443 }" in hover(analysis, text.index("$web") + 2)
    assert "SYN" in hover(analysis, text.index("syn"))
    assert "has errors: `$nope` is not defined" in hover(analysis, text.index("drop udp"))
    assert hover(analysis, text.index("80")) is None


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.stem for e in EXAMPLES])
def test_hover_everywhere_in_every_example(example) -> None:
    analysis = analyse(SourceFile(str(example), example.read_text()))
    for offset in range(0, len(analysis.source.text), 3):
        hover(analysis, offset)


def test_forms_of_every_target_for_every_example_rule() -> None:
    for example in EXAMPLES:
        compiled = compile_text(example.read_text(), str(example))
        policy = compiled.require()
        for rule in policy.rules:
            for f in forms(rule, policy, tuple(TARGETS)):
                assert f.ok == (f.note.startswith("not expressible") is False)
                assert f.lines or not f.ok or f.format is None, (example, rule.line, f)


# ------------------------------------------------------------- analysis, targets

def test_target_comment_wins_and_unknown_targets_are_warned() -> None:
    text = "# policy\n# pfc: targets socket, nosuch\ncount\n"
    analysis = analyse(SourceFile("/tmp/t.pf", text), settings=("tc",))
    assert analysis.config.targets == ("socket",) and analysis.config.origin == "comment"
    warn = next(d for d in analysis.diagnostics if d.code == "unknown-target")
    assert text[warn.span.start:warn.span.end] == "nosuch"
    module = compile_text("count\n").module
    assert target_config(module, ("tc", "bogus")).targets == ("tc",)
    assert target_config(module, ()).origin == "none"


def test_capability_errors_only_once_the_front_end_is_clean() -> None:
    """As `pfc check --target T`: a syntax or type error hides the targets' limits."""
    redirect = "# pfc: targets iptables\nredirect udp dport 80 to 10.0.0.2:8080\n"
    clean = analyse(SourceFile("/tmp/c.pf", redirect))
    assert [d.code for d in clean.diagnostics] == ["unsupported"]
    for broken in ("drop udp dprot 53\n", "drop src $nope\n"):
        analysis = analyse(SourceFile("/tmp/c.pf", redirect + broken))
        assert [d.code for d in analysis.diagnostics] == [
            "syntax" if "dprot" in broken else "unknown-name"]


def _cli_view(diags) -> list[tuple]:
    return sorted((d.severity.value, d.code, d.span.start, d.span.end, d.message, d.hint)
                  for d in diags if d.code != "unknown-target")


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.stem for e in EXAMPLES])
@pytest.mark.parametrize("damage", ["", "drop udp dprot 53\n", "drop src $nope\n",
                                    "count udp\nredirect tcp to 10.0.0.9\n"])
def test_lsp_diagnostics_are_what_pfc_check_says(example, damage: str) -> None:
    """The editor's diagnostics for every target are `pfc check --target T`'s
    (pfc.api.check, which the command prints), with the file intact or damaged."""
    text = example.read_text() + damage
    for target in TARGETS:
        source = SourceFile(str(example), f"# pfc: targets {target}\n" + text)
        expected = pfc.api.check(compile_source(source), targets=[target])
        assert _cli_view(analyse(source).diagnostics) == _cli_view(expected), target


def test_set_file_errors_land_on_the_set_declaration(tmp_path) -> None:
    (tmp_path / "bad.txt").write_text("10.0.0.1\nnot-an-address\n")
    text = 'set bad = file "bad.txt"\ndrop src $bad\n'
    analysis = analyse(SourceFile(str(tmp_path / "p.pf"), text))
    diag = lsp_diagnostics(analysis, (tmp_path / "p.pf").as_uri())[0]
    assert diag.range == analysis.index.range(
        compile_text(text).module.statements[0].path.span)
    assert diag.message.startswith("line 2 of bad.txt: ")
    assert diag.related_information[0].location.uri == (tmp_path / "bad.txt").as_uri()
    assert diag.related_information[0].location.range.start == types.Position(1, 0)


@pytest.mark.parametrize("path", ["/dev/stdin", "/dev/zero", "/"])
def test_set_files_that_are_not_regular_files_are_refused(path: str) -> None:
    analysis = analyse(SourceFile("/tmp/s.pf", f'set s = file "{path}"\ndrop src $s\n'))
    assert [d.code for d in analysis.diagnostics] == ["set-file"]
    assert "not a regular file" in analysis.diagnostics[0].message


def test_lsp_diagnostic_fields() -> None:
    text = "define a = 1\ndefine a = 2\ndrop tcp dprot 22\ndrop\ndrop udp\n"
    analysis = analyse(SourceFile("/tmp/d.pf", text))
    by_code = {d.code: d for d in lsp_diagnostics(analysis, "file:///tmp/d.pf")}
    redefined = by_code["redefined"]
    assert redefined.source == "pfc" and redefined.severity == types.DiagnosticSeverity.Error
    assert redefined.related_information[0].message == "first defined here"
    assert redefined.related_information[0].location.range.start == types.Position(0, 7)
    assert "hint: did you mean `dport`?" in by_code["syntax"].message


def test_shadow_warning_is_tagged_unnecessary() -> None:
    analysis = analyse(SourceFile("/tmp/w.pf", "drop\ndrop udp\n"))
    (diag,) = lsp_diagnostics(analysis, "file:///tmp/w.pf")
    assert diag.code == "shadowed" and diag.severity == types.DiagnosticSeverity.Warning
    assert diag.tags == [types.DiagnosticTag.Unnecessary]
    assert diag.range == types.Range(types.Position(1, 0), types.Position(1, 8))


def test_definitions_and_references() -> None:
    text = ("define a = 10.0.0.1\ndefine b = { $a, 10.0.0.2 }\ndrop src $b dst $a\n"
            "redirect udp dst $a to $a:80\n")
    module = compile_text(text).module
    assert symbol_at(module, text.index("$b") + 1) == "b"
    assert symbol_at(module, text.index("a =")) == "a"
    assert symbol_at(module, text.index("drop")) is None
    assert [s.start for s in definitions(module)["a"]] == [text.index("a =")]
    uses = [s.start for n, s in references(module) if n == "a"]
    assert len(uses) == 4 and uses[0] == text.index("$a")


# ---------------------------------------------------------------- semantic tokens

def test_semantic_tokens_types_and_utf16_columns() -> None:
    text = '# café ✓\ndefine web = { 80 }\ndrop tcp dst 10.0.0.0/8 dport $web !flags syn\n' \
           'drop udp payload[0] == "😀" ttl 1 # 😀 x\n'
    tokens = [(line, col, length, kind) for line, col, length, kind, _ in decode(encode(text))]
    assert tokens[:4] == [(0, 0, 8, "comment"), (1, 0, 6, "keyword"), (1, 7, 3, "variable"),
                          (1, 15, 2, "number")]
    line2 = [k for line, _, _, k in tokens if line == 2]
    assert line2 == ["action", "protocol", "field", "address", "field", "variable",
                     "operator", "field", "enumMember"]
    line3 = [(c, n, k) for line, c, n, k in tokens if line == 3]
    assert (23, 4, "string") in line3  # "😀" is 4 UTF-16 units with its quotes
    assert (28, 3, "field") in line3 and (32, 1, "number") in line3
    assert line3[-1] == (34, 6, "comment")  # "# 😀 x"
    declaration = decode(encode("define web = 1\n"))[1]
    assert declaration[3:] == ("variable", 1)


# ------------------------------------------------------------------ robustness

@settings(derandomize=True, max_examples=60, deadline=None)
@given(policies(max_rules=4), st.data())
def test_every_feature_survives_damaged_policies(text: str, data) -> None:
    """Cut a generated policy anywhere and splice in junk: checking, hover, completion,
    tokens and formatting all answer, and diagnostics stay inside the text."""
    cut = data.draw(st.integers(0, len(text)))
    junk = data.draw(st.sampled_from(["", "{", "$", "!", '"', "\\\n", "😀", "[1:", "=="]))
    broken = text[:cut] + junk + text[cut + data.draw(st.integers(0, 3)):]
    analysis = analyse(SourceFile("/tmp/fuzz.pf", broken), settings=tuple(TARGETS))
    end = analysis.index.end()
    for diag in lsp_diagnostics(analysis, "file:///tmp/fuzz.pf"):
        assert (diag.range.end.line, diag.range.end.character) <= (end.line, end.character)
    for offset in range(0, len(broken) + 1, 4):
        hover(analysis, offset)
        items(context(broken, offset), {})
    decode(encode(broken))
    format_source(SourceFile("/tmp/fuzz.pf", broken))


# ------------------------------------------- hover with backends not written yet

def _fake_asm(policy: ir.Policy, options: Options) -> Artifact:
    """A stand-in classic BPF backend: `tcpdump -d` style, 3 instructions per rule."""
    lines = ["(000) ldh      [12]"]
    for n, rule in enumerate(policy.rules):
        lines += [f"({3 * n + 1:03d}) jeq      #0x800  # rule {rule.index}, line {rule.line}",
                  f"({3 * n + 2:03d}) ldb      [23]", f"({3 * n + 3:03d}) ret      #0"]
    lines.append(f"({3 * len(policy.rules) + 1:03d}) ret      #262144")
    text = "\n".join(lines) + "\n"
    return Artifact(options.target, "socket", "asm", text, {"x": text.encode()}, policy)


def _broken(policy: ir.Policy, options: Options) -> Artifact:
    raise KeyError("half-written backend")


@pytest.fixture
def fake_registry(monkeypatch):
    real = dict(backends.registry())
    fake = {**real,
            "fakebpf": Backend("fakebpf", "test", frozenset({"ipv6", "non-ip"}), ("asm", "bin"),
                               ("socket",), _fake_asm, binary_formats=frozenset({"bin"})),
            "boom": Backend("boom", "test", frozenset(FEATURES), ("txt",), ("x",), _broken)}
    monkeypatch.setattr(backends, "registry", lambda: fake)
    form.cache_clear()
    yield fake
    form.cache_clear()


def test_rule_hover_works_with_whatever_the_registry_holds(fake_registry) -> None:
    text = "# pfc: targets fakebpf, boom, tc\ndrop udp dport 53\ncount tcp\n"
    analysis = analyse(SourceFile("/tmp/f.pf", text))
    drop = hover(analysis, text.index("drop"))
    assert "**fakebpf** (asm) — 5 instructions" in drop and "jeq      #0x800" in drop
    assert "**boom** (txt): not compiled: the `boom` backend failed" in drop
    assert "**tc** (c)" in drop
    count = hover(analysis, text.index("count"))
    assert "**fakebpf** (asm): not expressible: target `fakebpf` cannot express `count`" \
        in count
    assert "fakebpf" in support_line({"ipv6"})
    assert re.search(r"not [^(]*\bfakebpf\b", support_line({"count"}))
    codes = [d.code for d in analysis.diagnostics]
    assert codes == ["unsupported"]  # fakebpf cannot count; boom and tc can
