"""Whole firewalls (v2) on a host: every hook block's part (nft, iptables, xdp, tc)
loaded all or none, unloaded, inspected (docs/load.md "Whole firewalls")."""
