"""The ``.ko``: the module's files built with Kbuild against one kernel's headers.

``headers(release)`` finds a kernel's build tree: ``/lib/modules/RELEASE/build`` (a
host with its headers package), else the kernel lab's cache
(``~/.cache/pfc/kernels/RELEASE/root/usr/src/linux-headers-RELEASE``: Debian's headers
unpacked by ``pfc.kernel.lab``, visible inside a lab guest at the same path).
Debian splits its headers in two packages, the arch one's Makefile being one line,
``include /usr/src/linux-headers-X-common/Makefile``; unpacked elsewhere, that path does
not exist, so ``make`` is given the common Makefile with ``-f`` (which is what the
include does).

The compiler: Debian's headers name the one the kernel was built with
(``.kernelvariables``: ``CC = ... gcc-10`` for 5.10, ``gcc-12`` for 6.1,
``x86_64-linux-gnu-gcc-14`` for 6.12). When it is not installed, ``make`` is given
``CC=gcc`` (the host's; Kbuild warns that it differs, which Debian allows:
``DEBIAN_KERNEL_NO_CC_VERSION_CHECK``). 5.10's headers build with gcc 12 that way.
Debian's build tools of a kernel (``scripts/mod/modpost``, ``objtool``: the
linux-kbuild package) are binaries of that Debian release; when they need a newer glibc
than the host's (6.12's need 2.38, Debian 12 has 2.36) no module can be built here, and
``NoToolchain`` says so before running ``make``.

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


class NoToolchain(BuildError):
    """The kernel's build tools cannot run on this host (module doc)."""


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
    there, and ``CC=gcc`` when the kernel's compiler is not installed (module doc)."""
    argv = ["make", "-C", str(tree)]
    found = _INCLUDE.search((tree / "Makefile").read_text())
    if found and not Path(found.group(1)).is_file():
        common = tree.parent / Path(found.group(1)).parent.name / "Makefile"
        if not common.is_file():
            raise BuildError(f"{tree}/Makefile includes {found.group(1)}, which is missing")
        argv += ["-f", str(common)]
    wanted = kernel_cc(tree)
    if wanted and shutil.which(wanted) is None:
        argv.append("CC=gcc")
    return argv + [f"M={where}", "modules"]


_CC = re.compile(r"^CC\s*=.*?(\S*gcc[-\w.]*)\s*$", re.MULTILINE)
_GLIBC = re.compile(rb"GLIBC_(\d+)\.(\d+)")


def kernel_cc(tree: Path) -> str | None:
    """The compiler Debian's headers name (``.kernelvariables``), without
    ``$(CROSS_COMPILE)``'s prefix made explicit; None when they name none."""
    try:
        text = (tree / ".kernelvariables").read_text()
    except OSError:
        return None
    found = _CC.search(text)
    if not found:
        return None
    cc = found.group(1).replace("$(CROSS_COMPILE)", "")
    cross = re.search(r"^override CROSS_COMPILE = (\S+)$", text, re.MULTILINE)
    return (cross.group(1) if cross and "$" not in cross.group(1) else "") + cc


def glibc_needed(tree: Path) -> tuple[tuple[int, int], str] | None:
    """The newest glibc version the kernel's build tools need, and which tool; None when
    they need none newer than 2.0 or are not there."""
    newest = None
    for tool in ("scripts/mod/modpost*", "tools/objtool/objtool*", "scripts/basic/fixdep"):
        for path in sorted(tree.glob(tool)):
            try:
                data = path.read_bytes()
            except OSError:
                continue
            for major, minor in _GLIBC.findall(data):
                version = (int(major), int(minor))
                if newest is None or version > newest[0]:
                    newest = (version, path.name.split(".")[0])
    return newest


def host_glibc() -> tuple[int, int] | None:
    try:
        text = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError):
        return None
    found = re.search(r"(\d+)\.(\d+)", text)
    return (int(found.group(1)), int(found.group(2))) if found else None


def check_tools(tree: Path, release: str) -> None:
    """NoToolchain when the kernel's build tools need a newer glibc than the host's."""
    needed, host = glibc_needed(tree), host_glibc()
    if needed is None or host is None or needed[0] <= host:
        return
    want, have = (".".join(map(str, v)) for v in (needed[0], host))
    raise NoToolchain(f"kernel {release}'s build tools (Debian's linux-kbuild: "
                      f"{needed[1]}) need glibc {want}, this host has {have}: build the "
                      f"module on a host with glibc {want} or newer")


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
    check_tools(tree, release)
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
