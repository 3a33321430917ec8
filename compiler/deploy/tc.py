"""``pfc load --target tc``: a cls_bpf direct-action filter on clsact ingress.

``clsact`` is created if missing (and recorded, so unload deletes only a qdisc pfc
created, and only when no filter is left on it); pfc's filter sits at handle
``TC_HANDLE`` and priority ``TC_PRIORITY`` (1: it runs first), protocol ETH_P_ALL, and a
replace swaps its program in place (``BPF_TC_F_REPLACE``: same handle and priority,
cls_bpf ``list_replace_rcu``): no gap. A filter at that handle and priority that pfc did
not load is refused unless ``--force``. pfc's program returns ``TC_ACT_OK`` for pass,
which ends classification: filters at later priorities do not see what pfc passes
(``pfc load`` says so when there are any). Pins and counters: :mod:`pfc.deploy.bpf`.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from pfc.deploy import state
from pfc.deploy.base import Inspection, Loader, LoadError, Plan, device_index
from pfc.deploy.bpf import (
    NEW,
    base_info,
    commit_pins,
    drop_pins,
    open_object,
    pin_dir,
    pin_new,
    prog_name,
    read_counters,
    remove_pins,
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


def _tc_old(plan: Plan, previous: state.Record | None, now: int | None) -> list[str]:
    if now is None:
        return ([f"note: pfc's previous tc filter (program id {previous.attach['prog_id']})"
                 f" had been removed from {plan.dev} by someone else"] if previous else [])
    if previous is not None and previous.attach.get("prog_id") == now:
        return []
    if not plan.force:
        raise LoadError(f"a tc filter (program id {now}, `{prog_name(now)}`) sits at pfc's "
                        f"handle {TC_HANDLE:#x} priority {TC_PRIORITY} on {plan.dev} "
                        "ingress and pfc did not load it",
                        hint="--force replaces it (in place, atomically)")
    return [f"replaced the tc filter with program id {now} (`{prog_name(now)}`), which "
            "pfc had not loaded (--force)"]


def tc_attach(plan: Plan, previous: state.Record | None) -> tuple[dict, list[str]]:
    directory = pin_dir(plan.netns, plan.dev, "tc")
    with open_object(plan) as obj:
        created = bpf_attach.tc_hook_create(plan.ifindex)
        try:
            now = bpf_attach.tc_query(plan.ifindex, TC_HANDLE, TC_PRIORITY)
            messages = _tc_old(plan, previous, now)
            pins = pin_new(obj, plan, directory)
            try:
                bpf_attach.tc_attach(plan.ifindex, obj.programs[plan.artifact.meta["program"]]
                                     .fd, TC_HANDLE, TC_PRIORITY, replace=now is not None)
            except OSError as exc:
                drop_pins(pins, NEW)
                raise LoadError(f"tc attach to {plan.dev} failed: {exc.strerror}; "
                                "nothing was changed", hint="run pfc load again") from None
        except BaseException:
            if created:
                with contextlib.suppress(OSError):
                    bpf_attach.tc_hook_destroy(plan.ifindex)
            raise
        commit_pins(pins, directory)
        info = base_info(plan, obj, pins)
    carried = bool(previous and previous.attach.get("qdisc_created"))
    info |= {"handle": TC_HANDLE, "priority": TC_PRIORITY,
             "qdisc_created": created or carried}
    return info, messages + _others(plan)


def _others(plan: Plan) -> list[str]:
    other = sorted(tc_priorities(plan.ifindex) - {TC_PRIORITY})
    if not other:
        return []
    return [f"note: {plan.dev} also has tc filters at priorities "
            f"{', '.join(map(str, other))}; pfc's filter (priority {TC_PRIORITY}) runs "
            "first on ingress and a frame it passes ends classification (TC_ACT_OK)"]


def tc_detach(record: state.Record) -> list[str]:
    index = device_index(record.dev)
    if index is None:
        remove_pins(Path(record.attach["pin_dir"]))
        return [f"device {record.dev} is gone (and its filters with it)"]
    handle, prio = record.attach["handle"], record.attach["priority"]
    now = bpf_attach.tc_query(index, handle, prio)
    ours = record.attach["prog_id"]
    if now == ours:
        bpf_attach.tc_detach(index, handle, prio)
        out = [f"removed the tc filter (program id {ours}) from {record.dev} ingress"]
    else:
        what = f"program id {now}" if now else "nothing"
        out = [f"pfc's tc filter (program id {ours}) was no longer on {record.dev} "
               f"({what} is at its handle/priority); left it as it is"]
    if record.attach.get("qdisc_created"):
        out.append(_drop_qdisc(index, record.dev))
    remove_pins(Path(record.attach["pin_dir"]))
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
    counters = read_counters(record)
    index = device_index(record.dev)
    if index is None:
        return Inspection("vanished", f"device {record.dev} no longer exists", counters)
    now = bpf_attach.tc_query(index, record.attach["handle"], record.attach["priority"])
    ours = record.attach["prog_id"]
    if now == ours:
        return Inspection("ok", f"tc ingress filter, program id {ours}", counters)
    if now is None:
        return Inspection("vanished", f"pfc's tc filter (program id {ours}) is no longer "
                          f"on {record.dev}", counters)
    return Inspection("changed", f"program id {now} (`{prog_name(now)}`) sits at pfc's "
                      f"tc handle/priority, not pfc's id {ours}", counters)



LOADER = Loader(tc_attach, tc_detach, tc_inspect)
