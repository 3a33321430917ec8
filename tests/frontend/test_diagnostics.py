"""Golden diagnostics: every bad input in tests/bad gives exactly its rendered output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pfc.frontend.diagnostics import render_text, to_json
from pfc.frontend.pipeline import compile_source
from pfc.frontend.source import SourceFile
from tests.paths import BAD  # noqa: E402

CASES = sorted(BAD.glob("*.pf"))


def _compile(path: Path):
    # Relative names keep the golden text independent of where the tree lives; the
    # bytes are decoded as SourceFile.read does (some cases are not UTF-8).
    source = SourceFile.decode(f"tests/bad/{path.name}", path.read_bytes())
    return compile_source(source, read_set=lambda p: SourceFile.decode(
        f"tests/bad/{p.name}", (BAD / p.name).read_bytes()))


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_golden_diagnostics(path: Path, golden) -> None:
    compiled = _compile(path)
    assert compiled.diagnostics, f"{path.name} gave no diagnostic"
    text = "\n".join(render_text(d, compiled.sources) for d in compiled.diagnostics) + "\n"
    golden(path.with_suffix(".out"), text)


def test_at_least_thirty_bad_inputs_are_errors() -> None:
    errors = [p for p in CASES if not _compile(p).ok]
    assert len(errors) >= 30


@pytest.mark.parametrize("path", CASES[:8], ids=[p.stem for p in CASES[:8]])
def test_json_has_the_same_diagnostics(path: Path) -> None:
    compiled = _compile(path)
    rendered = [to_json(d, compiled.sources) for d in compiled.diagnostics]
    json.dumps(rendered)
    for d, j in zip(compiled.diagnostics, rendered, strict=True):
        line, col = compiled.sources[d.span.file].position(d.span.start)
        assert (j["line"], j["column"], j["message"]) == (line, col, d.message)


def test_all_errors_are_collected() -> None:
    compiled = _compile(BAD / "many-errors.pf")
    lines = sorted({compiled.source.position(d.span.start)[0] for d in compiled.diagnostics})
    assert lines == [1, 2, 3, 4]


def test_caret_sits_under_the_exact_span() -> None:
    compiled = _compile(BAD / "typo-keyword.pf")
    text = render_text(compiled.diagnostics[0], compiled.sources).splitlines()
    assert text[0].startswith("tests/bad/typo-keyword.pf:1:10: error:")
    source_line, caret_line = text[1], text[2]
    start = caret_line.index("^")
    assert source_line[start:start + 5] == "dprot"
    assert caret_line.strip() == "^~~~~"
    assert any("did you mean `dport`?" in line for line in text)


def test_a_note_of_several_lines_is_shown_as_lines() -> None:
    """clang's output in an internal error's note: one line each, indented (it was
    one line with `\\x0a` in it); control characters inside stay escaped."""
    from pfc.frontend.diagnostics import Note, error
    from pfc.frontend.source import Span

    source = SourceFile("p.pf", "drop udp\n")
    diag = error("boom", Span("p.pf", 0, 4), notes=(Note("clang said:\na\nb\x1b[2J"),))
    lines = render_text(diag, {"p.pf": source}).splitlines()
    assert lines[-3:] == ["  = note: clang said:", "    a", "    b\\x1b[2J"]
