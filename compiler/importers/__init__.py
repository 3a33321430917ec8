"""``pfc import``: existing firewalls (iptables-save, nft, pcap-filter) as pfc policies.

One module (or subpackage) per source format reads its text into the shared rule model
(``pfc.importers.model``: hook blocks, chains, rules with pfc's own match and action
words, each rule knowing the source line it came from), and ``pfc.importers.emit``
prints that model as a v2 policy, which pfc's own checker and formatter then read like
any other file (docs/import.md). What cannot be said in pfc is a diagnostic at the
source line and column, never a silent omission.
"""
