"""Compile a checked policy for one target: capability check, the target's passes, emit.

The one function every user of the library goes through (the CLI's ``compile`` and
``load``, ``verify``, ``bench``, the language server's rule hover, :mod:`pfc.api`): a
rule the target cannot express comes back as diagnostics, never as a partial artifact.
"""

from __future__ import annotations

from pathlib import Path

from pfc import backends
from pfc.backends.base import Artifact, Backend, Options, capability_errors
from pfc.frontend.diagnostics import CompileError, Diagnostic
from pfc.frontend.pipeline import Compiled, paused_gc
from pfc.passes.audit import audited


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
    chosen = backend(target)
    policy = compiled.require()
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
