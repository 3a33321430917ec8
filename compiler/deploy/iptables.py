"""``pfc load --target iptables``: IPv4 and IPv6 rules (and ipsets) from one policy,
switched together, never a mix.

Layout (:mod:`pfc.deploy.ipt_text`): base chain → switch chain ``PFC`` (one rule,
``-g PFC.N``) → generation chain ``PFC.N`` with the rules, sets ``NAME.gN``. A load:

1. the journal entry: old generation per family, the new one, its chains and sets;
2. ``ipset restore`` creates the new generation's sets (fresh names: pfc never takes
   over a set it did not create, whatever its type);
3. per family, one ``iptables-restore --noflush`` creates ``PFC.N`` with the rules
   (nothing jumps there yet: traffic still meets the old rules);
4. the switch: both families' switch chains rewritten to ``-g PFC.N`` (and the jump
   from the base chain inserted first, on a first load) by one child process, in its
   own session, that inherits the state lock: a SIGKILL or Ctrl-C of pfc cannot stop
   it between the two families, and the next pfc command waits for it (the lock);
5. the record; then the old generation's chains and sets are removed.

A failure or a kill before 4 leaves the old policy in force and the next command (or
the failing load itself) removes what was built; after 4 the next command finishes
the load. Counters: ``iptables-save -c`` of the generation chain, each line's counters
added to its rule (``meta["lines"]``); the default's line, or one pfc adds at the end
of the chain when the policy's default pass has none, counts the default. The tools
are the system's flavour (``iptables -V``: nf_tables or legacy).

Unload: per family the jump, the switch chain and pfc's generation chains (one
restore), then pfc's sets (``ipset destroy``), then an iptables-nft table pfc's first
load created if nothing else is left in it.
"""

from __future__ import annotations

import contextlib
import re
from collections import Counter

from pfc.deploy import ipt_text as tx
from pfc.deploy import journal, state
from pfc.deploy.base import (
    Inspection,
    Loader,
    LoadError,
    Plan,
    Recovery,
    device_index,
    scratch_netns,
)
from pfc.deploy.ipt_kernel import (
    CHANGED,
    FILES,
    HOOKS,
    NAMES,
    TOOLS,
    Failed,
    Family,
    call,
    destroy_sets,
    drop_base,
    drop_table,
    family_state,
    has_base,
    has_table,
    restore,
    restore_argv,
    sets_present,
    states,
    switch,
    system_flavour,
    tool,
)

# -------------------------------------------------------------------------- attach

def _where(plan: Plan, flavour: str) -> dict:
    meta = plan.artifact.meta
    return {"table": meta["table"], "base": meta["base"], "chain": meta["chain"],
            "dev": meta["dev"], "flavour": flavour, "notrack": meta["notrack"]}


def _check_conflicts(plan: Plan, where: dict, previous: state.Record | None,
                     now: dict[int, Family]) -> list[str]:
    for other in state.records(plan.netns):
        a = other.attach
        if other.target == "iptables" and other.dev != plan.dev and \
                (a.get("table"), a.get("chain")) == (where["table"], where["chain"]):
            raise LoadError(f"chain {where['chain']} (table {where['table']}) holds pfc's "
                            f"iptables policy for {other.dev}; one chain serves one device",
                            hint="use another --table NAME for this device")
    ours = previous is not None and (previous.attach.get("table"), previous.attach.get(
        "chain")) == (where["table"], where["chain"])
    found = [NAMES[f] for f in TOOLS if now[f].switch]
    if not found or ours:
        return []
    if not plan.force:
        raise LoadError(f"chain {where['chain']} already exists in table {where['table']} "
                        f"({', '.join(found)}) and pfc did not load it",
                        hint="--force replaces its rules with a jump to the policy's, or "
                             "use --table NAME for another chain")
    return [f"replaced the rules of chain {where['chain']} ({', '.join(found)}), which "
            "pfc had not loaded (--force)"]


