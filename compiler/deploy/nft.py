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
``pfc rule INDEX``, and the default rule ``pfc default``, so ``status`` shows every
rule's packets and bytes, summed over the nft rules a policy rule became (families,
redirect variants). They start at zero on every load (new rules, new counters).

Journal: before the transaction, the intent names the table's handle and its rules'
handles. One transaction is all or nothing, so an unfinished load finds the kernel
holding the old table (same handle, the same rule handles) or the new one (new rule
handles, or a new table handle): the next command commits or drops the record.
"""

from __future__ import annotations

import json
import re

from pfc.deploy import journal, state
from pfc.deploy.base import Inspection, Loader, LoadError, Plan, Recovery, device_index
from pfc.kernel import nftlib

_RULE_TAG = re.compile(r"^pfc (?:rule (\d+)|(default))$")
CHANGED = "changed outside pfc: "


def _nft():
    try:
        nftables = nftlib.load()
    except nftlib.NftablesMissing as exc:
        raise LoadError(str(exc), hint=exc.hint) from None
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
    flush the base chain (it stays hooked) and the other chains, delete every other
    object (sets, maps, named counters; then the chains, which verdict-map elements
    jump to: a chain still referenced is EBUSY), add the new ones and the new rules.
    None when the base chain itself changes (hook, priority, device, policy): then
    only a table replace will do.

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
    for kind, objects in found.items():  # maps first: their elements jump to chains
        if kind not in ("table", "chain", "rule"):
            batch += [{"delete": {kind: ref | {"name": o["name"]}}} for o in objects]
    batch += [{"delete": {"chain": ref | {"name": n}}} for n in others]
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


def prepare(plan: Plan, previous: state.Record | None) \
        -> tuple[dict, dict | None, bool, list[str]]:
    """What a load of ``plan`` would run (one batch: the in-place replace of pfc's table,
    or the artifact's table commands), the table now, whether the batch replaces pfc's
    table in place, and notes.
    LoadError when the table is someone else's and not ``force``."""
    meta = plan.artifact.meta
    family, table = meta["family"], meta["table"]
    _owner(plan, family, table)
    now = list_table(family, table)
    ours = previous is not None and now is not None and \
        now["table"].get("handle") == previous.attach.get("handle") and \
        (previous.attach.get("family"), previous.attach.get("table")) == (family, table)
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
    if ours and batch is None:
        messages.append("note: the base chain changed (device, hook or priority): the "
                        "table was replaced whole, and a packet crossing the commit may "
                        "meet both policies (docs/load.md)")
    return batch or doc, now, batch is not None, messages


def nft_check(plan: Plan, previous: state.Record | None) -> list[str]:
    """``--dry-run``: the batch a load would run, checked by the kernel and thrown away
    (libnftables dry run, as ``nft -c``: the batch is sent without its commit)."""
    doc, now, in_place, messages = prepare(plan, previous)
    nft = _nft()
    nft.set_dry_run(True)
    rc, _, err = nft.json_cmd(doc)
    if rc != 0:
        raise LoadError(f"nftables would refuse the ruleset: {_first(err)}",
                        hint="check the ruleset with `pfc compile --target nft`")
    meta = plan.artifact.meta
    how = "replaced in place" if in_place else ("replaced" if now else "created")
    return [f"nftables accepted the batch (checked by the kernel, not committed, as "
            f"`nft -c`): table {meta['family']} {meta['table']} would be {how}"] + \
        [f"on load: {m}" for m in messages]


def nft_attach(plan: Plan, previous: state.Record | None,
               txn: journal.Txn) -> tuple[dict, list[str]]:
    meta = plan.artifact.meta
    family, table = meta["family"], meta["table"]
    batch, now, _, messages = prepare(plan, previous)
    new = {"family": family, "table": table, "chain": meta["chain"], "hook": meta["hook"],
           "counters": {str(k): v for k, v in meta["counters"].items()}}
    txn.begin(_identity(now, previous), new)
    rc, _, err = _run(batch)
    if rc != 0:
        raise LoadError(f"nftables refused the ruleset: {_first(err)}",
                        hint="check the ruleset with `pfc compile --target nft`")
    txn.step("swapped")
    if meta["hook"] != "ingress":
        messages.append(f"note: hook {meta['hook']} (family {family}) filters packets "
                        f"from every device, not only {plan.dev}")
    return _loaded(new, list_table(family, table)), messages


def _identity(now: dict | None, previous: state.Record | None) -> dict:
    """The kernel's table before the transaction (handle, rule handles) and the previous
    record's attach info (another table after a ``--table`` change: retired after)."""
    return {"handle": now["table"].get("handle") if now else None,
            "rules": sorted(r.get("handle", 0) for r in now["rule"]) if now else [],
            "previous": previous.attach if previous else None}


def _loaded(new: dict, found: dict | None) -> dict:
    return new | {"handle": found["table"].get("handle") if found else None,
                  "rules": len(found["rule"]) if found else None}


def nft_retire(old: dict | None, new: dict) -> list[str]:
    """After a replace into another table (``--table``/hook change): drop the old one."""
    previous = (old or {}).get("previous")
    if not previous or (previous.get("family"), previous.get("table")) == \
            (new["family"], new["table"]):
        return []
    return _drop(previous)


def nft_recover(intent: journal.Intent) -> Recovery:
    new, old = intent.new, intent.old or {}
    found = list_table(new["family"], new["table"])
    what = f"nftables table {new['family']} {new['table']}"
    if found is None:
        verdict = "old" if old.get("handle") is None else "other"
        return Recovery(verdict, f"{what} does not exist")
    handles = sorted(r.get("handle", 0) for r in found["rule"])
    if found["table"].get("handle") == old.get("handle") and handles == old.get("rules"):
        return Recovery("old", f"{what} holds the previous rules (the same rule handles)")
    return Recovery("new", f"{what} holds the new rules", attach=_loaded(new, found))


def _first(err: str) -> str:
    lines = [ln.strip() for ln in err.splitlines() if ln.strip()]
    return lines[0] if lines else "(no message)"


def _drop(a: dict, force: bool = False) -> list[str]:
    """Delete the table attach info ``a`` names, if it is still the one pfc loaded."""
    now = list_table(a["family"], a["table"])
    if now is None:
        return [f"nftables table {a['family']} {a['table']} was already gone"]
    if now["table"].get("handle") != a.get("handle") and not force:
        return [f"nftables table {a['family']} {a['table']} is no longer the one pfc "
                "loaded (recreated outside pfc); left it as it is (--force deletes it)"]
    rc, _, err = _cmd(f"delete table {a['family']} {a['table']}")
    if rc != 0:
        return [f"could not delete nftables table {a['family']} {a['table']}: {_first(err)}"]
    return [f"deleted nftables table {a['family']} {a['table']}"]


def nft_detach(record: state.Record, force: bool = False) -> list[str]:
    return _drop(record.attach, force)


def counters(record: state.Record, found: dict) -> dict[int | str, tuple[int, int]]:
    """Per rule index: named counters of count rules, anonymous counters of the rules
    tagged ``pfc rule INDEX`` (summed); the default rule's as "default"."""
    names = {v: int(k) for k, v in record.attach.get("counters", {}).items()}
    totals: dict[int | str, tuple[int, int]] = {}

    def add(index: int | str, packets: int, nbytes: int) -> None:
        p, b = totals.get(index, (0, 0))
        totals[index] = (p + packets, b + nbytes)

    for c in found.get("counter", []):
        if c.get("name") in names:
            add(names[c["name"]], c.get("packets", 0), c.get("bytes", 0))
    for rule in found["rule"]:
        tag = _RULE_TAG.match(str(rule.get("comment", "")))
        if not tag:
            continue
        key = int(tag.group(1)) if tag.group(1) else "default"
        for expr in rule.get("expr", []):
            if isinstance(expr.get("counter"), dict) and "packets" in expr["counter"]:
                add(key, expr["counter"]["packets"], expr["counter"]["bytes"])
    return totals


def nft_inspect(record: state.Record) -> Inspection:
    a = record.attach
    found = list_table(a["family"], a["table"])
    what = f"nftables table {a['family']} {a['table']}"
    if found is None:
        return Inspection("vanished", f"{CHANGED}{what} was deleted", None)
    totals = counters(record, found)
    if found["table"].get("handle") != a.get("handle"):
        return Inspection("changed", f"{CHANGED}{what} was deleted and created again",
                          totals)
    if a.get("rules") is not None and len(found["rule"]) != a["rules"]:
        return Inspection("changed", f"{CHANGED}{what} has {len(found['rule'])} rules, "
                          f"pfc loaded {a['rules']}", totals)
    if device_index(record.dev) is None:
        effect = ("its ingress chain is hooked to nothing" if a.get("hook") == "ingress"
                  else "it still filters every device")
        return Inspection("vanished", f"device {record.dev} no longer exists; {what} "
                          f"remains ({effect}); unload removes it", totals)
    return Inspection("ok", f"{what}, chain {a['chain']}", totals)


def nft_discover(dev: str) -> dict | None:
    """pfc's table under its default name: ``pfc`` with pfc's rule comments."""
    for family, hook in (("netdev", "ingress"), ("inet", None)):
        found = list_table(family, "pfc")
        if found and any(_RULE_TAG.match(str(r.get("comment", ""))) for r in found["rule"]):
            return {"family": family, "table": "pfc", "chain": None, "hook": hook,
                    "handle": found["table"].get("handle"), "rules": None, "counters": {}}
    return None


LOADER = Loader(nft_attach, nft_detach, nft_inspect, nft_recover, nft_retire, nft_discover)
