"""``pfc load --dry-run`` of a whole firewall: every check a load makes before its first
change, the kernel's included, and nothing changed (as :mod:`pfc.deploy.preview` for
one rule list):

- iptables: conflicts (a switch chain pfc did not load), then the next generation's
  ipsets and both families' chains restored in a scratch network namespace (``ipset
  restore``, ``iptables-restore --test --noflush``), never in the host's tables;
- nft: the exact batch the load would send (an in-place replace of pfc's tables, or
  their creation) as a libnftables dry run (``nft -c``);
- xdp, tc: each ingress program loaded (the verifier runs, sets filled) and closed,
  never attached; its device must exist.

Then what is loaded now is read: the firewall's record, its health, pfc's copy of it.
No state file, no journal entry; an unfinished load is reported, not settled.
"""

from __future__ import annotations

from collections import Counter

from pfc.deploy import journal, snapshot, state
from pfc.deploy.base import LoadError, check_privileges, in_netns, scratch_netns
from pfc.deploy.firewall import ebpf, ipt, nft
from pfc.deploy.firewall.commit import _targets, build, rows
from pfc.deploy.firewall.loader import DEV, TARGET, _part, _prev, fw_inspect
from pfc.deploy.ipt_kernel import TOOLS, Failed, call, restore_argv
from pfc.deploy.preview import Preview
from pfc.frontend.diagnostics import CompileError

Rows = list[tuple[int, str]]


def dry_run(compiled, targets: list[str], netns: str | None, force: bool,
            mode: str | None, table: str) -> tuple[Preview, str, Rows | None, Rows | None,
                                                   object]:
    """The checked preview, how it compares (``nothing loaded``, ``no copy``,
    ``compared``), the rules removed and added (line, ``BLOCK: rule``) and the loaded
    copy compiled again."""
    ruleset = compiled.require_ruleset()
    artifacts, diags = build(ruleset, targets, table=table)
    if diags:
        raise CompileError(diags, compiled.sources)
    seen = preview_ruleset(artifacts, netns, force, mode)
    if seen.previous is None:
        return seen, "nothing loaded", None, None, None
    old = snapshot.compile_copy(seen.loaded) if seen.loaded else None
    if old is None or old.ruleset is None:
        return seen, "no copy", None, None, None
    before = [(r.line, f"{r.block}: {r.text}") for r in rows(old.ruleset, old.rule_text)]
    after = [(r.line, f"{r.block}: {r.text}") for r in rows(ruleset, compiled.rule_text)]
    kept = Counter(t for _, t in before) & Counter(t for _, t in after)
    return seen, "compared", _unmatched(before, kept), _unmatched(after, kept), old


def _unmatched(rows_: Rows, kept: Counter) -> Rows:
    left, out = kept.copy(), []
    for line, text in rows_:
        if left[text]:
            left[text] -= 1
        else:
            out.append((line, text))
    return out


def preview_ruleset(artifacts: list, netns: str | None = None, force: bool = False,
                    mode: str | None = None) -> Preview:
    """Check a load of a whole firewall's ``artifacts`` in ``netns`` with the kernel;
    LoadError when the load would fail."""
    for target in _targets(artifacts):
        check_privileges(target, netns, "load --dry-run")
    with in_netns(netns) as ns, state.locked():
        warnings = []
        if journal.pending(ns, DEV):
            warnings.append("note: an interrupted load is pending; the next pfc command "
                            "(not this dry run) finishes or rolls it back")
        try:
            previous = state.read(ns, DEV, TARGET)
        except state.Unreadable as exc:
            previous = None
            warnings.append(f"warning: {exc}")
        checked = _iptables(artifacts, previous, force) + \
            _ebpf(artifacts, ns, previous, force, mode) + \
            _nft(artifacts, ns, previous, force)
        health = fw_inspect(previous) if previous else None
        loaded, why = snapshot.checked(previous) if previous else (None, None)
        if why and previous.copy_digest is not None:
            warnings.append(f"warning: {why}")
    return Preview(TARGET, DEV, ns, checked, previous, health, loaded, warnings)


def _iptables(artifacts: list, previous, force: bool) -> list[str]:
    art = _part(artifacts, "iptables")
    if art is None:
        return []
    a, _, texts, notes = ipt.prepare(art, _prev(previous, "iptables"), force)
    with scratch_netns():
        try:
            if texts["sets"]:
                call(["ipset", "restore"], texts["sets"])
            for f in TOOLS:
                call(restore_argv(f, a["flavour"], "--test", "--noflush"),
                     texts["chains"][f])
        except Failed as exc:
            raise LoadError(f"the kernel would refuse the iptables rules: {exc}",
                            hint="check the rules with `pfc compile --target iptables`") \
                from None
    blocks = ", ".join(p["block"] for p in a["places"])
    return [f"iptables: ipset and iptables-restore --test accepted generation {a['gen']} "
            f"(both families, in a scratch namespace) of {blocks}"] + \
        [f"on load: {m}" for m in notes]


def _ebpf(artifacts: list, ns: str, previous, force: bool, mode: str | None) -> list[str]:
    out = []
    for part in ebpf.parts(artifacts, ns, {}, previous.attach if previous else None,
                           force, mode):
        ebpf.verify(part)
        out.append(f"{part.key}: the verifier accepted the {part.block} program (loaded "
                   "with its sets filled, then closed, never attached)")
    return out


def _nft(artifacts: list, ns: str, previous, force: bool) -> list[str]:
    art = _part(artifacts, "nft")
    if art is None:
        return []
    doc, new, _, notes = nft.prepare(art, ns, _prev(previous, "nft"), force, False)
    nft.check(doc)
    families = ", ".join(new["families"])
    return [f"nft: the kernel accepted the transaction (nft -c, not committed) for "
            f"table {new['table']} ({families}): chains "
            f"{', '.join(new['chains'])}"] + \
        [f"on load: {m}" for m in notes]
