"""A recording LSP client for the language server's end-to-end tests: pytest-lsp's
client keeping every diagnostics publish, and small helpers to open and change
documents and to wait (by polling, never a fixed sleep) for a version's diagnostics."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest_lsp
from lsprotocol import types
from pygls.protocol import default_converter
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities
from pytest_lsp.client import DEFAULT_CLIENT_FEATURES, register_lsp_features

PUBLISH = types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS


def recording_client() -> LanguageClient:
    """pytest-lsp's client, keeping every diagnostics publish (with its version)."""
    client = LanguageClient(converter_factory=default_converter)
    register_lsp_features(client, {m: f for m, f in DEFAULT_CLIENT_FEATURES.items()
                                   if m != PUBLISH})
    client.published = []

    @client.feature(PUBLISH)
    def publish(ls: LanguageClient, params: types.PublishDiagnosticsParams) -> None:
        ls.diagnostics[params.uri] = params.diagnostics
        ls.published.append(params)

    return client


async def published(client: LanguageClient, uri: str, version: int,
                    timeout: float = 15.0) -> list[types.Diagnostic]:
    """The diagnostics published for one version of a document (waits for them)."""
    async def wait():
        while True:
            for p in reversed(client.published):
                if p.uri == uri and p.version == version:
                    return list(p.diagnostics)
            await asyncio.sleep(0.003)
    return await asyncio.wait_for(wait(), timeout)


async def open_doc(client: LanguageClient, path: Path, text: str) -> str:
    uri = path.as_uri()
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        types.TextDocumentItem(uri, "pfc", 1, text)))
    await published(client, uri, 1)
    return uri


def change(client: LanguageClient, uri: str, version: int, text: str) -> None:
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        types.VersionedTextDocumentIdentifier(version, uri),
        [types.TextDocumentContentChangeWholeDocument(text)]))


def doc(uri: str) -> types.TextDocumentIdentifier:
    return types.TextDocumentIdentifier(uri)


def pos(line: int, character: int) -> types.Position:
    return types.Position(line, character)


def utf16_end(text: str) -> types.Position:
    """The LSP position of the end of ``text``, computed independently of the server."""
    lines = text.split("\n")
    return pos(len(lines) - 1, len(lines[-1].encode("utf-16-le")) // 2)


async def until(predicate) -> None:
    while not predicate():
        await asyncio.sleep(0.01)


def session(name: str, command: list[str], editor: str = "visual-studio-code",
            options: object = None):
    """A pytest-lsp fixture called ``name``: the server run by ``command``, initialized
    as ``editor`` would (its capabilities) with ``options`` as initializationOptions;
    the server's capabilities are kept on the client."""
    config = ClientServerConfig(server_command=command, client_factory=recording_client)

    @pytest_lsp.fixture(config=config, name=name)
    async def started(lsp_client: LanguageClient):
        result = await lsp_client.initialize_session(types.InitializeParams(
            capabilities=client_capabilities(editor), initialization_options=options))
        lsp_client.server_capabilities = result.capabilities
        yield
        await lsp_client.shutdown_session()

    return started
