"""Target ``iptables``: iptables-restore files (+ ipset). ``backend`` (the target) →
``lower`` (IR rules → match arguments, ``u32`` for byte-exact tests); ``run`` loads them
in a throw-away namespace."""