def _next_gen(where: dict, previous: state.Record | None, now: dict[int, Family],
              sets: list[str]) -> int:
    """The generation after the previous one whose chains and sets are all unused."""
    start = (previous.attach.get("gen") or 0) if previous else 0
    taken_chains = set().union(*(f.chains for f in now.values()))
    taken_sets = sets_present()
    for step in range(1, tx.GENERATIONS):
        gen = (start + step - 1) % (tx.GENERATIONS - 1) + 1
        chain = tx.gen_chain(where["chain"], gen)
        if {chain, chain + tx.NOTRACK} & taken_chains or \
                any(tx.is_sub_chain(chain, c) for c in taken_chains) or \
                set(tx.gen_sets(sets, gen).values()) & taken_sets:
            continue
        return gen
    raise LoadError(f"every generation name of chain {where['chain']} is in use",
                    hint="remove stale chains PFC.* by hand")


def _family_text(plan: Plan, family: int, chains: dict[str, str], sets: dict[str, str]) \
        -> tuple[str, list, dict[str, list]]:
    """The restore text creating this generation's chain(s) for ``family``, the owner
    (rule index, None for the default) of each line of the main chain, and of each line
    of each tree chain (``PFC.N-tK``: a large policy, backends/iptables/ipt_tree.py)."""
    meta = plan.artifact.meta
    text = plan.artifact.files[meta["files"][FILES[family]]].decode()
    subs = meta.get("chains", {}).get(NAMES[family], {})
    chains = chains | {c: chains[meta["chain"]] + c[len(meta["chain"]):] for c in subs}
    lines = tx.rule_lines(text, meta["table"], set(chains))
    owners = list(meta["lines"][NAMES[family]])
    per_chain = Counter(tx.chain_of(ln) for ln in lines)
    for chain, own in [(meta["chain"], owners), *subs.items()]:
        if per_chain[chain] != len(own):
            raise LoadError(f"the artifact's {NAMES[family]} rules ({per_chain[chain]} lines of "
                            f"chain {chain}) do not match its line table ({len(own)})",
                            hint="a pfc bug: please report it with the policy")
    sub_owners = {chains[c]: tx.pack_owners(own) for c, own in subs.items()}
    if not any(o is None or o == "default" for o in
               owners + [o for own in subs.values() for o in own]):
        lines.append(f"-A {meta['chain']}")  # counts the default pass
        owners.append(None)
    lines = [tx.rewrite(ln, chains, sets) for ln in lines]
    return tx.chain_text(meta["table"], sorted(set(chains.values())), lines), owners, \
        sub_owners


def _prepare(plan: Plan, previous: state.Record | None, where: dict,
             now: dict[int, Family]) -> tuple[dict, dict[int, str], str]:
    """The next generation: its attach info (the record's), per family the restore
    text creating its chains, and the ipset text creating its sets."""
    meta = plan.artifact.meta
    gen = _next_gen(where, previous, now, meta["sets"])
    chain = tx.gen_chain(where["chain"], gen)
    chains = {where["chain"]: chain} | ({where["chain"] + tx.NOTRACK: chain + tx.NOTRACK}
                                        if where["notrack"] else {})
    sets = tx.gen_sets(meta["sets"], gen)
    built = {f: _family_text(plan, f, chains, sets) for f in TOOLS}
    made = {NAMES[f] for f in TOOLS if not has_table(f, where)}
    bases = {NAMES[f] for f in TOOLS if NAMES[f] not in made and not has_base(f, where)}
    if previous:
        made |= set(previous.attach.get("created_tables", []))
        bases |= set(previous.attach.get("created_bases", []))
    new = where | {"gen": gen, "gen_chain": chain, "sets": sorted(sets.values()),
                   "lines": {NAMES[f]: built[f][1] for f in TOOLS},
                   "chains": {NAMES[f]: built[f][2] for f in TOOLS},
                   "created_tables": sorted(made), "created_bases": sorted(bases)}
    return new, {f: built[f][0] for f in TOOLS}, _set_text(plan, sets)


