"""``pfc``: the command line, the top layer. Nothing in the package imports it.

``main`` builds the parser from every command; ``common`` holds what commands share;
one module per group of commands (``compile``: check/fmt/compile/targets, ``run``,
``verify``, ``bench``, ``load``, ``lsp``).
"""
