"""Target ``nfmod``: a netfilter kernel module. ``backend`` (the target) → ``lower``
(IR rules → C expressions and tables) → ``templates/nfmod/module.c.j2``; ``build`` makes
the ``.ko`` against a kernel's headers; ``run`` loads it in a throw-away namespace."""