def ipt_check(plan: Plan, previous: state.Record | None) -> list[str]:
    """``--dry-run``: the next generation's sets and chains, as a load would build them,
    built in a scratch namespace (``ipset restore``, then ``iptables-restore --test``
    per family): the kernel checks them, the host's tables are not touched."""
    where = _where(plan, system_flavour())
    now = states(where)
    messages = _check_conflicts(plan, where, previous, now)
    new, texts, set_text = _prepare(plan, previous, where, now)
    with scratch_netns():
        try:
            if set_text:
                call(["ipset", "restore"], set_text)
            for f in TOOLS:
                call(restore_argv(f, where["flavour"], "--test", "--noflush"), texts[f])
        except Failed as exc:
            raise LoadError(f"the kernel would refuse the iptables rules: {exc}",
                            hint="check the rules with `pfc compile --target iptables`") \
                from None
    verb = f"replace generation {previous.attach.get('gen')} with" if previous else "create"
    return [f"ipset and {tool(4, where['flavour'], 'restore')} --test accepted the sets and "
            f"both families' rules (in a scratch namespace): the load would {verb} "
            f"chain {new['gen_chain']} in table {where['table']}"] + \
        [f"on load: {m}" for m in messages]


def ipt_attach(plan: Plan, previous: state.Record | None,
               txn: journal.Txn) -> tuple[dict, list[str]]:
    where = _where(plan, system_flavour())
    now = states(where)
    messages = _check_conflicts(plan, where, previous, now)
    new, texts, set_text = _prepare(plan, previous, where, now)
    txn.begin({"targets": {NAMES[f]: now[f].target for f in TOOLS},
               "previous": previous.attach if previous else None}, new)
    if set_text:
        try:
            call(["ipset", "restore"], set_text)
        except Failed as exc:
            raise LoadError(f"ipset restore failed: {exc}",
                            hint="check the sets with `pfc compile --target iptables`") \
                from None
        txn.step("sets")
    for f in TOOLS:
        try:
            restore(f, where["flavour"], texts[f])
        except Failed as exc:
            raise LoadError(f"{tool(f, where['flavour'], 'restore')} refused the "
                            f"{NAMES[f]} rules: {exc}",
                            hint="check the rules with `pfc compile --target iptables`") \
                from None
    txn.step("chains")
    _switch_all(new, now)
    txn.step("switched")
    return new, messages


def _set_text(plan: Plan, sets: dict[str, str]) -> str:
    meta = plan.artifact.meta
    if not meta["files"].get("ipset"):
        return ""
    parts = tx.set_parts(plan.artifact.files[meta["files"]["ipset"]].decode(), meta["sets"])
    missing = sorted(set(meta["sets"]) - set(parts))
    if missing:
        raise LoadError(f"the artifact's ipset file does not create {', '.join(missing)}",
                        hint="a pfc bug: please report it with the policy")
    return tx.set_text(parts, sets)


def _switch_all(new: dict, now: dict[int, Family]) -> None:
    """Both families' switch chains to the new generation, in one child process."""
    texts = {f: tx.switch_text(new, new["gen_chain"], not now[f].jump) for f in TOOLS}
    try:
        switch(new["flavour"], texts)
    except Failed as exc:
        raise LoadError(f"switching to the new rules failed: {exc}",
                        hint="run pfc load again") from None


# --------------------------------------------------------------- retire, recover

def _remove(family: int, where: dict, chains: list[str]) -> None:
    """Flush and delete those of ``chains`` that exist (one restore)."""
    present = family_state(family, where).chains
    gone = [c for c in chains if c in present]
    gone += sorted(c for c in present for g in chains if tx.is_sub_chain(g, c))
    if gone:
        restore(family, where["flavour"], tx.remove_text(where["table"], gone))


def _with_notrack(chains: list[str | None]) -> list[str]:
    """The chains and their ``-notrack`` twins, once each, in order."""
    return list(dict.fromkeys(x for c in chains if c for x in (c, c + tx.NOTRACK)))


def ipt_retire(old: dict | None, new: dict) -> list[str]:
    """Remove the previous generation (and the previous switch chain after a
    ``--table``/hook change); its sets the new one does not share."""
    old = old or {}
    prev = old.get("previous") or {}
    out = []
    same = prev and (prev.get("table"), prev.get("chain")) == (new["table"], new["chain"])
    for f in TOOLS:
        stale = [old.get("targets", {}).get(NAMES[f]), prev.get("gen_chain")] if same else []
        stale = [c for c in stale if tx.generation_of(new["chain"], c) is not None
                 and c != new["gen_chain"]]
        if same and not prev.get("gen") and prev.get("notrack"):
            stale.append(new["chain"] + tx.NOTRACK)  # a record from before generations
        with contextlib.suppress(Failed):
            if stale:
                _remove(f, new, _with_notrack(stale))
            if prev and not same:
                _remove_all(f, prev)
    if prev and not same:
        out.append(f"removed pfc's previous chain {prev['chain']} (table {prev['table']})")
    return out + destroy_sets([s for s in prev.get("sets", []) if s not in new["sets"]])


