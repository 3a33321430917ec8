"""Every policy shown in README.md and docs/*.md is one `pfc fmt --check` leaves alone
and `pfc check` accepts (new-user trial m12: README's edge.pf failed fmt --check for
two rounds).

A policy is a fenced block with no info string (or ```pf) whose every non-blank line
starts with a statement keyword or a comment. A block that looks like one but is
deliberately not a policy (a broken example, an excerpt) is fenced as ```text.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pfc.frontend.diagnostics import has_errors
from pfc.frontend.fmt import format_source
from pfc.frontend.pipeline import compile_source
from pfc.frontend.source import SourceFile
from tests.paths import ROOT

STATEMENTS = ("define", "set", "default", "drop", "pass", "accept", "count", "log",
              "redirect", "queue")
_FENCE = re.compile(r"^\s*```(\S*)\s*$")


def fenced_blocks(path: Path) -> list[tuple[int, str, str]]:
    """(line of the opening fence, info string, body) of every fenced block."""
    out, lines, i = [], path.read_text().split("\n"), 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m:
            end = next(j for j in range(i + 1, len(lines)) if _FENCE.match(lines[j]))
            out.append((i + 1, m.group(1), "\n".join(lines[i + 1:end]) + "\n"))
            i = end
        i += 1
    return out


def is_policy(info: str, body: str) -> bool:
    if info not in ("", "pf"):
        return False
    words = [line.split()[0] for line in body.splitlines() if line.strip()]
    return bool(words) and all(w in STATEMENTS or w.startswith("#") for w in words)


DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
POLICIES = [(path, line, body) for path in DOCS for line, info, body in fenced_blocks(path)
            if is_policy(info, body)]


def test_the_known_policies_are_found() -> None:
    """The extraction itself: README's edge.pf, language.md's first example and its
    options block at least (a test that finds nothing passes for nothing)."""
    found = {(path.name, body.splitlines()[0]) for path, _, body in POLICIES}
    assert ("README.md", "# edge.pf") in found
    assert any(name == "language.md" and first.startswith("# edge.pf")
               for name, first in found)
    assert len(POLICIES) >= 3


@pytest.mark.parametrize("path, line, body", POLICIES,
                         ids=[f"{p.name}:{line}" for p, line, _ in POLICIES])
def test_every_policy_in_the_docs_is_formatted_and_checks(path: Path, line: int,
                                                          body: str) -> None:
    source = SourceFile(f"{path.name}:{line}", body)
    text, diags = format_source(source)
    assert text == body, f"{path.name} line {line}: `pfc fmt` would write\n{text}"
    # set files named in the docs are not beside them: check everything else
    compiled = compile_source(source, read_set=lambda p: SourceFile(str(p), "10.0.0.1\n"))
    assert not has_errors(compiled.diagnostics), compiled.diagnostics
