"""The language server end to end: ``python -m pfc.lsp`` as a subprocess, driven over
stdio by pytest-lsp's client (a real LSP client: JSON-RPC framing, initialize, and the
positions as the client sends them, 0-based and in UTF-16 code units)."""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from pathlib import Path

import pytest
from lsprotocol import types
from pytest_lsp import LanguageClient

from pfc.frontend.fmt import format_source
from pfc.frontend.pipeline import compile_path
from pfc.frontend.source import SourceFile
from pfc.lsp.tokens import decode
from tests.paths import EXAMPLES
from tests.tools.lsp_session import (
    change,
    doc,
    open_doc,
    pos,
    published,
    session,
    until,
    utf16_end,
)

pytestmark = pytest.mark.asyncio
SERVER = [sys.executable, "-m", "pfc.lsp"]
client = session("client", SERVER)
# A session started with ``initializationOptions: {"pfc": {"targets": ["socket"]}}``.
targeted = session("targeted", SERVER, options={"pfc": {"targets": ["socket"]}})

# `pfc lsp` as the CLI runs it: the Command's argument parser and handler.
VIA_COMMAND = [sys.executable, "-c",
               "import argparse, sys\n"
               "from pfc.cli.lsp import LSP\n"
               "parser = argparse.ArgumentParser()\n"
               "LSP.arguments(parser)\n"
               "sys.exit(LSP.handler(parser.parse_args(['--stdio'])))\n"]
via_command = session("via_command", VIA_COMMAND, "neovim")

# The server with every change checked at once however long a check takes (a busy
# machine makes the small examples "slow", and slow documents are debounced): the typing
# replay expects one publish per keystroke. Debouncing has its own test (5,000 rules).
INLINE = [sys.executable, "-c",
          "import math, sys\n"
          "import pfc.lsp.server as server\n"
          "server.INLINE_LIMIT = server.BIG_TEXT = math.inf\n"
          "sys.exit(server.main())\n"]
typist = session("typist", INLINE)


# ------------------------------------------------------------------ diagnostics

async def test_capabilities(client: LanguageClient) -> None:
    caps = client.server_capabilities
    assert caps.position_encoding == types.PositionEncodingKind.Utf16
    assert caps.hover_provider and caps.definition_provider and caps.references_provider
    assert caps.document_formatting_provider
    assert "$" in caps.completion_provider.trigger_characters
    assert "protocol" in caps.semantic_tokens_provider.legend.token_types


async def test_diagnostics_ranges_are_utf16(client: LanguageClient, tmp_path: Path) -> None:
    text = ('# café ✓\n'
            'drop udp payload[0:4] == "😀" dprot 53\n'
            'drop src $nope\n')
    uri = await open_doc(client, tmp_path / "u.pf", text)
    diags = {d.code: d for d in await published(client, uri, 1)}
    syntax = diags["syntax"]
    col = len('drop udp payload[0:4] == "😀" '.encode("utf-16-le")) // 2
    assert syntax.range == types.Range(pos(1, col), pos(1, col + 5))
    assert syntax.source == "pfc" and "hint: did you mean `dport`?" in syntax.message
    unknown = diags["unknown-name"]
    assert unknown.range == types.Range(pos(2, 9), pos(2, 14))
    change(client, uri, 2, text.replace("dprot", "dport").replace("$nope", "10.0.0.1"))
    assert await published(client, uri, 2) == []


async def test_notes_become_related_information(client: LanguageClient, tmp_path) -> None:
    uri = await open_doc(client, tmp_path / "n.pf", "define a = 1\ndefine a = 2\n")
    (redefined,) = await published(client, uri, 1)
    assert redefined.related_information[0] == types.DiagnosticRelatedInformation(
        types.Location(uri, types.Range(pos(0, 7), pos(0, 8))), "first defined here")
    uri = await open_doc(client, tmp_path / "w.pf", "define a = 1\n\ndrop\ndrop tcp\n")
    (shadowed,) = await published(client, uri, 1)
    assert shadowed.code == "shadowed" and list(shadowed.tags) == [types.DiagnosticTag.Unnecessary]
    assert shadowed.severity == types.DiagnosticSeverity.Warning
    assert shadowed.range == types.Range(pos(3, 0), pos(3, 8))
    assert shadowed.related_information[0].location.range.start == pos(2, 0)


