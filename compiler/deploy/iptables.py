"""``pfc load --target iptables``: pfc's own chain, filled by ``iptables-restore --noflush``.

The artifact (docs/iptables.md) has, per family, a main restore file (``:PFC - [0:0]``
creates or flushes pfc's chain, the jump from the base chain is deleted and inserted
again at position 1, then the rules), an ``.init`` file (the chain and the first jump:
needed on the first load only, since ``-D`` of a missing jump fails the whole restore)
and, when the policy has lists, an ``ipset restore`` file (sets created if missing,
filled under a temporary name and swapped in).

A load: the sets (``ipset restore``), then per family the ``.init`` file when the jump
is not there yet (``iptables -C``), then the main file: each restore is one atomic
commit, so a replace swaps pfc's rules with no gap and counters start at zero. The
tools are the system's iptables flavour (``iptables -V``: nf_tables or legacy), so pfc's
chain lives where the user's other rules live. If a step fails, what was done is
undone: sets get their old members back, each family its previous rules *and counters*
(saved with ``iptables-save -c`` before, put back with ``iptables-restore --counters``),
a chain and jump this load created are removed; the
error names the step. An existing chain of that name that pfc did not load is refused
unless ``--force``.

Unload: per family ``-D`` the jump, ``-F`` and ``-X`` pfc's chain (one restore), then
``ipset destroy`` of the sets pfc created. Counters: ``iptables-save -c`` of pfc's chain,
each line's counters added to the rule it belongs to (``meta["lines"]``): every rule,
terminal ones too (a terminal rule counts the packets it decided).
"""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess

from pfc.deploy import state
from pfc.deploy.base import Inspection, Loader, LoadError, Plan

TOOLS = {4: "iptables", 6: "ip6tables"}
NAMES = {4: "IPv4", 6: "IPv6"}
_NFT_FAMILY = {4: "ip", 6: "ip6"}
FILES = {4: ("init4", "ipv4"), 6: ("init6", "ipv6")}
_COUNTER = re.compile(r"^\[(\d+):(\d+)\] -A (\S+)")


class _Failed(Exception):
    """A tool exited non-zero: its command and stderr."""


def _call(argv: list[str], text: str | None = None) -> str:
    try:
        proc = subprocess.run(argv, input=text, capture_output=True, text=True)
    except FileNotFoundError:
        raise _Failed(f"`{argv[0]}` is not installed") from None
    if proc.returncode:
        raise _Failed(f"`{' '.join(argv[:3])}` failed: "
                      f"{proc.stderr.strip().splitlines()[-1:] or ['(no message)']}")
    return proc.stdout


def _ok(argv: list[str]) -> bool:
    return subprocess.run(argv, capture_output=True).returncode == 0


def system_flavour() -> str:
    """``nft`` or ``legacy``: what the system's ``iptables`` is (``iptables -V``)."""
    if shutil.which("iptables") is None:
        raise LoadError("iptables is not installed", hint="apt install iptables")
    out = subprocess.run(["iptables", "-V"], capture_output=True, text=True).stdout
    return "legacy" if "legacy" in out else "nft"


def _tool(family: int, flavour: str, what: str = "") -> str:
    return f"{TOOLS[family]}-{flavour}" + (f"-{what}" if what else "")


def _jump(where: dict) -> list[str]:
    return (["-i", where["dev"]] if where.get("dev") else []) + ["-j", where["chain"]]


def _has_chain(family: int, where: dict) -> bool:
    return _ok([_tool(family, where["flavour"]), "-t", where["table"], "-S", where["chain"]])


def _has_jump(family: int, where: dict) -> bool:
    return _ok([_tool(family, where["flavour"]), "-t", where["table"], "-C", where["base"],
                *_jump(where)])


def _restore(family: int, flavour: str, text: str) -> None:
    _call([_tool(family, flavour, "restore"), "--noflush"], text)


# ---------------------------------------------------------------------------- sets

def _save_sets(names: list[str]) -> dict[str, str | None]:
    """Members of the sets that exist now (``ipset save``), None for missing ones."""
    out = {}
    for name in names:
        try:
            out[name] = _call(["ipset", "save", name])
        except _Failed:
            out[name] = None
    return out


def _restore_sets(saved: dict[str, str | None]) -> None:
    """Undo an ``ipset restore``: old members back, sets that were missing destroyed."""
    for name, text in saved.items():
        with contextlib.suppress(_Failed):
            if text is None:
                _call(["ipset", "destroy", name])
            else:
                adds = "".join(ln + "\n" for ln in text.splitlines() if ln.startswith("add "))
                _call(["ipset", "restore"], f"flush {name}\n{adds}")


def _destroy_sets(names: list[str]) -> list[str]:
    out = []
    for name in names:
        try:
            _call(["ipset", "destroy", name])
            out.append(f"destroyed ipset {name}")
        except _Failed as exc:
            if _ok(["ipset", "list", "-n", name]):
                out.append(f"kept ipset {name}: {exc} (still referenced?)")
    return out


# ---------------------------------------------------------------------------- attach

