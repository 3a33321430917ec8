"""``pfc import`` as a library call: source texts → a checked, formatted pfc policy.

The format is told by the caller or read from the text (``detect``); the importer of
that format gives the shared rule model; ``emit`` prints it; pfc's own checker reads
the print. A rule the checker refuses (a word a hook does not allow, a value out of
range) is refused at its *source* line with the checker's reason, and the policy is
printed again without it, so every rule in the result is one pfc checked. Then pfc's
formatter gives the text its canonical form (``pfc fmt``-clean).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from pfc.frontend.diagnostics import Diagnostic, Severity, error
from pfc.frontend.fmt import format_module
from pfc.frontend.pipeline import Compiled, compile_source
from pfc.frontend.source import MAX_POLICY_BYTES, SourceFile
from pfc.importers.detect import UnknownFormat, detect
from pfc.importers.emit import Printed, emit
from pfc.importers.model import Firewall, Item, Refusal, Rule, Skipped

FORMATS = ("iptables", "nft", "nft-json", "pcap-filter")
MAX_ROUNDS = 50


class ImportBug(Exception):
    """The importer printed something pfc's checker refuses and no source rule is to
    blame: a pfc bug (exit 70)."""


@dataclass
class ImportResult:
    """``text``: the policy (complete or not); ``refusals``: one error per source rule
    pfc cannot say (``cannot import: REASON`` at the rule's words); ``remarks``: notes
    that change no verdict; ``sources``: the inputs, for rendering."""

    text: str
    format: str
    refusals: list[Diagnostic]
    remarks: list[Diagnostic]
    sources: dict[str, SourceFile]
    firewall: Firewall
    compiled: Compiled | None = None
    set_files: dict[str, str] = field(default_factory=dict)
    families: frozenset[int] = frozenset((4, 6))

    @property
    def complete(self) -> bool:
        return not self.refusals

    @property
    def counts(self) -> dict[str, int]:
        """Source rules read, and how many of them pfc could not say."""
        refused = len({(d.span.file, self._line(d)) for d in self.refusals})
        total = max(self.firewall.source_rules, refused)
        return {"source": total, "imported": total - refused, "refused": refused}

    def _line(self, d: Diagnostic) -> int:
        src = self.sources.get(d.span.file)
        return src.position(d.span.start)[0] if src else 0


def read_input(path: str | os.PathLike) -> SourceFile:
    """A file to import, as text (bytes that are not UTF-8 are kept as U+FFFD and
    refused where they stand). OSError if it cannot be read or is larger than 64 MiB
    (pfc's limit for a policy)."""
    return SourceFile.read(path, limit=MAX_POLICY_BYTES)


def import_sources(sources: list[SourceFile], fmt: str | None = None,
                   output_name: str = "imported.pf", root: str | None = None,
                   set_files: bool = False) -> ImportResult:
    """Import ``sources`` (one file; for iptables, a dump and its other family's
    twin). ``root``: where an nft file's absolute includes are read (a copied /etc).
    ``set_files``: the policy goes to a file, so large named sets may be set files
    beside it (``result.set_files``, by name). ``UnknownFormat`` when the format is
    not given and cannot be told."""
    from pfc.importers.nft.parse import ROOT
    fmt = fmt or detect(sources[0])
    token = ROOT.set(root)
    try:
        fw, families = _read(sources, fmt, Path(output_name).stem if set_files else None)
    finally:
        ROOT.reset(token)
    absent_interfaces(fw)
    prune(fw)
    break_loops(fw)
    result = ImportResult("", fmt, [], [], {s.name: s for s in sources}, fw,
                          families=families)
    result.sources.update(fw.extra_sources)
    printed, compiled = _checked(fw, families, output_name)
    result.text = format_module(compiled.module)
    result.compiled = compiled
    result.set_files = {path: "".join(x + "\n" for x in lines) for _, path, lines in fw.sets}
    result.refusals = sorted((_refusal(r) for r in fw.refusals), key=_place)
    result.remarks = sorted((Diagnostic(Severity.NOTE, m.message, m.span)
                             for m in fw.remarks), key=_place)
    return result


def _read(sources: list[SourceFile], fmt: str, set_stem: str | None
          ) -> tuple[Firewall, frozenset[int]]:
    if fmt == "iptables":
        from pfc.importers.iptables import import_iptables
        return import_iptables(sources)
    if fmt in ("nft", "nft-json"):
        from pfc.importers.nft import import_nft
        return import_nft(sources, json=fmt == "nft-json", set_stem=set_stem)
    if fmt == "pcap-filter":
        from pfc.importers.pcap import import_pcap
        return import_pcap(sources)
    raise UnknownFormat(f"importing {fmt} is not written yet")


# Blocks whose packets have no input (output side) or no output interface yet: a rule
# reading it never matches there, negated or not (nft's meta iif/oif break the rule).
NO_INTERFACE = {"iif": ("raw output", "nat output", "output"),
                "oif": ("raw prerouting", "prerouting", "nat prerouting", "input",
                        "nat input")}


def absent_interfaces(fw: Firewall) -> None:
    """Rules of a block that read an interface its packets cannot have are left out
    as never matching (pfc's checker refuses the word there)."""
    for block in fw.blocks:
        for i, item in enumerate(block.items):
            if not isinstance(item, Rule):
                continue
            field = next((f for f, blocks in NO_INTERFACE.items() if block.name in blocks
                          and any(m.field == f for m in item.matches)), None)
            if field is not None and item.origin is not None:
                block.items[i] = Skipped(item.origin, f"never matches: packets in "
                                         f"`{block.name}` have no `{field}`")


def prune(fw: Firewall) -> None:
    """Chains no block reaches (left behind by rewrites that copied them) go."""
    by_name = {c.name: c for c in fw.chains}
    todo = [i.chain for b in fw.blocks for i in b.items if isinstance(i, Rule) and i.chain]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen or name not in by_name:
            continue
        seen.add(name)
        todo += [i.chain for i in by_name[name].items if isinstance(i, Rule) and i.chain]
    fw.chains = [c for c in fw.chains if c.name in seen]


def break_loops(fw: Firewall) -> None:
    """A jump that closes a loop of chains (nft and iptables refuse to load those; a
    mutated dump may hold one) is refused at its rule."""
    by_name = {c.name: c for c in fw.chains}
    state: dict[str, int] = {}

    def visit(name: str) -> None:
        state[name] = 1
        chain = by_name[name]
        for i, item in enumerate(chain.items):
            if not (isinstance(item, Rule) and item.chain in by_name):
                continue
            if state.get(item.chain) == 1:
                reason = f"{item.action} {item.chain}: a loop of chains (nft and iptables " \
                         "refuse to load one)"
                if item.origin is not None:  # (the importers' own jumps never loop)
                    fw.refusals.append(Refusal(item.origin, reason, item.origin.span))
                    chain.items[i] = Skipped(item.origin, reason)
            elif state.get(item.chain) is None:
                visit(item.chain)
        state[name] = 2

    for name in list(by_name):
        if state.get(name) is None:
            visit(name)


def _place(d: Diagnostic) -> tuple:
    return (d.span.file, d.span.start)


def _refusal(r: Refusal) -> Diagnostic:
    return error(f"cannot import: {r.reason}", r.span, code="cannot-import")


def _checked(fw: Firewall, families: frozenset[int], name: str
             ) -> tuple[Printed, Compiled]:
    """Print and check until pfc's checker takes every rule left."""
    for _ in range(MAX_ROUNDS):
        printed = emit(fw, families)
        compiled = compile_source(SourceFile(name, printed.text), _set_reader(fw))
        errors = [d for d in compiled.diagnostics if d.severity is Severity.ERROR]
        if not errors:
            return printed, compiled
        blamed = _blame(fw, printed, compiled, errors)
        if not blamed:
            raise ImportBug("pfc's checker refuses the imported policy:\n" +
                            "\n".join(f"{d.span.file}:{_line(compiled, d)}: {d.message}"
                                      for d in errors[:5]) + "\n" + printed.text)
    raise ImportBug("the imported policy did not settle")


def _set_reader(fw: Firewall):
    """The set files the import writes, read from memory by the checker."""
    files = {path: "".join(x + "\n" for x in lines) for _, path, lines in fw.sets}

    def read(path: Path) -> SourceFile:
        if path.name not in files:
            raise FileNotFoundError(2, "not a set file of this import", str(path))
        return SourceFile(path.name, files[path.name])
    return read


def _line(compiled: Compiled, d: Diagnostic) -> int:
    return compiled.source.position(d.span.start)[0]


def _blame(fw: Firewall, printed: Printed, compiled: Compiled,
           errors: list[Diagnostic]) -> int:
    """Each error on a printed rule refuses its source rule; how many were."""
    blamed = 0
    seen: set[int] = set()
    for d in errors:
        item = printed.lines.get(_line(compiled, d))
        if not isinstance(item, Rule) or item.origin is None or id(item) in seen:
            continue
        seen.add(id(item))
        reason = f"pfc refuses `{_words(item)}`: {d.message}"
        if not any(r.origin is item.origin for r in fw.refusals):  # one per source rule
            fw.refusals.append(Refusal(item.origin, reason, item.origin.span))
        _replace(fw, item, Skipped(item.origin, f"refused by pfc's checker: {d.message}"))
        blamed += 1
    return blamed


def _words(rule: Rule) -> str:
    from pfc.importers.emit import rule_line
    return rule_line(rule).split("  #")[0]


def _replace(fw: Firewall, old: Item, new: Item) -> None:
    for container in [*fw.blocks, *fw.chains]:
        for i, item in enumerate(container.items):
            if item is old:
                container.items[i] = new
                return
