"""``pfc lsp``: the language server for ``.pf`` files (pygls 2, stdio).

A thin layer over the compiler: diagnostics come from :func:`pfc.frontend.pipeline.compile_source`
plus :func:`pfc.backends.base.capability_errors` for the configured targets
(:mod:`pfc.lsp.analysis`), formatting is :func:`pfc.frontend.fmt.format_source`, hover and
completion read the field catalogue and the backend registry (:mod:`pfc.lsp.hover`,
:mod:`pfc.lsp.complete`), highlighting the grammar's terminals (:mod:`pfc.lsp.tokens`).

Latency (measured on a 2-core VM, 5,000-rule file): one full check costs about a
second (lark parsing dominates), so a document whose last check took longer than
``INLINE_LIMIT`` is checked ``DEBOUNCE`` seconds after typing pauses, in a worker
thread; smaller documents are checked at every change and get a publish per version.
Completion never waits for a check: it reads the line being typed.

Robustness (:mod:`pfc.lsp.guard`): every handler is :func:`~pfc.lsp.guard.guarded` (an
exception is logged and answered with an empty result), a check that raises publishes
one ``internal`` diagnostic (:func:`pfc.lsp.analysis.failed`), malformed JSON-RPC is
answered or ignored with one line on stderr, and the editor is never sent "Error in
server".

Run with ``pfc lsp`` or ``python -m pfc.lsp``.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata
from pathlib import Path

from lsprotocol import types
from pygls import uris
from pygls.lsp.server import LanguageServer

from pfc.frontend.fmt import format_source
from pfc.frontend.source import SourceFile
from pfc.lsp import guard
from pfc.lsp.analysis import (
    Analysis,
    analyse,
    definitions,
    failed,
    lsp_diagnostics,
    references,
    symbol_at,
)
from pfc.lsp.complete import completion_list, no_items
from pfc.lsp.firewall import chain_at, chain_definitions, chain_uses, folding_ranges
from pfc.lsp.hover import hover
from pfc.lsp.text import UTF16, LineIndex
from pfc.lsp.tokens import TOKEN_MODIFIERS, TOKEN_TYPES, encode

INLINE_LIMIT = 0.15  # seconds: checks faster than this run at every change
DEBOUNCE = 0.3  # seconds of quiet before a slow document is checked again
SWITCH_INTERVAL = 0.0005  # seconds (Python's default is 0.005)
BIG_TEXT = 50_000  # characters: a document this big is assumed slow before its 1st check
log = logging.getLogger("pfc.lsp")


class PfcServer(LanguageServer):
    """Documents' latest checks, pending debounced checks and the target setting."""

    def __init__(self) -> None:
        super().__init__("pfc", _version(), protocol_cls=guard.Protocol,
                         text_document_sync_kind=types.TextDocumentSyncKind.Incremental)
        self.settings: tuple[str, ...] = ()
        self.analyses: dict[str, Analysis] = {}
        self.pending: dict[str, asyncio.Task] = {}
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pfc-lsp")

    @property
    def encoding(self) -> str:
        enc = self.workspace.position_encoding
        return str(getattr(enc, "value", enc) or UTF16)

    def report_server_error(self, error: Exception, source: type) -> None:
        guard.report_server_error(self, error, source)

    # ------------------------------------------------------------------ checking

    def check(self, uri: str, text: str, version: int | None) -> Analysis:
        """The document checked; never raises (a crash is an ``internal`` diagnostic)."""
        source = SourceFile(doc_name(uri), text)
        try:
            return analyse(source, version, self.settings, encoding=self.encoding)
        except Exception as exc:  # noqa: BLE001 - any front-end bug
            log.error("checking %s (version %s) failed", uri, version, exc_info=exc)
            return failed(source, version, self.settings, exc, self.encoding)

    def changed(self, uri: str) -> None:
        """A document opened or changed: check now if checks are fast, else debounce."""
        doc = self.workspace.get_text_document(uri)
        text, version = doc.source, doc.version
        last = self.analyses.get(uri)
        slow = last.elapsed > INLINE_LIMIT if last else len(text) > BIG_TEXT
        task = self.pending.pop(uri, None)
        if task is not None:
            task.cancel()
        if not slow:
            self.publish(uri, self.check(uri, text, version))
        else:
            self.pending[uri] = asyncio.ensure_future(self._check_later(uri, text, version))

    async def _check_later(self, uri: str, text: str, version: int | None) -> None:
        await asyncio.sleep(DEBOUNCE)
        loop = asyncio.get_running_loop()
        analysis = await loop.run_in_executor(self.pool, self.check, uri, text, version)
        self.pending.pop(uri, None)
        self.publish(uri, analysis)

    def publish(self, uri: str, analysis: Analysis) -> None:
        """Store and publish a check, unless a newer version's is already out."""
        last = self.analyses.get(uri)
        if last is not None and (analysis.version or 0) < (last.version or 0):
            return
        self.analyses[uri] = analysis
        try:
            diagnostics = lsp_diagnostics(analysis, uri)
        except Exception as exc:  # noqa: BLE001 - a position bug must not hide the rest
            log.error("converting diagnostics of %s failed", uri, exc_info=exc)
            diagnostics = lsp_diagnostics(failed(analysis.source, analysis.version,
                                                 analysis.settings, exc, analysis.encoding),
                                          uri)
        self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(
            uri, diagnostics, version=analysis.version))

    async def current(self, uri: str) -> Analysis:
        """The check of the document as it is now (run now if the last one is older)."""
        doc = self.workspace.get_text_document(uri)
        last = self.analyses.get(uri)
        if last is not None and last.version == doc.version and last.source.text == doc.source \
                and last.settings == self.settings:
            return last
        loop = asyncio.get_running_loop()
        analysis = await loop.run_in_executor(self.pool, self.check, uri, doc.source,
                                              doc.version)
        if uri in self.workspace.text_documents and uri not in self.pending:
            self.publish(uri, analysis)
        return analysis

    def recheck_all(self) -> None:
        """The settings changed: check every open document again."""
        for uri in list(self.workspace.text_documents):
            self.changed(uri)


