"""No text makes the front end raise or hang: every crash class the fuzzer found is a
diagnostic with a span and (where it helps) a hint; set files are read safely; files
that are not UTF-8 are reported at the bad byte; nothing raw reaches a terminal."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from pfc.frontend import diagnostics, pipeline, source
from pfc.frontend.diagnostics import MAX_ERRORS, render_text, suggest
from pfc.frontend.fmt import format_source
from pfc.frontend.pipeline import Compiled, compile_path, compile_source, compile_text
from pfc.frontend.source import SourceFile

HUGE = "9" * 4301
HEX = "0x" + "f" * 3600
ZEROS = "0" * 4300

# The ten crash classes of fuzz-and-faults.md §7 (and their siblings): text → the code
# of the error it must give.
CRASHES = {
    'drop udp payload[0] == "\\x"': "bad-escape",
    'drop udp payload[0] == "\\xZZ"': "bad-escape",
    'drop udp payload[0] == "\\x4"': "bad-escape",
    f"drop udp dport {HUGE}": "out-of-range",
    f"drop udp dport 1-{HUGE}": "out-of-range",
    f"drop udp dport {HEX}": "out-of-range",
    f"drop udp dport {HEX}-1": "out-of-range",
    f"drop udp payload[{HEX}] == 1": "out-of-range",
    f"drop udp payload[0:{HEX}] == 1": "out-of-range",
    f"drop udp payload[{HUGE}] == 1": "out-of-range",
    f"drop udp payload[0] == {HEX}": "out-of-range",
    f"drop udp payload[0:2] == {HEX}": "out-of-range",
    f"drop src 10.0.0.0/{HUGE}": "bad-address",
    f"drop src 2001:db8::/{HUGE}": "bad-address",
    f"drop src 1{HUGE}.0.0.1": "bad-address",
    f"drop src 10.0.0.0/{ZEROS}1": "bad-address",  # fuzz-and-faults F1
    f"drop src ::/{ZEROS}1": "bad-address",
    f"drop src {{ 10.0.0.0/{ZEROS}24, 2001:db8::/{ZEROS}32 }}": "bad-address",
    f"define n = 10.0.0.0/{ZEROS}8\ndrop src $n": "bad-address",
    f"define x = {HUGE}\ndrop udp dport $x": "out-of-range",
    f"redirect udp dport 1 to 10.0.0.1:{HUGE}": "out-of-range",
    'drop udp payload[0] == "\ud800"': "encoding",
    'set s = file "a\\x00b"\ndrop src $s': "set-file",
    'set s = file "a\x00b"\ndrop src $s': "set-file",
}


@pytest.mark.parametrize("text", CRASHES, ids=range(len(CRASHES)))
def test_crash_classes_are_diagnostics(text: str) -> None:
    compiled = compile_text(text + "\n", "p.pf")
    codes = [d.code for d in compiled.diagnostics if d.severity == "error"]
    assert codes and codes[0] == CRASHES[text], compiled.diagnostics
    rendered = "\n".join(render_text(d, compiled.sources) for d in compiled.diagnostics)
    assert len(rendered) < 2000  # no message repeats a 4,301-digit number


def test_a_nul_in_a_set_entry_is_an_error_in_the_set_file(tmp_path: Path) -> None:
    (tmp_path / "nul.txt").write_bytes(b"10.0.0.1\x00\n")
    compiled = _compile(tmp_path, 'set s = file "nul.txt"\ndrop src $s\n')
    (d,) = compiled.diagnostics
    assert d.code == "bad-set-entry" and d.notes[0].span.file.endswith("nul.txt")
    assert "U+0000 (NUL)" in d.message
    assert "\x00" not in render_text(d, compiled.sources)


def test_prefix_lengths_with_leading_zeros(tmp_path: Path) -> None:
    """Leading zeros are fine in a short prefix length (`/024`); thousands of them are
    an error in a policy and in a set file, never int()'s 4,300-digit ValueError."""
    assert compile_text("drop src 10.0.0.0/024\ndrop src 2001:db8::/0032\n").ok
    (tmp_path / "z.txt").write_text(f"10.0.0.0/{ZEROS}1\n::/{ZEROS}1\n")
    compiled = _compile(tmp_path, 'set s = file "z.txt"\ndrop src $s\n')
    assert [d.code for d in compiled.diagnostics] == ["bad-set-entry"] * 2