def ipt_recover(intent: journal.Intent) -> Recovery:
    new = intent.new
    now = states(new)
    old = (intent.old or {}).get("targets", {})
    at = {f: now[f].target for f in TOOLS}
    what = f"chain {new['chain']} (table {new['table']})"
    if all(at[f] == new["gen_chain"] for f in TOOLS):
        return Recovery("new", f"{what} goes to {new['gen_chain']} in both families",
                        attach=dict(new))
    if any(at[f] == new["gen_chain"] for f in TOOLS):
        return _finish_switch(intent, now)
    if all(at[f] == old.get(NAMES[f]) for f in TOOLS):
        removed = _drop_new(new)
        held = ", ".join(f"{NAMES[f]}: {at[f] or 'none'}" for f in TOOLS)
        return Recovery("old", f"{what} goes to the previous rules in both families "
                        f"({held})", removed=removed)
    return Recovery("other", f"{what} goes to " + ", ".join(
        f"{at[f] or 'nothing'} ({NAMES[f]})" for f in TOOLS))


def _finish_switch(intent: journal.Intent, now: dict[int, Family]) -> Recovery:
    """One family switched, the other not (the switch process was killed between
    them): switch the other one too (the new chains were complete before the switch
    began), or, if that fails, switch the first one back."""
    new = intent.new
    lagging = {f: tx.switch_text(new, new["gen_chain"], not now[f].jump) for f in TOOLS
               if now[f].target != new["gen_chain"]}
    try:
        switch(new["flavour"], lagging)
        return Recovery("new", f"{', '.join(NAMES[f] for f in lagging)} switched to "
                        f"{new['gen_chain']} too: both families hold the new rules",
                        attach=dict(new))
    except Failed as exc:
        old = (intent.old or {}).get("targets", {})
        back = {f: tx.switch_text(new, old.get(NAMES[f]), False) for f in TOOLS
                if f not in lagging}
        switch(new["flavour"], back)
        return Recovery("old", f"switching the other family failed ({exc}); switched "
                        "back: both families hold the previous rules",
                        removed=_drop_new(new))


def _drop_new(new: dict) -> list[str]:
    """Remove what an unfinished load built (its generation's chains and sets)."""
    out = []
    for f in TOOLS:
        with contextlib.suppress(Failed):
            if new["gen_chain"] in family_state(f, new).chains:
                _remove(f, new, _with_notrack([new["gen_chain"]]))
                out.append(f"removed chain {new['gen_chain']} ({NAMES[f]})")
    return out + destroy_sets(new.get("sets", []))


# -------------------------------------------------------------------- detach

def _remove_all(family: int, where: dict) -> bool:
    """Delete the jump, the switch chain and pfc's generation chains, in one restore.
    False if there was nothing of pfc's in this family."""
    now = family_state(family, where)
    gens = [c for c in {where.get("gen_chain"), now.target}
            if c and (c == where.get("gen_chain") or
                      tx.generation_of(where["chain"], c) is not None)]
    chains = [c for c in [where["chain"]] + _with_notrack(sorted(gens)) if c in now.chains]
    chains += sorted(c for c in now.chains for g in gens if tx.is_sub_chain(g, c))
    if where.get("notrack") and not where.get("gen"):
        chains += [c for c in [where["chain"] + tx.NOTRACK] if c in now.chains]
    if not chains and not now.jump:
        return False
    base_jump = f"{where['base']} {tx.jump(where)}" if now.jump else None
    restore(family, where["flavour"], tx.remove_text(where["table"], chains, base_jump))
    return True