def doc_name(uri: str) -> str:
    """The file name diagnostics and set paths use: the path of a file: URI."""
    if uri.startswith("file:"):
        return uris.to_fs_path(uri) or uri
    return uri


def targets_setting(value: object) -> tuple[str, ...] | None:
    """``pfc.targets`` from initializationOptions or settings: ``{"pfc": {"targets":
    [...]}}``, ``{"targets": ...}``, a list, or a comma-separated string; None: absent."""
    if isinstance(value, dict):
        if "pfc" in value:
            return targets_setting(value["pfc"])
        return targets_setting(value["targets"]) if "targets" in value else None
    if isinstance(value, str):
        return tuple(t.strip() for t in value.replace(" ", ",").split(",") if t.strip())
    if isinstance(value, (list, tuple)):
        return tuple(str(t).strip() for t in value if str(t).strip())
    return None


def _version() -> str:
    try:
        return metadata.version("pfc")
    except metadata.PackageNotFoundError:
        return "0+unknown"


# ------------------------------------------------------------------------- features

def create_server() -> PfcServer:
    server = PfcServer()
    _documents(server)
    _configuration(server)
    _requests(server)
    _editing(server)
    _saves(server)
    return server


def _saves(server: PfcServer) -> None:
    """On save, a code lens on line 1: what the edit changes against the last save
    (``pfc.prove.lsp``); clients ask for lenses again after a save."""
    from pfc.prove.lsp import Saves

    saves = Saves()

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE, types.SaveOptions(include_text=True))
    async def did_save(ls: PfcServer, params: types.DidSaveTextDocumentParams) -> None:
        uri = params.text_document.uri
        text = params.text if params.text is not None else \
            ls.workspace.get_text_document(uri).source
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(ls.pool, saves.saved, uri, doc_name(uri), text)

    @server.feature(types.TEXT_DOCUMENT_CODE_LENS)
    def code_lens(ls: PfcServer, params: types.CodeLensParams) -> list[types.CodeLens]:
        uri = params.text_document.uri
        if uri in ls.workspace.text_documents:
            saves.opened(uri, ls.workspace.get_text_document(uri).source)
        summary = saves.summaries.get(uri)
        if summary is None:
            return []
        start = types.Position(0, 0)
        return [types.CodeLens(types.Range(start, start),
                               types.Command(summary, "pfc.showEditSummary"))]


