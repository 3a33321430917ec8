"""``pfc load --target nfmod``: pfc's netfilter module, inserted in a namespace.

The module hooks the network namespace of the process that inserts it (``insmod`` runs
inside ``--netns``): every device of that namespace, at the policy's hook; ``--dev``
only names pfc's record. Its ``.ko`` is the artifact's when it was built for the
running kernel (``pfc compile --target nfmod --kernel host``), else built now against
the running kernel's headers (``/lib/modules/RELEASE/build``; modules are cached, so a
``.ko`` built once, on this host or for its kernel, is found again). No headers, or a
kernel that cannot load unsigned modules (no ``CONFIG_MODULES``, ``sig_enforce``,
lockdown: :func:`pfc.backends.nfmod.kmod.modules_unavailable`), is refused before
anything is touched.

Replace: a kernel holds one module per name, so pfc alternates two names, ``TABLE_nf``
and ``TABLE_nf2``: the new module is inserted beside the old one, then (the record
written) the old one is removed. No gap, but not atomic: between the two steps both
modules' hooks run at the same priority, old first, so a packet can be judged by both
(dropped if either drops; counted by both): a stricter policy for a moment, never no
policy. A failed ``insmod`` leaves the old module as it was.

Status: ``/proc/net/MODULE`` of the namespace (a line per rule: index, packets,
bytes). The module is pfc's in a namespace when its ``/proc/net`` entry is there.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

from pfc.backends.base import Artifact
from pfc.backends.nfmod import backend as nfmod
from pfc.backends.nfmod import kmod
from pfc.deploy import journal, state
from pfc.deploy.base import (
    CAP_SYS_MODULE,
    Inspection,
    Loader,
    LoadError,
    Plan,
    Recovery,
    effective_caps,
)

BUILD_HINT = ("install the headers of the running kernel (Debian: apt install "
              "linux-headers-$(uname -r) gcc make), or build the module where they are: "
              "pfc compile --target nfmod --kernel RELEASE (docs/nfmod.md)")


def names(module: str) -> tuple[str, str]:
    """The two names a policy's module alternates between (module doc)."""
    return module, module + "2"


def loaded(module: str) -> bool:
    return Path("/sys/module", module).exists()


def here(module: str) -> bool:
    """Whether ``module`` hooks the current network namespace (its /proc/net entry)."""
    return Path("/proc/thread-self/net", module).exists() and loaded(module)


def module_files(artifact: Artifact, module: str) -> dict[str, bytes]:
    """The sources of the artifact's module under the name ``module`` (what Kbuild
    builds; the build cache is keyed by them: a .ko built for another kernel's lab
    from these files is the one a load there finds)."""
    text = nfmod.render(artifact.policy, artifact.hook, module)
    return {f"{module}.c": text.encode(),
            "Kbuild": nfmod.KBUILD.format(module=module).encode()}


def ko_for(artifact: Artifact, module: str) -> bytes:
    """The ``.ko`` of the artifact's policy named ``module``, for the running kernel."""
    from pfc.backends.nfmod import build

    release = os.uname().release
    if module == artifact.meta["module"] and artifact.meta.get("release") == release \
            and f"{module}.ko" in artifact.files:
        return artifact.files[f"{module}.ko"]
    try:
        ko = build.build(module_files(artifact, module), module, release).ko
    except build.BuildError as exc:
        raise LoadError(f"cannot build the module for kernel {release}: "
                        f"{str(exc).splitlines()[0]}", hint=BUILD_HINT) from None
    return ko


def insmod(ko: bytes, module: str) -> None:
    with tempfile.TemporaryDirectory(prefix="pfc-nfmod-") as tmp:
        path = Path(tmp, f"{module}.ko")
        path.write_bytes(ko)
        done = subprocess.run(["insmod", str(path)], capture_output=True, text=True)
    if done.returncode != 0:
        why = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else \
            f"exit {done.returncode}"
        raise LoadError(f"the kernel refused module {module}: {why}",
                        hint="`dmesg | tail` says why")


