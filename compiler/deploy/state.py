"""What ``pfc load`` put where: one small JSON file per (netns, device, target).

Files live under ``/run/pfc`` (``PFC_STATE_DIR`` overrides it, e.g. for tests) as
``NETNS/DEV/TARGET.json``; ``/run`` is a tmpfs, so the records vanish with a reboot,
exactly as the loaded programs and rulesets do. Writes are atomic (a temporary file
renamed over the old one) and every load/unload/status holds an exclusive ``flock`` on
``DIR/.lock`` so two runs never interleave.

A record is a cache of what the kernel holds, never the authority: the loaders find
what pfc attached in the kernel (program id, name and tag; nft table handle; iptables
chains) and say so when the two disagree. It holds: target, hook, device, namespace
(name and inode), what was attached (``attach``: program id, name and tag, tc handle
and priority, nft table, iptables chains and sets), the policy file (absolute path)
and the sha256 of its text, the load time, and the per-rule table (index, line, rule
text, action) that ``pfc status`` prints counters against, and the digest of pfc's copy
of the policy's sources (``copy_digest``, :mod:`pfc.deploy.snapshot`): a copy whose
digest is another is not the loaded policy's. An unfinished load is a separate file
beside it (:mod:`pfc.deploy.journal`).

A write the file system refuses (full, read-only) is :class:`Unwritable`: the path, the
reason and the bytes it needed; no ``.part`` file stays behind. A load reserves room
before it changes the kernel (:func:`reserve`): a write that then finds the file
system full releases the reserve and tries once more, so the record of a policy the
kernel holds can be written.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

DEFAULT_DIR = "/run/pfc"
VERSION = 2
_SAFE = re.compile(r"^[A-Za-z0-9_.:@-]{1,64}$")
RECORD, INTENT = ".json", ".intent"  # file suffixes: a record, an unfinished load
_lock: list[int] = []  # the fd of the lock this process holds (one at most)


def state_dir() -> Path:
    return Path(os.environ.get("PFC_STATE_DIR") or DEFAULT_DIR)


@dataclass
class RuleRow:
    """One source rule. ``counted_with``: the index of the rule whose counter also counts
    this one, when a pass merged them (``group_runs`` merges runs of terminal rules
    into the first; its counter covers the run)."""

    index: int
    line: int
    text: str
    action: str
    counted_with: int | None = None
    block: str | None = None  # a whole firewall's: the hook block (or ``chain NAME``)


@dataclass
class Record:
    target: str
    hook: str
    dev: str
    netns: str
    policy: str  # absolute path of the policy file
    sha256: str  # of its text as loaded
    loaded_at: str  # ISO 8601, UTC
    rules: list[RuleRow]
    default: str  # default verdict
    attach: dict = field(default_factory=dict)  # per target: ids, tags, table, chains
    version: int = VERSION
    netns_id: int | None = None  # the namespace's inode at load (a recreated name differs)
    copy_digest: str | None = None  # of pfc's copy of the sources (None: no copy kept)

    def to_json(self) -> dict:
        return asdict(self)

    def holds_bpf(self) -> bool:
        """Its programs are eBPF (reading them back needs CAP_BPF): xdp, tc, or a whole
        firewall with an xdp or tc block (``attach["parts"]``: ``xdp:eth0``...)."""
        parts = (self.attach.get("parts") or {}) if self.target == "firewall" else {}
        return self.target in ("xdp", "tc") or any(
            str(p).split(":")[0] in ("xdp", "tc") for p in parts)

    @staticmethod
    def from_json(data: dict) -> Record:
        data = dict(data)
        data["rules"] = [RuleRow(**r) for r in data.get("rules", [])]
        return Record(**data)


class Unreadable(ValueError):
    """A state file that is not a record pfc can read: where it is and why."""

    def __init__(self, netns: str, dev: str, target: str, where: Path, reason: str):
        super().__init__(f"unreadable state file {where}: {reason}")
        self.netns, self.dev, self.target, self.where = netns, dev, target, where


def valid_part(value: str) -> bool:
    """Whether ``value`` can name a state file's directory or file (no ``/``, ``.``,
    ``..``, spaces or control characters)."""
    return bool(_SAFE.match(value)) and value not in (".", "..")


def _part(value: str, what: str) -> str:
    if not valid_part(value):
        raise ValueError(f"invalid {what} `{value}` for a state file name")
    return value


def path(netns: str, dev: str, target: str, suffix: str = RECORD) -> Path:
    return state_dir() / _part(netns, "namespace") / _part(dev, "device") / \
        f"{_part(target, 'target')}{suffix}"


def read(netns: str, dev: str, target: str) -> Record | None:
    """The record, None if there is none; :class:`Unreadable` if it is corrupt."""
    p = path(netns, dev, target)
    try:
        record = Record.from_json(json.loads(p.read_text()))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError, AttributeError) as exc:
        raise Unreadable(netns, dev, target, p, str(exc).splitlines()[0][:200]) from None
    if (record.netns, record.dev, record.target) != (netns, dev, target) or \
            not isinstance(record.attach, dict):
        raise Unreadable(netns, dev, target, p, "it names another place")
    return record


class Unwritable(OSError):
    """pfc's state (or lib) directory refused a write: where, why, and how many bytes
    the write needed."""

    def __init__(self, where: Path, err: OSError, needed: int = 0):
        super().__init__(err.errno, err.strerror or str(err))
        self.where, self.needed = where, needed

    def __str__(self) -> str:
        return f"cannot write {self.where}: {self.strerror}"

    def need(self) -> str:
        """What pfc needs there, for the user."""
        root = state_dir() if self.where.is_relative_to(state_dir()) else self.where.parent
        if self.errno in (errno.ENOSPC, errno.EDQUOT):
            size = max(1, -(-self.needed // 1024))
            return f"{root} needs about {size} kB more free space"
        if self.errno == errno.EROFS:
            return f"{root} must be writable: it is on a read-only file system"
        if self.errno in (errno.EACCES, errno.EPERM):
            return f"{root} must be writable by pfc (run as root)"
        return f"{root} must be a writable directory"

    def hint(self) -> str:
        full = self.errno in (errno.ENOSPC, errno.EDQUOT)
        return (f"{'free space in' if full else 'make writable'} {self.where.parent}, or set "
                "PFC_STATE_DIR to a writable directory with room (`pfc status` then shows "
                "what is loaded)")


_reserved: list[Path] = []  # this process's reserves (see reserve)


def write_json(p: Path, data: dict, retry: bool = True) -> None:
    """Write ``data`` to ``p`` atomically (rename), creating the directories.
    :class:`Unwritable` if the file system refuses (the temporary file is removed);
    a full one first gets this process's reserve back (:func:`reserve`)."""
    text = json.dumps(data, indent=2) + "\n"
    tmp = None
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=".tmp-", suffix=".part")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, p)
    except OSError as exc:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        if retry and _reserved and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            release()
            return write_json(p, data, retry=False)
        raise Unwritable(p, exc, len(text.encode())) from None


