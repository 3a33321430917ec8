"""`pfc import` (docs/import.md): its own folder, as `pfc log` has `events/`, so that
compiler/cli stays within tests/test_layers.py's 15 modules a folder."""
