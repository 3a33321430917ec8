"""``pfc load`` for the eBPF hooks: XDP and tc (clsact ingress, cls_bpf direct action).

The object is loaded (the verifier runs) before anything on the device changes. Its
program and its counter map are pinned under ``PIN_ROOT/NETNS/DEV/TARGET/`` (``prog``,
``counters``; ``PIN_ROOT`` is ``/sys/fs/bpf/pfc``, ``PFC_PIN_DIR`` overrides it), first
as ``prog_new``/``counters_new``, renamed over the old pins once the kernel took the new
program. The pins keep the counters readable after ``pfc load`` exits and name the
program pfc loaded (``pfc status`` compares its id with what is attached). Measured:
bpffs supports rename, and refuses any name with a dot with EPERM ("reserved for
future extensions", ``bpf_lookup`` in kernel/bpf/inode.c), hence ``_new``.

- XDP (netlink, like ``ip link set dev D xdp``): a first load attaches with
  ``XDP_FLAGS_UPDATE_IF_NOEXIST``; a replace with ``XDP_FLAGS_REPLACE`` and the old
  program's fd, one atomic swap (``dev_xdp_install`` under RTNL) that fails with
  EEXIST if the attached program is not the one pfc expected. The mode stays what it
  is: native and generic cannot be active together, so a mode change cannot be atomic
  and is refused (unload first). Measured on Linux 6.18: a REPLACE asking for another
  mode than the attached program's fails with EEXIST ("Active program does not match
  expected"); native attach on a device without ``ndo_bpf`` (bridge, ...) fails with
  EOPNOTSUPP ("Underlying driver does not support XDP in native mode").
- tc: :mod:`pfc.deploy.tc`, on the pins and object helpers here.

Counters: the new program's map starts at zero on every load (a replace too). The maps
of large address sets are filled from the artifact's maps file right after the object
is loaded (``ebpf_maps.open_filled``), before anything is attached; they are not
pinned (the attached program holds them).
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from pathlib import Path

from pfc.deploy import state
from pfc.deploy.base import Inspection, Loader, LoadError, Plan, device_index
from pfc.kernel import bpf, bpf_attach
from pfc.kernel.bpf import BpfError

BPFFS = "/sys/fs/bpf"
NEW = "_new"  # suffix of pins not yet committed (no dots on bpffs)


# --------------------------------------------------------------------------- pins

def pin_root() -> Path:
    return Path(os.environ.get("PFC_PIN_DIR") or f"{BPFFS}/pfc")


def pin_dir(netns: str, dev: str, target: str) -> Path:
    return pin_root() / netns / dev / target


def _ensure_bpffs(directory: Path) -> None:
    """A bpf filesystem under the pins (mounted on /sys/fs/bpf if none is), and the
    directory itself."""
    if str(directory).startswith(BPFFS + "/") and not bpf_attach.is_bpffs(BPFFS):
        bpf_attach.mount_bpffs(BPFFS)
    directory.mkdir(parents=True, exist_ok=True)
    if not bpf_attach.is_bpffs(str(directory)):
        raise LoadError(f"{directory} is not on a bpf filesystem",
                        hint=f"mount one: mount -t bpf bpf {BPFFS} (or set PFC_PIN_DIR)")


def pin_new(obj: bpf.Object, plan: Plan, directory: Path) -> dict[str, str]:
    """Pin program and counter map as ``*_new``; the final names they will get."""
    _ensure_bpffs(directory)
    meta = plan.artifact.meta
    pins = {"prog": str(directory / "prog")}
    if meta.get("counters"):
        pins["counters"] = str(directory / "counters")
    fds = {"prog": obj.programs[meta["program"]].fd}
    if "counters" in pins:
        fds["counters"] = obj.maps[meta["counters"]].fd
    for key, final in pins.items():
        Path(final + NEW).unlink(missing_ok=True)
        bpf_attach.obj_pin(fds[key], final + NEW)
    return pins


def commit_pins(pins: dict[str, str], directory: Path) -> None:
    """Rename the new pins over the old ones (bpffs supports rename); drop an old
    counter pin the new program does not have."""
    for final in pins.values():
        os.replace(final + NEW, final)
    if "counters" not in pins:
        (directory / "counters").unlink(missing_ok=True)


def drop_pins(pins: dict[str, str], suffix: str = "") -> None:
    for final in pins.values():
        Path(final + suffix).unlink(missing_ok=True)


def remove_pins(directory: Path) -> None:
    """Unpin everything pfc pinned for one (netns, dev, target) and the directories
    left empty, up to the pin root."""
    for name in ("prog", "counters", "prog" + NEW, "counters" + NEW):
        (directory / name).unlink(missing_ok=True)
    root = pin_root()
    for d in (directory, directory.parent, directory.parent.parent, root):
        with contextlib.suppress(OSError):
            d.rmdir()


def read_counters(record: state.Record) -> dict[int, tuple[int, int]] | None:
    """The count rules' (packets, bytes) from the pinned map; {} without count rules,
    None if the pin is gone."""
    pin, rules = record.attach.get("counters_pin"), record.attach.get("count_rules", [])
    if not pin:
        return {}
    try:
        fd = bpf_attach.obj_get(pin)
    except OSError:
        return None
    try:
        return bpf_attach.read_u64_pairs(fd, rules)
    finally:
        os.close(fd)


# ----------------------------------------------------------------------- objects

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
                        f"{os.strerror(exc.errno)}; nothing was changed",
                        hint=_log_hint(exc)) from None


def _log_hint(exc: BpfError) -> str:
    if exc.errno == errno.EPERM:
        return "loading eBPF needs CAP_BPF (or CAP_SYS_ADMIN) and enough RLIMIT_MEMLOCK"
    fd, path = tempfile.mkstemp(prefix="pfc-verifier-", suffix=".log")
    with os.fdopen(fd, "w") as f:
        f.write(str(exc) + "\n" + (exc.log or ""))
    return (f"the verifier log is in {path}; a program pfc generated that the verifier "
            "refuses is a pfc bug: please report it with the policy")


def _prog_fd(prog_id: int) -> int:
    try:
        return bpf_attach.prog_fd_by_id(prog_id)
    except OSError as exc:
        raise LoadError(f"cannot open the attached program id {prog_id}: {exc}") from None


def prog_name(prog_id: int) -> str:
    with contextlib.suppress(OSError):
        fd = bpf_attach.prog_fd_by_id(prog_id)
        try:
            return bpf_attach.prog_info(fd).name or "?"
        finally:
            os.close(fd)
    return "?"


def base_info(plan: Plan, obj: bpf.Object, pins: dict[str, str]) -> dict:
    meta = plan.artifact.meta
    info = bpf_attach.prog_info(obj.programs[meta["program"]].fd)
    return {"prog_id": info.id, "prog_tag": info.tag, "prog_name": info.name,
            "prog_pin": pins["prog"], "counters_pin": pins.get("counters"),
            "count_rules": list(meta.get("count_rules", [])),
            "pin_dir": str(Path(pins["prog"]).parent)}


# --------------------------------------------------------------------------- XDP

def _xdp_old(plan: Plan, previous: state.Record | None,
             now: bpf_attach.XdpState) -> tuple[int | None, str | None, list[str]]:
    """What to replace: (prog id or None, mode to attach in, messages)."""
    if not now.prog_id:
        gone = [f"note: pfc's previous XDP program (id {previous.attach['prog_id']}) had "
                f"been detached from {plan.dev} by someone else"] if previous else []
        return None, plan.mode, gone
    ours = previous is not None and previous.attach.get("prog_id") == now.prog_id
    if plan.mode and plan.mode != now.mode:
        raise LoadError(f"an XDP program is attached to {plan.dev} in {now.mode} mode; "
                        f"switching to {plan.mode} cannot be atomic",
                        hint=f"keep --mode {now.mode}, or unload first "
                             "(traffic is unfiltered in between)")
    if ours:
        return now.prog_id, now.mode, []
    name = prog_name(now.prog_id)
    if not plan.force:
        raise LoadError(f"XDP program id {now.prog_id} (`{name}`) is attached to "
                        f"{plan.dev} in {now.mode} mode and pfc did not load it",
                        hint="--force replaces it (atomically)")
    return now.prog_id, now.mode, [f"replaced XDP program id {now.prog_id} (`{name}`), "
                                   "which pfc had not loaded (--force)"]


def _xdp_error(exc: OSError, plan: Plan, mode: str | None) -> LoadError:
    if exc.errno == errno.EOPNOTSUPP and mode == "native":
        return LoadError(f"the driver of {plan.dev} does not support native XDP",
                         hint="use --mode generic")
    if exc.errno == errno.EEXIST:
        return LoadError(f"the XDP program on {plan.dev} changed while pfc was loading; "
                         "nothing was changed", hint="run pfc load again")
    if exc.errno == errno.EBUSY:
        return LoadError(f"an XDP program is attached to {plan.dev} through a bpf_link "
                         "or appeared while pfc was loading; nothing was changed",
                         hint="detach it with the tool that attached it")
    first = str(exc).splitlines()[-1] if str(exc) else os.strerror(exc.errno)
    return LoadError(f"XDP attach to {plan.dev} failed: {os.strerror(exc.errno)} "
                     f"({first}); nothing was changed",
                     hint="try --mode generic" if mode != "generic" else None)


def xdp_attach(plan: Plan, previous: state.Record | None) -> tuple[dict, list[str]]:
    directory = pin_dir(plan.netns, plan.dev, "xdp")
    with open_object(plan) as obj:
        now = bpf_attach.xdp_query(plan.ifindex)
        old_id, mode, messages = _xdp_old(plan, previous, now)
        pins = pin_new(obj, plan, directory)
        old_fd = _prog_fd(old_id) if old_id else None
        try:
            bpf_attach.xdp_attach(plan.ifindex, obj.programs[plan.artifact.meta["program"]].fd,
                                  mode, old_fd)
        except OSError as exc:
            drop_pins(pins, NEW)
            raise _xdp_error(exc, plan, mode) from None
        finally:
            if old_fd is not None:
                os.close(old_fd)
        commit_pins(pins, directory)
        info = base_info(plan, obj, pins)
    info["mode"] = bpf_attach.xdp_query(plan.ifindex).mode
    return info, messages


def xdp_detach(record: state.Record) -> list[str]:
    index = device_index(record.dev)
    out = []
    if index is None:
        out.append(f"device {record.dev} is gone (and its XDP program with it)")
    else:
        out.append(_xdp_detach_ours(record, index))
    remove_pins(Path(record.attach["pin_dir"]))
    return out


def _xdp_detach_ours(record: state.Record, index: int) -> str:
    now = bpf_attach.xdp_query(index)
    ours = record.attach["prog_id"]
    if now.prog_id != ours:
        what = f"program id {now.prog_id}" if now.prog_id else "no program"
        return (f"pfc's XDP program (id {ours}) was no longer attached to {record.dev} "
                f"({what} is); left it as it is")
    fd = bpf_attach.obj_get(record.attach["prog_pin"])
    try:
        bpf_attach.xdp_detach(index, now.mode if now.mode in ("native", "generic")
                              else None, fd)
    finally:
        os.close(fd)
    return f"detached XDP program id {ours} from {record.dev}"


def xdp_inspect(record: state.Record) -> Inspection:
    counters = read_counters(record)
    index = device_index(record.dev)
    if index is None:
        return Inspection("vanished", f"device {record.dev} no longer exists", counters)
    now = bpf_attach.xdp_query(index)
    ours = record.attach["prog_id"]
    if now.prog_id == ours:
        return Inspection("ok", f"XDP program id {ours} attached ({now.mode})", counters)
    if not now.prog_id:
        return Inspection("vanished", f"no XDP program on {record.dev}: pfc's (id {ours}) "
                          "was detached", counters)
    return Inspection("changed", f"XDP program id {now.prog_id} (`{prog_name(now.prog_id)}`)"
                      f" is attached, not pfc's id {ours}", counters)


LOADERS = {"xdp": Loader(xdp_attach, xdp_detach, xdp_inspect)}
