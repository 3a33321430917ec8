"""The module's C in kernel style: every example's module (and at each runnable hook)
passes the kernel's own scripts/checkpatch.pl --strict with no error, warning or check.

checkpatch.pl is not in Debian's linux-headers packages; it is in linux-source-X (the
kernel's source tarball, 139 MB for 6.1): `$PFC_CHECKPATCH` names it, else it is looked
for under /usr/src/linux-source-*/scripts/. The lines-and-tabs test runs everywhere."""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from pfc.build import build_artifact
from pfc.frontend.pipeline import compile_path
from tests.paths import EXAMPLES

HOOKS = ("prerouting", "input", "output")


def _checkpatch() -> str | None:
    found = os.environ.get("PFC_CHECKPATCH") or next(
        iter(sorted(glob.glob("/usr/src/linux-source-*/scripts/checkpatch.pl"))), None)
    return found if found and Path(found).is_file() and shutil.which("perl") else None


def _modules() -> list[tuple[str, str]]:
    out = []
    for path in EXAMPLES:
        compiled = compile_path(path)
        for hook in HOOKS:
            artifact, _ = build_artifact(compiled, "nfmod", hook=hook)
            if artifact is not None:
                out.append((f"{path.stem}:{hook}", artifact.text))
    return out


def test_lines_fit_and_indent_with_tabs() -> None:
    modules = _modules()
    assert len(modules) >= 20
    for name, text in modules:
        for number, line in enumerate(text.splitlines(), 1):
            assert len(line.expandtabs(8)) <= 100, (name, number, line)
            # tabs, then spaces only to align (fewer than a tab); " *" in comments
            assert re.match(r"\t* {0,7}(\S|$)", line), (name, number, line)
            assert not line.endswith((" ", "\t")), (name, number)


@pytest.mark.skipif(_checkpatch() is None,
                    reason="no checkpatch.pl: not in Debian's linux-headers; install "
                           "linux-source-6.1 or set PFC_CHECKPATCH (module doc)")
def test_checkpatch_strict_is_clean(tmp_path: Path) -> None:
    script = _checkpatch()
    for name, text in _modules():
        if not name.endswith(":prerouting"):  # the hooks differ in two constants
            continue
        source = tmp_path / "pfc_nf.c"
        source.write_text(text)
        done = subprocess.run(["perl", script, "--no-tree", "--strict", "--show-types",
                               "-f", str(source)],
                              capture_output=True, text=True)
        assert done.returncode == 0 and "total: 0 errors, 0 warnings, 0 checks" in \
            done.stdout, (name, done.stdout[-3000:])
