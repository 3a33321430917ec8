"""The language server's last lines of defence: it never answers "Error in server".

- :func:`guarded` wraps every feature handler: an exception it raises (a pfc bug, or a
  front-end crash on a half-typed line) is logged and the client gets an empty result.
- :class:`Protocol` answers a request whose parameters do not fit the LSP types with an
  ``InvalidParams`` error (pygls leaves such a request unanswered, and the editor waits
  for ever) and ignores JSON that is not a JSON-RPC object.
- :func:`report_server_error` replaces pygls' default, which shows "Error in server:
  ..." in the editor for any out-of-band error: the error is only logged.
- :func:`setup_logging`: stderr (which editors keep as the server's log) gets one line
  per warning or error, never a traceback, non-printable characters escaped; ``--log
  FILE`` gets everything, tracebacks included.

Checking a document is guarded in :class:`pfc.lsp.server.PfcServer` (a crash becomes
an ``internal`` diagnostic, :func:`pfc.lsp.analysis.failed`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pygls.exceptions import FeatureRequestError, JsonRpcException
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol

from pfc.frontend.text import visible

log = logging.getLogger("pfc.lsp")
LINE_LIMIT = 400  # characters of one stderr log line
_NOT_A_MESSAGE = object()  # what structure_message returns for a message it refused


def describe(exc: BaseException, limit: int = 200) -> str:
    """``Type: first line of the message``, at most ``limit`` characters."""
    text = str(exc).splitlines()[0] if str(exc).strip() else ""
    out = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return out if len(out) <= limit else out[:limit - 3] + "..."



class OneLine(logging.Formatter):
    """``pfc lsp: error: MESSAGE: Type: reason``: the first line of the message and of
    the exception, no traceback, escaped, at most ``LINE_LIMIT`` characters."""

    def format(self, record: logging.LogRecord) -> str:
        lines = record.getMessage().splitlines()
        text = lines[0] if lines else ""
        if record.exc_info and record.exc_info[1] is not None:
            text += f": {describe(record.exc_info[1])}"
        text = visible(f"pfc lsp: {record.levelname.lower()}: {text}")
        return text if len(text) <= LINE_LIMIT else text[:LINE_LIMIT - 3] + "..."


def setup_logging(log_file: Path | None = None) -> None:
    """Warnings and errors to stderr, one line each; with ``log_file``, a full debug log
    (tracebacks included) there too."""
    root = logging.getLogger()
    stderr = logging.StreamHandler(sys.stderr)
    stderr.setLevel(logging.WARNING)
    stderr.setFormatter(OneLine())
    root.addHandler(stderr)
    root.setLevel(logging.WARNING)
    if log_file is not None:
        to_file = logging.FileHandler(log_file)
        to_file.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root.addHandler(to_file)
        root.setLevel(logging.DEBUG)


def guarded(default: Callable[[], Any] = lambda: None) -> Callable:
    """A handler that never raises: on an exception, log it (one line on stderr, the
    traceback in ``--log``) and return ``default()`` (an empty result). Works on plain
    and ``async`` handlers and keeps their signature (pygls reads it)."""
    def wrap(handler: Callable) -> Callable:
        name = handler.__name__
        if asyncio.iscoroutinefunction(handler):
            @functools.wraps(handler)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                try:
                    return await handler(*args, **kwargs)
                except Exception:  # noqa: BLE001 - the point: any bug becomes a log line
                    log.exception("%s failed; answered with an empty result", name)
                    return default()
            return run_async

        @functools.wraps(handler)
        def run(*args: Any, **kwargs: Any) -> Any:
            try:
                return handler(*args, **kwargs)
            except Exception:  # noqa: BLE001 - as above
                log.exception("%s failed; answered with an empty result", name)
                return default()
        return run
    return wrap


class Protocol(LanguageServerProtocol):
    """pygls' protocol, answering requests it cannot read instead of dropping them."""

    def structure_message(self, data: dict[str, Any]) -> Any:
        try:
            return super().structure_message(data)
        except JsonRpcException as exc:
            method = data.get("method")
            if "id" in data and method is not None:
                self._send_response(data["id"], None, exc.to_response_error())
            log.warning("refused a malformed %r message: %s", method,
                        describe(exc.__cause__ or exc))
            return _NOT_A_MESSAGE

    def handle_message(self, message: Any) -> None:
        if message is _NOT_A_MESSAGE:
            return
        if not hasattr(message, "jsonrpc"):
            log.warning("ignored a body that is not a JSON-RPC object: %.60r", message)
            return
        super().handle_message(message)


def report_server_error(server: LanguageServer, error: Exception, source: type) -> None:
    """Log an out-of-band error (a notification handler that raised); the editor is not
    shown "Error in server". Requests pygls has answered with an error and bodies it
    could not read, pygls has logged itself. A body that is not JSON (or not UTF-8) is
    not answered: JSON-RPC's Parse error would need ``"id": null``, which pygls leaves
    out, and Neovim reports an id-less response as an invalid server message."""
    if source not in (JsonRpcException, FeatureRequestError):
        log.error("%s (%s)", describe(error), source.__name__)
