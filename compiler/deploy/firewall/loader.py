"""A whole firewall (v2) as one place of pfc's: its parts (iptables, nft, eBPF
programs) loaded all or none, as one transaction (:mod:`pfc.deploy.journal`).

The record lives at ``NETNS/:firewall/firewall.json`` (``:`` is never in a Linux
device name: no device's records can meet it); its ``attach`` holds each part's
attach info under ``parts`` (``iptables``, ``nft``, ``xdp:eth0``, ``tc:eth1``) in the
order they commit: the iptables switch, the nft transaction, then each eBPF program.
Everything that can be checked is checked before the first change (the verifier
loads each object, nft and iptables' conflicts, the generation's names); a part that
fails puts back the parts before it (eBPF: the previous program, held open; nft: the
previous tables, kept in the journal when an eBPF part follows; iptables: the switch
chains back to the previous generation, which stays until the whole load committed).

A command that finds the intent of a killed load asks each part what the kernel
holds (:func:`fw_recover`): every part new → the load is finished (iptables chains
caught between the two families are switched forward first); otherwise the parts
that changed are put back and the load is rolled back. The one state it cannot
settle: a kill between two eBPF parts' swaps (the replaced program is freed with the
process that held it); it says so ("other") and ``pfc load`` again repairs it.

This module is the dispatcher's loader for target ``firewall``
(:func:`pfc.deploy.load.loader`); the load itself is :mod:`pfc.deploy.firewall.commit`.
"""

from __future__ import annotations

import contextlib

from pfc.deploy import journal, state
from pfc.deploy.base import Inspection, Loader, LoadError, Plan, Recovery
from pfc.deploy.firewall import ebpf, ipt, nft

DEV, TARGET = ":firewall", "firewall"
RANK = {"ok": 0, "vanished": 1, "changed": 2}


def _part(artifacts: list, target: str):
    return next((a for a in artifacts if a.target == target and a.hook == "ruleset"), None)


def _prev(previous: state.Record | None, key: str) -> dict | None:
    return ((previous.attach if previous else {}).get("parts") or {}).get(key)


def fw_attach(plan: Plan, previous: state.Record | None,
              txn: journal.Txn) -> tuple[dict, list[str]]:
    artifacts, force = plan.options["artifacts"], plan.force
    i_art, n_art = _part(artifacts, "iptables"), _part(artifacts, "nft")
    messages: list[str] = []
    old: dict = {"parts": {}, "previous": previous.attach if previous else None}
    new: dict = {"parts": {}, "begun": [], "targets": plan.options["targets"],
                 "hooks": plan.options.get("hooks", [])}
    if i_art is not None:
        a, i_old, texts, notes = ipt.prepare(i_art, _prev(previous, "iptables"), force)
        old["parts"]["iptables"], new["parts"]["iptables"] = i_old, a
        messages += notes
    bparts = ebpf.parts(artifacts, plan.netns, plan.options, previous.attach
                        if previous else None, force, plan.mode)
    for p in bparts:
        ebpf.verify(p)
    if n_art is not None:
        doc, n_new, n_old, notes = nft.prepare(n_art, plan.netns, _prev(previous, "nft"),
                                               force, keep_old=bool(bparts))
        old["parts"]["nft"], new["parts"]["nft"] = n_old, n_new
        messages += notes
    new["order"] = list(new["parts"]) + [p.key for p in bparts]
    new["blocks"] = {p.key: p.block for p in bparts}
    txn.begin(old, new)
    done: list[ebpf.Part] = []
    try:
        if i_art is not None:
            ipt.build(new["parts"]["iptables"], texts, txn.step)
            ipt.commit(new["parts"]["iptables"])
            txn.step("fw-switched")
        if n_art is not None:
            nft.commit(doc)
            txn.step("fw-nft")
        for p in bparts:
            messages += ebpf.attach(p, txn)
            done.append(p)
    except LoadError:
        for p in reversed(done):
            with contextlib.suppress(Exception):
                ebpf.undo(p)
        raise
    finally:
        ebpf.release(bparts)
    info = dict(new, parts=dict(new["parts"]))
    if n_art is not None:
        info["parts"]["nft"] = nft.loaded(new["parts"]["nft"])
    for p in bparts:
        info["parts"][p.key] = p.attach | {"block": p.block}
    return info, messages


# ------------------------------------------------------------------------- recover

def _verdicts(intent: journal.Intent) -> dict[str, tuple[str, str, dict | None]]:
    new, old = intent.new, intent.old or {"parts": {}}
    out: dict[str, tuple[str, str, dict | None]] = {}
    for key in new.get("order", list(new["parts"])):
        if key == "iptables":
            v, d = ipt.verdict(old["parts"]["iptables"], new["parts"]["iptables"])
            out[key] = (v, d, new["parts"]["iptables"])
        elif key == "nft":
            v, d = nft.verdict(old["parts"]["nft"], new["parts"]["nft"])
            out[key] = (v, d, nft.loaded(new["parts"]["nft"]) if v == "new" else None)
        else:
            r = ebpf.verdict(intent, key)
            out[key] = (r.verdict, r.detail, r.attach)
    return out


