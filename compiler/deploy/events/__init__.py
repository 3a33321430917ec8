"""Log events from what ``pfc load`` attached: :mod:`pfc.deploy.events.bpf` reads the
eBPF hooks' ring buffers (XDP, tc)."""
