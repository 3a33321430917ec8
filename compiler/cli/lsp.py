"""``pfc lsp``: the language server for editors (LSP over stdio)."""

from __future__ import annotations

import argparse

from pfc.cli.common import Command


def _lsp_args(p: argparse.ArgumentParser) -> None:
    from pfc.lsp.server import add_arguments

    add_arguments(p)


def _lsp(args: argparse.Namespace) -> int:
    from pfc.lsp.server import serve

    return serve(args)


LSP = Command("lsp", "run the language server for editors (LSP on stdin/stdout)",
              "Run pfc's language server on stdin/stdout, for editors: diagnostics as you\n"
              "type (syntax, types, shadowed rules, and what the targets named in a\n"
              "`# pfc: targets xdp,nft` comment or the `pfc.targets` setting cannot\n"
              "express), hover (what a match reads; a rule in plain English and compiled\n"
              "for each target), completion, go to definition and references of $names,\n"
              "formatting (as `pfc fmt`) and semantic highlighting. See editors/README.md.",
              _lsp_args, _lsp)