def _where(plan: Plan, flavour: str) -> dict:
    meta = plan.artifact.meta
    return {"table": meta["table"], "base": meta["base"], "chain": meta["chain"],
            "dev": meta["dev"], "flavour": flavour, "notrack": meta["notrack"]}


def _check_conflicts(plan: Plan, where: dict, previous: state.Record | None) -> list[str]:
    for other in state.records(plan.netns):
        a = other.attach
        if other.target == "iptables" and other.dev != plan.dev and \
                (a.get("table"), a.get("chain")) == (where["table"], where["chain"]):
            raise LoadError(f"chain {where['chain']} (table {where['table']}) holds pfc's "
                            f"iptables policy for {other.dev}; one chain serves one device",
                            hint="use another --table NAME for this device")
    ours = previous is not None and (previous.attach.get("table"), previous.attach.get(
        "chain")) == (where["table"], where["chain"])
    found = [NAMES[f] for f in TOOLS if _has_chain(f, where)]
    if not found or ours:
        return []
    if not plan.force:
        raise LoadError(f"chain {where['chain']} already exists in table {where['table']} "
                        f"({', '.join(found)}) and pfc did not load it",
                        hint="--force replaces its rules with the policy's, or use "
                             "--table NAME for another chain")
    return [f"replaced the rules of chain {where['chain']} ({', '.join(found)}), which "
            "pfc had not loaded (--force)"]


def ipt_attach(plan: Plan, previous: state.Record | None) -> tuple[dict, list[str]]:
    flavour = system_flavour()
    where = _where(plan, flavour)
    messages = _check_conflicts(plan, where, previous)
    files, meta = plan.artifact.files, plan.artifact.meta
    texts = {f: files[meta["files"][FILES[f][1]]].decode() for f in TOOLS}
    saved = _save_sets(meta["sets"])
    if meta["files"]["ipset"]:
        try:
            _call(["ipset", "restore"], files[meta["files"]["ipset"]].decode())
        except _Failed as exc:
            _restore_sets(saved)
            raise LoadError(f"ipset restore failed: {exc}; nothing was changed",
                            hint="a set that grew past its maxelem needs `ipset destroy "
                                 "NAME` first (docs/iptables.md)") from None
    fresh = [f for f in TOOLS if not _has_table(f, where)]
    _apply_families(plan, where, texts, saved)
    if previous is not None:
        messages += _retire(previous, where, meta["sets"])
    made = sorted(set(fresh) | set(previous.attach.get("created_tables", []) if previous
                                   else []))
    info = where | {"sets": list(meta["sets"]), "lines": meta["lines"],
                    "created_tables": made}
    return info, messages


def _has_table(family: int, where: dict) -> bool:
    """iptables-nft keeps each table as an nftables table (``ip raw``, ``ip6 raw``),
    created by the first rule; legacy tables always exist (kernel modules)."""
    if where["flavour"] != "nft":
        return True
    return _nft(f"list table {_NFT_FAMILY[family]} {where['table']}")


def _nft(command: str) -> bool:
    import nftables

    nft = nftables.Nftables()
    rc, _, _ = nft.cmd(command)
    return rc == 0


def _drop_table(family: int, where: dict) -> str | None:
    """Delete an iptables-nft table pfc's first load created, if nothing but empty
    built-in chains with policy ACCEPT is left in it."""
    text = _call([_tool(family, where["flavour"], "save"), "-t", where["table"]])
    chains = re.findall(r"^:(\S+) (\S+)", text, re.MULTILINE)
    if any(line.startswith("-A ") for line in text.splitlines()) or \
            any(policy != "ACCEPT" for _, policy in chains):
        return None
    if _nft(f"delete table {_NFT_FAMILY[family]} {where['table']}"):
        return f"deleted the empty {NAMES[family]} table {where['table']} pfc's load created"
    return None


def _apply_families(plan: Plan, where: dict, texts: dict[int, str], saved: dict) -> None:
    """Init (when the jump is missing) and main file per family; on a failure every
    family gets back what it had, counters included (:func:`_snapshot`)."""
    files, meta = plan.artifact.files, plan.artifact.meta
    before = {f: _snapshot(f, where) for f in TOOLS}
    for family in TOOLS:
        try:
            if not _has_jump(family, where):
                _restore(family, where["flavour"], files[meta["files"][FILES[family][0]]]
                         .decode())
            _restore(family, where["flavour"], texts[family])
        except _Failed as exc:
            for fam in [f for f in TOOLS if f <= family]:
                _undo_family(fam, where, before[fam])
            _restore_sets(saved)
            raise LoadError(f"{_tool(family, where['flavour'], 'restore')} refused the "
                            f"{NAMES[family]} rules: {exc}; the previous state was restored",
                            hint="check the rules with `pfc compile --target iptables`") \
                from None


