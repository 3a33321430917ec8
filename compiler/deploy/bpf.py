"""``pfc load`` for the eBPF hooks: XDP here, tc in :mod:`pfc.deploy.tc` (both use the
helpers of this module).

The kernel is the source of truth: pfc finds its program on the device (XDP: what
``bpf_xdp_query`` reports; tc: the filter at pfc's handle and priority), knows it by
id or, after a load whose record was lost, by name (``pfc_xdp``/``pfc_tc``) and tag
(a hash of the instructions: the same policy compiles to the same tag) as recorded at
load, and reads its counters through the program's own map ids (``bpf_prog_info``
``map_ids`` → ``pfc_counters`` by id). Nothing is pinned: what ``pfc load`` attached
keeps living on the device, and every command works from any mount namespace —
``ip netns exec NS pfc ...`` (which mounts a fresh /sys, without the host's bpffs),
``--netns NS``, a container without a bpffs.

The object is loaded (the verifier runs) and its set maps filled
(``ebpf_maps.open_filled``) before anything on the device changes; the journal entry
(:mod:`pfc.deploy.journal`) names the old and the new program (id, tag) before the
swap, so a load killed at any point is finished or rolled back by the next command.

XDP (netlink, like ``ip link set dev D xdp``): a first load attaches with
``XDP_FLAGS_UPDATE_IF_NOEXIST``; a replace with ``XDP_FLAGS_REPLACE`` and the old
program's fd, one atomic swap (``dev_xdp_install`` under RTNL) that fails with EEXIST
if the attached program is not the one pfc expected. The mode stays what it is:
native and generic cannot be active together, so a mode change cannot be atomic and is
refused (unload first). Measured on Linux 6.18: a REPLACE asking for another mode than
the attached program's fails with EEXIST ("Active program does not match expected");
native attach on a device without ``ndo_bpf`` (bridge, ...) fails with EOPNOTSUPP.

Counters (docs/load.md): per the artifact's ``counter_slots`` (every rule, the default
and, for objects with maps filled at load, ``not_ready``); an older artifact without
them has slots for its count rules only (slot = rule index). They start at zero on
every load (a new program, a new map).
"""

from __future__ import annotations

import contextlib
import errno
import os

from pfc.deploy import base, journal, state
from pfc.deploy.base import (
    CAP_SYS_ADMIN,
    Counters,
    Inspection,
    Loader,
    LoadError,
    Plan,
    Recovery,
    device_index,
    no_retire,
)
from pfc.kernel import bpf, bpf_attach
from pfc.kernel.bpf import BpfError

CHANGED = "changed outside pfc: "


# ----------------------------------------------------------------------- programs

def open_object(plan: Plan) -> bpf.Object:
    """Load the artifact's ELF object and fill its set maps (``ebpf_maps.open_filled``):
    the verifier runs here, before any change, and the program is attached only with
    its sets in place (a replace loads a new object with new maps)."""
    from pfc.backends.ebpf import maps as ebpf_maps

    artifact = plan.artifact
    try:
        return ebpf_maps.open_filled(artifact)
    except BpfError as exc:
        raise LoadError(f"the kernel refused program {artifact.meta['program']}: "
                        f"{os.strerror(exc.errno)}", hint=_log_hint(exc)) from None


LOG_TAIL = 3  # lines of the verifier log a refusal quotes (its verdict is last)


def _log_hint(exc: BpfError) -> str:
    """The verifier's last lines, quoted; no file is left behind (the whole log comes
    again from ``bpftool prog loadall`` of the compiled object)."""
    if exc.errno == errno.EPERM:
        return "loading eBPF needs CAP_BPF (or CAP_SYS_ADMIN) and enough RLIMIT_MEMLOCK"
    lines = [ln.strip() for ln in (exc.log or exc.messages or "").splitlines() if ln.strip()]
    said = " | ".join(ln[:160] for ln in lines[-LOG_TAIL:]) or "(no log)"
    return (f"the verifier log ends: {said}; a program pfc generated that the verifier "
            "refuses is a pfc bug: please report it with the policy (`pfc compile FILE "
            "--target T -o DIR`, then `bpftool prog loadall DIR/FILE.T.o "
            "/sys/fs/bpf/x` prints the whole log)")


