"""Target ``cbpf``: classic BPF. ``backend`` (the target) → ``cfg`` (IR → a DAG of tests
over ``graph``, one ``match`` per language match) → ``opt`` → ``asm`` (instructions and
printed forms); ``run`` runs a program in the kernel, ``pcaplib`` is libpcap (the peer
and an independent interpreter)."""
