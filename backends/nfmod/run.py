"""Run an ``nfmod`` artifact in the kernel: the module built for the running kernel,
loaded (``insmod``) inside the nft runner's throw-away namespace, frames injected on
the veth peer, verdicts and bytes observed by the nft runner's observer around the
hook (``pfc.backends.nft.run``: a chain at priority -1000 logs what enters, one at
+1000 what leaves undropped, with its bytes after ``redirect``), the module's counters
read from ``/proc/net/MODULE`` before and after.

Runs where the kernel can load the module: a lab guest (``pfc verify --kernel 6.1``,
``tests/backends/test_nfmod.py``), or a host with its headers. Elsewhere (a kernel
without module loading or enforcing signatures: ``kmod.modules_unavailable``; no
headers for the running kernel) the runner raises ``KernelUnavailable`` with the
reason, and ``pfc verify`` reports the target as compiled only.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from pfc.backends.base import DEFAULT_COUNTER, Artifact, counters_since
from pfc.backends.nfmod.kmod import modules_unavailable
from pfc.backends.nft import run as nftrun
from pfc.kernel import iplab
from pfc.kernel.nflog import flush_conntrack
from pfc.kernel.observation import KernelUnavailable, Observation

RUNNABLE = ("prerouting", "input")  # the hooks the IP-input lab drives


def module_for_running(artifact: Artifact) -> bytes:
    """The ``.ko`` for the running kernel: the artifact's when built for it, else built
    now (cached); KernelUnavailable when there are no headers for it."""
    from pfc.backends.nfmod import build

    module = artifact.meta["module"]
    release = os.uname().release
    if artifact.meta.get("release") == release and f"{module}.ko" in artifact.files:
        return artifact.files[f"{module}.ko"]
    sources = {n: d for n, d in artifact.files.items() if n in (f"{module}.c", "Kbuild")}
    try:
        return build.build(sources, module, release).ko
    except build.BuildError as exc:
        raise KernelUnavailable(f"target `nfmod`: {exc}") from exc


def read_counters(module: str, proc: Path | None = None) -> dict[int | str, tuple[int, int]]:
    """``/proc/net/MODULE`` of the current namespace: (packets, bytes) per rule index
    and for ``default``."""
    text = (proc or Path("/proc/net") / module).read_text()
    out: dict[int | str, tuple[int, int]] = {}
    for line in text.splitlines():
        key, packets, nbytes = line.split()
        out[DEFAULT_COUNTER if key == "default" else int(key)] = (int(packets), int(nbytes))
    return out


def insmod(ko: bytes, module: str) -> None:
    """Load ``ko`` into the current network namespace (the module hooks the namespace
    of the process that loads it); a module of the same name is removed first."""
    if shutil.which("insmod") is None:
        raise KernelUnavailable("target `nfmod`: insmod is not installed (kmod)")
    if Path("/sys/module", module).exists():
        rmmod(module)
    with tempfile.TemporaryDirectory(prefix="pfc-nfmod-") as tmp:
        path = Path(tmp, f"{module}.ko")
        path.write_bytes(ko)
        done = subprocess.run(["insmod", str(path)], capture_output=True, text=True)
    if done.returncode != 0:
        raise KernelUnavailable(f"target `nfmod`: insmod {module}.ko: "
                                f"{done.stderr.strip() or done.returncode}")


def rmmod(module: str) -> None:
    done = subprocess.run(["rmmod", module], capture_output=True, text=True)
    if done.returncode != 0 and Path("/sys/module", module).exists():
        raise RuntimeError(f"rmmod {module}: {done.stderr.strip()}")


@contextlib.contextmanager
def loaded(ko: bytes, module: str) -> Iterator[None]:
    insmod(ko, module)
    try:
        yield
    finally:
        rmmod(module)


def run(artifact: Artifact, frames: list[bytes]) -> Observation:
    """``Backend.run`` for nfmod: in the nft runner's current session, or a fresh one."""
    if artifact.hook not in RUNNABLE:
        raise KernelUnavailable(f"target `nfmod`: the lab runs hooks {', '.join(RUNNABLE)}, "
                                f"not `{artifact.hook}`")
    why = modules_unavailable()
    if why:
        raise KernelUnavailable(f"target `nfmod`: {why}")
    ko = module_for_running(artifact)
    if nftrun._current is None:
        with nftrun.session():
            return _run(nftrun._current, artifact, ko, frames)
    return _run(nftrun._current, artifact, ko, frames)


def _run(session: nftrun.Session, artifact: Artifact, ko: bytes,
         frames: list[bytes]) -> Observation:
    module = artifact.meta["module"]
    nftrun.nft_cmd(session.ctx, "flush ruleset")
    flush_conntrack()
    nftrun.nft_cmd(session.ctx, nftrun.observer(artifact.hook, session.lab.dut))
    with loaded(ko, module):
        before = read_counters(module)
        verdicts = session.judge(frames)
        after = read_counters(module)
    return iplab.observation(frames, verdicts, counters_since(after, before))