def counter_slots(meta: dict) -> dict:
    """``{"rules": {index: slot}, "default": slot|None, "not_ready": slot|None}`` from
    the artifact (contract: ``meta["counter_slots"]``), or the count rules' slots of an
    artifact that predates it (slot = rule index)."""
    slots = meta.get("counter_slots")
    if not slots:
        return {"rules": {str(i): i for i in meta.get("count_rules", [])},
                "default": None, "not_ready": None}
    return {"rules": {str(k): int(v) for k, v in slots.get("rules", {}).items()},
            "default": slots.get("default"), "not_ready": slots.get("not_ready")}


def new_identity(plan: Plan, obj: bpf.Object) -> dict:
    """What a load records of its program: id, tag, name, and how to read counters."""
    meta = plan.artifact.meta
    info = bpf_attach.prog_info(obj.programs[meta["program"]].fd)
    return {"prog_id": info.id, "prog_tag": info.tag, "prog_name": info.name,
            "counters": meta.get("counters"), "counter_slots": counter_slots(meta),
            "ready_map": meta.get("ready_map"), "set_maps": set_maps(plan.artifact)}


def is_ours(info: bpf_attach.ProgInfo | None, attach: dict) -> bool:
    """The program pfc recorded: the same id, or the same name and tag."""
    if info is None:
        return False
    return info.id == attach.get("prog_id") or \
        (info.name, info.tag) == (attach.get("prog_name"), attach.get("prog_tag"))


def describe(prog_id: int) -> str:
    info = bpf_attach.prog_info_by_id(prog_id)
    if info is None:
        return f"program id {prog_id}"
    return f"program id {prog_id} (`{info.name or '?'}`, tag {info.tag})"


def read_counters(prog_id: int | None, attach: dict) -> Counters | None:
    """Per rule index (and "default", "not_ready"): (packets, bytes) summed over CPUs,
    read from program ``prog_id``'s counter map found by its map ids; {} for a program
    without counters, None if the program or its map is gone."""
    name = attach.get("counters") or ("pfc_counters" if attach.get("counters_pin") else None)
    slots = attach.get("counter_slots") or \
        counter_slots({"count_rules": attach.get("count_rules", [])})
    if not name:
        return {}
    fd = bpf_attach.prog_map_fd(prog_id, name) if prog_id else None
    if fd is None:
        return None
    keys: dict[int | str, int] = {int(k): v for k, v in slots["rules"].items()}
    keys |= {k: slots[k] for k in ("default", "not_ready") if slots.get(k) is not None}
    try:
        values = bpf_attach.read_u64_pairs(fd, sorted(set(keys.values())))
    except OSError:
        return None
    finally:
        os.close(fd)
    return {key: values[slot] for key, slot in keys.items()}


def discover(prog_id: int, name: str) -> dict | None:
    """The attach info of program ``prog_id`` if it is named ``name`` (pfc's)."""
    info = bpf_attach.prog_info_by_id(prog_id) if prog_id else None
    if info is None or info.name != name:
        return None
    return {"prog_id": info.id, "prog_tag": info.tag, "prog_name": info.name,
            "counters": "pfc_counters", "counter_slots": None}


def _prog_fd(prog_id: int) -> int:
    try:
        return bpf_attach.prog_fd_by_id(prog_id)
    except OSError as exc:
        raise LoadError(f"cannot open the attached program id {prog_id}: {exc}") from None


def foreign(what: str, prog_id: int, previous: state.Record | None) -> str:
    """The refusal's text for a program pfc has no record of; a LoadError naming
    CAP_SYS_ADMIN when pfc cannot read the program back (with CAP_BPF alone
    ``BPF_PROG_GET_FD_BY_ID`` is refused: pfc's own program looked like another's)."""
    info = bpf_attach.prog_info_by_id(prog_id)
    if info is None and previous is not None and CAP_SYS_ADMIN not in base.effective_caps():
        raise LoadError(f"{what} (program id {prog_id}) and pfc cannot tell whether it is "
                        "the one it loaded: opening a program by id needs CAP_SYS_ADMIN",
                        hint="run with CAP_SYS_ADMIN (docs/operate.md, \"Capabilities\")")
    text = f"{what} ({describe(prog_id)}) and pfc did not load it"
    if info is not None and info.name.startswith("pfc_") and previous is None:
        text += " (the name is pfc's: loaded by hand, or pfc's records were lost)"
    return text


