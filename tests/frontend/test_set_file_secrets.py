"""A set file is never shown (fuzz-and-faults S1): a policy may name any readable file
(``set s = file "/etc/shadow"``) and pfc may read it with more privilege than the
policy's author (``pfc load`` as root into the journal, a root CI job, the editor).

Every output form (text, ``check --format json``, ``compile --diagnostics json``, the
language server's diagnostics) quotes at most ~40 characters of an entry, names the place
as ``line N of FILE`` on the ``set`` declaration, and stops after 10 errors a file.
"""

from __future__ import annotations

import json
import random
import string
from pathlib import Path

import pytest
from lsprotocol import converters

from pfc.cli.main import main
from pfc.frontend.diagnostics import render_text, to_json
from pfc.frontend.pipeline import compile_path
from pfc.frontend.source import SourceFile
from pfc.frontend.values import MAX_SET_FILE_ERRORS
from pfc.lsp.analysis import analyse, lsp_diagnostics

WINDOW = 41  # no run of this many characters of a secret line may appear anywhere
POLICY = 'set s = file "shadow"\ndrop src $s\n'


def _shadow(lines: int = 25) -> list[str]:
    """Lines in /etc/shadow's format, with SHA-512 crypt hashes of the real length."""
    rng = random.Random(7)
    alphabet = string.ascii_letters + string.digits + "./"
    out = []
    for i in range(lines):
        salt = "".join(rng.choice(alphabet) for _ in range(16))
        digest = "".join(rng.choice(alphabet) for _ in range(86))
        out.append(f"user{i}:$6${salt}${digest}:19000:0:99999:7:::")
    return out


@pytest.fixture
def secret(tmp_path: Path) -> tuple[Path, list[str]]:
    lines = _shadow()
    (tmp_path / "shadow").write_text("\n".join(lines) + "\n")
    (tmp_path / "p.pf").write_text(POLICY)
    return tmp_path / "p.pf", lines


def _assert_hidden(text: str, lines: list[str]) -> None:
    for line in lines:
        for i in range(len(line) - WINDOW + 1):
            assert line[i:i + WINDOW] not in text, f"leaked {line[i:i + WINDOW]!r}"


def test_text_diagnostics_quote_40_characters_and_no_line(secret) -> None:
    policy, lines = secret
    compiled = compile_path(policy)
    text = "\n".join(render_text(d, compiled.sources) for d in compiled.diagnostics)
    _assert_hidden(text, lines)
    first = compiled.diagnostics[0]
    assert first.message.startswith("line 1 of shadow: `user0:$6$")
    assert compiled.source.position(first.span.start) == (1, 14)  # on the set's path
    assert "   1 | set s = file" in text  # the policy's line is shown, the file's never
    assert all(" | user" not in line for line in text.splitlines())


def test_errors_of_one_set_file_stop_after_ten(secret) -> None:
    policy, lines = secret
    diags = compile_path(policy).diagnostics
    assert len(diags) == MAX_SET_FILE_ERRORS + 1
    assert [d.message.split(":")[0] for d in diags[:3]] == [
        "line 1 of shadow", "line 2 of shadow", "line 3 of shadow"]
    rest = len(lines) - MAX_SET_FILE_ERRORS
    assert diags[-1].message == f"{rest} more errors in shadow not shown"


def test_the_place_in_the_file_is_kept_as_data(secret) -> None:
    """JSON and editors still jump to the entry: a note's span, whose line is never
    printed (not even through a note)."""
    policy, _ = secret
    compiled = compile_path(policy)
    second = to_json(compiled.diagnostics[1], compiled.sources)
    assert second["notes"][0]["file"].endswith("shadow")
    assert (second["notes"][0]["line"], second["notes"][0]["column"]) == (2, 1)
    note_text = render_text(compiled.diagnostics[1], compiled.sources).splitlines()[-1]
    assert note_text.endswith("shadow:2:1: note: here, in the set file")


def test_cli_text_and_json_forms(secret, capsys) -> None:
    policy, lines = secret
    assert main(["check", str(policy)]) == 1
    assert main(["check", "--format", "json", str(policy)]) == 1
    assert main(["compile", str(policy), "--target", "nft", "--diagnostics", "json"]) == 1
    out, err = capsys.readouterr()
    _assert_hidden(out + err, lines)
    assert "line 1 of shadow" in out and "line 1 of shadow" in err


def test_language_server_diagnostics(secret) -> None:
    policy, lines = secret
    analysis = analyse(SourceFile(str(policy), POLICY))
    diags = lsp_diagnostics(analysis, policy.as_uri())
    _assert_hidden(json.dumps(converters.get_converter().unstructure(diags)), lines)
    assert diags[0].message.startswith("line 1 of shadow: ")
    assert diags[0].related_information[0].location.uri == (policy.parent / "shadow").as_uri()


def test_a_valid_entry_named_in_a_note_is_not_shown_with_its_line(tmp_path: Path) -> None:
    """Valid entries reach notes (`... comes from $s, defined here`); the set file's
    line (which may hold a comment) is still never printed."""
    (tmp_path / "ports").write_text("70000  # a comment that must stay private\n")
    (tmp_path / "p.pf").write_text('set s = file "ports"\ndrop udp dport $s\n')
    compiled = compile_path(tmp_path / "p.pf")
    text = "\n".join(render_text(d, compiled.sources) for d in compiled.diagnostics)
    assert "70000" in text and "private" not in text
