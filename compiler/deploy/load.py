"""``pfc load`` / ``unload`` / ``status``: put a compiled policy on a device, all or
nothing, replace it with no gap, take it off again, and read its counters.

This module is the dispatcher: it owns the table of targets, takes the lock, enters the
namespace (``--netns``), finds the device and writes the state record
(:mod:`pfc.deploy.state`); what every loader shares (privileges, namespaces, the plan)
is :mod:`pfc.deploy.base`, and each target's attach/replace/detach/inspect lives in its
own module (:mod:`pfc.deploy.bpf`, :mod:`pfc.deploy.tc`, :mod:`pfc.deploy.nft`,
:mod:`pfc.deploy.iptables`), behind the :class:`Loader` interface.

All or nothing: the policy is compiled (by the caller, through
:func:`pfc.build.build_artifact`) and every check below is made before anything in the
kernel changes; the change itself is one atomic step per target (XDP
``XDP_FLAGS_REPLACE``, tc ``NLM_F_REPLACE`` on the same handle and priority, one nft
transaction, one ``iptables-restore``). A failure leaves the previous policy, its
counters and its state record exactly as they were. The state record is written only
after the kernel took the new policy.

Errors the user can act on are :class:`LoadError` (a one-line cause and a hint; the
CLI exits 2).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from pfc.backends.base import Artifact
from pfc.deploy import state
from pfc.deploy.base import (
    Inspection,
    Loader,
    LoadError,
    Plan,
    check_privileges,
    current_netns,
    ifindex,
    in_netns,
    netns_path,
)
from pfc.frontend import ir

TARGETS = ("xdp", "tc", "nft", "iptables")


def loader(target: str) -> Loader:
    if target == "xdp":
        from pfc.deploy import bpf as load_bpf
        return load_bpf.LOADERS[target]
    if target == "tc":
        from pfc.deploy import tc as load_tc
        return load_tc.LOADER
    if target == "nft":
        from pfc.deploy import nft as load_nft
        return load_nft.LOADER
    if target == "iptables":
        from pfc.deploy import iptables as load_ipt
        return load_ipt.LOADER
    raise LoadError(f"`pfc load` cannot attach target `{target}`",
                    hint="loadable targets: " + ", ".join(TARGETS) +
                    "; socket filters are attached by the application "
                    "(pfc.attach_socket, docs/load.md)")


# ------------------------------------------------------------------------ commands

@dataclass
class Result:
    record: state.Record | None
    messages: list[str]


def rule_rows(policy: ir.Policy, lowered: ir.Policy,
              text_of: Callable[[ir.Rule], str]) -> list[state.RuleRow]:
    """The source rules, each with the lowered rule that counts it if a pass merged it
    into an earlier one (merged runs keep their first rule's index)."""
    kept = sorted(r.index for r in lowered.rules)
    rows = []
    for r in policy.rules:
        earlier = [i for i in kept if i <= r.index]
        merged = None if r.index in kept or not earlier else earlier[-1]
        rows.append(state.RuleRow(r.index, r.line, text_of(r), r.action.name, merged))
    return rows


def load(artifact: Artifact, policy_path: str, source_text: str,
         rows: list[state.RuleRow], dev: str, netns: str | None = None,
         force: bool = False, mode: str | None = None, options: dict | None = None) -> Result:
    """Attach a compiled artifact to ``dev`` (in ``netns``), replacing what pfc loaded
    there before for the same target. LoadError when anything is in the way."""
    target = artifact.target
    check_privileges(target, netns)
    impl = loader(target)
    with in_netns(netns) as ns_name, state.locked():
        plan = Plan(artifact, dev, ifindex(dev, ns_name), ns_name, force, mode,
                    dict(options or {}))
        previous = state.read(ns_name, dev, target)
        info, messages = impl.attach(plan, previous)
        record = state.Record(
            target=target, hook=artifact.hook, dev=dev, netns=ns_name,
            policy=str(Path(policy_path).resolve()),
            sha256=hashlib.sha256(source_text.encode()).hexdigest(),
            loaded_at=datetime.now(UTC).isoformat(timespec="seconds"),
            rules=rows, default=artifact.policy.default.value, attach=info)
        state.write(record)
    return Result(record, messages)


def unload(target: str, dev: str, netns: str | None = None) -> Result:
    """Remove exactly what pfc loaded for (netns, dev, target); idempotent."""
    check_privileges(target, netns, "unload")
    impl = loader(target)
    ns_name = netns or current_netns()
    with state.locked():
        record = state.read(ns_name, dev, target)
        if record is None:
            return Result(None, [f"nothing loaded: no {target} policy of pfc on {dev} "
                                 f"in namespace {ns_name}"])
        if netns_path(ns_name) is None and ns_name != current_netns():
            _forget_pins(record)
            state.remove(record)
            return Result(record, [f"namespace {ns_name} is gone (with everything in it); "
                                   "pins and state record removed"])
        with in_netns(ns_name):
            messages = impl.detach(record)
        state.remove(record)
    return Result(record, messages)


@dataclass
class Status:
    record: state.Record
    inspection: Inspection
    file_changed: bool | None  # the policy file's text differs from what was loaded


def _forget_pins(record: state.Record) -> None:
    """Unpin what pfc pinned for a record whose namespace is gone (the pins would keep
    the program and map alive)."""
    if record.attach.get("pin_dir"):
        from pfc.deploy.bpf import remove_pins
        remove_pins(Path(record.attach["pin_dir"]))


def status(dev: str | None = None, netns: str | None = None) -> list[Status]:
    """Every record (of ``dev``/``netns``) with what the kernel says about it now."""
    check_privileges(None, netns, "status")
    out = []
    for record in state.records(netns, dev):
        out.append(Status(record, inspect(record), _file_changed(record)))
    return out


def inspect(record: state.Record) -> Inspection:
    if record.netns != current_netns() and netns_path(record.netns) is None:
        counters = None
        if record.attach.get("pin_dir"):
            from pfc.deploy.bpf import read_counters
            counters = read_counters(record)
        return Inspection("vanished", f"namespace {record.netns} no longer exists",
                          counters)
    with in_netns(record.netns):
        return loader(record.target).inspect(record)


def _file_changed(record: state.Record) -> bool | None:
    try:
        text = Path(record.policy).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    return hashlib.sha256(text.encode()).hexdigest() != record.sha256
