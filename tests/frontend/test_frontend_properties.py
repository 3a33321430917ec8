"""Property tests of the front end: the parser never crashes, fmt is idempotent and
keeps the meaning (the same IR), generated policies are valid."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pfc.backends.irjson import to_jsonable
from pfc.frontend.fmt import format_source
from pfc.frontend.pipeline import compile_source, compile_text
from pfc.frontend.source import SourceFile
from tests.paths import EXAMPLES
from tests.strategies import policies

ALPHABET = st.sampled_from(list("drop pass udp tcp src dst 10.0.0.1/8 2001:db8::1 { } , "
                                "! $ - [ ] : = \" \\ # \n flags syn payload 0x ff 12345"))


def meaning(text: str, name: str = "p.pf"):
    """The IR as JSON without spans and lines: what the policy means."""
    compiled = compile_text(text, name)
    return _strip(to_jsonable(compiled.require()))


def _strip(obj):
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if k not in ("span", "default_span", "line")}
    if isinstance(obj, list):
        return [_strip(x) for x in obj]
    return obj


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(ALPHABET, max_size=80) | st.text(max_size=60))
def test_parser_and_checker_never_crash(text: str) -> None:
    compiled = compile_text(text)
    assert compiled.ok or compiled.diagnostics
    for d in compiled.diagnostics:
        assert 0 <= d.span.start <= d.span.end <= len(text) + 1


@settings(max_examples=200)
@given(policies())
def test_generated_policies_are_valid(text: str) -> None:
    compiled = compile_text(text)
    assert compiled.ok, [d.message for d in compiled.diagnostics]


@settings(max_examples=200)
@given(policies(), st.data())
def test_fmt_is_idempotent_and_keeps_the_meaning(text: str, data) -> None:
    messy = _mess_up(text, data)
    formatted, diags = format_source(SourceFile("p.pf", messy))
    assert formatted is not None, diags
    again, _ = format_source(SourceFile("p.pf", formatted))
    assert again == formatted
    assert meaning(formatted) == meaning(text)


def _mess_up(text: str, data) -> str:
    """Same tokens, other spacing, comments and continuations."""
    out = []
    for line in text.splitlines():
        words = line.split(" ")
        sep = data.draw(st.sampled_from([" ", "  ", "\t", " \\\n   "]))
        comment = data.draw(st.sampled_from(["", "   # why", "# x"]))
        out.append(sep.join(words) + comment)
        if data.draw(st.booleans()):
            out.append(data.draw(st.sampled_from(["", "# note", "   "])))
    return "\n".join(out)


def test_examples_are_clean_and_formatted() -> None:
    for path in EXAMPLES:
        compiled = compile_source(SourceFile.read(path))
        assert compiled.ok and not compiled.diagnostics, (path, compiled.diagnostics)
        formatted, _ = format_source(SourceFile.read(path))
        assert formatted == path.read_text(), f"{path.name} is not in canonical form"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20)


@settings(max_examples=200, deadline=None)
@given(st.one_of(policies(max_rules=8).map(lambda t: to_jsonable(compile_text(t).require())),
                 json_values))
def test_ir_json_printer_writes_what_json_dumps_writes(value) -> None:
    """``irjson.dumps`` prints by hand (json's indenting encoder took seconds on 100k
    rules): byte for byte ``json.dumps(indent=2)``, for IR and for any JSON value."""
    import json

    from pfc.backends.irjson import dumps

    assert dumps(value) == json.dumps(value, indent=2)
