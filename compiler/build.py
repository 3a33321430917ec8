"""Compile a checked policy for one target: capability check, the target's passes, emit.

The one function every user of the library goes through (the CLI's ``compile`` and
``load``, ``verify``, ``bench``, the language server's rule hover, :mod:`pfc.api`): a
rule the target cannot express comes back as diagnostics, never as a partial artifact.
"""

from __future__ import annotations

import json
from pathlib import Path

from pfc import backends
from pfc.backends.base import Artifact, Backend, Options, capability_errors
from pfc.frontend import ir
from pfc.frontend.diagnostics import CompileError, Diagnostic, error, sort_key
from pfc.frontend.firewall.hooks import BLOCKS
from pfc.frontend.firewall.ruleset import Ruleset
from pfc.frontend.pipeline import Compiled, paused_gc
from pfc.frontend.source import Span
from pfc.passes.audit import audited
from pfc.passes.inline_chains import inline_chains


class OptionError(ValueError):
    """A bad option for a target: unknown target, format or hook, a bad device or table
    name. The CLI reports it as a usage error (exit 2)."""


def backend(target: str) -> Backend:
    """The backend for ``target``; OptionError naming the known targets otherwise."""
    try:
        return backends.get(target)
    except KeyError as exc:
        raise OptionError(exc.args[0]) from exc


def build_artifact(compiled: Compiled, target: str, fmt: str | None = None,
                   **options) -> tuple[Artifact | None, list[Diagnostic]]:
    """Compile a checked policy for one target: capability check, passes, emit.

    Returns the artifact, or None and the diagnostics that stopped it (rules the target
    cannot express, a policy too large for it). Bad options raise :class:`OptionError`.
    """
    return build_policy(compiled.require(), target, fmt, **options)


def build_policy(policy: ir.Policy, target: str, fmt: str | None = None,
                 **options) -> tuple[Artifact | None, list[Diagnostic]]:
    """``build_artifact`` for one rule list: a v1 policy, or one block of a whole
    firewall (its chains inlined first)."""
    chosen = backend(target)
    try:
        policy = inline_chains(policy)
    except CompileError as exc:  # a chain's rule that cannot be joined with its jump
        return None, exc.diagnostics
    if options.get("audit"):
        policy = audited(policy)
    # the backend's size limits are enforced by its emitter, with the same diagnostics
    diags = capability_errors(policy, chosen, backends.registry(), limits=False)
    if diags:
        return None, diags
    fmt = fmt or chosen.formats[0]
    if fmt not in chosen.formats:
        raise OptionError(f"target `{target}` has no format `{fmt}`; formats: "
                          + ", ".join(chosen.formats))
    hook = options.pop("hook", None) or chosen.default_hook(Options(target, fmt, **options))
    if hook not in chosen.hooks:
        raise OptionError(f"target `{target}` has no hook `{hook}`; hooks: "
                          + ", ".join(chosen.hooks))
    try:
        with paused_gc():  # lowering 100k-entry sets makes ~10^6 objects, none in a cycle
            artifact = chosen.emit(chosen.lower(policy), Options(target, fmt, hook, **options))
    except CompileError as exc:
        return None, exc.diagnostics
    except ValueError as exc:
        raise OptionError(str(exc)) from exc
    return artifact, []


def assign_blocks(ruleset: Ruleset, targets: list[str]
                  ) -> tuple[dict[str, Ruleset], list[Diagnostic]]:
    """Each block of a whole firewall to the first of ``targets`` that carries it
    (docs/language.md "Targets for whole firewalls"): the part of the ruleset each
    target gets, and an error on every block none of them carries."""
    chosen = [backend(t) for t in targets]
    parts: dict[str, list[ir.Policy]] = {b.name: [] for b in chosen}
    diags = []
    for block in ruleset.lists:
        name = block.hook.name
        taker = next((b for b in chosen if name in b.carries), None)
        if taker is not None:
            parts[taker.name].append(block)
            continue
        able = [b.name for b in backends.registry().values() if name in b.carries]
        diags.append(error(
            f"no target of {', '.join(targets)} carries the `{name}` block",
            block.hook.span, hint=("targets that do: " + ", ".join(able)) if able
            else f"no target carries `{name}` yet", code="unsupported"))
    return {t: Ruleset(tuple(lists), ruleset.chains, ruleset.interfaces, ruleset.source)
            for t, lists in parts.items() if lists}, diags


def build_ruleset(ruleset: Ruleset, targets: list[str], fmt: str | None = None,
                  **options) -> tuple[list[Artifact], list[Diagnostic]]:
    """Compile a whole firewall for ``targets``: every block goes to the first target
    that carries it; a target with ``emit_ruleset`` makes one artifact of its blocks,
    the others one artifact per block (at the hook ``Backend.carries`` names). Nothing
    is returned unless everything compiled."""
    if not ruleset.lists:  # the checker warned: "no hook blocks"
        return [], _no_blocks(ruleset, targets)
    parts, diags = assign_blocks(ruleset, targets)
    artifacts: list[Artifact] = []
    for target, part in parts.items():
        chosen = backend(target)
        if chosen.emit_ruleset is not None:
            made, errs = _build_whole(part, chosen, fmt, options)
        else:
            made, errs = _build_each(part, chosen, fmt, options)
        artifacts += made
        diags += errs
    return ([], diags) if diags else (artifacts, [])