async def test_targets_from_settings_and_comment(client: LanguageClient, tmp_path) -> None:
    text = "count udp\nredirect udp dport 80 to 10.0.0.2:8080\n"
    uri = await open_doc(client, tmp_path / "t.pf", text)
    assert await published(client, uri, 1) == []
    # pushed settings: the socket target cannot redirect (it can count)
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(
        {"pfc": {"targets": ["socket"]}}))
    await asyncio.wait_for(until(lambda: client.diagnostics.get(uri)), 10)
    (diag,) = client.diagnostics[uri]
    assert diag.code == "unsupported" and "`socket`" in diag.message
    assert diag.range.start == pos(1, 0)
    # the comment wins over the setting
    change(client, uri, 2, "# pfc: targets xdp\n" + text)
    assert await published(client, uri, 2) == []
    # pulled settings (workspace/configuration) after a change notification without any
    client.set_configuration({"targets": "tc, nosuch"}, section="pfc")
    change(client, uri, 3, text)
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(None))
    await asyncio.wait_for(until(lambda: any(
        d.code == "unknown-target" for d in client.diagnostics.get(uri, []))), 10)


async def test_initialization_options_set_targets(targeted: LanguageClient, tmp_path) -> None:
    uri = await open_doc(targeted, tmp_path / "i.pf", "redirect udp to 10.0.0.2\n")
    (diag,) = await published(targeted, uri, 1)
    assert diag.code == "unsupported" and "hint: targets that can:" in diag.message


async def test_the_cli_command_serves(via_command: LanguageClient, tmp_path: Path) -> None:
    uri = await open_doc(via_command, tmp_path / "v.pf", "drop tcp dport $nope\n")
    (diag,) = await published(via_command, uri, 1)
    assert diag.code == "unknown-name" and diag.range.start == pos(0, 15)


async def test_set_file_on_a_device_does_not_hang(client: LanguageClient, tmp_path) -> None:
    uri = await open_doc(client, tmp_path / "s.pf", 'set s = file "/dev/stdin"\ndrop src $s\n')
    (diag,) = await published(client, uri, 1)
    assert diag.code == "set-file" and "not a regular file" in diag.message


# ------------------------------------------------------------- hover, completion

EDGE = """# pfc: targets xdp, iptables
define dut = 192.168.0.79  # café ✓
drop udp dst $dut dport 12345
"""


async def test_hover_on_rule_and_field(client: LanguageClient, tmp_path: Path) -> None:
    uri = await open_doc(client, tmp_path / "e.pf", EDGE)
    rule = await client.text_document_hover_async(types.HoverParams(doc(uri), pos(2, 1)))
    text = rule.contents.value
    assert "drops UDP packets to 192.168.0.79 with destination port 12345" in text
    assert "**xdp** (c)" in text and "**iptables**" in text
    field = await client.text_document_hover_async(types.HoverParams(doc(uri), pos(2, 20)))
    assert "TCP/UDP destination port" in field.contents.value
    name = await client.text_document_hover_async(types.HoverParams(doc(uri), pos(2, 15)))
    assert "define dut = 192.168.0.79" in name.contents.value
    blank = await client.text_document_hover_async(types.HoverParams(doc(uri), pos(1, 30)))
    assert blank is None  # in the comment


async def complete(client: LanguageClient, uri: str, line: int, character: int) -> list[str]:
    result = await client.text_document_completion_async(
        types.CompletionParams(doc(uri), pos(line, character)))
    return [i.label for i in result.items]


