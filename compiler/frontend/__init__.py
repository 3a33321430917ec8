"""The front end: policy text → AST → checked IR, with every diagnostic.

``source`` (files and spans) → ``parse`` (lark; ``syntax`` is the AST) → ``check``
(names, types; ``values`` and ``matches`` turn what is written into typed atoms and IR
matches) → ``ir`` (the typed IR every pass, backend and the interpreter read), plus
``shadow`` (rules that can never match), ``fmt`` (``pfc fmt``) and ``diagnostics``.
``pipeline`` is the one front door: nothing else parses or checks.
"""