def check_ruleset(ruleset: Ruleset, targets: list[str]) -> list[Diagnostic]:
    """What ``build_ruleset`` would refuse, without emitting (``pfc check --target``):
    blocks no target carries, and the rules each target cannot express in the blocks it
    gets (its size limits included)."""
    if not ruleset.lists:
        return _no_blocks(ruleset, targets)
    parts, diags = assign_blocks(ruleset, targets)
    registry = backends.registry()
    for target, part in parts.items():
        chosen = backend(target)
        for block in part.lists:
            try:
                flat = inline_chains(block)
            except CompileError as exc:
                diags += exc.diagnostics
                continue
            diags += capability_errors(flat, chosen, registry,
                                       limits=chosen.emit_ruleset is None)
    return sorted(diags, key=sort_key)


def _no_blocks(ruleset: Ruleset, targets: list[str]) -> list[Diagnostic]:
    return [error(f"no hook blocks: nothing for {', '.join(targets)} to carry",
                  Span(ruleset.source, 0, 0), code="no-rules",
                  hint="rules go in hook blocks such as `input { ... }`")]


def block_label(block: ir.Policy) -> str:
    """A block's name in file names: ``input``, ``nat-prerouting``, ``ingress-eth0``."""
    return "-".join(block.hook.name.split() + list(block.hook.devices))


def _block_files(artifact: Artifact, block: ir.Policy) -> Artifact:
    """The artifact of one block, its files named ``STEM.BLOCK.EXT`` (``host.input.nft``)
    instead of ``STEM.TARGET.EXT``, so that every block of a file has its own."""
    label = block_label(block)
    files, renamed = {}, {}
    for name, data in artifact.files.items():
        stem, dot, rest = name.partition(f".{artifact.target}.")
        renamed[name] = f"{stem}.{label}.{rest}" if dot else f"{label}.{name}"
        files[renamed[name]] = data
    # the meta and JSON files name files too (an eBPF object's maps file, the data file
    # of its classifier's maps): they follow
    for old, new in ((json.dumps(o).encode(), json.dumps(n).encode())
                     for o, n in renamed.items() if o != n):
        files.update({name: data.replace(old, new) for name, data in files.items()
                      if name.endswith(".json") and old in data})
    artifact.files = files
    artifact.meta = {k: renamed.get(v, v) if isinstance(v, str) else v
                     for k, v in artifact.meta.items()}
    return artifact


def _build_whole(part: Ruleset, chosen: Backend, fmt: str | None,
                 options: dict) -> tuple[list[Artifact], list[Diagnostic]]:
    try:
        flat = [inline_chains(p) for p in part.lists]
    except CompileError as exc:
        return [], exc.diagnostics
    diags = [d for p in flat
             for d in capability_errors(p, chosen, backends.registry(), limits=False)]
    if diags:
        return [], diags
    audit = options.get("audit")
    lists = tuple(chosen.lower(audited(p) if audit else p) for p in flat)
    part = Ruleset(lists, (), part.interfaces, part.source)
    fmt = fmt or chosen.formats[0]
    try:
        with paused_gc():
            return [chosen.emit_ruleset(part, Options(chosen.name, fmt, **options))], []
    except CompileError as exc:
        return [], exc.diagnostics
    except ValueError as exc:
        raise OptionError(str(exc)) from exc


def _build_each(part: Ruleset, chosen: Backend, fmt: str | None,
                options: dict) -> tuple[list[Artifact], list[Diagnostic]]:
    made, diags = [], []
    for block in part.lists:
        opts = dict(options, hook=chosen.carries[block.hook.name])
        if BLOCKS[block.hook.name].per_device and block.hook.devices:
            opts["dev"] = block.hook.devices[0]
        artifact, errs = build_policy(block, chosen.name, fmt, **opts)
        diags += errs
        made += [_block_files(artifact, block)] if artifact is not None else []
    return made, diags


def write_artifact(artifact: Artifact, out: Path) -> list[Path]:
    """Write an artifact's files. ``out`` a directory (existing, or written with a
    trailing ``/``): every file under its own name there. Otherwise the main file to
    ``out`` and the others beside it, named ``out``'s stem + their own tail."""
    names = list(artifact.files)
    if out.is_dir() or str(out).endswith("/"):
        out.mkdir(parents=True, exist_ok=True)
        paths = [out / name for name in names]
    else:
        main_stem = names[0].split(".", 1)[0]
        stem = out.name.split(".", 1)[0]
        paths = [out] + [out.with_name(stem + name[len(main_stem):]) for name in names[1:]]
    for name, path in zip(names, paths, strict=True):
        path.write_bytes(artifact.files[name])
    return paths
