"""Whole firewalls (v2): hook blocks, chains and the host model (docs/language.md)."""
