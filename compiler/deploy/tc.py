"""``pfc load --target tc``: a cls_bpf direct-action filter on clsact ingress (or egress:
a whole firewall's ``egress`` block, ``meta["tc_attach"]``, recorded as ``direction``).

``clsact`` is created if missing (and recorded, so unload deletes only a qdisc pfc
created, and only when no filter is left on it); pfc's filter sits at handle
``TC_HANDLE`` and priority ``TC_PRIORITY`` (1: it runs first), protocol ETH_P_ALL, and a
replace swaps its program in place (``BPF_TC_F_REPLACE``: same handle and priority,
cls_bpf ``list_replace_rcu``): no gap. A filter at that handle and priority that pfc did
not load (not the recorded id, nor the recorded name and tag) is refused unless
``--force``. pfc's program returns ``TC_ACT_OK`` for pass, which ends classification:
filters at later priorities do not see what pfc passes (``pfc load`` says so when there
are any). Identity, counters and the journal: :mod:`pfc.deploy.bpf`.

Whether ``clsact`` existed is written to the journal before it is created, so a load
killed between creating it and attaching the filter leaves nothing behind once the
next command has rolled it back.
"""

from __future__ import annotations

import contextlib

from pfc.deploy import journal, state
from pfc.deploy.base import Inspection, Loader, LoadError, Plan, Recovery, device_index, no_retire
from pfc.deploy.bpf import (
    describe,
    discover,
    foreign,
    health,
    is_ours,
    new_identity,
    old_identity,
    open_object,
    recover_prog,
)
from pfc.kernel import bpf_attach

TC_HANDLE = 0x7066  # "pf"
TC_PRIORITY = 1
TC_INGRESS_PARENT, TC_EGRESS_PARENT = 0xFFFFFFF2, 0xFFFFFFF3


def tc_priorities(index: int) -> set[int]:
    """Priorities of every filter on the device's clsact ingress and egress."""
    from pyroute2 import IPRoute

    found = set()
    with IPRoute() as ipr:
        for parent in (TC_INGRESS_PARENT, TC_EGRESS_PARENT):
            with contextlib.suppress(Exception):
                found |= {f["info"] >> 16 for f in ipr.get_filters(index=index,
                                                                    parent=parent)}
    return found


def clsact_exists(index: int) -> bool:
    from pyroute2 import IPRoute

    with IPRoute() as ipr:
        return any(q.get_attr("TCA_KIND") == "clsact" for q in ipr.get_qdiscs(index=index))


def direction(attach: dict) -> str:
    """Where a recorded (or planned: the artifact's meta) filter sits."""
    return "egress" if attach.get("direction") == "egress" else "ingress"


def plan_direction(plan: Plan) -> str:
    """Where the plan's filter goes: the artifact's ``meta["tc_attach"]``."""
    return "egress" if plan.artifact.meta.get("tc_attach") == "egress" else "ingress"


def _query(index: int, attach: dict) -> int | None:
    return bpf_attach.tc_query(index, attach.get("handle", TC_HANDLE),
                               attach.get("priority", TC_PRIORITY),
                               egress=direction(attach) == "egress")


def _tcold_identity(plan: Plan, previous: state.Record | None, now: int | None) -> list[str]:
    if now is None:
        return ([f"note: pfc's previous tc filter (program id "
                 f"{previous.attach.get('prog_id')}) had been removed from {plan.dev} "
                 "outside pfc"] if previous else [])
    if previous is not None and is_ours(bpf_attach.prog_info_by_id(now), previous.attach):
        return []
    if not plan.force:
        raise LoadError(foreign(f"a tc filter sits at pfc's handle {TC_HANDLE:#x} priority "
                                f"{TC_PRIORITY} on {plan.dev} {plan_direction(plan)}",
                                now, previous),
                        hint="--force replaces it (in place, atomically)")
    return [f"replaced the tc filter with {describe(now)}, which pfc had not loaded "
            "(--force)"]