def test_huge_numbers_in_a_set_file(tmp_path: Path) -> None:
    (tmp_path / "ports.txt").write_text(f"53\n{HUGE}\n1-{HUGE}\n")
    compiled = _compile(tmp_path, 'set s = file "ports.txt"\ndrop udp dport $s\n')
    assert [d.code for d in compiled.diagnostics] == ["out-of-range", "out-of-range"]


def _compile(folder: Path, text: str) -> Compiled:
    policy = folder / "p.pf"
    policy.write_text(text)
    return compile_path(policy)


# ------------------------------------------------------------------------ set files

def test_set_files_must_be_regular_files(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    for path, why in (("fifo", "a FIFO"), ("/dev/zero", "a character device"),
                      ("/dev/stdin", "not a regular file"), ("dir", "is a directory")):
        compiled = _in_thread(lambda p=path: _compile(tmp_path, f'set s = file "{p}"\n'
                                                                 "drop src $s\n"))
        (d,) = compiled.diagnostics
        assert d.code == "set-file" and why.lower() in d.message.lower(), (path, d.message)
        line, col = compiled.source.position(d.span.start)
        assert (line, col) == (1, 14)


def _in_thread(work):
    """Run ``work`` in a thread and fail (not hang the suite) if it blocks."""
    result: list = []
    thread = threading.Thread(target=lambda: result.append(work()), daemon=True)
    thread.start()
    thread.join(60)
    assert result, "blocked reading a set file"
    return result[0]


def test_set_files_have_a_size_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(source, "MAX_SET_BYTES", 1000)
    (tmp_path / "big.txt").write_text("10.0.0.1\n" * 200)
    (d,) = _compile(tmp_path, 'set s = file "big.txt"\ndrop src $s\n').diagnostics
    assert d.code == "set-file" and "larger than" in d.message


def test_set_paths_take_the_string_escapes(tmp_path: Path) -> None:
    (tmp_path / 'q"b.txt').write_text("10.0.0.1\n")
    (tmp_path / "A.txt").write_text("10.0.0.2\n")
    compiled = _compile(tmp_path, 'set s = file "q\\"b.txt"\nset t = file "\\x41.txt"\n'
                                  "drop src $s\ndrop src $t\n")
    assert compiled.ok and not compiled.diagnostics, compiled.diagnostics


# ------------------------------------------------------------------------- encoding

def test_a_latin1_policy_is_reported_at_the_bad_byte(tmp_path: Path) -> None:
    path = tmp_path / "l.pf"
    path.write_bytes(b"drop udp dport 53\ndrop src 10.0.0.1  # caf\xe9\n")
    compiled = compile_path(path)
    (d,) = compiled.diagnostics
    assert (d.code, d.message) == ("encoding", "not UTF-8: byte 0xe9")
    assert compiled.source.position(d.span.start) == (2, 25)
    text, diags = format_source(SourceFile.read(path))
    assert text is None and diags == [d]


def test_a_latin1_set_file_is_reported_at_the_bad_byte(tmp_path: Path) -> None:
    (tmp_path / "s.txt").write_bytes(b"10.0.0.1\n10.0.0.2 # \xff\n")
    compiled = _compile(tmp_path, 'set s = file "s.txt"\ndrop src $s\n')
    (d,) = compiled.diagnostics
    assert d.message == "line 2 of s.txt: not UTF-8: byte 0xff"
    assert compiled.source.position(d.span.start) == (1, 14)  # the set's path
    here = d.notes[0].span
    assert here.file.endswith("s.txt")
    assert compiled.sources[here.file].position(here.start) == (2, 12)


def test_a_leading_bom_is_accepted_and_one_elsewhere_is_named(tmp_path: Path) -> None:
    path = tmp_path / "b.pf"
    path.write_bytes(b"\xef\xbb\xbfdrop udp dprot 53\n")
    (d,) = compile_path(path).diagnostics
    assert compile_path(path).source.position(d.span.start) == (1, 10)  # as editors count
    assert compile_text("\ufeffdrop udp dport 53\n").ok
    (d,) = compile_text("drop udp\ufeff dport 53\n").diagnostics
    assert d.message == "unexpected character U+FEFF (byte-order mark)"
    assert format_source(SourceFile("b.pf", "\ufeffdrop  udp\n"))[0] == "drop udp\n"


def test_lone_surrogates_from_an_editor_are_errors() -> None:
    for text in ('drop udp payload[0:1] == "\ud800"\n', "# \udfff\ndrop udp\n"):
        compiled = compile_text(text)
        assert [d.code for d in compiled.diagnostics] == ["encoding"]
        assert format_source(SourceFile("p.pf", text))[0] is None


# ---------------------------------------------------------------- terminal safety

def test_no_control_character_reaches_the_terminal() -> None:
    text = "drop udp # \x1b]0;pwned\x07\x1b[2J\ndrop\tudp \x1b[31mdport 53\n"
    compiled = compile_text(text, "evil\x1b[2J.pf")
    out = "\n".join(render_text(d, compiled.sources, color=True) for d in compiled.diagnostics)
    plain = out.replace("\033[1;31m", "").replace("\033[0m", "")
    assert not any(c < " " and c != "\n" for c in plain), repr(plain)
    assert "\\x1b[31m" in plain and "evil\\x1b[2J.pf:2:10:" in plain


def test_carets_stay_under_the_text_as_shown() -> None:
    text = "drop\tudp \x1b\u200bdprot 53\n"
    compiled = compile_text(text, "p.pf")
    d = next(d for d in compiled.diagnostics if "dprot" in d.message or "U+001B" in d.message)
    line, carets = render_text(d, compiled.sources).splitlines()[1:3]
    at = carets.index("^")
    assert line[at:at + 4] == "\\x1b"


def test_a_huge_line_is_cut_around_the_caret() -> None:
    text = "drop udp " + "x" * 100_000 + " dport 53\n"
    compiled = compile_text(text, "p.pf")
    for d in compiled.diagnostics:
        assert len(render_text(d, compiled.sources)) < 1000


# ---------------------------------------------------------------- bounded work

def test_suggest_skips_huge_words_and_compares_only_near_lengths(monkeypatch) -> None:
    calls: list[str] = []
    distance = diagnostics._distance
    monkeypatch.setattr(diagnostics, "_distance",
                        lambda a, b, limit=2: calls.append(b) or distance(a, b, limit))
    assert suggest("a" * 5000, ["a" * 4999]) is None
    assert suggest("dprot", ["dport", "s", "payloads", "a" * 100]) == "did you mean `dport`?"
    assert calls == ["dport"]


def test_errors_are_capped_with_a_count_of_the_rest() -> None:
    text = "".join(f"drop udp dport {70000 + i}\n" for i in range(250))
    compiled = compile_text(text, "p.pf")
    errors = [d for d in compiled.diagnostics if d.severity == "error"]
    assert len(errors) == MAX_ERRORS + 1
    assert errors[-1].code == "too-many-errors"
    assert errors[-1].message.startswith("150 more errors not reported")
    assert compiled.source.position(errors[-1].span.start)[0] == MAX_ERRORS + 1


def test_five_megabytes_of_junk_give_a_capped_report() -> None:
    line = "SGVsbG8gd29ybGQhIHRoaXMgaXMganVuayBiYXNlNjQgdGV4dCB0aGF0IGlzIG5vdCBhIHBv+/\n"
    text = line * (5_000_000 // len(line))
    compiled = compile_source(SourceFile("junk.pf", text))
    assert len(compiled.diagnostics) == MAX_ERRORS + 1
    assert compiled.diagnostics[-1].code == "too-many-errors"


def test_an_unknown_name_lookup_is_not_quadratic_in_the_rules() -> None:
    # 20,000 uses of undefined names: each used to rescan every statement.
    text = "".join(f"drop src $n{i}\n" for i in range(20_000))
    compiled = compile_text(text, "p.pf")
    assert compiled.diagnostics[-1].code == "too-many-errors"


def test_policies_over_the_size_limit_are_refused(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "p.pf"
    path.write_text("drop udp dport 53\n" * 10)
    with pytest.raises(OSError, match="larger than"):
        SourceFile.read(path, limit=100)
    with pytest.raises(OSError, match="larger than"):
        SourceFile.read("/dev/zero", limit=100)  # a stream: read up to the limit only
    monkeypatch.setattr(pipeline, "MAX_POLICY_BYTES", 100)
    (d,) = compile_text("drop udp dport 53\n" * 10).diagnostics
    assert d.code == "too-large"


def test_an_empty_policy_warns_that_everything_passes() -> None:
    for text, verdict in (("", "pass"), ("# nothing yet\n", "pass"), ("default drop\n", "drop")):
        (d,) = compile_text(text).diagnostics
        assert d.code == "no-rules" and d.severity == "warning"
        assert d.message == f"no rules: every packet gets the default verdict `{verdict}`"
