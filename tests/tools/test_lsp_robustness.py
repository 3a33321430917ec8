"""The language server never answers "Error in server" and never prints a traceback:
front-end crashes (the fuzzer's reproducers, and a front end made to raise), handlers
that raise, and malformed JSON-RPC on stdin (new-user trial 7j; fuzz-and-faults §7)."""

from __future__ import annotations

import inspect
import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest
from lsprotocol import types
from pytest_lsp import LanguageClient

from pfc.lsp import guard
from tests.tools.lsp_session import change, doc, open_doc, pos, published, session

# The fuzzer's front-end crash reproducers (fuzz-and-faults.md §7), as an editor that
# auto-closes quotes sends them while the user types.
CRASHERS = [
    'drop udp payload[0] == "\\x"\n',
    'drop udp payload[0] == "\\x4"\n',
    'drop udp payload[0] == "\\xZZ"\n',
    "drop udp dport " + "9" * 4301 + "\n",
    "drop udp dport 1-" + "9" * 4301 + "\n",
    "drop udp dport 0x" + "f" * 3600 + "\n",
    "drop src 10.0.0.0/" + "9" * 4301 + "\n",
    "drop udp payload[0x" + "f" * 3600 + "] == 1\n",
    "drop udp payload[0] == 0x" + "f" * 3600 + "\n",
    'set s = file "a\0b"\ndrop src $s\n',
    'set s = file "nul.txt"\ndrop src $s\n',  # the set file's entry holds a NUL
    'drop udp payload[0] == "\ud800"\n',  # a lone surrogate: JSON can carry it
]


def errors_shown(client: LanguageClient) -> list[str]:
    """What the server asked the editor to show as an error (pygls' "Error in server")."""
    return [m.message for m in client.messages if m.type == types.MessageType.Error]


client = session("client", [sys.executable, "-m", "pfc.lsp"], "neovim")


@pytest.mark.asyncio
async def test_fuzz_reproducers_get_diagnostics_not_errors(client: LanguageClient,
                                                           tmp_path: Path) -> None:
    """Each crasher opened and typed into: every version gets its diagnostics (an error
    on the text, or the ``internal`` one while the front end still crashes on it), the
    editor is shown no error, and the next good text is clean again."""
    (tmp_path / "nul.txt").write_bytes(b"10.0.0.1\0\n")
    for n, text in enumerate(CRASHERS):
        uri = await open_doc(client, tmp_path / f"c{n}.pf", text)
        diags = await published(client, uri, 1)
        assert diags and diags[0].severity == types.DiagnosticSeverity.Error, text[:40]
        change(client, uri, 2, "drop udp\n" + text)
        assert await published(client, uri, 2), text[:40]
        hover = await client.text_document_hover_async(types.HoverParams(doc(uri), pos(1, 1)))
        assert hover is None or hover.contents.value
        change(client, uri, 3, "drop udp dport 53\n")
        assert await published(client, uri, 3) == []
    assert errors_shown(client) == []


# A server whose front end raises on any text holding "BOOM" (as an unfixed crash does),
# whose diagnostics cannot be converted for a text holding "RANGE", and whose hover and
# semantic tokens always raise.
FAULTY = [sys.executable, "-c", """
import sys
import pfc.lsp.analysis as analysis
import pfc.lsp.server as server

real = analysis.compile_source

def compile_source(source, **kwargs):
    if "BOOM" in source.text:
        raise ValueError("invalid \\\\x escape")
    return real(source, **kwargs)

def broken(*args, **kwargs):
    raise KeyError("half-written feature")

real_lsp = server.lsp_diagnostics

def lsp_diagnostics(checked, uri):
    if "RANGE" in checked.source.text and checked.diagnostics[0].code != "internal":
        raise IndexError("position out of range")
    return real_lsp(checked, uri)

analysis.compile_source = compile_source
server.hover = server.encode = broken
server.lsp_diagnostics = lsp_diagnostics
sys.exit(server.main())
"""]


faulty = session("faulty", FAULTY)


@pytest.mark.asyncio
async def test_a_raising_front_end_and_handlers_give_empty_answers(faulty: LanguageClient,
                                                                  tmp_path: Path) -> None:
    uri = await open_doc(faulty, tmp_path / "b.pf", "drop udp dport 53  # BOOM\n")
    (diag,) = await published(faulty, uri, 1)
    assert diag.code == "internal" and diag.severity == types.DiagnosticSeverity.Error
    assert "ValueError: invalid \\x escape" in diag.message and "pfc bug" in diag.message
    assert diag.range == types.Range(pos(0, 0), pos(0, 0))
    assert await faulty.text_document_hover_async(types.HoverParams(doc(uri), pos(0, 1))) \
        is None
    tokens = await faulty.text_document_semantic_tokens_full_async(
        types.SemanticTokensParams(doc(uri)))
    assert list(tokens.data) == []
    result = await faulty.text_document_completion_async(
        types.CompletionParams(doc(uri), pos(0, 9)))
    assert "dport" in [i.label for i in result.items]  # completion reads the line
    assert await faulty.text_document_definition_async(
        types.DefinitionParams(doc(uri), pos(0, 1))) is None
    change(faulty, uri, 2, "drop udp dport 53\ndrop udp dport 53\n")
    assert [d.code for d in await published(faulty, uri, 2)] == ["shadowed"]
    change(faulty, uri, 3, "drop udp dport 53\ndrop udp dport 53  # RANGE\n")
    (diag,) = await published(faulty, uri, 3)
    assert diag.code == "internal" and "IndexError: position out of range" in diag.message
    assert errors_shown(faulty) == []