# --------------------------------------------------------------------------- XDP

def _xdpold_identity(plan: Plan, previous: state.Record | None,
             now: bpf_attach.XdpState) -> tuple[int | None, str | None, list[str]]:
    """What to replace: (prog id or None, mode to attach in, messages)."""
    if not now.prog_id:
        gone = [f"note: pfc's previous XDP program (id {previous.attach.get('prog_id')}) "
                f"had been detached from {plan.dev} outside pfc"] if previous else []
        return None, plan.mode, gone
    if plan.mode and plan.mode != now.mode:
        raise LoadError(f"an XDP program is attached to {plan.dev} in {now.mode} mode; "
                        f"switching to {plan.mode} cannot be atomic",
                        hint=f"keep --mode {now.mode}, or unload first "
                             "(traffic is unfiltered in between)")
    info = bpf_attach.prog_info_by_id(now.prog_id)
    if previous is not None and is_ours(info, previous.attach):
        return now.prog_id, now.mode, []
    if not plan.force:
        raise LoadError(foreign(f"an XDP program is attached to {plan.dev} in {now.mode} "
                                "mode", now.prog_id, previous),
                        hint="--force replaces it (atomically)")
    return now.prog_id, now.mode, [f"replaced XDP {describe(now.prog_id)}, which pfc had "
                                   "not loaded (--force)"]


def _xdp_error(exc: OSError, plan: Plan, mode: str | None) -> LoadError:
    if exc.errno == errno.EOPNOTSUPP and mode == "native":
        return LoadError(f"the driver of {plan.dev} does not support native XDP",
                         hint="use --mode generic")
    if exc.errno == errno.EEXIST:
        return LoadError(f"the XDP program on {plan.dev} changed while pfc was loading",
                         hint="run pfc load again")
    if exc.errno == errno.EBUSY:
        return LoadError(f"an XDP program is attached to {plan.dev} through a bpf_link "
                         "or appeared while pfc was loading",
                         hint="detach it with the tool that attached it")
    first = str(exc).splitlines()[-1] if str(exc) else os.strerror(exc.errno)
    return LoadError(f"XDP attach to {plan.dev} failed: {os.strerror(exc.errno)} "
                     f"({first})", hint="try --mode generic" if mode != "generic" else None)


def xdp_attach(plan: Plan, previous: state.Record | None,
               txn: journal.Txn) -> tuple[dict, list[str]]:
    with open_object(plan) as obj:
        new = new_identity(plan, obj)
        now = bpf_attach.xdp_query(plan.ifindex)
        old_id, mode, messages = _xdpold_identity(plan, previous, now)
        txn.begin(old_identity(old_id), new)
        old_fd = _prog_fd(old_id) if old_id else None
        try:
            bpf_attach.xdp_attach(plan.ifindex, obj.programs[plan.artifact.meta["program"]].fd,
                                  mode, old_fd)
        except OSError as exc:
            raise _xdp_error(exc, plan, mode) from None
        finally:
            if old_fd is not None:
                os.close(old_fd)
        txn.step("swapped")
    return new | {"mode": bpf_attach.xdp_query(plan.ifindex).mode}, messages


def old_identity(prog_id: int | None) -> dict | None:
    """What the journal records of the program a load replaces (None: nothing)."""
    info = bpf_attach.prog_info_by_id(prog_id) if prog_id else None
    return {"prog_id": prog_id, "prog_tag": info.tag if info else None} if prog_id else None


