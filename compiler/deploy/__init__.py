"""Deploying a compiled policy on a host: ``pfc load``, ``unload`` and ``status``.

``load`` dispatches to one loader per target (``bpf`` for XDP, ``tc``, ``nft``,
``iptables``), all built on ``base``; ``state`` is what pfc records of each load;
``socket`` attaches socket filters to an application's own socket.
"""
