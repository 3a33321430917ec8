"""Whether the running kernel can take what nfmod and u32 need, and why not.

``pfc verify`` reports a target the running kernel cannot run as ``compiled-only``
with the reason these give (docs/verify.md "Statuses"); ``pfc load`` refuses with it,
before touching anything (docs/nfmod.md, docs/u32.md). A reason names the kernel and
what it lacks; the kernel lab's 6.1 guest has everything (docs/kernels.md).
"""

from __future__ import annotations

import gzip
import os
import shutil
from pathlib import Path

# tc u32's kinds: (module, Kconfig option)
U32_KINDS = (("sch_ingress", "CONFIG_NET_SCH_INGRESS"), ("cls_u32", "CONFIG_NET_CLS_U32"),
             ("act_gact", "CONFIG_NET_ACT_GACT"), ("cls_matchall", "CONFIG_NET_CLS_MATCHALL"))
LOCKED = ("[integrity]", "[confidentiality]")


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def modules_unavailable(proc: Path = Path("/proc"), sys: Path = Path("/sys")) -> str | None:
    """Why the running kernel cannot load an unsigned out-of-tree module, or None."""
    release = os.uname().release
    if not (proc / "modules").exists():
        return (f"kernel {release} cannot load modules (built without CONFIG_MODULES: "
                "no /proc/modules)")
    if _read(sys / "module" / "module" / "parameters" / "sig_enforce") == "Y":
        return (f"kernel {release} enforces module signatures (module.sig_enforce=Y) "
                "and pfc's modules are unsigned")
    lockdown = _read(sys / "kernel" / "security" / "lockdown") or ""
    if any(mode in lockdown for mode in LOCKED):
        return (f"kernel {release} is locked down ({lockdown}): it loads signed modules "
                "only, and pfc's are unsigned")
    if shutil.which("insmod") is None:
        return "insmod is not installed (Debian: apt install kmod)"
    return None


def kernel_config(proc: Path = Path("/proc"), boot: Path = Path("/boot")) -> dict[str, str]:
    """The running kernel's configuration (``/proc/config.gz``, else
    ``/boot/config-RELEASE``): option -> value; empty when neither is readable."""
    text = None
    try:
        text = gzip.decompress((proc / "config.gz").read_bytes()).decode()
    except OSError:
        text = _read(boot / f"config-{os.uname().release}")
    out = {}
    for line in (text or "").splitlines():
        key, eq, value = line.partition("=")
        if eq and key.startswith("CONFIG_"):
            out[key] = value
    return out


def u32_unavailable(proc: Path = Path("/proc"), boot: Path = Path("/boot"),
                    sys: Path = Path("/sys")) -> str | None:
    """Why the running kernel has not the tc kinds the u32 target uses (clsact, cls_u32,
    act_gact, cls_matchall), neither built in nor loadable; None when it has them or
    its configuration cannot be read (then tc says what is missing)."""
    config = kernel_config(proc, boot)
    if not config:
        return None
    modules = modules_unavailable(proc, sys) is None
    missing = [(n, o) for n, o in U32_KINDS if config.get(o) not in ("y", "m")]
    unloadable = [n for n, o in U32_KINDS if config.get(o) == "m" and not modules]
    parts = []
    if missing:
        parts.append(f"{', '.join(n for n, _ in missing)} not built "
                     f"({', '.join(o for _, o in missing)} not set)")
    if unloadable:
        parts.append(f"{', '.join(unloadable)} only as modules, which it cannot load")
    if not parts:
        return None
    return f"kernel {os.uname().release} lacks what tc u32 needs: {'; '.join(parts)}"