def ipt_detach(record: state.Record, force: bool = False) -> list[str]:
    where, out = record.attach, []
    for family in TOOLS:
        try:
            if _remove_all(family, where):
                out.append(f"removed chain {where['chain']}, its rules and its jump from "
                           f"{where['table']} {where['base']} ({NAMES[family]})")
        except Failed as exc:
            out.append(f"could not remove chain {where['chain']} ({NAMES[family]}): {exc}")
        made = where.get("created_tables", [])
        with contextlib.suppress(Failed):
            if NAMES[family] in made or family in made:
                out += [m for m in [drop_table(family, where)] if m]
            elif NAMES[family] in where.get("created_bases", []):
                out += [m for m in [drop_base(family, where)] if m]
    return out + destroy_sets(where.get("sets", []))


# --------------------------------------------------------------------------- inspect

def counters(record: state.Record, now: dict[int, Family]) \
        -> tuple[dict[int | str, tuple[int, int]], list[str]]:
    """(packets, bytes) per rule index (and "default") summed over both families, and
    what is off."""
    where, totals, problems = record.attach, {}, []
    chain = where.get("gen_chain") or where["chain"]
    for family in TOOLS:
        owners = list(where["lines"][NAMES[family]])
        found = list(now[family].rules.get(chain, []))
        for sub, own in where.get("chains", {}).get(NAMES[family], {}).items():
            owners += tx.unpack_owners(own)
            found += now[family].rules.get(sub, [])
        if len(found) != len(owners):
            problems.append(f"{NAMES[family]} chain {chain} has {len(found)} rules, pfc "
                            f"loaded {len(owners)}")
            continue
        for owner, (p, b, _) in zip(owners, found, strict=True):
            key = "default" if owner is None else owner
            op, ob = totals.get(key, (0, 0))
            totals[key] = (op + p, ob + b)
    return totals, problems


def ipt_inspect(record: state.Record) -> Inspection:
    where = record.attach
    now = states(where)
    gen = where.get("gen_chain")
    missing = [NAMES[f] for f in TOOLS if not now[f].switch]
    if missing:
        return Inspection("vanished", f"{CHANGED}chain {where['chain']} was deleted "
                          f"({', '.join(missing)})", None)
    totals, problems = counters(record, now)
    unjumped = [NAMES[f] for f in TOOLS if not now[f].jump]
    if unjumped:
        return Inspection("vanished", f"{CHANGED}the jump from {where['table']} "
                          f"{where['base']} to {where['chain']} was deleted "
                          f"({', '.join(unjumped)})", totals)
    elsewhere = [f"{NAMES[f]} to {now[f].target or 'several rules'}" for f in TOOLS
                 if gen and now[f].target != gen]
    if elsewhere:
        return Inspection("changed", f"{CHANGED}chain {where['chain']} goes "
                          f"{', '.join(elsewhere)}, not to pfc's {gen}", totals)
    if problems:
        return Inspection("changed", CHANGED + "; ".join(problems), totals)
    if where.get("dev") and device_index(record.dev) is None:
        return Inspection("vanished", f"device {record.dev} no longer exists; pfc's chains "
                          "remain (they match nothing); unload removes them", totals)
    return Inspection("ok", f"chain {where['chain']} → {gen or where['chain']} in "
                      f"{where['table']} {where['base']} (iptables-{where['flavour']})",
                      totals)


def ipt_discover(dev: str) -> dict | None:
    """pfc's chains under the default name ``PFC``: a jump from raw PREROUTING or
    filter INPUT for ``dev`` to a switch chain that goes to a generation chain."""
    flavour = system_flavour()
    for table, base in HOOKS:
        where = {"table": table, "base": base, "chain": "PFC", "dev": dev,
                 "flavour": flavour, "notrack": False}
        now = states(where)
        gens = {now[f].target for f in TOOLS if now[f].jump and
                tx.generation_of("PFC", now[f].target) is not None}
        if gens:
            gen = sorted(gens)[0]
            used = {m for f in TOOLS for _, _, line in now[f].rules.get(gen, [])
                    for m in re.findall(r"--match-set (\S+)", line) if tx.is_gen_set(m)}
            return where | {"gen_chain": gen, "gen": tx.generation_of("PFC", gen),
                            "sets": sorted(used), "lines": {}, "created_tables": []}
    return None


LOADER = Loader(ipt_attach, ipt_detach, ipt_inspect, ipt_recover, ipt_retire, ipt_discover)
