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
text, action) that ``pfc status`` prints counters against. An unfinished load is a
separate file beside it (:mod:`pfc.deploy.journal`).
"""

from __future__ import annotations

import contextlib
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

    def to_json(self) -> dict:
        return asdict(self)

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


def write_json(p: Path, data: dict) -> None:
    """Write ``data`` to ``p`` atomically (rename), creating the directories."""
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=".tmp-", suffix=".part")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=2)
        f.write("\n")
    os.replace(tmp, p)


def write(record: Record) -> Path:
    p = path(record.netns, record.dev, record.target)
    write_json(p, record.to_json())
    return p


def remove_file(p: Path) -> None:
    """Delete a state file and the directories it leaves empty."""
    p.unlink(missing_ok=True)
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


@contextlib.contextmanager
def locked() -> Iterator[None]:
    """An exclusive lock over every state file (``DIR/.lock``), for one load, unload
    or status. A child process that inherits :func:`lock_fd` holds it until it exits
    (the iptables switch does: see :mod:`pfc.deploy.iptables`)."""
    root = state_dir()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "a") as f:
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
