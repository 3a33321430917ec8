"""``pfc load --dry-run``: everything a load checks, the kernel's own check included,
and nothing changed.

Per target, the kernel is asked without committing anything:

- ``xdp``, ``tc``: the object is loaded (the verifier runs) and its set maps filled,
  then closed: never attached;
- ``nft``: the exact batch the load would send (the in-place replace of pfc's table,
  or the table's creation) as a libnftables dry run (``nft -c``: the kernel checks
  the batch and aborts it);
- ``iptables``: the next generation's ipsets and chains, restored in a scratch
  network namespace (``ipset restore``, ``iptables-restore --test``), never in the
  host's tables.

Then what is loaded now is read: the record, its health, and the copy of the loaded
policy's sources (:mod:`pfc.deploy.snapshot`) for the caller to diff against
(:func:`pfc.api.dry_run` runs ``pfc diff``'s functions on it). No state file is
written, no journal entry, and an unfinished load is reported, not settled.

:func:`load_compiled` is the load that follows a preview (``apply``, ``pfc set``'s
replace): compile, attach, keep the copy.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pfc.backends.base import Artifact
from pfc.build import build_artifact
from pfc.deploy import journal, snapshot, state
from pfc.deploy import load as deploying
from pfc.deploy.base import (
    Inspection,
    Plan,
    check_dev_name,
    check_kernel,
    check_privileges,
    ifindex,
    in_netns,
)
from pfc.deploy.load import loader
from pfc.deploy.sets import pending as set_pending
from pfc.frontend.diagnostics import CompileError
from pfc.frontend.pipeline import Compiled


@dataclass
class Preview:
    """What a load would do at (netns, dev, target), as checked."""

    target: str
    dev: str
    netns: str
    checked: list[str]  # the kernel's check, and notes on what the load would do
    previous: state.Record | None  # pfc's record there now
    health: Inspection | None  # the kernel's view of it
    loaded: snapshot.Copy | None  # the sources of the policy loaded there now
    warnings: list[str] = field(default_factory=list)


def _bpf_check(plan: Plan, previous: state.Record | None) -> list[str]:
    from pfc.deploy import bpf as load_bpf

    with load_bpf.open_object(plan):
        pass
    what = "replace pfc's program" if previous else "attach it"
    return [f"the verifier accepted program {plan.artifact.meta['program']} (loaded with "
            f"its sets filled, then closed, never attached): the load would {what}"]


def _check(plan: Plan, previous: state.Record | None) -> list[str]:
    target = plan.artifact.target
    if target == "nft":
        from pfc.deploy import nft as load_nft
        return load_nft.nft_check(plan, previous)
    if target == "iptables":
        from pfc.deploy import iptables as load_ipt
        return load_ipt.ipt_check(plan, previous)
    if target in ("nfmod", "u32"):
        check_kernel(plan.artifact)
        return [f"the running kernel can take target `{target}` (modules, tc kinds); "
                "the module or filters themselves are not tried by --dry-run"]
    return _bpf_check(plan, previous)


def preview(artifact: Artifact, dev: str, netns: str | None = None, force: bool = False,
            mode: str | None = None, options: dict | None = None) -> Preview:
    """Check a load of ``artifact`` on ``dev`` (in ``netns``) with the kernel, change
    nothing, and return what is loaded there now. LoadError when the load would fail."""
    target = artifact.target
    check_privileges(target, netns, "load --dry-run")
    impl = loader(target)
    check_dev_name(dev)
    warnings: list[str] = []
    with in_netns(netns) as ns_name, state.locked():
        if journal.pending(ns_name, dev) or (ns_name, dev, target) in set_pending.places(
                ns_name):
            warnings.append(f"note: an interrupted load or set on {dev} is pending; the "
                            "next pfc command (not this dry run) finishes or rolls it back")
        try:
            previous = state.read(ns_name, dev, target)
        except state.Unreadable as exc:
            previous = None
            warnings.append(f"warning: {exc}")
        plan = Plan(artifact, dev, ifindex(dev, ns_name), ns_name, force, mode,
                    dict(options or {}))
        checked = _check(plan, previous)
        health = impl.inspect(previous) if previous else None
        loaded, why = snapshot.checked(previous) if previous else (None, None)
        if why and previous.copy_digest is not None:
            warnings.append(f"warning: {why}")
    return Preview(target, dev, ns_name, checked, previous, health, loaded, warnings)


def load_compiled(compiled: Compiled, target: str, dev: str, netns: str | None = None,
                  force: bool = False, mode: str | None = None, hook: str | None = None,
                  table: str = "pfc", artifact: Artifact | None = None,
                  origin: str | None = None) -> deploying.Result:
    """``pfc load`` of a front-end result: build the artifact, attach it, keep a copy of
    its sources beside the record (``origin``: the digest of the policy as applied,
    for a copy ``pfc set`` changed). CompileError for a policy the target refuses."""
    compiled.require()
    if artifact is None:  # (pfc.api.load builds it through pfc.api.compile)
        artifact, diags = build_artifact(compiled, target, hook=hook, dev=dev, table=table)
        if artifact is None:
            raise CompileError(diags, compiled.sources)
    rows = deploying.rule_rows(compiled.policy, artifact.policy, compiled.rule_text)
    copy = snapshot.Copy.of(compiled, {"target": target, "hook": hook, "table": table,
                                       "mode": mode})
    copy.origin = origin
    return deploying.load(artifact, compiled.source.name, compiled.source.text, rows, dev,
                          netns, force, mode, {"hook": hook, "dev": dev, "table": table},
                          copy)

