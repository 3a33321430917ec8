"""What the language server shows on save: how the saved edit changes the policy's
meaning against the previously saved version (``pfc diff``'s regions, one line).

:class:`Saves` keeps each document's last saved text (the text it was opened with,
until the first save); :meth:`Saves.saved` diffs the new text against it and keeps
the summary for the document's code lens. A version that does not compile gives no
summary (its diagnostics say why).
"""

from __future__ import annotations

from pfc.frontend.pipeline import compile_source
from pfc.frontend.source import SourceFile
from pfc.prove.diff import diff

LENS_REGIONS = 4  # regions named in the lens; more are summed up as "..."


def edit_summary(old: str, new: str, name: str) -> str | None:
    """One line: the regions whose verdict (counters, rewrite) the edit changes, or
    that it changes none; None when either version has errors."""
    before = compile_source(SourceFile(name, old))
    after = compile_source(SourceFile(name, new))
    if before.ruleset is not None and after.ruleset is not None:
        return _firewall_summary(before.ruleset, after.ruleset)
    if before.policy is None or after.policy is None:  # errors, or v1 against v2
        return None
    result = diff(before.require(), after.require(), limit=LENS_REGIONS)
    if result.same:
        return "this edit changes no verdict, counter or rewrite"
    more = "" if result.complete else "; ..."
    return ("this edit changes the verdict of: "
            + "; ".join(r.line() for r in result.regions) + more)


def _firewall_summary(old, new) -> str:
    """The same line for a whole firewall: each region with its hook."""
    from pfc.prove.firewall.diff import diff as diff_firewalls

    result = diff_firewalls(old, new, limit=LENS_REGIONS)
    if result.same:
        return "this edit changes no hook's verdict, mark, translation or rewrite"
    found = [f"{h.hook}: {r.line()}" for h in result.hooks for r in h.regions]
    more = "; ..." if len(found) > LENS_REGIONS or not all(
        h.complete for h in result.hooks) else ""
    return "this edit changes: " + "; ".join(found[:LENS_REGIONS]) + more


class Saves:
    """Per document: the last saved text and the summary of the last saved edit."""

    def __init__(self) -> None:
        self.texts: dict[str, str] = {}
        self.summaries: dict[str, str] = {}

    def opened(self, uri: str, text: str) -> None:
        self.texts.setdefault(uri, text)

    def saved(self, uri: str, name: str, text: str) -> str | None:
        """Diff ``text`` against the last saved version; it becomes the last saved."""
        old = self.texts.get(uri)
        self.texts[uri] = text
        summary = edit_summary(old, text, name) if old is not None and old != text else None
        if summary is None:
            self.summaries.pop(uri, None)
        else:
            self.summaries[uri] = summary
        return summary

    def closed(self, uri: str) -> None:
        self.texts.pop(uri, None)
        self.summaries.pop(uri, None)
