"""``pfc load --target nft``: pfc's own nftables table, replaced in one transaction.

The artifact's ruleset (``meta["json"]``, libnftables JSON) is ``add table`` /
``delete table`` / ``add table`` + its objects, chain and rules: handed to libnftables
in one ``json_cmd()`` it is one netlink batch, one transaction: on any error the kernel
keeps the old table untouched. A first load (or ``--force`` over a table pfc did not
load) applies it as it is. A replace of pfc's own table rewrites it first
(:func:`replace_batch`): the base chain stays, its rules and every other object are
replaced in the same transaction, so each packet is judged by the old policy or by
the new one, never by both. A table of that name that pfc did not load is refused
unless ``--force``; the table's handle is recorded, so ``status`` and ``unload``
notice a table that someone deleted or recreated under pfc, and unload deletes only
the table pfc loaded.

Counters: ``count`` rules have named counters (``meta["counters"]``: rule index →
name); every terminal rule carries an anonymous counter and the comment
``pfc rule INDEX``, so ``status`` shows every rule's packets and bytes, summed over the
nft rules a policy rule became (families, redirect variants). They start at zero on
every load (the table is new).
"""

from __future__ import annotations

import json
import re

from pfc.deploy import state
from pfc.deploy.base import Inspection, Loader, LoadError, Plan

_RULE_TAG = re.compile(r"^pfc rule (\d+)$")


def _nft():
    try:
        import nftables
    except ImportError:
        raise LoadError("python3-nftables is not available",
                        hint="apt install python3-nftables (see README: setup)") from None
    nft = nftables.Nftables()
    nft.set_json_output(True)
    nft.set_handle_output(True)
    return nft


def _cmd(command: str) -> tuple[int, str, str]:
    return _nft().cmd(command)


def list_table(family: str, table: str) -> dict | None:
    """``nft -j -a list table F T``: the table and lists of its objects by kind
    (chain, rule, set, map, counter, ...), or None if there is no such table."""
    rc, out, _ = _cmd(f"list table {family} {table}")
    if rc != 0:
        return None
    found: dict = {"table": None, "chain": [], "rule": []}
    for item in json.loads(out).get("nftables", []):
        for kind, value in item.items():
            if kind == "table":
                found["table"] = value
            elif kind != "metainfo":
                found.setdefault(kind, []).append(value)
    return found


def _run(doc: dict) -> tuple[int, str, str]:
    """One libnftables JSON batch: one transaction, all of it or none of it."""
    return _nft().json_cmd(doc)


def _base(chains: list[dict]) -> list[dict]:
    return [c for c in chains if c.get("hook")]


def _same_base(now: dict, new: dict) -> bool:
    """Same base chain spec. nft 1.0.6's JSON listing of a netdev chain has no ``dev``
    (measured): the device is the record's, which is the one being loaded."""
    keys = ("name", "type", "hook", "prio", "policy") + (("dev",) if "dev" in now else ())
    return all(now.get(k) == new.get(k) for k in keys)


def replace_batch(doc: dict, found: dict) -> dict | None:
    """The artifact's commands as an in-place replace of the table ``found`` lists:
    flush the base chain (it stays hooked), delete every other object (chains, sets,
    maps, named counters), add the new ones and the new rules. None when the base chain
    itself changes (hook, priority, device, policy): then only a table replace will do.

    Why: the artifact's ``delete table`` + ``add table`` swaps two base chains, each
    on its own hook entry, and ``nft_do_chain`` reads the generation cursor once per
    base chain: a packet that runs the old chain just before the commit flips the cursor
    and the new one just after is judged by both policies (measured under continuous
    traffic, Linux 6.18: in 3 of 144 swaps a frame only the old policy drops was
    dropped right after frames the new policy had judged). One base chain whose rules
    change in the transaction is read with one cursor value per packet: old policy or
    new, never both."""
    cmds = [c for c in doc["nftables"] if "add" in c and "table" not in c["add"]]
    new_base = _base([c["add"]["chain"] for c in cmds if "chain" in c["add"]])
    now_base = _base(found["chain"])
    if len(new_base) != 1 or len(now_base) != 1 or not _same_base(now_base[0], new_base[0]):
        return None
    ref = {"family": found["table"]["family"], "table": found["table"]["name"]}
    others = [c["name"] for c in found["chain"] if not c.get("hook")]
    batch = [{"flush": {"chain": ref | {"name": now_base[0]["name"]}}}]
    batch += [{"flush": {"chain": ref | {"name": n}}} for n in others]
    batch += [{"delete": {"chain": ref | {"name": n}}} for n in others]
    for kind, objects in found.items():
        if kind not in ("table", "chain", "rule"):
            batch += [{"delete": {kind: ref | {"name": o["name"]}}} for o in objects]
    batch += [c for c in cmds if not ("chain" in c["add"] and c["add"]["chain"].get("hook"))]
    return {"nftables": [{"metainfo": {"json_schema_version": 1}}] + batch}


