"""The ``.ko``: the module's files built with Kbuild against one kernel's headers.

``headers(release)`` finds a kernel's build tree: ``/lib/modules/RELEASE/build`` (a
host with its headers package), else the kernel lab's cache
(``~/.cache/pfc/kernels/RELEASE/root/usr/src/linux-headers-RELEASE``: Debian's headers
unpacked by ``pfc.kernel.lab``, visible inside a lab guest at the same path).
Debian splits its headers in two packages, the arch one's Makefile being one line,
``include /usr/src/linux-headers-X-common/Makefile``; unpacked elsewhere, that path does
not exist, so ``make`` is given the common Makefile with ``-f`` (which is what the
include does).

Modules are cached by a hash of (files, release, compiler version) under pfc's cache
(``toolchain.cache_dir``), like clang's objects: the lab's guests find there the
modules the host built for them (building under emulation takes minutes).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pfc.kernel import lab, toolchain

MAKE_TIMEOUT = 600  # seconds: one small module; a lab guest under emulation is slow


class BuildError(RuntimeError):
    """No headers for the kernel, or Kbuild refused the module (the message says)."""


class NoHeaders(BuildError):
    """No build tree for the kernel asked for."""


@dataclass(frozen=True)
class Built:
    ko: bytes
    release: str
    command: str
    cached: bool


def release_for(kernel: tuple[int, ...]) -> str:
    """The release to build for: the running kernel's when ``kernel`` is its series,
    else the newest kernel of that series in the lab's cache."""
    running = os.uname().release
    if tuple(lab.version_tuple(running)[:2]) == tuple(kernel[:2]):
        return running
    series = ".".join(str(k) for k in kernel[:2])
    cached = lab.cached(series)
    if cached is None:
        raise NoHeaders(f"no headers for kernel {series}: fetch it once with "
                         f"`pfc verify --kernel {series}` (the kernel lab unpacks Debian's "
                         "headers), or build on a host running it")
    return cached.release


def headers(release: str) -> Path:
    build = Path("/lib/modules") / release / "build"
    if (build / "Makefile").is_file():
        return build
    lab_tree = lab.cache_root() / release / "root" / "usr" / "src" / f"linux-headers-{release}"
    if (lab_tree / "Makefile").is_file():
        return lab_tree
    raise NoHeaders(f"no headers for kernel {release} (looked in {build} and {lab_tree}): "
                     f"install linux-headers-{release}")


_INCLUDE = re.compile(r"^include\s+(/usr/src/\S+/Makefile)\s*$", re.MULTILINE)


def make_argv(tree: Path, where: Path) -> list[str]:
    """``make -C TREE M=WHERE modules``, with ``-f`` the common Makefile of Debian's
    split headers when the arch Makefile includes one by an absolute path that is not
    there (module doc)."""
    argv = ["make", "-C", str(tree)]
    found = _INCLUDE.search((tree / "Makefile").read_text())
    if found and not Path(found.group(1)).is_file():
        common = tree.parent / Path(found.group(1)).parent.name / "Makefile"
        if not common.is_file():
            raise BuildError(f"{tree}/Makefile includes {found.group(1)}, which is missing")
        argv += ["-f", str(common)]
    return argv + [f"M={where}", "modules"]


def _key(files: dict[str, bytes], release: str) -> str:
    h = hashlib.sha256()
    for part in (_gcc_version().encode(), release.encode(),
                 *(n.encode() + b"\0" + d for n, d in sorted(files.items()))):
        h.update(part)
        h.update(b"\0")
    return h.hexdigest()


def _gcc_version() -> str:
    gcc = shutil.which("gcc")
    if gcc is None:
        raise BuildError("gcc is not installed: it builds kernel modules "
                         "(Debian: apt install gcc make)")
    out = subprocess.run([gcc, "--version"], capture_output=True, text=True)
    return out.stdout.splitlines()[0] if out.stdout else "gcc"


def build(files: dict[str, bytes], module: str, release: str) -> Built:
    """The ``.ko`` of ``files`` (the module's C, Kbuild) for ``release``; BuildError
    with Kbuild's last lines when it fails."""
    key = _key(files, release)
    cache = toolchain.cache_dir()
    cached = cache / "nfmod" / f"{key}.ko" if cache else None
    if cached is not None and cached.is_file():
        return Built(cached.read_bytes(), release, "", True)
    tree = headers(release)
    with tempfile.TemporaryDirectory(prefix="pfc-nfmod-") as tmp:
        for name, data in files.items():
            Path(tmp, name).write_bytes(data)
        argv = make_argv(tree, Path(tmp))
        proc = subprocess.run(argv, cwd=tmp, capture_output=True, text=True,
                              timeout=MAKE_TIMEOUT)
        ko = Path(tmp, f"{module}.ko")
        if proc.returncode != 0 or not ko.is_file():
            tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-6:])
            raise BuildError(f"Kbuild failed for {release} (exit {proc.returncode}): {tail}")
        data = ko.read_bytes()
    if cached is not None:
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp_path = cached.with_suffix(f".{os.getpid()}.tmp")
        tmp_path.write_bytes(data)
        os.replace(tmp_path, cached)
    return Built(data, release, " ".join(argv), False)


def build_for(kernel: tuple[int, ...], files: dict[str, bytes], module: str) -> Built:
    return build({n: d for n, d in files.items() if n != "Makefile"}, module,
                 release_for(kernel))