async def test_completion(client: LanguageClient, tmp_path: Path) -> None:
    text = ("define web = { 80, 443 }  # ✓😀\n"
            "drop udp \n"
            "drop tcp \n"
            "drop tcp flags syn,\n"
            "pass tcp dport $w\n"
            "count icmp6 icmp-type \n"
            "count icmp icmp-type \n"
            "drop proto \n"
            'drop tcp payload[0:4] == "😀" fl\n')
    uri = await open_doc(client, tmp_path / "c.pf", text)
    udp = await complete(client, uri, 1, 9)
    assert {"sport", "dport", "payload"} <= set(udp) and "flags" not in udp
    assert "flags" in await complete(client, uri, 2, 9)
    flags = await complete(client, uri, 3, 19)
    assert "ack" in flags and "syn" not in flags
    result = await client.text_document_completion_async(
        types.CompletionParams(doc(uri), pos(4, 17)))
    (web,) = result.items
    assert web.label == "$web" and web.text_edit.range == types.Range(pos(4, 15), pos(4, 17))
    icmp6 = await complete(client, uri, 5, 22)
    assert "nd-neighbor-solicit" in icmp6 and "source-quench" not in icmp6
    icmp = await complete(client, uri, 6, 21)
    assert "source-quench" in icmp and "nd-neighbor-solicit" not in icmp
    assert "gre" in await complete(client, uri, 7, 11)
    line8 = 'drop tcp payload[0:4] == "😀" fl'
    result = await client.text_document_completion_async(
        types.CompletionParams(doc(uri), pos(8, utf16_end(line8).character)))
    flags = next(i for i in result.items if i.label == "flags")
    assert flags.text_edit.range == types.Range(pos(8, 30), pos(8, 32))  # 😀 is 2 units
    assert "drop" in await complete(client, uri, 1, 0)
    assert await complete(client, uri, 0, 29) == []  # inside the comment, after ✓


# ------------------------------------------------------------------ formatting

async def test_formatting(client: LanguageClient, tmp_path: Path) -> None:
    messy = "define  web={80,443}\ndrop   tcp dport $web   # ✓ x\n\n\n\naccept udp\n"
    uri = await open_doc(client, tmp_path / "f.pf", messy)
    options = types.FormattingOptions(tab_size=4, insert_spaces=True)
    edits = await client.text_document_formatting_async(
        types.DocumentFormattingParams(doc(uri), options))
    (edit,) = edits
    assert edit.range == types.Range(pos(0, 0), utf16_end(messy))
    expected, _ = format_source(SourceFile("f.pf", messy))
    assert edit.new_text == expected
    change(client, uri, 2, expected)
    await published(client, uri, 2)
    assert not await client.text_document_formatting_async(
        types.DocumentFormattingParams(doc(uri), options))
    change(client, uri, 3, expected + "drop tcp dport {\n")
    await published(client, uri, 3)
    assert not await client.text_document_formatting_async(
        types.DocumentFormattingParams(doc(uri), options))


# --------------------------------------------------------- definition, references

NAMES = """define a = 10.0.0.1  # ✓😀
define b = { $a, 10.0.0.2 }
drop src $b dst $a
redirect udp dst $a to $a:80
"""


async def test_definition_and_references(client: LanguageClient, tmp_path: Path) -> None:
    uri = await open_doc(client, tmp_path / "d.pf", NAMES)
    found = await client.text_document_definition_async(
        types.DefinitionParams(doc(uri), pos(2, 17)))
    assert list(found) == [types.Location(uri, types.Range(pos(0, 7), pos(0, 8)))]
    refs = await client.text_document_references_async(types.ReferenceParams(
        text_document=doc(uri), position=pos(0, 7),
        context=types.ReferenceContext(include_declaration=True)))
    starts = [(r.range.start.line, r.range.start.character) for r in refs]
    assert starts == [(0, 7), (1, 13), (2, 16), (3, 17), (3, 23)]
    refs = await client.text_document_references_async(types.ReferenceParams(
        text_document=doc(uri), position=pos(1, 7),
        context=types.ReferenceContext(include_declaration=False)))
    assert [r.range for r in refs] == [types.Range(pos(2, 9), pos(2, 11))]
    assert await client.text_document_definition_async(
        types.DefinitionParams(doc(uri), pos(2, 1))) is None


# ------------------------------------------------------------------ semantic tokens

async def test_semantic_tokens(client: LanguageClient, tmp_path: Path) -> None:
    text = "# ✓😀\ndefine web = { 80 }\ndrop tcp dst 10.0.0.0/8 dport $web !flags syn\n"
    uri = await open_doc(client, tmp_path / "s.pf", text)
    result = await client.text_document_semantic_tokens_full_async(
        types.SemanticTokensParams(doc(uri)))
    tokens = [(line, col, n, kind) for line, col, n, kind, _ in decode(result.data)]
    assert tokens[0] == (0, 0, 5, "comment")  # 3 characters, 5 UTF-16 units
    assert [k for line, _, _, k in tokens if line == 2] == [
        "action", "protocol", "field", "address", "field", "variable", "operator", "field",
        "enumMember"]


