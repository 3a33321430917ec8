"""The kernel lab: Debian's kernels booted under qemu, for running pfc where users run it.

::

    from pfc.kernel import lab

    with lab.boot("6.1") as vm:             # fetched into the cache on first use
        r = vm.run([".venv/bin/python", "-m", "pfc", "verify", "x.pf"])
        r.returncode, r.stdout, r.stderr

- :mod:`.debian`: a series (``5.10``, ``6.1``, ``6.12``) → the newest Debian kernel of
  that series, unpacked (image, modules, headers) into ``~/.cache/pfc/kernels`` or
  ``$PFC_KERNEL_DIR`` through a private apt configuration;
- :mod:`.initramfs`: busybox and the 9p/virtio/overlay modules, with the guest's /init;
- :mod:`.qemu`: the command line, KVM or TCG, a process that dies with its parent;
- :mod:`.session`: :func:`boot` → :class:`Session` (``run``, ``batch``, ``shared``);
- :mod:`.agent`: the guest's side of the command channel.

One boot per batch: a session runs any number of commands in one guest. Booting takes
about 6 s under TCG here (docs/kernels.md). The guest sees the host's files read-only;
``modprobe`` inside finds the guest kernel's own modules.
"""

from pfc.kernel.lab.debian import Kernel, cache_root, cached, fetch, version_tuple
from pfc.kernel.lab.errors import LabError
from pfc.kernel.lab.qemu import available
from pfc.kernel.lab.session import Result, Session, boot

__all__ = ["Kernel", "LabError", "Result", "Session", "available", "boot", "cache_root",
           "cached", "fetch", "version_tuple"]
