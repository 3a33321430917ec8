"""clang for eBPF: C text → ELF object, with the exact command kept and a cache.

``compile_c(source, stem)`` writes ``STEM.c`` into a fresh directory, runs ``clang -O2
-g -target bpf -Wall -Werror -I/usr/include/<multiarch> -c ./STEM.c -o ./STEM.o`` there
(``./``: a stem may start with ``-``), and returns the object and the command (as a
shell line, relative to that directory: it is what ran, and what a user re-runs beside
the saved ``.c``).

Debian keeps ``asm/`` headers (pulled in by ``linux/bpf.h``) under
``/usr/include/$(clang -print-multiarch)``; clang's BPF target does not search there.

Objects are cached by a hash of (source, command, clang version) under
``$XDG_CACHE_HOME/pfc`` (else ``~/.cache/pfc``): the differential tests compile the
same program many times. A failing compile is never cached. A cache directory that
cannot be used (``HOME=/root`` for a user who cannot enter /root, a read-only home)
is never an error: pfc falls back to ``$TMPDIR/pfc-cache-UID`` (created 0700, used only
when it belongs to the user and nobody else can write it), and without that to no cache
at all, silently (:func:`cache_dir` says which).
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
    """The multiarch triplet (e.g. x86_64-linux-gnu) as clang says it, else gcc (a
    Debian host with clang need not have gcc: the Debian package does not pull it),
    or None."""
    for tool in (CLANG, "gcc"):
        path = shutil.which(tool)
        if path is None:
            continue
        out = subprocess.run([path, "-print-multiarch"], capture_output=True, text=True)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip()
    return None


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
    """The clang argv that turns ``STEM.c`` into ``STEM.o`` in the current directory.
    The names start with ``./``: a stem may start with ``-`` (a policy ``-.pf`` or
    ``--help.pf``), and clang would read ``-.xdp.c`` as an option."""
    if not _SAFE_STEM.match(stem):
        raise ValueError(f"invalid object name `{stem}`")
    return [CLANG, *FLAGS, *include_flags(), "-c", f"./{stem}.c", "-o", f"./{stem}.o"]


def cache_dir() -> Path | None:
    """The cache directory in use (created if missing), or None: no usable cache."""
    for candidate in _candidates():
        if _usable(candidate):
            return candidate
    return None


def _candidates() -> list[Path]:
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        try:
            base = os.path.join(Path.home(), ".cache")
        except RuntimeError:  # no HOME and no passwd entry
            base = None
    tmp = Path(tempfile.gettempdir()) / f"pfc-cache-{os.getuid()}"
    return ([Path(base) / "pfc"] if base else []) + [tmp]


def _usable(path: Path) -> bool:
    """A directory we can list and write, made if missing; a shared temporary
    directory only when it is ours and private (0700), never another user's."""
    try:
        private = path.name.startswith("pfc-cache-")
        path.mkdir(mode=0o700, parents=not private, exist_ok=True)
        if private:
            st = path.lstat()
            if st.st_uid != os.getuid() or st.st_mode & 0o077 or not path.is_dir():
                return False
        return os.access(path, os.R_OK | os.W_OK | os.X_OK)
    except OSError:
        return False


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
    where = cache_dir() if use_cache else None
    cached = where / f"{_key(source, argv)}.o" if where else None
    hit = _read_cached(cached) if cached else None
    if hit is not None:
        return Compiled(hit, line, True)
    with tempfile.TemporaryDirectory(prefix="pfc-clang-") as tmp:
        Path(tmp, f"{stem}.c").write_text(source)
        proc = subprocess.run(argv, cwd=tmp, capture_output=True, text=True)
        if proc.returncode != 0:
            raise ToolchainError(f"clang exited with status {proc.returncode}",
                                 proc.stderr, line)
        obj = Path(tmp, f"{stem}.o").read_bytes()
    if cached:
        _store(cached, obj)
    return Compiled(obj, line, False)


def _read_cached(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:  # missing, or unreadable: a miss either way
        return None


def _store(path: Path, data: bytes) -> None:
    """Atomic write (rename), so concurrent test processes never read half a file."""
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError:
        pass  # a cache that cannot be written is no error
