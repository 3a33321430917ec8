"""Log events from what ``pfc load`` attached: :mod:`pfc.deploy.events.bpf` reads the
eBPF hooks' ring buffers (XDP, tc), :mod:`pfc.deploy.events.stream` merges them with
NFLOG (nft, iptables) for ``pfc log``."""