def rmmod(module: str) -> str:
    done = subprocess.run(["rmmod", module], capture_output=True, text=True)
    if done.returncode != 0 and loaded(module):
        raise LoadError(f"rmmod {module}: {done.stderr.strip()}",
                        hint="`lsmod` shows what uses it")
    return f"removed module {module}"


def _check(plan: Plan) -> None:
    why = kmod.modules_unavailable()
    if why:
        raise LoadError(why, hint=f"nft or iptables filter at the same hooks; {BUILD_HINT}")
    if CAP_SYS_MODULE not in effective_caps():
        raise LoadError("missing privileges: inserting a module needs CAP_SYS_MODULE",
                        hint="run as root (sudo pfc ...)")


def nfmod_attach(plan: Plan, previous: state.Record | None,
                 txn: journal.Txn) -> tuple[dict, list[str]]:
    _check(plan)
    first, second = names(plan.artifact.meta["module"])
    old = previous.attach.get("module") if previous else None
    if old is not None and not here(old):
        old = None
    module = second if old == first else first
    if loaded(module):
        raise LoadError(f"a module named {module} is loaded and pfc's record in namespace "
                        f"{plan.netns} does not name it (another namespace's pfc load, or "
                        "loaded by hand)", hint="--table NAME gives pfc's module another "
                        f"name; `rmmod {module}` removes a leftover")
    ko = ko_for(plan.artifact, module)
    release = os.uname().release
    if f"vermagic={release} ".encode() not in ko:
        raise LoadError(f"the module was built for another kernel than {release}",
                        hint=BUILD_HINT)
    new = {"module": module, "hook": plan.artifact.hook, "release": release,
           "priority": nfmod.HOOKS[plan.artifact.hook][1]}
    txn.begin({"module": old} if old else None, new)
    insmod(ko, module)
    txn.step("inserted")
    return new, [f"note: module {module} filters every device of namespace {plan.netns} "
                 f"at {plan.artifact.hook} (--dev names pfc's record only)"]


def nfmod_retire(old: dict | None, new: dict) -> list[str]:
    gone = (old or {}).get("module")
    if not gone or gone == new.get("module") or not here(gone):
        return []
    return [rmmod(gone)]


def nfmod_detach(record: state.Record, force: bool = False) -> list[str]:
    module = record.attach.get("module", "")
    if not loaded(module):
        return [f"module {module} was no longer loaded; nothing to remove"]
    if here(module) or force:
        return [rmmod(module)]
    return [f"module {module} is loaded but hooks another namespace, not {record.netns}; "
            "left it as it is (--force removes it)"]


def read_counters(module: str) -> dict[int | str, tuple[int, int]]:
    from pfc.backends.nfmod import run as nfrun

    return nfrun.read_counters(module, Path("/proc/thread-self/net", module))


def nfmod_inspect(record: state.Record) -> Inspection:
    module = record.attach.get("module", "")
    if not loaded(module):
        return Inspection("vanished", f"module {module} is not loaded", None)
    if not here(module):
        return Inspection("changed", f"module {module} is loaded but hooks another "
                          f"namespace than {record.netns}", None)
    return Inspection("ok", f"module {module} at {record.attach.get('hook')} "
                      f"(priority {record.attach.get('priority')}), kernel "
                      f"{record.attach.get('release')}", read_counters(module))


def nfmod_recover(intent: journal.Intent) -> Recovery:
    module, old = intent.new["module"], (intent.old or {}).get("module")
    if here(module):
        return Recovery("new", f"module {module} is loaded", attach=intent.new)
    if loaded(module):
        return Recovery("other", f"module {module} is loaded in another namespace")
    if old and not here(old):
        return Recovery("other", f"neither module {module} nor {old} is loaded")
    return Recovery("old", f"module {module} is not loaded" +
                    (f"; {old} still is" if old else ""))


def nfmod_discover(dev: str) -> dict | None:
    found = [m for m in names(nfmod.module_name(nfmod.Options(target="nfmod")))
             if here(m)]
    return {"module": found[0]} if found else None


LOADER = Loader(nfmod_attach, nfmod_detach, nfmod_inspect, nfmod_recover, nfmod_retire,
                nfmod_discover)
