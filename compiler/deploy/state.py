"""What ``pfc load`` put where: one small JSON file per (netns, device, target).

Files live under ``/run/pfc`` (``PFC_STATE_DIR`` overrides it, e.g. for tests) as
``NETNS/DEV/TARGET.json``; ``/run`` is a tmpfs, so the records vanish with a reboot,
exactly as the loaded programs and rulesets do. Writes are atomic (a temporary file
renamed over the old one) and every load/unload holds an exclusive ``flock`` on
``DIR/.lock`` so two ``pfc load`` runs never interleave.

A record holds: target, hook, device, namespace, where the thing lives (program id and
pins, tc handle and priority, nft table, iptables chain — ``attach``), the policy file
(absolute path) and the sha256 of its text, the load time, and the per-rule table
(index, line, rule text, action) that ``pfc status`` prints counters against.
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
VERSION = 1
_SAFE = re.compile(r"^[A-Za-z0-9_.:@-]{1,64}$")


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
    attach: dict = field(default_factory=dict)  # per target: ids, pins, table, chain
    version: int = VERSION

    def to_json(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_json(data: dict) -> Record:
        data = dict(data)
        data["rules"] = [RuleRow(**r) for r in data.get("rules", [])]
        return Record(**data)


def _part(value: str, what: str) -> str:
    if not _SAFE.match(value) or value in (".", ".."):
        raise ValueError(f"invalid {what} `{value}` for a state file name")
    return value


def path(netns: str, dev: str, target: str) -> Path:
    return state_dir() / _part(netns, "namespace") / _part(dev, "device") / \
        f"{_part(target, 'target')}.json"


def read(netns: str, dev: str, target: str) -> Record | None:
    p = path(netns, dev, target)
    try:
        return Record.from_json(json.loads(p.read_text()))
    except FileNotFoundError:
        return None
    except (ValueError, TypeError) as exc:
        raise ValueError(f"unreadable state file {p}: {exc}") from exc


def write(record: Record) -> Path:
    """Write atomically (rename), creating the directories."""
    p = path(record.netns, record.dev, record.target)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=".tmp-", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(record.to_json(), f, indent=2)
        f.write("\n")
    os.replace(tmp, p)
    return p


def remove(record: Record) -> None:
    """Delete the record and the directories it leaves empty."""
    p = path(record.netns, record.dev, record.target)
    p.unlink(missing_ok=True)
    for parent in (p.parent, p.parent.parent):
        with contextlib.suppress(OSError):
            parent.rmdir()


def records(netns: str | None = None, dev: str | None = None) -> list[Record]:
    """Every record, optionally of one namespace and/or device, sorted."""
    root = state_dir()
    if not root.is_dir():
        return []
    out = []
    for p in sorted(root.glob("*/*/*.json")):
        ns_name, dev_name = p.parent.parent.name, p.parent.name
        if (netns and ns_name != netns) or (dev and dev_name != dev):
            continue
        out.append(read(ns_name, dev_name, p.stem))
    return [r for r in out if r is not None]


@contextlib.contextmanager
def locked() -> Iterator[None]:
    """An exclusive lock over every state file (``DIR/.lock``), for one load/unload."""
    root = state_dir()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
