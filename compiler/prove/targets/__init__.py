"""Per target, the artifact's behaviour as a formula: classic BPF, eBPF, nft, iptables."""