def tc_attach(plan: Plan, previous: state.Record | None,
              txn: journal.Txn) -> tuple[dict, list[str]]:
    place = {"direction": plan_direction(plan)}
    with open_object(plan) as obj:
        existed = clsact_exists(plan.ifindex)
        now = _query(plan.ifindex, place) if existed else None
        messages = _tcold_identity(plan, previous, now)
        carried = bool(previous and previous.attach.get("qdisc_created"))
        new = new_identity(plan, obj) | place | {
            "handle": TC_HANDLE, "priority": TC_PRIORITY, "qdisc_existed": existed,
            "qdisc_created": not existed or carried}
        txn.begin(old_identity(now), new)
        if not existed:
            bpf_attach.tc_hook_create(plan.ifindex)
            txn.step("qdisc")
        try:
            bpf_attach.tc_attach(plan.ifindex, obj.programs[plan.artifact.meta["program"]].fd,
                                 TC_HANDLE, TC_PRIORITY, replace=now is not None,
                                 egress=place["direction"] == "egress")
        except OSError as exc:
            raise LoadError(f"tc attach to {plan.dev} failed: {exc.strerror}",
                            hint="run pfc load again") from None
        txn.step("swapped")
    return new, messages + _others(plan)


def _others(plan: Plan) -> list[str]:
    other = sorted(tc_priorities(plan.ifindex) - {TC_PRIORITY})
    if not other:
        return []
    return [f"note: {plan.dev} also has tc filters at priorities "
            f"{', '.join(map(str, other))}; pfc's filter (priority {TC_PRIORITY}) runs "
            "first on ingress and a frame it passes ends classification (TC_ACT_OK)"]


def tc_detach(record: state.Record, force: bool = False) -> list[str]:
    index = device_index(record.dev)
    if index is None:
        return [f"device {record.dev} is gone (and its filters with it)"]
    handle = record.attach.get("handle", TC_HANDLE)
    prio = record.attach.get("priority", TC_PRIORITY)
    way = direction(record.attach)
    now = _query(index, record.attach)
    ours = record.attach.get("prog_id")
    if now is None:
        out = [f"pfc's tc filter (program id {ours}) was no longer on {record.dev}; "
               "nothing to remove"]
    elif is_ours(bpf_attach.prog_info_by_id(now), record.attach) or force:
        bpf_attach.tc_detach(index, handle, prio, egress=way == "egress")
        out = [f"removed the tc filter (program id {now}) from {record.dev} {way}"]
    else:
        out = [f"{describe(now)} sits at pfc's tc handle/priority on {record.dev}, not "
               f"pfc's (id {ours}); left it as it is (--force removes it)"]
    if record.attach.get("qdisc_created"):
        out.append(_drop_qdisc(index, record.dev))
    return out


def _drop_qdisc(index: int, dev: str) -> str:
    left = tc_priorities(index)
    if left:
        return (f"kept the clsact qdisc pfc created on {dev}: other filters use it "
                f"(priorities {', '.join(map(str, sorted(left)))})")
    with contextlib.suppress(OSError):
        bpf_attach.tc_hook_destroy(index)
    return f"deleted the clsact qdisc pfc had created on {dev}"


def tc_inspect(record: state.Record) -> Inspection:
    index = device_index(record.dev)
    if index is None:
        return Inspection("vanished", f"device {record.dev} no longer exists", None)
    return health(record, f"tc {direction(record.attach)} filter", _query(index, record.attach))


def tc_recover(intent: journal.Intent) -> Recovery:
    index = device_index(intent.dev)
    if index is None:
        return Recovery("other", f"device {intent.dev} no longer exists")
    now = _query(index, intent.new)
    found = recover_prog(intent, now, f"tc {direction(intent.new)} of {intent.dev}")
    if found.verdict == "old" and not intent.new.get("qdisc_existed", True) and \
            clsact_exists(index):
        found.removed.append(_drop_qdisc(index, intent.dev))
    return found


def tc_discover(dev: str) -> dict | None:
    index = device_index(dev)
    if index is None:
        return None
    found = discover(bpf_attach.tc_query(index, TC_HANDLE, TC_PRIORITY) or 0, "pfc_tc")
    return found | {"handle": TC_HANDLE, "priority": TC_PRIORITY} if found else None


LOADER = Loader(tc_attach, tc_detach, tc_inspect, tc_recover, no_retire, tc_discover)