def xdp_detach(record: state.Record, force: bool = False) -> list[str]:
    index = device_index(record.dev)
    if index is None:
        return [f"device {record.dev} is gone (and its XDP program with it)"]
    now = bpf_attach.xdp_query(index)
    ours = record.attach.get("prog_id")
    if not now.prog_id:
        return [f"pfc's XDP program (id {ours}) was no longer attached to {record.dev}; "
                "nothing to remove"]
    if not (is_ours(bpf_attach.prog_info_by_id(now.prog_id), record.attach) or force):
        return [f"XDP {describe(now.prog_id)} is attached to {record.dev}, not pfc's "
                f"(id {ours}); left it as it is (--force removes it)"]
    fd = _prog_fd(now.prog_id)
    try:
        bpf_attach.xdp_detach(index, now.mode if now.mode in ("native", "generic")
                              else None, fd)
    finally:
        os.close(fd)
    return [f"detached XDP program id {now.prog_id} from {record.dev}"]


def health(record: state.Record, what: str, now: int | None) -> Inspection:
    """The health of an eBPF record whose place on the device holds program ``now``."""
    a, ours = record.attach, record.attach.get("prog_id")
    info = bpf_attach.prog_info_by_id(now) if now else None
    counters = read_counters(now if is_ours(info, a) else ours, a)
    if now and now == ours:
        return Inspection("ok", f"{what}, program id {ours} (tag {a.get('prog_tag')})",
                          counters)
    if is_ours(info, a):
        return Inspection("changed", f"{CHANGED}pfc's program (same name and tag) is "
                          f"attached as id {now}, not the id {ours} pfc recorded", counters)
    if not now:
        return Inspection("vanished", f"{CHANGED}pfc's {what} (program id {ours}) was "
                          f"removed from {record.dev}", counters)
    return Inspection("changed", f"{CHANGED}{describe(now)} sits at pfc's place "
                      f"({what}), not pfc's id {ours}", counters)


def xdp_inspect(record: state.Record) -> Inspection:
    index = device_index(record.dev)
    if index is None:
        return Inspection("vanished", f"device {record.dev} no longer exists", None)
    now = bpf_attach.xdp_query(index)
    found = health(record, f"XDP ({now.mode or record.attach.get('mode')})", now.prog_id)
    return found


def recover_prog(intent: journal.Intent, now: int | None, what: str) -> Recovery:
    """The verdict on an unfinished eBPF load whose place holds program ``now``."""
    new, old = intent.new, (intent.old or {}).get("prog_id")
    if now and now == new.get("prog_id"):
        return Recovery("new", f"{what}: the new program id {now} is attached",
                        attach=dict(new))
    if (now or None) == old:
        held = f"the previous program id {old} is attached" if old else "nothing is attached"
        return Recovery("old", f"{what}: {held}")
    return Recovery("other", f"{what}: {describe(now) if now else 'nothing'} is attached")


def xdp_recover(intent: journal.Intent) -> Recovery:
    index = device_index(intent.dev)
    if index is None:
        return Recovery("other", f"device {intent.dev} no longer exists")
    now = bpf_attach.xdp_query(index)
    found = recover_prog(intent, now.prog_id, f"XDP on {intent.dev}")
    if found.attach is not None:
        found.attach["mode"] = now.mode
    return found


def xdp_discover(dev: str) -> dict | None:
    index = device_index(dev)
    if index is None:
        return None
    with contextlib.suppress(OSError):
        return discover(bpf_attach.xdp_query(index).prog_id, "pfc_xdp")
    return None


LOADERS = {"xdp": Loader(xdp_attach, xdp_detach, xdp_inspect, xdp_recover, no_retire,
                         xdp_discover)}


# ------------------------------------------------------------------ live set changes

def set_maps(artifact) -> list[dict]:
    """What a load records of the object's set maps (``attach["set_maps"]``): each
    maps-file record without its prefixes, with their count and digest (the drift
    check of a map no ``set`` feeds)."""
    from pfc.backends.ebpf import maps as ebpf_maps

    out = []
    for r in ebpf_maps.maps_of(artifact):
        if r["type"] in ("data", "ifaces"):  # the classifier's tables, iif/oif: no set
            continue
        prefixes = ebpf_maps.int_prefixes(r)
        out.append({k: v for k, v in r.items() if k != "prefixes"}
                   | {"count": len(prefixes), "digest": prefix_digest(prefixes)})
    return out


def prefix_digest(prefixes: list[tuple[int, int]]) -> str:
    import hashlib

    return hashlib.sha256(repr(sorted(prefixes)).encode()).hexdigest()[:32]