# ------------------------------------------------------------------ typing replay

@pytest.mark.parametrize("example", EXAMPLES, ids=[e.stem for e in EXAMPLES])
async def test_typing_every_example_character_by_character(typist: LanguageClient,
                                                           example: Path) -> None:
    """Every keystroke state gets its diagnostics; completion answers at every line end;
    no error reaches the client; the final state's diagnostics are the CLI's."""
    text = example.read_text()
    uri = example.as_uri()
    started = time.perf_counter()
    typist.text_document_did_open(types.DidOpenTextDocumentParams(
        types.TextDocumentItem(uri, "pfc", 0, "")))
    for i in range(1, len(text) + 1):
        prefix = text[:i - 1]
        end = utf16_end(prefix)
        typist.text_document_did_change(types.DidChangeTextDocumentParams(
            types.VersionedTextDocumentIdentifier(i, uri),
            [types.TextDocumentContentChangePartial(types.Range(end, end), text[i - 1])]))
        if text[i - 1] in "\n $,":
            result = await asyncio.wait_for(typist.text_document_completion_async(
                types.CompletionParams(doc(uri), utf16_end(text[:i]))), 10)
            assert isinstance(result, types.CompletionList)
    final = await published(typist, uri, len(text))
    versions = {p.version for p in typist.published if p.uri == uri}
    assert versions == set(range(len(text) + 1))
    assert not [m for m in typist.messages if m.type == types.MessageType.Error]
    assert len(final) == len(compile_path(example).diagnostics)
    print(f"{example.name}: {len(text)} keystrokes in {time.perf_counter() - started:.1f} s")


# ------------------------------------------------------------------ 5,000 rules

def big_policy(rules: int = 5000) -> str:
    lines = ["# generated: 5,000 rules", "define web = { 80, 443 }", "default pass", ""]
    for i in range(rules):
        kind = i % 4
        if kind == 0:
            lines.append(f"drop tcp src 10.{i // 250}.{i % 250}.0/24 dport {1000 + i}")
        elif kind == 1:
            lines.append(f"pass udp dst 192.168.{i % 250}.{i // 250} sport {2000 + i}")
        elif kind == 2:
            lines.append(f"count icmp src 172.16.{i % 250}.{i // 250} icmp-type echo-request")
        else:
            lines.append(f"drop dst 10.200.{i % 250}.{i // 250} ttl {1 + i % 200}")
    return "\n".join(lines) + "\n"


async def test_a_5000_rule_file_stays_responsive(client: LanguageClient,
                                                tmp_path: Path) -> None:
    """didChange -> publishDiagnostics, completion and hover on 5,000 rules: completion
    answers while a check runs (checks are debounced and run off the event loop), every
    version gets its diagnostics. The latencies are printed (`pytest -s`), not asserted:
    timing bounds do not belong in unit tests."""
    text = big_policy()
    uri = await open_doc(client, tmp_path / "big.pf", text)
    line = 4 + 2600
    timings: dict[str, list[float]] = {"publish": [], "completion": [], "hover": []}
    for version in (2, 3):
        broken = text.replace("dport 3600\n", "dport\n") if version == 2 else text
        started = time.perf_counter()
        change(client, uri, version, broken)
        for _ in range(3):
            t = time.perf_counter()
            items = await complete(client, uri, line, 9)
            timings["completion"].append(time.perf_counter() - t)
            assert "dport" in items
            await asyncio.sleep(0.2)
        diags = await published(client, uri, version, timeout=30)
        timings["publish"].append(time.perf_counter() - started)
        assert len(diags) == (1 if version == 2 else 0)
    for k in range(3):
        t = time.perf_counter()
        hover = await client.text_document_hover_async(types.HoverParams(doc(uri),
                                                                          pos(3000 + k, 1)))
        timings["hover"].append(time.perf_counter() - t)
        assert "rule at line" in hover.contents.value
    print({k: [round(x, 3) for x in v] for k, v in timings.items()},
          {k: round(statistics.median(v), 3) for k, v in timings.items()})