def reserve(p: Path, size: int) -> None:
    """Hold ``size`` bytes of ``p``'s file system (a file at ``p``, allocated) for the
    writes that must follow a change to the kernel; :class:`Unwritable` if there is no
    room. Released by :func:`release` or by a write that finds the disk full."""
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.posix_fallocate(fd, 0, max(size, 1))
        finally:
            os.close(fd)
    except OSError as exc:
        with contextlib.suppress(OSError):
            p.unlink()
        raise Unwritable(p, exc, size) from None
    _reserved.append(p)


def check_writable() -> None:
    """:class:`Unwritable` unless the state directory takes writes (a read-only mount,
    no permission), checked before an unload changes the kernel."""
    root = state_dir()
    if root.is_dir() and not os.access(root, os.W_OK):
        err = errno.EROFS if os.statvfs(root).f_flag & os.ST_RDONLY else errno.EACCES
        raise Unwritable(root / ".lock", OSError(err, os.strerror(err)))


def release() -> None:
    """Give this process's reserves back."""
    while _reserved:
        with contextlib.suppress(OSError):
            _reserved.pop().unlink()


def reserved(p: Path) -> bool:
    """Whether ``p`` is a reserve of this process (a running load's, never stale)."""
    return p in _reserved


def write(record: Record) -> Path:
    p = path(record.netns, record.dev, record.target)
    write_json(p, record.to_json())
    return p


def remove_file(p: Path) -> None:
    """Delete a state file and the directories it leaves empty (:class:`Unwritable`
    on a read-only file system)."""
    try:
        if os.path.lexists(p):  # (unlink fails with EROFS even for a missing file)
            p.unlink(missing_ok=True)
    except OSError as exc:
        raise Unwritable(p, exc) from None
    for parent in (p.parent, p.parent.parent):
        with contextlib.suppress(OSError):
            parent.rmdir()


def remove(record: Record) -> None:
    remove_file(path(record.netns, record.dev, record.target))


def places(netns: str | None = None, dev: str | None = None,
           suffix: str = RECORD) -> list[tuple[str, str, str]]:
    """(netns, dev, target) of every state file with ``suffix``, optionally of one
    namespace and/or device, sorted; names that could not be pfc's are skipped."""
    root = state_dir()
    if not root.is_dir():
        return []
    out = []
    for p in sorted(root.glob(f"*/*/*{suffix}")):
        where = (p.parent.parent.name, p.parent.name, p.name[:-len(suffix)])
        if (netns and where[0] != netns) or (dev and where[1] != dev) or \
                not all(map(valid_part, where)):
            continue
        out.append(where)
    return out


def records(netns: str | None = None, dev: str | None = None,
            problems: list[Unreadable] | None = None) -> list[Record]:
    """Every readable record, optionally of one namespace and/or device, sorted; the
    unreadable ones go to ``problems`` (if given)."""
    out = []
    for where in places(netns, dev):
        try:
            record = read(*where)
        except Unreadable as exc:
            if problems is not None:
                problems.append(exc)
            continue
        if record is not None:
            out.append(record)
    return out


def _lock_file(root: Path):
    """``DIR/.lock`` opened for the lock: for writing, or read-only where the file
    system is (flock works on either; a read-only directory fails at its first
    write); :class:`Unwritable` if it cannot be opened at all."""
    p = root / ".lock"
    try:
        root.mkdir(parents=True, exist_ok=True)
        return open(p, "a")
    except OSError as exc:
        try:
            return open(p)
        except OSError:
            raise Unwritable(p, exc) from None


@contextlib.contextmanager
def locked() -> Iterator[None]:
    """An exclusive lock over every state file (``DIR/.lock``), for one load, unload
    or status; re-entered freely by the process that holds it (``pfc set`` reloads
    a policy under its own lock). A child process that inherits :func:`lock_fd` holds
    it until it exits (the iptables switch does: see :mod:`pfc.deploy.iptables`)."""
    if _lock:
        yield
        return
    with _lock_file(state_dir()) as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        _lock.append(f.fileno())
        try:
            yield
        finally:
            _lock.remove(f.fileno())
            fcntl.flock(f, fcntl.LOCK_UN)


def lock_fd() -> int | None:
    """The fd of the state lock this process holds now, or None."""
    return _lock[-1] if _lock else None
