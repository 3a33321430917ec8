"""clang for eBPF: C text → ELF object, with the exact command kept and a cache.

``compile_c(source, stem)`` writes ``STEM.c`` into a fresh directory, runs
``clang -O2 -g -target bpf -Wall -Werror -I/usr/include/<multiarch> -c STEM.c -o STEM.o``
there, and returns the object and the command (as a shell line, relative to that
directory: it is what ran, and what a user re-runs beside the saved ``.c``).

Debian keeps ``asm/`` headers (pulled in by ``linux/bpf.h``) under
``/usr/include/$(gcc -print-multiarch)``; clang's BPF target does not search there.

Objects are cached by a hash of (source, command, clang version) under
``$XDG_CACHE_HOME/pfc`` (else ``~/.cache/pfc``): the differential tests compile the
same program many times. A failing compile is never cached.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

CLANG = "clang"
FLAGS = ("-O2", "-g", "-target", "bpf", "-Wall", "-Werror")
_SAFE_STEM = re.compile(r"^[A-Za-z0-9_.+-]{1,100}$")


class ToolchainError(RuntimeError):
    """clang is missing or rejected the program; ``output`` is clang's stderr and
    ``lines`` the line numbers of the C source it complained about."""

    def __init__(self, message: str, output: str = "", command: str = ""):
        super().__init__(message)
        self.output = output
        self.command = command

    @property
    def lines(self) -> list[int]:
        return [int(n) for n in re.findall(r"^[^:\n]+\.c:(\d+):\d+: error", self.output,
                                           re.MULTILINE)]


@dataclass(frozen=True)
class Compiled:
    obj: bytes
    command: str  # shell line, run in the directory holding STEM.c
    cached: bool


@cache
def multiarch() -> str | None:
    """``gcc -print-multiarch`` (e.g. x86_64-linux-gnu), or None without gcc."""
    gcc = shutil.which("gcc")
    if gcc is None:
        return None
    out = subprocess.run([gcc, "-print-multiarch"], capture_output=True, text=True)
    return out.stdout.strip() or None


def include_flags() -> list[str]:
    arch = multiarch()
    path = f"/usr/include/{arch}" if arch else None
    return [f"-I{path}"] if path and os.path.isdir(path) else []


@cache
def clang_version() -> str:
    """First line of ``clang --version``; ToolchainError when clang is missing."""
    if shutil.which(CLANG) is None:
        raise ToolchainError("clang is not installed: it is needed to build eBPF objects "
                             "(Debian: apt install clang libbpf-dev)")
    out = subprocess.run([CLANG, "--version"], capture_output=True, text=True, check=True)
    return out.stdout.splitlines()[0]


def command(stem: str) -> list[str]:
    """The clang argv that turns ``STEM.c`` into ``STEM.o`` in the current directory."""
    if not _SAFE_STEM.match(stem):
        raise ValueError(f"invalid object name `{stem}`")
    return [CLANG, *FLAGS, *include_flags(), "-c", f"{stem}.c", "-o", f"{stem}.o"]


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(base) / "pfc"


def _key(source: str, argv: list[str]) -> str:
    h = hashlib.sha256()
    for part in (clang_version(), shlex.join(argv), source):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def compile_c(source: str, stem: str = "prog", use_cache: bool = True) -> Compiled:
    """Compile eBPF C with clang; ToolchainError carries clang's output on failure."""
    argv = command(stem)
    line = shlex.join(argv)
    key = _key(source, argv)
    cached = cache_dir() / f"{key}.o"
    if use_cache and cached.is_file():
        return Compiled(cached.read_bytes(), line, True)
    with tempfile.TemporaryDirectory(prefix="pfc-clang-") as tmp:
        Path(tmp, f"{stem}.c").write_text(source)
        proc = subprocess.run(argv, cwd=tmp, capture_output=True, text=True)
        if proc.returncode != 0:
            raise ToolchainError(f"clang exited with status {proc.returncode}",
                                 proc.stderr, line)
        obj = Path(tmp, f"{stem}.o").read_bytes()
    if use_cache:
        _store(cached, obj)
    return Compiled(obj, line, False)


def _store(path: Path, data: bytes) -> None:
    """Atomic write (rename), so concurrent test processes never read half a file."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError:
        pass  # a cache that cannot be written is no error
