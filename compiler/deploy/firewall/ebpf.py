"""The eBPF parts of a whole firewall: an ``ingress`` (or ``egress``) block given to
``xdp`` or ``tc`` (``--target xdp,nft``, ``--target iptables,tc``) is one part per
device, attached by the target's own loader (:mod:`pfc.deploy.bpf`,
:mod:`pfc.deploy.tc`) with the firewall's journal standing in for its own
(:class:`PartTxn`): its ``begin`` and steps are written into the firewall's intent.

Each part's object is loaded once before anything changes (the verifier runs then),
and the parts are attached last, each one atomic. If a later part fails, the earlier
ones are put back: the previous program, held open since before the swap (an XDP or
tc replace frees the old program otherwise), or none (detached).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field

from pfc.deploy import journal, state
from pfc.deploy.base import Inspection, Loader, Plan, Recovery, ifindex
from pfc.frontend.firewall.hooks import BLOCKS
from pfc.kernel import bpf_attach

TC_HANDLE, TC_PRIORITY = 0x7066, 1  # as pfc.deploy.tc


def loader(target: str) -> Loader:
    if target == "xdp":
        from pfc.deploy import bpf as load_bpf
        return load_bpf.LOADERS["xdp"]
    from pfc.deploy import tc as load_tc
    return load_tc.LOADER


@dataclass
class Part:
    key: str  # "xdp:eth0"
    target: str
    dev: str
    block: str
    plan: Plan
    previous: state.Record | None
    old_fd: int | None = None
    attach: dict = field(default_factory=dict)


def split(key: str) -> tuple[str, str]:
    """(target, device) of a part's key: ``xdp:eth0``, ``tc:eth1``, ``tc:eth1:egress``."""
    target, dev = key.split(":", 1)
    return target, dev.removesuffix(":egress")


def devices(artifact, options: dict) -> list[str]:
    """The devices of the block an artifact carries: the block's, else ``--dev``."""
    hook = artifact.policy.hook
    devs = list(hook.devices) if hook is not None and hook.devices else []
    return devs or ([options["dev"]] if options.get("dev") else [])


def record(netns: str, target: str, dev: str, attach: dict) -> state.Record:
    """A stand-in record of one part, for its loader's detach and inspect."""
    return state.Record(target, target, dev, netns, "?", "", "", [], "?", dict(attach))


def parts(artifacts: list, netns: str, options: dict, prev: dict | None, force: bool,
          mode: str | None) -> list[Part]:
    out = []
    for artifact in (a for a in artifacts if a.target in ("xdp", "tc")):
        block = artifact.policy.hook.name if artifact.policy.hook else "ingress"
        if not BLOCKS[block].per_device:
            continue
        for dev in devices(artifact, options):
            key = f"{artifact.target}:{dev}" + (":egress" if block == "egress" else "")
            before = ((prev or {}).get("parts") or {}).get(key)
            plan = Plan(artifact, dev, ifindex(dev, netns), netns, force,
                        mode if artifact.target == "xdp" else None, {})
            out.append(Part(key, artifact.target, dev, block, plan,
                            record(netns, artifact.target, dev, before) if before else None))
    return out


def verify(part: Part) -> None:
    """Load the object (the verifier runs, its sets filled) and close it: before any
    change, so a refusal changes nothing."""
    from pfc.deploy import bpf as load_bpf

    with load_bpf.open_object(part.plan):
        pass


class PartTxn:
    """A part's journal: its ``begin`` and steps go into the firewall's intent."""

    def __init__(self, txn: journal.Txn, key: str):
        self.txn, self.key = txn, key

    @property
    def intent(self) -> journal.Intent | None:
        return self.txn.intent

    def begin(self, old: dict | None, new: dict) -> None:
        intent = self.txn.intent
        assert intent is not None
        intent.old["parts"][self.key] = old
        intent.new["parts"][self.key] = new
        intent.new["begun"].append(self.key)
        self.txn.step(f"{self.key.split(':')[0]}-begun")

    def step(self, phase: str, **new) -> None:
        assert self.txn.intent is not None
        self.txn.intent.new["parts"][self.key].update(new)
        self.txn.step(phase)


def _egress(part: Part) -> bool:
    from pfc.deploy.tc import plan_direction

    return plan_direction(part.plan) == "egress"


def _attached(part: Part) -> int | None:
    index = part.plan.ifindex
    if part.target == "xdp":
        return bpf_attach.xdp_query(index).prog_id or None
    return bpf_attach.tc_query(index, TC_HANDLE, TC_PRIORITY, egress=_egress(part))


def attach(part: Part, txn: journal.Txn) -> list[str]:
    """Attach the part (atomic), holding the program it replaces open for :func:`undo`."""
    now = _attached(part)
    if now:
        with contextlib.suppress(OSError):
            part.old_fd = bpf_attach.prog_fd_by_id(now)
    info, messages = loader(part.target).attach(part.plan, part.previous,
                                                PartTxn(txn, part.key))
    part.attach = info
    return messages


def undo(part: Part) -> None:
    """Put back what the part replaced (a later part failed)."""
    index, now = part.plan.ifindex, _attached(part)
    if part.old_fd is None:
        if now:
            loader(part.target).detach(record(part.plan.netns, part.target, part.dev,
                                              part.attach), False)
        return
    new_fd = bpf_attach.prog_fd_by_id(now) if now else None
    try:
        if part.target == "xdp":
            bpf_attach.xdp_attach(index, part.old_fd, part.attach.get("mode"), new_fd)
        else:
            bpf_attach.tc_attach(index, part.old_fd, TC_HANDLE, TC_PRIORITY, replace=True,
                                 egress=_egress(part))
    finally:
        if new_fd is not None:
            os.close(new_fd)


def release(parts_: list[Part]) -> None:
    for part in parts_:
        if part.old_fd is not None:
            os.close(part.old_fd)
            part.old_fd = None


def verdict(intent: journal.Intent, key: str) -> Recovery:
    """A part's state in the kernel: its loader's verdict on its share of the intent
    (a part whose attach never began holds what it held: "old")."""
    if key not in intent.new.get("begun", []):
        return Recovery("old", f"{key}: not begun")
    target, dev = split(key)
    sub = journal.Intent(target, dev, intent.netns, intent.phase,
                         intent.old["parts"].get(key), intent.new["parts"][key], {})
    return loader(target).recover(sub)


def detach(netns: str, key: str, attach: dict, force: bool) -> list[str]:
    target, dev = split(key)
    return loader(target).detach(record(netns, target, dev, attach), force)


def inspect(netns: str, key: str, attach: dict) -> Inspection:
    target, dev = split(key)
    return loader(target).inspect(record(netns, target, dev, attach))
