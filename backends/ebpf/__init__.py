"""Targets ``socket``, ``tc`` and ``xdp``: eBPF C from one template. ``backend`` (the
targets) reads ``plan`` (the policy laid out for the template), ``maps`` fills large sets
at load time, ``run`` runs objects in the kernel."""
