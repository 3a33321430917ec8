"""The nft part of a whole firewall: pfc's ``inet`` and ``netdev`` tables, every hook
in one libnftables transaction.

The artifact (``backends/nft/ruleset.py``) deletes and recreates both tables. A load
over pfc's own tables sends it as an in-place replace instead (:func:`batch`): each
base chain whose hook, priority and type stay is flushed, not deleted (it stays
hooked: a packet is judged by its old rules or its new ones, never by both, as for a
v1 load: docs/load.md), every other object is deleted and the new ones are added, all
in one transaction. A table of that name pfc did not load is refused unless
``--force``; so is one a v1 ``pfc load`` uses.

The journal names both tables' handles and rule handles (one transaction: the kernel
holds the old ones or the new ones) and, when a later part of the firewall could still
fail (an eBPF program attached after it), the old tables as libnftables JSON, to put
them back (:func:`rollback`).
"""

from __future__ import annotations

import json
import re

from pfc.deploy import state
from pfc.deploy.base import Inspection, LoadError
from pfc.deploy.nft import CHANGED, _first, _nft, _run, _same_base, list_table

FAMILIES = ("inet", "netdev")
_TAG = re.compile(r"^pfc (?:rule (\d+)|(default))$")


def _found(table: str) -> dict[str, dict | None]:
    return {f: list_table(f, table) for f in FAMILIES}


def _handles(found: dict | None) -> dict | None:
    if found is None:
        return None
    return {"handle": found["table"].get("handle"),
            "rules": sorted(r.get("handle", 0) for r in found["rule"])}


def _owner(netns: str, table: str) -> None:
    for other in state.records(netns):
        a = other.attach
        if other.target == "nft" and a.get("table") == table and a.get("family") in FAMILIES:
            raise LoadError(f"table {a['family']} {table} holds pfc's nft policy for "
                            f"{other.dev} (a rule list loaded with --dev)",
                            hint=f"unload it (`pfc unload --target nft --dev {other.dev}`) "
                                 "or load the firewall with another --table NAME")


def prepare(artifact, netns: str, prev: dict | None, force: bool, keep_old: bool
            ) -> tuple[dict, dict, dict, list[str]]:
    """The batch a load runs, the attach info, the journal's ``old`` (with the old
    tables as JSON when ``keep_old``), and notes."""
    meta = artifact.meta
    table = meta["table"]
    _owner(netns, table)
    now = _found(table)
    handles = (prev or {}).get("handles", {})
    ours = {f: now[f] is not None and (prev or {}).get("table") == table and
            handles.get(f, {}) and now[f]["table"].get("handle") == handles[f].get("handle")
            for f in FAMILIES}
    messages = []
    foreign = [f for f in FAMILIES if now[f] is not None and not ours[f]]
    if foreign and not force:
        raise LoadError(f"nftables table {foreign[0]} {table} exists and pfc did not load "
                        "it", hint="--force replaces it (one transaction), or use --table "
                                   "NAME")
    messages += [f"replaced nftables table {f} {table}, which pfc had not loaded (--force)"
                 for f in foreign]
    doc = json.loads(meta["json"])
    new = {"table": table, "families": list(meta["tables"]), "chains": meta["chains"],
           "counters": {str(k): v for k, v in meta["counters"].items()}}
    old = {"handles": {f: _handles(now[f]) for f in FAMILIES},
           "saved": {f: _saved(now[f]) for f in FAMILIES} if keep_old else None}
    return batch(doc, now, ours, table), new, old, messages


def _saved(found: dict | None) -> list[dict] | None:
    """A table as libnftables ``add`` commands (its listing without handles)."""
    if found is None:
        return None

    def strip(o):
        if isinstance(o, dict):
            return {k: strip(v) for k, v in o.items() if k != "handle"}
        return [strip(x) for x in o] if isinstance(o, list) else o

    items = [{"table": found["table"]}]
    for kind, objects in found.items():
        if kind not in ("table", "chain", "rule"):
            items += [{kind: o} for o in objects]
    items += [{"chain": c} for c in found["chain"]] + [{"rule": r} for r in found["rule"]]
    return [{"add": strip(i)} for i in items]


