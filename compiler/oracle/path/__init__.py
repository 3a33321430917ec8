"""The path of a packet through a whole firewall: the host model, NAT, reject
replies and the walker (semantics.md "The path of a packet")."""
