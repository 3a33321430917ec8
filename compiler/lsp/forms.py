"""A rule's compiled form on each target, for the rule hover.

Works with whatever :func:`pfc.backends.registry` holds: the rule alone (its checked IR,
names resolved) is compiled with :func:`pfc.build.build_artifact` for each target, in
the target's text format, and compared line by line with the same target's output for no
rule at all; the lines that differ are the rule's form (the nft rule, the iptables line,
the eBPF C block). For a target with an ``asm`` format (classic BPF) the instruction
count of the one-rule program is given too. A target that cannot express the rule says
why ("not expressible: ...", the capability error's message).
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import re
from functools import lru_cache

from pfc import backends
from pfc.build import build_artifact
from pfc.frontend import ir
from pfc.frontend.pipeline import Compiled
from pfc.frontend.source import SourceFile
from pfc.frontend.syntax import Module

MAX_LINES = 12  # lines of a form shown in a hover
_INSTRUCTION = re.compile(r"^\(\d+\)")  # `tcpdump -d` style: "(000) ldh [12]"
log = logging.getLogger("pfc.lsp")


@dataclasses.dataclass(frozen=True)
class Form:
    target: str
    format: str | None
    lines: tuple[str, ...] = ()
    note: str = ""  # "not expressible: ..." or "7 instructions"; empty otherwise
    ok: bool = True


def display_format(target: str) -> str | None:
    """The format a hover shows: ``asm`` when there is one, else the first text one."""
    backend = backends.registry()[target]
    if "asm" in backend.formats:
        return "asm"
    return next((f for f in backend.formats if f not in backend.binary_formats), None)


def forms(rule: ir.Rule, policy: ir.Policy, targets: tuple[str, ...]) -> list[Form]:
    return [form(rule, policy.default, policy.source, t) for t in targets]


@lru_cache(maxsize=256)
def form(rule: ir.Rule, default: ir.Verdict, name: str, target: str) -> Form:
    """The rule's form on one target (``name``: the policy file's name)."""
    fmt = display_format(target)
    if fmt is None:
        return Form(target, None, note="binary output only")
    one = _compile((rule,), default, name, target, fmt)
    if isinstance(one, str):
        return Form(target, fmt, note=one, ok=False)
    empty = _compile((), default, name, target, fmt)
    lines = _added(empty if isinstance(empty, list) else [], one, rule.line)
    note = ""
    if not lines and one == empty:
        # The rule changes no verdict under this default (`pass` under `default pass`):
        # a target may compile it to nothing. Show its form under the other default.
        other = ir.Verdict.DROP if default is ir.Verdict.PASS else ir.Verdict.PASS
        shown = _compile((rule,), other, name, target, fmt)
        if isinstance(shown, list):
            one, lines = shown, shown
            note = (f"changes no verdict under `default {default.value}`; "
                    f"under `default {other.value}`: ")
    if fmt == "asm":
        count = sum(1 for line in one if _INSTRUCTION.match(line)) or len(one)
        note += f"{count} instructions"
    return Form(target, fmt, tuple(lines), note)


def _compile(rules: tuple[ir.Rule, ...], default: ir.Verdict, name: str, target: str,
             fmt: str) -> list[str] | str:
    """The artifact's text lines, or why there is none. Backends print the rules from
    the IR, so the source text is not needed (an empty one stands in)."""
    source = SourceFile(name, "")
    policy = ir.Policy(rules, default, source=name)
    compiled = Compiled(source, Module(source, (), ()), policy, [], {name: source})
    try:
        artifact, diags = build_artifact(compiled, target, fmt)
    except ValueError as exc:  # OptionError too
        return f"not compiled: {exc}"
    except Exception as exc:  # noqa: BLE001 - a backend's bug must not kill the hover
        log.exception("backend %s failed on a one-rule policy", target)
        return f"not compiled: the `{target}` backend failed: {exc!r}"
    if artifact is None:
        first = diags[0] if diags else None
        return "not expressible: " + (_reason(first.message) if first else "unknown reason")
    return (artifact.text or "").splitlines()


def _reason(message: str) -> str:
    """A capability error without its "(rule at line N)" tail (the hover is on it)."""
    return re.sub(r"\s*\(rule at line \d+\)$", "", message)


def _added(base: list[str], lines: list[str], line: int) -> list[str]:
    """The rule's own lines: what ``lines`` adds to ``base``, hunk by hunk, keeping only
    the hunks that name the rule's source line when any does (backends comment each
    rule "rule N, line L: ..."; helpers and headers a rule pulls in are left out)."""
    hunks = []
    matcher = difflib.SequenceMatcher(None, base, lines, autojunk=False)
    for tag, _, _, j1, j2 in matcher.get_opcodes():
        if tag in ("insert", "replace"):
            hunks.append([text for text in lines[j1:j2] if text.strip()])
    marker = re.compile(rf"\bline {line}\b")
    own = [h for h in hunks if any(marker.search(text) for text in h)]
    return [text for h in (own or hunks) for text in h]


def render(forms_: list[Form]) -> str:
    """Markdown: one section per target."""
    parts = []
    for f in forms_:
        head = f"**{f.target}**" + (f" ({f.format})" if f.format else "")
        if not f.ok or not f.lines:
            parts.append(f"{head}: {f.note or 'no code of its own'}")
            continue
        shown = list(f.lines[:MAX_LINES])
        if len(f.lines) > MAX_LINES:
            shown.append(f"... ({len(f.lines) - MAX_LINES} more lines)")
        note = f" — {f.note}" if f.note else ""
        lang = {"c": "c", "json": "json"}.get(f.format or "", "")
        parts.append(f"{head}{note}\n```{lang}\n" + "\n".join(shown) + "\n```")
    return "\n\n".join(parts)