def _documents(server: PfcServer) -> None:
    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    @guard.guarded()
    def did_open(ls: PfcServer, params: types.DidOpenTextDocumentParams) -> None:
        ls.changed(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    @guard.guarded()
    def did_change(ls: PfcServer, params: types.DidChangeTextDocumentParams) -> None:
        ls.changed(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    @guard.guarded()
    def did_close(ls: PfcServer, params: types.DidCloseTextDocumentParams) -> None:
        uri = params.text_document.uri
        task = ls.pending.pop(uri, None)
        if task is not None:
            task.cancel()
        ls.analyses.pop(uri, None)
        ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri, []))


def _configuration(server: PfcServer) -> None:
    @server.feature(types.INITIALIZE)
    @guard.guarded()
    def initialize(ls: PfcServer, params: types.InitializeParams) -> None:
        found = targets_setting(params.initialization_options)
        if found is not None:
            ls.settings = found

    @server.feature(types.INITIALIZED)
    @guard.guarded()
    async def initialized(ls: PfcServer, params: types.InitializedParams) -> None:
        await _pull_settings(ls)

    @server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    @guard.guarded()
    async def did_change_configuration(ls: PfcServer,
                                       params: types.DidChangeConfigurationParams) -> None:
        found = targets_setting(params.settings)
        if found is not None:
            ls.settings = found
            ls.recheck_all()
        else:
            await _pull_settings(ls)


async def _pull_settings(ls: PfcServer) -> None:
    """Ask the client for the ``pfc`` section when it can answer; re-check on news."""
    workspace = ls.client_capabilities.workspace
    if workspace is None or not workspace.configuration:
        return
    try:
        answer = await ls.workspace_configuration_async(
            types.ConfigurationParams([types.ConfigurationItem(section="pfc")]))
    except Exception as exc:  # noqa: BLE001 - a client that cannot answer keeps the old
        log.warning("workspace/configuration failed: %s", exc)
        return
    found = targets_setting(answer[0]) if answer else None
    if found is not None and found != ls.settings:
        ls.settings = found
        ls.recheck_all()


def _requests(server: PfcServer) -> None:
    @server.feature(types.TEXT_DOCUMENT_HOVER)
    @guard.guarded()
    async def on_hover(ls: PfcServer, params: types.HoverParams) -> types.Hover | None:
        analysis = await ls.current(params.text_document.uri)
        text = hover(analysis, analysis.index.offset(params.position))
        if text is None:
            return None
        return types.Hover(types.MarkupContent(types.MarkupKind.Markdown, text))

    @server.feature(types.TEXT_DOCUMENT_COMPLETION,
                    types.CompletionOptions(trigger_characters=["$", ",", "!", " "]))
    @guard.guarded(no_items)
    def on_completion(ls: PfcServer, params: types.CompletionParams) -> types.CompletionList:
        uri = params.text_document.uri
        return completion_list(ls.workspace.get_text_document(uri).source, params.position,
                               ls.encoding, ls.analyses.get(uri))

    @server.feature(types.TEXT_DOCUMENT_DEFINITION)
    @guard.guarded()
    async def on_definition(ls: PfcServer, params: types.DefinitionParams
                            ) -> list[types.Location] | None:
        analysis = await ls.current(params.text_document.uri)
        offset = analysis.index.offset(params.position)
        name = symbol_at(analysis.module, offset)
        spans = definitions(analysis.module).get(name or "", [])
        if name is None and (chain := chain_at(analysis.module, offset)) is not None:
            spans = chain_definitions(analysis.module).get(chain, [])
        return [types.Location(params.text_document.uri, analysis.index.range(spans[0]))] \
            if spans else None

    @server.feature(types.TEXT_DOCUMENT_FOLDING_RANGE)
    @guard.guarded(list)
    async def on_folding(ls: PfcServer, params: types.FoldingRangeParams
                         ) -> list[types.FoldingRange]:
        analysis = await ls.current(params.text_document.uri)
        return [types.FoldingRange(first, last, kind=types.FoldingRangeKind.Region)
                for first, last in folding_ranges(analysis.module)]

    @server.feature(types.TEXT_DOCUMENT_REFERENCES)
    @guard.guarded()
    async def on_references(ls: PfcServer, params: types.ReferenceParams
                            ) -> list[types.Location] | None:
        analysis = await ls.current(params.text_document.uri)
        offset = analysis.index.offset(params.position)
        name = symbol_at(analysis.module, offset)
        if name is None:
            return _chain_references(analysis, offset, params)
        spans = [s for n, s in references(analysis.module) if n == name]
        if params.context.include_declaration:
            spans += definitions(analysis.module).get(name, [])
        uri = params.text_document.uri
        return [types.Location(uri, analysis.index.range(s))
                for s in sorted(spans, key=lambda s: s.start)]


