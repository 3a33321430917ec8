"""``pfc lsp``: the language server for ``.pf`` files (pygls), on top of the front end.

``server`` wires the LSP features: ``analysis`` (one checked document), ``complete``,
``hover`` (with ``reading``: a rule in plain English, and ``forms``: its compiled form
per target), ``tokens`` (semantic highlighting) and ``text`` (positions, a lexer that
never fails); ``guard`` keeps any failure from reaching the editor as an error (one log
line on stderr instead). ``python -m pfc.lsp`` runs it.
"""