# ------------------------------------------------------------ malformed JSON-RPC

def frame(body: bytes | dict) -> bytes:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return b"Content-Length: %d\r\n\r\n" % len(data) + data


def frames_out(stdout: bytes) -> list[dict]:
    """The JSON-RPC messages in the server's stdout."""
    out = []
    while stdout:
        head, _, rest = stdout.partition(b"\r\n\r\n")
        length = int(head.split(b"Content-Length:")[1].split(b"\r\n")[0])
        out.append(json.loads(rest[:length]))
        stdout = rest[length:]
    return out


def request(n: int, method: str, params: dict | None = None) -> dict:
    return {"jsonrpc": "2.0", "id": n, "method": method, "params": params}


def test_malformed_json_rpc_is_answered_with_one_line_logs(tmp_path: Path) -> None:
    """Not JSON, not UTF-8, not an object, parameters of the wrong shape: requests get
    JSON-RPC errors, the server goes on serving, stderr has one line per problem and no
    traceback."""
    uri = (tmp_path / "m.pf").as_uri()
    opened = {"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {
        "textDocument": {"uri": uri, "languageId": "pfc", "version": 1,
                         "text": "drop tcp dprot 22\n"}}}
    stdin = b"".join([
        frame(request(1, "initialize", {"capabilities": {}, "processId": None})),
        frame({"jsonrpc": "2.0", "method": "initialized", "params": {}}),
        frame(b"{not json"),
        frame(b'{"jsonrpc": "2.0", "method": "\xff\xfe"}'),
        frame(b"[1, 2, 3]"),
        frame(b'"\\u001b[31mred"'),
        frame(request(2, "textDocument/hover", {"bogus": 1})),
        frame({"jsonrpc": "2.0", "method": "textDocument/didChange", "params": {"x": None}}),
        frame({"jsonrpc": "2.0", "method": "textDocument/didChange", "params": {  # not open
            "textDocument": {"uri": uri + "x", "version": 2},
            "contentChanges": [{"text": "drop\n"}]}}),
        frame(request(5, "pfc/nosuch", {})),
        frame(opened),
        frame(request(3, "textDocument/hover", {"textDocument": {"uri": uri},
                                                "position": {"line": 0, "character": 1}})),
        frame(request(4, "shutdown")),
        frame({"jsonrpc": "2.0", "method": "exit"}),
    ])
    run = subprocess.run([sys.executable, "-m", "pfc.lsp"], input=stdin,
                         capture_output=True, timeout=120, check=False)
    out = frames_out(run.stdout)
    answers = {m["id"]: m for m in out if "id" in m and "method" not in m}
    assert "capabilities" in answers[1]["result"]
    assert answers[2]["error"]["code"] == -32602  # InvalidParams
    assert "**drop**" in answers[3]["result"]["contents"]["value"]
    assert "result" in answers[4]
    diags = [m for m in out if m.get("method") == "textDocument/publishDiagnostics"]
    assert diags and diags[-1]["params"]["diagnostics"][0]["code"] == "syntax"
    assert answers[5]["error"]["code"] == -32601  # MethodNotFound
    assert sorted(answers) == [1, 2, 3, 4, 5] and len(out) == 5 + len(diags)  # nothing else
    stderr = run.stderr.decode()
    assert "Traceback" not in stderr and "\x1b" not in stderr
    lines = stderr.splitlines()
    assert lines and all(line.startswith("pfc lsp: ") for line in lines), stderr
    assert any("KeyError" in line and "FeatureNotificationError" in line for line in lines)
    assert run.returncode == 0


# ------------------------------------------------------------------ the guard itself

def test_one_line_log_records() -> None:
    try:
        int("9" * 5000)
    except ValueError:
        record = logging.LogRecord("pfc.lsp", logging.ERROR, __file__, 1,
                                   "checking %s failed\nsecond line", ("a\x1b[31m.pf",),
                                   sys.exc_info())
    line = guard.OneLine().format(record)
    assert line.startswith("pfc lsp: error: checking a\\x1b[31m.pf failed: ValueError: ")
    assert "\n" not in line and "Traceback" not in line and len(line) <= guard.LINE_LIMIT


@pytest.mark.asyncio
async def test_guarded_handlers_log_and_answer_empty(caplog) -> None:
    @guard.guarded(list)
    def plain(ls, params):
        raise KeyError(params)

    @guard.guarded()
    async def coroutine(ls, params):
        raise ValueError(params)

    assert plain(None, 1) == [] and await coroutine(None, 2) is None
    assert [r.getMessage() for r in caplog.records] == [
        "plain failed; answered with an empty result",
        "coroutine failed; answered with an empty result"]
    assert all(r.exc_info for r in caplog.records)  # the --log file gets the traceback
    assert inspect.iscoroutinefunction(coroutine)
    assert list(inspect.signature(plain).parameters) == ["ls", "params"]
