"""Golden files: what every target emits for every example.

tests/golden/<example>/<target>.<format> holds the text form (the first text format
of the target) and, for eBPF programs with large sets, <target>.maps.json; a rule a
target cannot express gives its rendered error instead, in <target>.error.
Regenerate all with ``pytest tests/backends/test_golden.py --update-golden``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pfc import backends
from pfc.build import build_artifact
from pfc.frontend.diagnostics import render_text
from pfc.frontend.pipeline import compile_source
from pfc.frontend.source import SourceFile
from tests.paths import (
    EXAMPLES,
    GOLDEN,  # noqa: E402
    ROOT,
)

CASES = [(e, t) for e in EXAMPLES for t in backends.registry()]


def text_format(backend) -> str:
    return next(f for f in backend.formats if f not in backend.binary_formats)


@pytest.mark.parametrize("example,target", CASES,
                         ids=[f"{e.stem}-{t}" for e, t in CASES])
def test_golden_output(example: Path, target: str, golden) -> None:
    source = SourceFile.read(example)
    source = SourceFile(str(example.relative_to(ROOT)), source.text)
    compiled = compile_source(source, read_set=lambda p: SourceFile(
        str(p), (example.parent / p.name).read_text()))
    backend = backends.get(target)
    fmt = text_format(backend)
    # nft's default hook is netdev ingress, which needs a device: golden files use eth0.
    artifact, diags = build_artifact(compiled, target, fmt, dev="eth0")
    if artifact is None:
        text = "\n".join(render_text(d, compiled.sources) for d in diags) + "\n"
        golden(GOLDEN / example.stem / f"{target}.error", text)
    else:
        golden(GOLDEN / example.stem / f"{target}.{fmt}", artifact.text)
        if artifact.meta.get("maps_file"):  # eBPF sets: the maps' contents, filled at load
            golden(GOLDEN / example.stem / f"{target}.maps.json",
                   artifact.files[artifact.meta["maps_file"]].decode())
