"""A booted lab kernel and the commands run in it.

``boot(kernel)`` starts one guest and waits for its agent; ``Session.run(command)``
runs one command there (a list of arguments, or a shell script as a string) and
returns its exit status and output; ``Session.batch(commands)`` runs several, in
order, in the same guest. The guest sees the host's files read-only at the same paths
(writes land in RAM and vanish with the guest), so a command can be the host's own
``.venv/bin/python -m pfc ...``; ``Session.shared`` is a host folder the guest can
write, at the same path on both sides. Closing the session (``with`` or ``close()``)
powers the guest off; qemu never outlives the Python process that booted it
(:mod:`.qemu`).
"""

from __future__ import annotations

import os
import shlex
import shutil
import socket
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from pfc.kernel.lab import agent, debian, initramfs, qemu
from pfc.kernel.lab.errors import LabError

BOOT_TIMEOUT = 600.0  # seconds: TCG on a busy 2-core machine; a boot takes ~6 s idle
KVM_PROBE_TIMEOUT = 20.0
COMMAND_TIMEOUT = 900.0
GUEST_ENV = {"LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1", "TERM": "dumb"}


@dataclass(frozen=True)
class Result:
    """One command's end in the guest: ``returncode`` 124 (or 137) when its time ran
    out (``timeout``'s codes)."""

    command: str
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def timed_out(self) -> bool:
        return self.returncode in (124, 137)


