"""The language server's save lens: what an edit changes, against the last save."""

from __future__ import annotations

import asyncio
import sys

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

from pfc.prove.lsp import Saves, edit_summary

OLD = "default pass\ndrop udp dport 53\npass tcp dport 80\n"


def test_edit_summary_names_the_changed_regions() -> None:
    changed = edit_summary(OLD, OLD.replace("53", "54"), "x.pf")
    assert changed.startswith("this edit changes the verdict of: ")
    assert "udp dport 53: drop → pass" in changed and "udp dport 54: pass → drop" in changed
    moved = "default pass\npass tcp dport 80\ndrop udp dport 53\n"
    assert edit_summary(OLD, moved, "x.pf") == "this edit changes no verdict, counter or rewrite"
    assert edit_summary(OLD, "drop udp dprot 53\n", "x.pf") is None


def test_saves_diff_against_the_last_save() -> None:
    saves = Saves()
    saves.opened("u", OLD)
    first = saves.saved("u", "x.pf", OLD.replace("53", "54"))
    assert "dport 54" in first
    assert saves.saved("u", "x.pf", OLD.replace("53", "54")) is None  # nothing new saved
    assert "u" not in saves.summaries


@pytest_lsp.fixture(config=ClientServerConfig(server_command=[sys.executable, "-m", "pfc.lsp"]))
async def client(lsp_client: LanguageClient):
    await lsp_client.initialize_session(types.InitializeParams(
        capabilities=client_capabilities("visual-studio-code")))
    yield
    await lsp_client.shutdown_session()


@pytest.mark.asyncio
async def test_the_server_shows_the_edit_as_a_code_lens(client: LanguageClient, tmp_path) -> None:
    uri = (tmp_path / "edge.pf").as_uri()
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        types.TextDocumentItem(uri, "pfc", 1, OLD)))
    empty = await client.text_document_code_lens_async(
        types.CodeLensParams(types.TextDocumentIdentifier(uri)))
    assert not empty
    new = OLD.replace("53", "54")
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        types.VersionedTextDocumentIdentifier(version=2, uri=uri),
        [types.TextDocumentContentChangeWholeDocument(new)]))
    client.text_document_did_save(types.DidSaveTextDocumentParams(
        types.TextDocumentIdentifier(uri), new))
    for _ in range(100):
        lenses = await client.text_document_code_lens_async(
            types.CodeLensParams(types.TextDocumentIdentifier(uri)))
        if lenses:
            break
        await asyncio.sleep(0.1)
    assert lenses and "udp dport 54: pass → drop" in lenses[0].command.title