def batch(doc: dict, now: dict, ours: dict, table: str) -> dict:
    """The artifact's commands, with pfc's own tables replaced in place (above)."""
    cmds = [c for c in doc["nftables"] if "add" in c and "table" not in c["add"]]
    out: list[dict] = []
    for family in FAMILIES:
        adds = [c for c in cmds if next(iter(c["add"].values())).get("family") == family]
        ref = {"family": family, "name": table}
        if now[family] is None:
            out += [{"add": {"table": ref}}] + adds if adds else []
        elif not adds or not ours[family]:
            out += [{"delete": {"table": ref}}]
            out += [{"add": {"table": ref}}] + adds if adds else []
        else:
            out += _in_place(now[family], adds, family, table)
    return {"nftables": [{"metainfo": {"json_schema_version": 1}}] + out}


def _in_place(found: dict, adds: list[dict], family: str, table: str) -> list[dict]:
    ref = {"family": family, "table": table}
    new_base = {c["add"]["chain"]["name"]: c["add"]["chain"] for c in adds
                if "chain" in c["add"] and c["add"]["chain"].get("hook")}
    kept = {c["name"] for c in found["chain"] if c.get("hook") and c["name"] in new_base
            and _same_base(c, new_base[c["name"]])}
    out = [{"flush": {"chain": ref | {"name": c["name"]}}} for c in found["chain"]]
    for kind, objects in found.items():  # maps first: their elements jump to chains
        if kind not in ("table", "chain", "rule"):
            out += [{"delete": {kind: ref | {"name": o["name"]}}} for o in objects]
    out += [{"delete": {"chain": ref | {"name": c["name"]}}} for c in found["chain"]
            if c["name"] not in kept]
    return out + [c for c in adds if not ("chain" in c["add"] and
                                          c["add"]["chain"]["name"] in kept)]


def commit(doc: dict) -> None:
    rc, _, err = _run(doc)
    if rc != 0:
        raise LoadError(f"nftables refused the ruleset: {_first(err)}",
                        hint="check the ruleset with `pfc compile --target nft`")


def check(doc: dict) -> None:
    """``--dry-run``: the batch checked by the kernel, not committed (``nft -c``)."""
    nft = _nft()
    nft.set_dry_run(True)
    rc, _, err = nft.json_cmd(doc)
    if rc != 0:
        raise LoadError(f"nftables would refuse the ruleset: {_first(err)}",
                        hint="check the ruleset with `pfc compile --target nft`")


def loaded(new: dict) -> dict:
    """The attach info once committed: each table's handle and rule count."""
    now = _found(new["table"])
    return new | {"handles": {f: _handles(now[f]) for f in FAMILIES if now[f]},
                  "rules": {f: len(now[f]["rule"]) for f in FAMILIES if now[f]}}


def verdict(old: dict, new: dict) -> tuple[str, str]:
    """"old" or "new" (one transaction: nothing else), and what was seen."""
    now = {f: _handles(t) for f, t in _found(new["table"]).items()}
    what = f"nftables tables inet/netdev {new['table']}"
    if now == old["handles"]:
        return "old", f"{what} hold the previous rules (the same handles)"
    return "new", f"{what} hold the new rules"


def rollback(old: dict, new: dict) -> list[str]:
    """Put the old tables back in one transaction, from the journal's copy of them: a
    table that was there keeps its handle (its objects are replaced in it), one that
    was not is deleted."""
    table, now = new["table"], _found(new["table"])
    saved = old.get("saved") or {}
    cmds: list[dict] = []
    for f in FAMILIES:
        ref = {"family": f, "name": table}
        if not saved.get(f):
            cmds += [{"delete": {"table": ref}}] if now[f] else []
        elif now[f] is None:
            cmds += saved[f]
        else:
            cmds += _emptied(now[f], f, table) + saved[f][1:]  # (its first: the table)
    rc, _, err = _run({"nftables": [{"metainfo": {"json_schema_version": 1}}] + cmds})
    if rc != 0:
        raise LoadError(f"nftables refused to put the previous tables back: {_first(err)}")
    return [f"put the previous nftables tables {table} back"]