def _owner(plan: Plan, family: str, table: str) -> None:
    """Refuse a table another pfc record (another device) already uses."""
    for other in state.records(plan.netns):
        a = other.attach
        if other.target == "nft" and other.dev != plan.dev and \
                (a.get("family"), a.get("table")) == (family, table):
            raise LoadError(f"table {family} {table} holds pfc's nft policy for "
                            f"{other.dev}; one table serves one device",
                            hint="use another --table NAME for this device")


def nft_attach(plan: Plan, previous: state.Record | None) -> tuple[dict, list[str]]:
    meta = plan.artifact.meta
    family, table = meta["family"], meta["table"]
    _owner(plan, family, table)
    now = list_table(family, table)
    ours = previous is not None and now is not None and \
        now["table"].get("handle") == previous.attach.get("handle") and \
        previous.attach.get("family") == family
    messages = []
    if now is not None and not ours:
        if not plan.force:
            raise LoadError(f"nftables table {family} {table} exists and pfc did not load "
                            "it", hint="--force replaces it (one transaction), or use "
                                       "--table NAME")
        messages.append(f"replaced nftables table {family} {table}, which pfc had not "
                        "loaded (--force)")
    doc = json.loads(meta["json"])
    batch = replace_batch(doc, now) if ours else None
    rc, _, err = _run(batch or doc)
    if rc != 0:
        raise LoadError(f"nftables refused the ruleset: {_first(err)}; nothing was changed",
                        hint="check the ruleset with `pfc compile --target nft`")
    if ours and batch is None:
        messages.append("note: the base chain changed (device, hook or priority): the "
                        "table was replaced whole, and a packet crossing the commit may "
                        "meet both policies (docs/load.md)")
    loaded = list_table(family, table)
    if previous is not None and (previous.attach.get("family"), previous.attach.get(
            "table")) != (family, table):
        messages += _drop(previous)
    if meta["hook"] != "ingress":
        messages.append(f"note: hook {meta['hook']} (family {family}) filters packets "
                        f"from every device, not only {plan.dev}")
    return {"family": family, "table": table, "chain": meta["chain"], "hook": meta["hook"],
            "handle": loaded["table"].get("handle") if loaded else None,
            "rules": len(loaded["rule"]) if loaded else None,
            "counters": {str(k): v for k, v in meta["counters"].items()}}, messages


def _first(err: str) -> str:
    lines = [ln.strip() for ln in err.splitlines() if ln.strip()]
    return lines[0] if lines else "(no message)"


def _drop(record: state.Record) -> list[str]:
    """Delete the table ``record`` names, if it is still the one pfc loaded."""
    a = record.attach
    now = list_table(a["family"], a["table"])
    if now is None:
        return [f"nftables table {a['family']} {a['table']} was already gone"]
    if now["table"].get("handle") != a.get("handle"):
        return [f"nftables table {a['family']} {a['table']} is no longer the one pfc "
                "loaded (someone recreated it); left it as it is"]
    rc, _, err = _cmd(f"delete table {a['family']} {a['table']}")
    if rc != 0:
        return [f"could not delete nftables table {a['family']} {a['table']}: {_first(err)}"]
    return [f"deleted nftables table {a['family']} {a['table']}"]


def nft_detach(record: state.Record) -> list[str]:
    return _drop(record)


def counters(record: state.Record, found: dict) -> dict[int, tuple[int, int]]:
    """Per rule index: named counters of count rules, anonymous counters of the rules
    tagged ``pfc rule INDEX`` (summed)."""
    names = {v: int(k) for k, v in record.attach.get("counters", {}).items()}
    totals: dict[int, tuple[int, int]] = {}

    def add(index: int, packets: int, nbytes: int) -> None:
        p, b = totals.get(index, (0, 0))
        totals[index] = (p + packets, b + nbytes)

    for c in found.get("counter", []):
        if c.get("name") in names:
            add(names[c["name"]], c.get("packets", 0), c.get("bytes", 0))
    for rule in found["rule"]:
        tag = _RULE_TAG.match(rule.get("comment", ""))
        if not tag:
            continue
        for expr in rule.get("expr", []):
            if isinstance(expr.get("counter"), dict) and "packets" in expr["counter"]:
                add(int(tag.group(1)), expr["counter"]["packets"], expr["counter"]["bytes"])
    return totals


def nft_inspect(record: state.Record) -> Inspection:
    a = record.attach
    found = list_table(a["family"], a["table"])
    if found is None:
        return Inspection("vanished", f"nftables table {a['family']} {a['table']} is gone",
                          None)
    totals = counters(record, found)
    if found["table"].get("handle") != a.get("handle"):
        return Inspection("changed", f"table {a['family']} {a['table']} was deleted and "
                          "recreated under pfc", totals)
    if a.get("rules") is not None and len(found["rule"]) != a["rules"]:
        return Inspection("changed", f"table {a['family']} {a['table']} has "
                          f"{len(found['rule'])} rules, pfc loaded {a['rules']}", totals)
    return Inspection("ok", f"nftables table {a['family']} {a['table']}, chain {a['chain']}",
                      totals)


LOADER = Loader(nft_attach, nft_detach, nft_inspect)