class Session:
    """One running guest (module doc). Not thread-safe: one command at a time."""

    def __init__(self, kernel: debian.Kernel, accel: str, memory: int = qemu.MEMORY_MIB,
                 boot_timeout: float = BOOT_TIMEOUT):
        self.kernel = kernel
        self.accel = accel
        _sweep()
        self.shared = Path(tempfile.mkdtemp(prefix="pfc-lab-"))
        self.shared.chmod(0o755)
        (self.shared / "owner").write_text(str(os.getpid()))
        self.console = self.shared / "console.log"
        self.release = ""
        self.boot_seconds = 0.0
        self._next = 0
        self._buffer = b""
        self._sock, theirs = socket.socketpair()
        try:
            self._start(theirs, memory, boot_timeout)
        except BaseException:
            self.close()
            raise
        finally:
            theirs.close()

    def _start(self, theirs: socket.socket, memory: int, boot_timeout: float) -> None:
        (self.shared / "agent.sh").write_text(agent.SCRIPT)
        (self.shared / "kernel.root").write_text(str(self.kernel.root))
        argv = qemu.command(initramfs.vmlinux(self.kernel), initramfs.build(self.kernel),
                            self.shared, self.console, theirs.fileno(), self.accel, memory)
        started = time.monotonic()
        self._process = qemu.start(argv, theirs.fileno(), self.shared / "qemu.err")
        self.pid = self._process.pid
        line = self._line(boot_timeout, "booting")
        if not line.startswith("READY "):
            raise LabError(f"{self.kernel.release}: unexpected first word from the guest: "
                           f"{line!r}")
        self.release = line.split()[1]
        self.boot_seconds = time.monotonic() - started

    # ------------------------------------------------------------------ commands

    def run(self, command: list[str] | str, cwd: str | os.PathLike | None = None,
            env: dict[str, str] | None = None, timeout: float = COMMAND_TIMEOUT,
            stdin: bytes = b"") -> Result:
        """Run ``command`` in the guest (in ``cwd``, default this process's; with
        ``GUEST_ENV`` and ``env``); its time is limited to ``timeout`` seconds."""
        self._next += 1
        ident = str(self._next)
        script = command if isinstance(command, str) else shlex.join(command)
        where = self.shared
        (where / f"{ident}.sh").write_text(script + "\n")
        (where / f"{ident}.cwd").write_text(str(cwd or os.getcwd()))
        variables = GUEST_ENV | (env or {})
        (where / f"{ident}.env").write_text("".join(
            f"{k}={shlex.quote(v)}\n" for k, v in variables.items() if _name_ok(k)))
        (where / f"{ident}.in").write_bytes(stdin)
        started = time.monotonic()
        self._send(f"RUN {ident} {max(1, int(timeout))}\n")
        line = self._line(timeout + 60, f"running {script[:60]!r}")
        verb, done_id, rc = (line.split() + ["", "", ""])[:3]
        if verb != "DONE" or done_id != ident:
            raise LabError(f"unexpected answer from the guest: {line!r}")
        result = Result(script, int(rc), self._take(ident, "out"), self._take(ident, "err"),
                        time.monotonic() - started)
        for ext in ("sh", "cwd", "env", "in"):
            (where / f"{ident}.{ext}").unlink(missing_ok=True)
        return result

    def cpu_seconds(self) -> float:
        """CPU time qemu has used so far (user + system): what the guest cost the host,
        whatever the machine's load."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def batch(self, commands: list[list[str] | str], **options) -> list[Result]:
        return [self.run(c, **options) for c in commands]

    def _take(self, ident: str, ext: str) -> str:
        path = self.shared / f"{ident}.{ext}"
        text = path.read_text(errors="replace") if path.exists() else ""
        path.unlink(missing_ok=True)
        return text

    # ------------------------------------------------------------------ channel

    def _send(self, text: str) -> None:
        try:
            self._sock.sendall(text.encode())
        except OSError as exc:
            raise LabError(f"{self.kernel.release}: the guest is gone ({exc}); "
                           f"{self.console_tail()}") from exc

    def _line(self, timeout: float, doing: str) -> str:
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise LabError(f"{self.kernel.release} ({self.accel}): no answer after "
                               f"{timeout:.0f} s {doing}; {self.console_tail()}")
            self._sock.settimeout(left)
            try:
                chunk = self._sock.recv(4096)
            except TimeoutError:
                continue
            if not chunk:
                raise LabError(f"{self.kernel.release} ({self.accel}): the guest stopped "
                               f"while {doing}; {self.console_tail()}")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode(errors="replace").strip()

    def console_tail(self, lines: int = 4) -> str:
        """The last lines of the guest's console and of qemu's messages, for errors."""
        texts = []
        for path in (self.console, self.shared / "qemu.err"):
            if path.exists():
                texts += [t for t in path.read_text(errors="replace").splitlines()
                          if t.strip()]
        tail = " | ".join(t.strip() for t in texts[-lines:])
        return f"last console lines: {tail}" if tail else "the console is empty"

    # ------------------------------------------------------------------ end

    def close(self) -> None:
        process = getattr(self, "_process", None)
        if process is not None and process.poll() is None:
            try:
                self._sock.sendall(b"STOP\n")
            except OSError:
                pass
            qemu.stop(process, grace=30.0)
        self._sock.close()
        shutil.rmtree(self.shared, ignore_errors=True)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _sweep() -> None:
    """Remove the exchange folders of sessions whose process died without closing
    them (SIGKILL: qemu died with it, its folder stayed)."""
    for folder in Path(tempfile.gettempdir()).glob("pfc-lab-*"):
        try:
            owner = int((folder / "owner").read_text())
        except (OSError, ValueError):
            continue
        if not Path(f"/proc/{owner}").exists():
            shutil.rmtree(folder, ignore_errors=True)


def _name_ok(name: str) -> bool:
    return name.isidentifier()


def boot(kernel: str | debian.Kernel, memory: int = qemu.MEMORY_MIB,
         boot_timeout: float = BOOT_TIMEOUT) -> Session:
    """A guest running ``kernel`` (a series such as ``6.1``, fetched if needed, or a
    fetched :class:`~pfc.kernel.lab.debian.Kernel`); use it as a context manager."""
    why = qemu.available()
    if why:
        raise LabError(why)
    if isinstance(kernel, str):
        kernel = debian.fetch(kernel)
    cache = debian.cache_root()
    accel = qemu.choose_accel(cache)
    if accel != "kvm?":
        return Session(kernel, accel, memory, boot_timeout)
    try:
        session = Session(kernel, "kvm", memory, KVM_PROBE_TIMEOUT)
    except LabError as exc:
        qemu.remember_kvm(cache, False, str(exc)[:300])
        return Session(kernel, "tcg", memory, boot_timeout)
    qemu.remember_kvm(cache, True)
    return session