def _emptied(found: dict, family: str, table: str) -> list[dict]:
    """Commands emptying a table: its chains flushed, its objects and chains deleted."""
    ref = {"family": family, "table": table}
    out = [{"flush": {"chain": ref | {"name": c["name"]}}} for c in found["chain"]]
    for kind, objects in found.items():
        if kind not in ("table", "chain", "rule"):
            out += [{"delete": {kind: ref | {"name": o["name"]}}} for o in objects]
    return out + [{"delete": {"chain": ref | {"name": c["name"]}}} for c in found["chain"]]


def retire(old: dict | None, new: dict) -> list[str]:
    """A previous firewall in tables of another name (``--table`` changed): dropped."""
    prev = (old or {}).get("previous") or {}
    if not prev or prev.get("table") == new["table"]:
        return []
    return detach(prev)


def detach(a: dict, force: bool = False) -> list[str]:
    out = []
    for family, handles in a.get("handles", {}).items():
        now = list_table(family, a["table"])
        what = f"nftables table {family} {a['table']}"
        if now is None:
            out.append(f"{what} was already gone")
        elif now["table"].get("handle") != handles["handle"] and not force:
            out.append(f"{what} is no longer the one pfc loaded (recreated outside pfc); "
                       "left it as it is (--force deletes it)")
        else:
            rc, _, err = _run({"nftables": [{"delete": {"table": {"family": family,
                                                                   "name": a["table"]}}}]})
            out.append(f"deleted {what}" if rc == 0 else f"could not delete {what}: "
                       f"{_first(err)}")
    return out


def counters(a: dict, found: dict[str, dict | None]) -> dict:
    """Per rule index: named counters of count rules and the counters of rules tagged
    ``pfc rule N`` (summed over families and chains); ``default BLOCK`` per chain."""
    names = {v: int(k) for k, v in a.get("counters", {}).items()}
    blocks = {name: spec[1] for name, spec in a.get("chains", {}).items()}
    totals: dict = {}

    def add(key, packets: int, nbytes: int) -> None:
        p, b = totals.get(key, (0, 0))
        totals[key] = (p + packets, b + nbytes)

    for table in (t for t in found.values() if t):
        for c in table.get("counter", []):
            if c.get("name") in names:
                add(names[c["name"]], c.get("packets", 0), c.get("bytes", 0))
        for rule in table["rule"]:
            tag = _TAG.match(str(rule.get("comment", "")))
            if not tag:
                continue
            key = int(tag.group(1)) if tag.group(1) else \
                f"default {blocks.get(rule.get('chain'), rule.get('chain'))}"
            for expr in rule.get("expr", []):
                if isinstance(expr.get("counter"), dict) and "packets" in expr["counter"]:
                    add(key, expr["counter"]["packets"], expr["counter"]["bytes"])
    return totals


def inspect(a: dict) -> Inspection:
    found = {f: list_table(f, a["table"]) for f in a.get("handles", {})}
    totals = counters(a, found)
    for family, handles in a.get("handles", {}).items():
        what = f"nftables table {family} {a['table']}"
        now = found[family]
        if now is None:
            return Inspection("vanished", f"{CHANGED}{what} was deleted", totals)
        if now["table"].get("handle") != handles["handle"]:
            return Inspection("changed", f"{CHANGED}{what} was deleted and created again",
                              totals)
        if len(now["rule"]) != a["rules"][family]:
            return Inspection("changed", f"{CHANGED}{what} has {len(now['rule'])} rules, "
                              f"pfc loaded {a['rules'][family]}", totals)
    chains = ", ".join(a.get("chains", {}))
    return Inspection("ok", f"nftables tables {'/'.join(a.get('handles', {}))} "
                      f"{a['table']}: chains {chains}", totals)
