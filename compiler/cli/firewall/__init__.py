"""The commands' handling of whole firewalls (v2 files): verify, load, run. Each
command module hands a v2 file here; these modules import only ``cli.common``,
``cli.output`` and the library."""