def _chain_references(analysis: Analysis, offset: int, params: types.ReferenceParams
                      ) -> list[types.Location] | None:
    chain = chain_at(analysis.module, offset)
    if chain is None:
        return None
    spans = [s for n, s in chain_uses(analysis.module) if n == chain]
    if params.context.include_declaration:
        spans += chain_definitions(analysis.module).get(chain, [])
    return [types.Location(params.text_document.uri, analysis.index.range(s))
            for s in sorted(spans, key=lambda s: s.start)]


def _no_tokens() -> types.SemanticTokens:
    return types.SemanticTokens(data=[])


def _editing(server: PfcServer) -> None:
    @server.feature(types.TEXT_DOCUMENT_FORMATTING)
    @guard.guarded(list)
    async def on_formatting(ls: PfcServer, params: types.DocumentFormattingParams
                            ) -> list[types.TextEdit]:
        doc = ls.workspace.get_text_document(params.text_document.uri)
        text = doc.source
        loop = asyncio.get_running_loop()
        formatted, _ = await loop.run_in_executor(
            ls.pool, format_source, SourceFile(doc_name(params.text_document.uri), text))
        if formatted is None or formatted == text:
            return []
        end = LineIndex(text, ls.encoding).end()
        return [types.TextEdit(types.Range(types.Position(0, 0), end), formatted)]

    @server.feature(types.TEXT_DOCUMENT_SEMANTIC_TOKENS_FULL,
                    types.SemanticTokensLegend(list(TOKEN_TYPES), list(TOKEN_MODIFIERS)))
    @guard.guarded(_no_tokens)
    async def on_tokens(ls: PfcServer, params: types.SemanticTokensParams
                        ) -> types.SemanticTokens:
        text = ls.workspace.get_text_document(params.text_document.uri).source
        loop = asyncio.get_running_loop()
        data = await loop.run_in_executor(ls.pool, encode, text, LineIndex(text, ls.encoding))
        return types.SemanticTokens(data=data)


def main(argv: list[str] | None = None) -> int:
    """Serve on stdio until the client says exit."""
    import argparse

    parser = argparse.ArgumentParser(prog="pfc lsp", description=__doc__)
    add_arguments(parser)
    return serve(parser.parse_args(argv))


def add_arguments(parser) -> None:
    parser.add_argument("--stdio", action="store_true",
                        help="talk LSP on stdin/stdout (the default and only transport)")
    parser.add_argument("--log", metavar="FILE",
                        help="write a debug log to FILE, tracebacks included (stderr gets "
                        "one line per warning or error)")


def serve(args) -> int:
    guard.setup_logging(Path(args.log) if args.log else None)
    _warm_up()
    # Checks run in a worker thread; a short GIL switch interval lets the event loop
    # answer completion requests within milliseconds while a long check runs
    # (measured: completion during a 5,000-rule check: at most 240 ms -> 120 ms).
    sys.setswitchinterval(SWITCH_INTERVAL)
    create_server().start_io()
    return 0


def _warm_up() -> None:
    """Build the parser and import the backends before threads share them."""
    from pfc import backends
    from pfc.frontend.parse import _parser

    _parser()
    backends.registry()


if __name__ == "__main__":
    raise SystemExit(main())
