"""Commands that follow what the kernel reports as it happens: ``pfc log``."""