def fw_recover(intent: journal.Intent) -> Recovery:
    seen = _verdicts(intent)
    detail = "; ".join(d for _, d, _ in seen.values())
    rest_new = all(v == "new" for k, (v, _, _) in seen.items() if k != "iptables")
    if rest_new and seen.get("iptables", ("new",))[0] == "mixed":
        try:
            detail += "; " + ipt.finish(intent.new["parts"]["iptables"])
            seen["iptables"] = ("new", "", intent.new["parts"]["iptables"])
        except LoadError as exc:  # then switched back, below
            detail += f"; switching the lagging chains failed ({exc.cause})"
    if all(v == "new" for v, _, _ in seen.values()):
        parts = {k: a | ({"block": intent.new["blocks"][k]} if k in intent.new.get(
            "blocks", {}) else {}) for k, (_, _, a) in seen.items()}
        return Recovery("new", detail, attach=dict(intent.new, parts=parts))
    try:
        removed = _roll_back(intent, seen)
    except _Stuck as exc:
        return Recovery("other", f"{detail}; {exc}")
    changed = [k for k, (v, _, _) in seen.items() if v != "old"]
    held = "; ".join(d for v, d, _ in seen.values() if v == "old")
    return Recovery("old", (held + "; " if held else "") + (
        f"put back: {', '.join(changed)}" if changed else "no part had changed"),
        removed=removed)


class _Stuck(Exception):
    """A part that changed and cannot be put back."""


def _roll_back(intent: journal.Intent, seen: dict) -> list[str]:
    new, old = intent.new, intent.old or {"parts": {}}
    out: list[str] = []
    for key in reversed(list(seen)):
        verdict = seen[key][0]
        if key == "iptables":
            a = new["parts"][key]
            out += ipt.rollback(old["parts"][key], a) if verdict in ("new", "mixed") \
                else ipt.drop_new(a)
        elif verdict == "old":
            continue
        elif key == "nft":
            if not old["parts"]["nft"].get("saved"):
                raise _Stuck("the nft part holds the new rules and pfc kept no copy of "
                             "the previous tables")
            out += nft.rollback(old["parts"]["nft"], new["parts"]["nft"])
        elif (old["parts"].get(key) or {}).get("prog_id") is None:
            out += ebpf.detach(intent.netns, key, new["parts"][key], False)
        else:
            raise _Stuck(f"{key} holds the new program and the previous one is gone "
                         "(freed when the load was killed): `pfc load` the firewall again")
    return out


# ----------------------------------------------------- retire, detach, inspect

def fw_retire(old: dict | None, new: dict) -> list[str]:
    prev = (old or {}).get("previous") or {}
    parts_old, out = (old or {}).get("parts", {}), []
    if "iptables" in new["parts"]:
        out += ipt.retire(dict(parts_old.get("iptables") or {}, previous=(
            prev.get("parts") or {}).get("iptables")), new["parts"]["iptables"])
    if "nft" in new["parts"]:
        out += nft.retire({"previous": (prev.get("parts") or {}).get("nft")},
                          new["parts"]["nft"])
    for key, a in (prev.get("parts") or {}).items():
        if key not in new["parts"]:
            out += _detach_part(key, a, False)
    return out


def _detach_part(key: str, a: dict, force: bool) -> list[str]:
    if key == "iptables":
        return ipt.detach(a)
    if key == "nft":
        return nft.detach(a, force)
    return ebpf.detach("?", key, a, force)


def fw_detach(record: state.Record, force: bool = False) -> list[str]:
    """Every part, the last loaded first: a clsact qdisc goes with the part that
    created it, once the filters of later parts (tc egress on its device) are gone."""
    out = []
    for key, a in reversed(list(record.attach.get("parts", {}).items())):
        out += _detach_part(key, a, force)
    return out


def inspect_parts(record: state.Record) -> dict[str, Inspection]:
    out = {}
    for key, a in record.attach.get("parts", {}).items():
        if key == "iptables":
            out[key] = ipt.inspect(a)
        elif key == "nft":
            out[key] = nft.inspect(a)
        else:
            found = ebpf.inspect(record.netns, key, a)
            counters = {(f"default {a.get('block', 'ingress')}" if k == "default" else k): v
                        for k, v in (found.counters or {}).items()}
            out[key] = Inspection(found.health, found.detail, counters)
    return out


def fw_inspect(record: state.Record) -> Inspection:
    parts = inspect_parts(record)
    health = max((i.health for i in parts.values()), key=RANK.get, default="ok")
    totals: dict = {}
    for found in parts.values():
        for k, (p, b) in (found.counters or {}).items():
            op, ob = totals.get(k, (0, 0))
            totals[k] = (op + p, ob + b)
    detail = "; ".join(f"{k}: {i.detail}" for k, i in parts.items() if i.health == health)
    return Inspection(health, detail, totals)


def fw_discover(dev: str) -> dict | None:
    return None


LOADER = Loader(fw_attach, fw_detach, fw_inspect, fw_recover, fw_retire, fw_discover)
