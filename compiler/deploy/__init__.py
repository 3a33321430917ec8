"""Deploying a compiled policy on a host: ``pfc load``, ``unload`` and ``status``.

``load`` dispatches to one loader per target (``bpf`` for XDP, ``tc``, ``nft``,
``iptables`` with ``ipt_text`` and ``ipt_kernel``), all built on ``base``; ``state`` is
what pfc records of each load (a cache: the loaders find what pfc attached in the
kernel), ``journal`` the intent of a load until it is committed; ``socket`` attaches
socket filters to an application's own socket.
"""
