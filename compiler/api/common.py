"""What every part of :mod:`pfc.api` shares: the policy argument (``PolicyInput``),
:func:`front`, and the result of a dry run."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pfc.frontend.pipeline import Compiled, compile_path, compile_text

if TYPE_CHECKING:
    from pfc.deploy.preview import Preview
    from pfc.prove.diff import Result as DiffResult
    from pfc.prove.sets import SetChange as ListChange

PolicyInput = str | os.PathLike | Compiled


def front(policy: PolicyInput) -> Compiled:
    """The front end's result for a policy (text, path or Compiled): the checked IR and
    every diagnostic. Never raises for errors in the policy; OSError if a file cannot
    be read."""
    if isinstance(policy, Compiled):
        return policy
    if isinstance(policy, os.PathLike):
        return compile_path(Path(policy))
    if isinstance(policy, str):
        if "\n" not in policy and policy.rstrip().endswith(".pf"):
            return compile_path(policy.rstrip())
        return compile_text(policy)
    raise TypeError(f"a policy is text, a path or a Compiled, not {type(policy).__name__}")


@dataclass
class DryRun:
    """``pfc load --dry-run``: the kernel's check and what would change. ``removed`` and
    ``added`` are (line, rule text) of the loaded and the new policy (``pfc diff``'s
    alignment); ``diff`` the regions of frames whose verdict, counters or rewrite
    change; both None when nothing is loaded there or pfc kept no copy of it
    (``compared`` says which)."""

    preview: Preview
    compared: str  # "nothing loaded" | "no copy" | "compared"
    removed: list[tuple[int, str]] | None = None
    added: list[tuple[int, str]] | None = None
    diff: DiffResult | None = None
    set_files: dict[str, tuple[int, int]] | None = None  # path → (lines removed, added)
    sets: list[ListChange] | None = None  # named lists whose entries changed

    @property
    def changes(self) -> bool:
        return self.compared != "compared" or bool(self.removed or self.added or
                                                   self.set_files or self.sets) or \
            not (self.diff is None or self.diff.same)


def set_file_changes(old: Compiled, new: Compiled) -> dict[str, tuple[int, int]]:
    """Per set file of the new policy whose text differs from the loaded copy's: the
    lines (entries, comments) removed and added."""
    out = {}
    for name, src in new.sources.items():
        before = old.sources.get(name)
        if name == new.source.name or before is None or before.text == src.text:
            continue
        a, b = set(before.text.splitlines()), set(src.text.splitlines())
        out[name] = (len(a - b), len(b - a))
    return out


