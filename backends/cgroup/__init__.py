"""Target ``cgroup``: the ``input`` and ``output`` blocks of a whole firewall as
``cgroup_skb`` ingress and egress programs, for the sockets of one cgroup (v2). The C
comes from the eBPF templates (hook ``cgroup``); ``backend`` is the target."""
