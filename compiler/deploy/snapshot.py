"""Copies of the policies pfc loaded: what ``--dry-run`` compares with, what ``apply``
falls back to.

A *copy* is every source text a policy was compiled from (the policy file and each
``set NAME = file`` it reads, keyed by the path the compiler read), with the load's
options (target, hook, table, mode) and a digest over all of it. Two places keep copies:

- beside the state record, ``STATE/NETNS/DEV/TARGET.sources`` (``/run/pfc``, a tmpfs):
  the policy loaded there now. ``pfc load --dry-run`` and ``pfc apply`` compile it
  again to diff against (the policy file on disk may have changed since); ``apply``
  compares digests to know that nothing changed; ``pfc set`` recompiles it. Removed
  with the record. It commits with the record: a load (or ``pfc set``) writes the new
  copy as ``TARGET.sources.pending`` before it changes the kernel and renames it into
  place right after writing the record (:func:`commit`, also what the next command
  does for a load that was killed: :mod:`pfc.deploy.journal`); the record names the
  copy's digest (``copy_digest``), and a copy whose digest is another is refused
  (:func:`checked`), never used as the loaded policy's.
- the *last good copy*, ``LIB/last-good/NETNS/DEV/TARGET.sources`` (``/var/lib/pfc``,
  ``PFC_LIB_DIR`` overrides it): written after every successful ``pfc apply`` of that
  place, it survives a reboot. When the config is broken at boot and nothing is loaded
  at that place, ``apply`` loads this copy: a host never comes up without a policy.

Copies are recompiled with :func:`compile_copy`, which reads set files from the copy,
never from disk.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pfc.deploy import state
from pfc.frontend.pipeline import Compiled, compile_source
from pfc.frontend.source import SourceFile

SUFFIX = ".sources"
PENDING = ".sources.pending"  # a load's or set's new copy, until it commits
DEFAULT_LIB = "/var/lib/pfc"


def lib_dir() -> Path:
    return Path(os.environ.get("PFC_LIB_DIR") or DEFAULT_LIB)


@dataclass
class Copy:
    """A policy's sources and the options it was loaded with."""

    main: str  # the policy file's path as the compiler read it
    sources: dict[str, str]  # path → text (the policy and its set files)
    options: dict = field(default_factory=dict)  # target, hook, table, mode
    origin: str | None = None  # `pfc set` changed it: the digest of what was loaded

    @property
    def applied(self) -> str:
        """The digest of the policy as loaded, before any live set change."""
        return self.origin or self.digest

    @property
    def digest(self) -> str:
        blob = json.dumps([self.main, sorted(self.sources.items()),
                           sorted((k, v) for k, v in self.options.items() if v is not None)])
        return hashlib.sha256(blob.encode()).hexdigest()

    @staticmethod
    def of(compiled: Compiled, options: dict) -> Copy:
        return Copy(compiled.source.name,
                    {name: src.text for name, src in compiled.sources.items()},
                    dict(options))


def compile_copy(copy: Copy) -> Compiled:
    """The copy compiled again, its set files read from the copy (OSError for one it
    does not hold: the compiler reports it as a diagnostic)."""
    def read_set(path: Path) -> SourceFile:
        text = copy.sources.get(str(path))
        if text is None:
            raise FileNotFoundError(2, "not in pfc's copy of the policy")
        return SourceFile(str(path), text)

    return compile_source(SourceFile(copy.main, copy.sources[copy.main]), read_set)


def _read(p: Path) -> Copy | None:
    try:
        data = json.loads(p.read_text())
        copy = Copy(str(data["main"]), dict(data["sources"]), dict(data.get("options", {})),
                    data.get("origin"))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return copy if copy.main in copy.sources else None


def loaded_path(netns: str, dev: str, target: str) -> Path:
    return state.path(netns, dev, target, SUFFIX)


def last_good_path(netns: str, dev: str, target: str) -> Path:
    return lib_dir() / "last-good" / loaded_path(netns, dev, target).relative_to(
        state.state_dir())


def pending_path(netns: str, dev: str, target: str) -> Path:
    return state.path(netns, dev, target, PENDING)


def write_pending(netns: str, dev: str, target: str, copy: Copy) -> None:
    """The copy a load or set is about to commit (before it changes the kernel)."""
    state.write_json(pending_path(netns, dev, target), asdict(copy))


def read_pending(netns: str, dev: str, target: str) -> Copy | None:
    return _read(pending_path(netns, dev, target))


def discard_pending(netns: str, dev: str, target: str) -> None:
    state.remove_file(pending_path(netns, dev, target))


def commit(netns: str, dev: str, target: str, digest: str | None) -> None:
    """Make the copy at (netns, dev, target) the one of digest ``digest`` (a record's
    ``copy_digest``; None: no copy): the pending copy renamed into place if it is that
    one (a rename: no space needed), else left alone if the copy there is that one."""
    pending, loaded = pending_path(netns, dev, target), loaded_path(netns, dev, target)
    if digest is None:
        state.remove_file(pending)
        state.remove_file(loaded)
        return
    new = _read(pending)
    if new is not None and new.digest == digest:
        try:
            os.replace(pending, loaded)
        except OSError as exc:
            raise state.Unwritable(loaded, exc) from None
        return
    state.remove_file(pending)


def read_loaded(netns: str, dev: str, target: str) -> Copy | None:
    """The copy of the policy loaded at (netns, dev, target), None if there is none;
    unchecked (:func:`checked` compares it with the record)."""
    return _read(loaded_path(netns, dev, target))


def checked(record: state.Record) -> tuple[Copy | None, str | None]:
    """(pfc's copy of the policy ``record`` names, None) if its digest is the record's;
    (None, why not) otherwise: no copy, or a copy of another policy (a load of an older
    pfc killed between its record and its copy, an edit by hand)."""
    p = loaded_path(record.netns, record.dev, record.target)
    copy = _read(p)
    if record.copy_digest is None:
        return None, (f"pfc's record of the {record.target} policy on {record.dev} names "
                      "no copy of its sources (loaded without one, or by an older pfc)")
    if copy is None:
        return None, f"pfc's copy of the policy's sources ({p}) is missing or unreadable"
    if copy.digest != record.copy_digest:
        return None, (f"pfc's copy {p} (sha256 {copy.digest[:12]}…) is not the copy pfc's "
                      f"record names (sha256 {record.copy_digest[:12]}…): it is not the "
                      "loaded policy's")
    return copy, None


def remove_loaded(netns: str, dev: str, target: str) -> None:
    state.remove_file(loaded_path(netns, dev, target))
    state.remove_file(pending_path(netns, dev, target))


def keep_last_good(netns: str, dev: str, target: str, copy: Copy) -> Path:
    p = last_good_path(netns, dev, target)
    state.write_json(p, asdict(copy))
    return p


def read_last_good(netns: str, dev: str, target: str) -> Copy | None:
    return _read(last_good_path(netns, dev, target))