def _snapshot(family: int, where: dict) -> tuple[list[str], bool] | None:
    """pfc's chain as it is now, with counters (``iptables-save -c``), and whether the
    jump is there; None if there is no chain."""
    if not _has_chain(family, where):
        return None
    text = _call([_tool(family, where["flavour"], "save"), "-c", "-t", where["table"]])
    rules = [ln for ln in text.splitlines() if (m := _COUNTER.match(ln))
             and m.group(3) == where["chain"]]
    return rules, _has_jump(family, where)


def _undo_family(family: int, where: dict, before: tuple[list[str], bool] | None) -> None:
    """Put back the chain's rules and counters as :func:`_snapshot` saw them (one
    ``restore --counters``), or remove the chain this load created."""
    with contextlib.suppress(_Failed):
        if before is None:
            _remove_family(family, where)
            return
        rules, had_jump = before
        lines = [f"*{where['table']}", f":{where['chain']} - [0:0]"]
        if not had_jump and _has_jump(family, where):
            lines.append(" ".join(["-D", where["base"], *_jump(where)]))
        lines += rules + ["COMMIT", ""]
        _call([_tool(family, where["flavour"], "restore"), "--noflush", "--counters"],
              "\n".join(lines))


def _retire(previous: state.Record, where: dict, sets: list[str]) -> list[str]:
    """After a successful replace: what the previous load had and this one has not
    (another chain when --table changed, sets no longer used)."""
    old = previous.attach
    out = []
    if (old.get("table"), old.get("chain")) != (where["table"], where["chain"]):
        for family in TOOLS:
            with contextlib.suppress(_Failed):
                _remove_family(family, old)
        out.append(f"removed pfc's previous chain {old['chain']} (table {old['table']})")
    return out + _destroy_sets([s for s in old.get("sets", []) if s not in sets])


# ---------------------------------------------------------------------------- detach

def _remove_family(family: int, where: dict) -> bool:
    """Delete the jump, flush and delete pfc's chain(s), in one restore. False if there
    was nothing of pfc's in this family."""
    chains = [where["chain"]] + ([where["chain"] + "-notrack"] if where.get("notrack")
                                 else [])
    present = [c for c in chains if _has_chain(family, where | {"chain": c})]
    if not present:
        return False
    lines = [f"*{where['table']}"]
    if _has_jump(family, where):
        lines.append(" ".join(["-D", where["base"], *_jump(where)]))
    lines += [f"-F {c}" for c in present] + [f"-X {c}" for c in present] + ["COMMIT", ""]
    _restore(family, where["flavour"], "\n".join(lines))
    return True


def ipt_detach(record: state.Record) -> list[str]:
    where, out = record.attach, []
    for family in TOOLS:
        try:
            if _remove_family(family, where):
                out.append(f"removed chain {where['chain']} and its jump from "
                           f"{where['table']} {where['base']} ({NAMES[family]})")
        except _Failed as exc:
            out.append(f"could not remove chain {where['chain']} ({NAMES[family]}): {exc}")
        if family in where.get("created_tables", []):
            with contextlib.suppress(_Failed):
                out += [m for m in [_drop_table(family, where)] if m]
    return out + _destroy_sets(where.get("sets", []))


# --------------------------------------------------------------------------- inspect

def _chain_counters(family: int, where: dict) -> list[tuple[int, int]]:
    text = _call([_tool(family, where["flavour"], "save"), "-c", "-t", where["table"]])
    return [(int(m.group(1)), int(m.group(2))) for m in map(_COUNTER.match, text.splitlines())
            if m and m.group(3) == where["chain"]]


def counters(record: state.Record) -> tuple[dict[int, tuple[int, int]] | None, list[str]]:
    """(packets, bytes) per rule index summed over both families, and what is off."""
    where, totals, problems = record.attach, {}, []
    for family in TOOLS:
        owners = where["lines"][NAMES[family]]
        try:
            found = _chain_counters(family, where)
        except _Failed as exc:
            return None, [str(exc)]
        if len(found) != len(owners):
            problems.append(f"{NAMES[family]} chain {where['chain']} has {len(found)} rules, "
                            f"pfc loaded {len(owners)}")
            continue
        for owner, (p, b) in zip(owners, found, strict=True):
            if owner is not None:
                op, ob = totals.get(owner, (0, 0))
                totals[owner] = (op + p, ob + b)
    return totals, problems


def ipt_inspect(record: state.Record) -> Inspection:
    where = record.attach
    missing = [NAMES[f] for f in TOOLS if not _has_chain(f, where)]
    if missing:
        return Inspection("vanished", f"chain {where['chain']} is gone ({', '.join(missing)})",
                          None)
    unjumped = [NAMES[f] for f in TOOLS if not _has_jump(f, where)]
    totals, problems = counters(record)
    if unjumped:
        return Inspection("vanished", f"the jump from {where['table']} {where['base']} to "
                          f"{where['chain']} is gone ({', '.join(unjumped)})", totals)
    if problems:
        return Inspection("changed", "; ".join(problems), totals)
    return Inspection("ok", f"chain {where['chain']} in {where['table']} {where['base']} "
                      f"(iptables-{where['flavour']})", totals)


LOADER = Loader(ipt_attach, ipt_detach, ipt_inspect)
