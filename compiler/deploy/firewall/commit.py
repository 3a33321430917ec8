"""``pfc load`` of a whole firewall (v2): every part or none, with the journal, the
record and pfc's copy of the sources as for one rule list (:mod:`pfc.deploy.load`).

:func:`load_ruleset` takes the artifacts :func:`pfc.build.build_ruleset` made for the
targets (one for nft or iptables, one per ``ingress``/``egress`` block for xdp and tc)
and loads them in the current namespace or ``netns``: the place is the namespace's
firewall (:data:`pfc.deploy.firewall.loader.DEV`), one per namespace. ``unload`` and
``status`` are the dispatcher's, with target ``firewall``.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from pfc.backends.base import Artifact
from pfc.deploy import journal, snapshot, state
from pfc.deploy import load as deploying
from pfc.deploy.base import (
    LoadError,
    Plan,
    check_privileges,
    current_netns_id,
    in_netns,
    unwritable,
)
from pfc.deploy.firewall.loader import DEV, TARGET
from pfc.frontend import ir
from pfc.frontend.diagnostics import Diagnostic
from pfc.frontend.firewall.hooks import BLOCKS
from pfc.frontend.firewall.ruleset import Ruleset

LOADABLE = ("nft", "iptables", "xdp", "tc")
FORMATS = {"nft": "json", "iptables": "restore", "xdp": "o", "tc": "o"}  # what loads


def build(ruleset: Ruleset, targets: list[str], **options
          ) -> tuple[list[Artifact], list[Diagnostic]]:
    """The artifacts a load of ``ruleset`` attaches: each block to the first of
    ``targets`` that carries it (:func:`pfc.build.assign_blocks`), each target's part
    in the format it is loaded from; nothing unless everything compiled."""
    from pfc.build import assign_blocks, build_ruleset

    bad = [t for t in targets if t not in LOADABLE]
    if bad:
        raise LoadError(f"`pfc load` of a whole firewall attaches targets "
                        f"{', '.join(LOADABLE)}; not `{bad[0]}`",
                        hint="socket filters are attached by the application")
    parts, diags = assign_blocks(ruleset, targets)
    artifacts: list[Artifact] = []
    for target, part in parts.items():
        made, errs = build_ruleset(part, [target], FORMATS[target], **options)
        artifacts += made
        diags += errs
    return ([], diags) if diags else (artifacts, [])


def rows(ruleset: Ruleset, text_of: Callable[[ir.Rule], str]) -> list[state.RuleRow]:
    """Every rule of the firewall with its block (``chain NAME`` for a chain's)."""
    out = []
    for policy in ruleset.lists:
        name = policy.hook.name
        out += [state.RuleRow(r.index, r.line, text_of(r), r.action.name, None, name)
                for r in policy.rules]
    for chain in ruleset.chains:
        out += [state.RuleRow(r.index, r.line, text_of(r), r.action.name, None,
                              f"chain {chain.name}") for r in chain.rules]
    return out


def blocks(ruleset: Ruleset) -> list[dict]:
    """Each block with its default (None: a nat block has none) and devices."""
    return [{"block": p.hook.name, "devices": list(p.hook.devices),
             "default": p.default.value if BLOCKS[p.hook.name].has_default else None}
            for p in ruleset.lists]


def _targets(artifacts: list[Artifact]) -> list[str]:
    out = list(dict.fromkeys(a.target for a in artifacts))
    bad = [t for t in out if t not in LOADABLE]
    if bad:
        raise LoadError(f"`pfc load` of a whole firewall attaches targets "
                        f"{', '.join(LOADABLE)}; not `{bad[0]}`",
                        hint="give that block to another target (--target LIST)")
    return out


def load_ruleset(artifacts: list[Artifact], ruleset: Ruleset, policy_path: str,
                 source_text: str, text_of: Callable[[ir.Rule], str],
                 netns: str | None = None, force: bool = False, mode: str | None = None,
                 options: dict | None = None,
                 copy: snapshot.Copy | None = None) -> deploying.Result:
    """Load a whole firewall (all parts or none), replacing pfc's previous one in the
    namespace. LoadError when anything is in the way (then the kernel holds what it
    held before, as checked)."""
    targets = _targets(artifacts)
    for target in targets:
        check_privileges(target, netns)
    impl = deploying.loader(TARGET)
    try:
        with in_netns(netns) as ns, state.locked():
            messages = deploying.recover(ns, DEV, TARGET)
            previous = _previous(ns, messages)
            opts = dict(options or {}) | {"artifacts": artifacts, "targets": targets,
                                          "hooks": blocks(ruleset)}
            plan = Plan(artifacts[0], DEV, 0, ns, force, mode, opts)
            record = state.Record(
                target=TARGET, hook="ruleset", dev=DEV, netns=ns,
                policy=str(Path(policy_path).resolve()),
                sha256=hashlib.sha256(source_text.encode()).hexdigest(),
                loaded_at=datetime.now(UTC).isoformat(timespec="seconds"),
                rules=rows(ruleset, text_of), default="per block",
                netns_id=current_netns_id(),
                copy_digest=copy.digest if copy is not None else None)
            if copy is not None:
                snapshot.write_pending(ns, DEV, TARGET, copy)
                journal.point("prepared")
            txn = journal.Txn(record)
            messages += deploying._transaction(impl, plan, previous, txn)
    except state.Unwritable as exc:
        with contextlib.suppress(state.Unwritable, LoadError), in_netns(netns) as ns:
            snapshot.discard_pending(ns, DEV, TARGET)
        raise unwritable(exc, "nothing was changed: the new policy is not in force") \
            from None
    finally:
        state.release()
    return deploying.Result(record, messages)


def _previous(netns: str, messages: list[str]) -> state.Record | None:
    try:
        return state.read(netns, DEV, TARGET)
    except state.Unreadable as exc:
        messages.append(f"warning: {exc}; ignored it (pfc's tables and chains there are "
                        "replaced with --force only)")
        return None


def load_compiled(compiled, targets: list[str], netns: str | None = None,
                  force: bool = False, mode: str | None = None, table: str = "pfc",
                  audit: bool = False) -> deploying.Result:
    """``pfc load`` of a front-end result holding a whole firewall: build the parts for
    ``targets`` (CompileError for a block none carries, a rule the carrying target
    cannot express), keep a copy of the sources beside the record (``pfc apply``
    compares it), and load every part or none."""
    from pfc.frontend.diagnostics import CompileError

    ruleset = compiled.require_ruleset()
    artifacts, diags = build(ruleset, targets, table=table, audit=audit)
    if diags:
        raise CompileError(diags, compiled.sources)
    copy = snapshot.Copy.of(compiled, copy_options(targets, table, mode, audit))
    return load_ruleset(artifacts, ruleset, compiled.source.name, compiled.source.text,
                        compiled.rule_text, netns, force, mode, {"table": table}, copy)


def copy_options(targets: list[str], table: str = "pfc", mode: str | None = None,
                 audit: bool = False) -> dict:
    """The options a whole firewall's copy records (``pfc apply`` loads a last good copy
    with them)."""
    return {"target": TARGET, "targets": ",".join(targets), "table": table, "mode": mode,
            "audit": audit or None}


def unload(netns: str | None = None, force: bool = False) -> deploying.Result:
    """Remove the namespace's whole firewall: every part, exactly what the load added."""
    return deploying.unload(TARGET, DEV, netns, force)
