"""The iptables part of a whole firewall: every netfilter block of both families,
switched together by generations, never half of it.

Layout per family (docs/load.md "Whole firewalls"): each block has pfc's *switch*
chain in its table (``PFC-INPUT`` in filter, ``PFC-PREROUTING`` in nat ...), jumped to
first from the built-in chain (``-I INPUT 1 -j PFC-INPUT``, inserted once), holding
one rule ``-g PFC-INPUT.N``: a goto to that block's chain of *generation* N, which
holds the block's rules (``pass`` is RETURN: back to the built-in chain). Its ipsets
are ``NAME.gN``. A load builds generation N+1 beside the running one (sets, then per
family one restore creating every block's chain: nothing jumps there yet), then
rewrites every switch chain of both families in one child process
(:func:`pfc.deploy.ipt_kernel.switch`: a SIGKILL of pfc cannot stop it between the
families), then, once the whole firewall committed, removes generation N.

``iptables-restore`` commits each table of its input on its own: a kill or a failure
while building leaves only chains nothing jumps to (removed by the rollback); while
switching, some switch chains go to N+1 and others still to N, and the next command
(or the failing load itself) switches them all forward (N+1 was complete before the
switch began) or, when a later part of the firewall failed, all back
(:func:`rollback`: N is kept until then). Only pfc's chains and its jumps are ever
written: the built-in chains keep every other rule (Docker's, firewalld's).
"""

from __future__ import annotations

import contextlib

from pfc.backends.iptables.ruleset import place as block_place
from pfc.deploy import ipt_text as tx
from pfc.deploy.base import Inspection, LoadError
from pfc.deploy.ipt_kernel import (
    CHANGED,
    FILES,
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
    sets_present,
    switch,
    system_flavour,
    tool,
)

TABLES = ("raw", "mangle", "nat", "filter")


def places(artifact) -> list[dict]:
    """Each block's place: table, built-in chain, pfc's switch chain, the block."""
    meta = artifact.meta
    out = []
    for policy in meta["ruleset"].lists:
        p = block_place(policy.hook.name, meta["prefix"])
        out.append({"table": p.table, "base": p.base, "chain": p.chain,
                    "block": policy.hook.name, "dev": None})
    return out


def _where(place: dict, flavour: str) -> dict:
    return place | {"flavour": flavour, "dev": None}


def states(a: dict) -> dict[int, dict[str, Family]]:
    """Per family, per switch chain: what ``iptables-save`` shows of it."""
    return {f: {p["chain"]: family_state(f, _where(p, a["flavour"])) for p in a["places"]}
            for f in TOOLS}


# ------------------------------------------------------------------------- prepare

def _owned(prev: dict | None, chain: str) -> bool:
    return bool(prev) and any(p["chain"] == chain for p in prev.get("places", []))


def _conflicts(a: dict, prev: dict | None, now: dict, force: bool) -> list[str]:
    """A switch chain that exists and pfc did not load: refused unless ``force``."""
    found = sorted({f"{p['chain']} ({p['table']}, {NAMES[f]})" for f in TOOLS
                    for p in a["places"] if now[f][p["chain"]].switch and
                    not _owned(prev, p["chain"])})
    if not found:
        return []
    if not force:
        raise LoadError(f"chain {found[0]} already exists and pfc did not load it",
                        hint="--force replaces its rules with a jump to the firewall's, "
                             "or use --table NAME for other chain names")
    return [f"replaced the rules of chains {', '.join(found)}, which pfc had not loaded "
            "(--force)"]


def _next_gen(a: dict, prev: dict | None, now: dict, sets: list[str]) -> int:
    start = (prev or {}).get("gen") or 0
    taken = {c for f in TOOLS for fam in now[f].values() for c in fam.chains}
    present = sets_present()
    for step in range(1, tx.GENERATIONS):
        gen = (start + step - 1) % (tx.GENERATIONS - 1) + 1
        if any(tx.gen_chain(p["chain"], gen) in taken for p in a["places"]) or \
                set(tx.gen_sets(sets, gen).values()) & present:
            continue
        return gen
    raise LoadError(f"every generation name of pfc's chains ({a['prefix']}-*) is in use",
                    hint=f"remove stale chains {a['prefix']}-*.* by hand")


def _family_text(artifact, family: int, a: dict, sets: dict[str, str]) -> tuple[str, dict]:
    """The restore text creating generation ``a['gen']``'s chains for ``family`` (every
    table), and each chain's line owners."""
    meta = artifact.meta
    text = artifact.files[meta["files"][FILES[family]]].decode()
    owners, out = {}, []
    for table in TABLES:
        here = [p for p in a["places"] if p["table"] == table]
        if not here:
            continue
        names = {p["chain"]: p["gen_chain"] for p in here}
        lines = tx.rule_lines(text, table, set(names))
        for p in here:
            own = list(meta["lines"][NAMES[family]].get(f"{p['chain']}@{table}", []))
            mine = [ln for ln in lines if tx.chain_of(ln) == p["chain"]]
            if len(mine) != len(own):
                raise LoadError(f"the artifact's {NAMES[family]} rules ({len(mine)} lines of "
                                f"chain {p['chain']}) do not match its line table "
                                f"({len(own)})", hint="a pfc bug: please report it")
            owners[p["chain"]] = own
        out.append(tx.chain_text(table, [p["gen_chain"] for p in here],
                                 [tx.rewrite(ln, names, sets) for ln in lines]).rstrip("\n"))
    return "\n".join(out) + "\n", owners


def prepare(artifact, prev: dict | None, force: bool) -> tuple[dict, dict, dict, list[str]]:
    """The new generation's attach info, the kernel's switch chains now (the journal's
    ``old``), per family the restore text building it, the ipset text, and notes."""
    meta = artifact.meta
    a = {"flavour": system_flavour(), "prefix": meta["prefix"], "places": places(artifact)}
    now = states(a)
    messages = _conflicts(a, prev, now, force)
    a["gen"] = gen = _next_gen(a, prev, now, meta["sets"])
    for p in a["places"]:
        p["gen_chain"] = tx.gen_chain(p["chain"], gen)
    sets = tx.gen_sets(meta["sets"], gen)
    built = {f: _family_text(artifact, f, a, sets) for f in TOOLS}
    a["sets"] = sorted(sets.values())
    a["lines"] = {NAMES[f]: built[f][1] for f in TOOLS}
    made = {f"{NAMES[f]} {t}" for f in TOOLS for t in {p["table"] for p in a["places"]}
            if not has_table(f, _where(_first(a, t), a["flavour"]))}
    bases = {f"{NAMES[f]} {p['table']} {p['base']}" for f in TOOLS for p in a["places"]
             if f"{NAMES[f]} {p['table']}" not in made and
             not has_base(f, _where(p, a["flavour"]))}
    a["created_tables"] = sorted(made | set((prev or {}).get("created_tables", [])))
    a["created_bases"] = sorted(bases | set((prev or {}).get("created_bases", [])))
    old = {"targets": {NAMES[f]: {c: s.target for c, s in now[f].items()} for f in TOOLS},
           "jumps": {NAMES[f]: sorted(c for c, s in now[f].items() if s.jump) for f in TOOLS},
           "previous": prev}
    texts = {"chains": {f: built[f][0] for f in TOOLS}, "sets": _set_text(artifact, sets)}
    return a, old, texts, messages


def _first(a: dict, table: str) -> dict:
    return next(p for p in a["places"] if p["table"] == table)


def _set_text(artifact, sets: dict[str, str]) -> str:
    meta = artifact.meta
    if not meta["files"].get("ipset"):
        return ""
    parts = tx.set_parts(artifact.files[meta["files"]["ipset"]].decode(), meta["sets"])
    return tx.set_text(parts, sets)


# ------------------------------------------------------------------------ build, switch

def build(a: dict, texts: dict, step) -> None:
    """The new generation's sets and chains, where no packet goes yet."""
    if texts["sets"]:
        try:
            call(["ipset", "restore"], texts["sets"])
        except Failed as exc:
            raise LoadError(f"ipset restore failed: {exc}",
                            hint="check the sets with `pfc compile --target iptables`") \
                from None
        step("fw-sets")
    for f in TOOLS:
        try:
            restore(f, a["flavour"], texts["chains"][f])
        except Failed as exc:
            raise LoadError(f"{tool(f, a['flavour'], 'restore')} refused the {NAMES[f]} "
                            f"rules: {exc}", hint="check the rules with `pfc compile "
                            "--target iptables`") from None
    step("fw-chains")


def _switch_text(a: dict, targets: dict[str, str | None], jumps: set[str]) -> str:
    """Every switch chain of ``targets`` rewritten to go to its generation chain (None:
    left empty, a RETURN), the jumps to those not in ``jumps`` inserted first."""
    out = []
    for table in TABLES:
        here = [p for p in a["places"] if p["table"] == table and p["chain"] in targets]
        if not here:
            continue
        out.append(f"*{table}")
        out += [f":{p['chain']} - [0:0]" for p in here]
        out += [f"-I {p['base']} 1 -j {p['chain']}" for p in here if p["chain"] not in jumps]
        out += [f"-A {p['chain']} -g {targets[p['chain']]}" for p in here
                if targets[p["chain"]]]
        out.append("COMMIT")
    return "\n".join(out + [""])


def switch_to(a: dict, targets: dict[int, dict[str, str | None]],
              now: dict[int, dict[str, Family]]) -> None:
    """Both families' switch chains to ``targets`` in one child process."""
    texts = {f: _switch_text(a, targets[f], {c for c, s in now[f].items() if s.jump})
             for f in TOOLS if targets[f]}
    try:
        switch(a["flavour"], texts)
    except Failed as exc:
        raise LoadError(f"switching to the new rules failed: {exc}",
                        hint="run pfc load again") from None


def commit(a: dict) -> None:
    now = states(a)
    switch_to(a, {f: {p["chain"]: p["gen_chain"] for p in a["places"]} for f in TOOLS}, now)


# --------------------------------------------------------------- recover, roll back

def verdict(old: dict, a: dict) -> tuple[str, str]:
    """("new" | "old" | "mixed" | "other", what was seen): where the switch chains go."""
    now = states(a)
    at = {(f, p["chain"]): now[f][p["chain"]].target for f in TOOLS for p in a["places"]}
    new = {(f, p["chain"]): p["gen_chain"] for f in TOOLS for p in a["places"]}
    before = {(f, c): t for f in TOOLS
              for c, t in (old or {}).get("targets", {}).get(NAMES[f], {}).items()}
    seen = f"iptables: pfc's chains of {len(a['places'])} blocks"
    if at == new:
        return "new", f"{seen} go to {a['gen']} (generation) in both families"
    if all(at[k] == before.get(k) for k in at):
        return "old", f"{seen} go where they went before in both families"
    if any(at[k] == new[k] for k in at):
        return "mixed", f"{seen}: some go to the new generation, some not"
    return "other", f"{seen} go elsewhere: " + ", ".join(
        f"{c} ({NAMES[f]}) to {t or 'nothing'}" for (f, c), t in sorted(at.items()))


def finish(a: dict) -> str:
    """Switch the lagging chains forward (the new generation was complete)."""
    commit(a)
    return "iptables: the lagging switch chains were switched to the new generation too"


def rollback(old: dict, a: dict) -> list[str]:
    """Every switch chain back where it went before (a chain pfc created: removed with
    its jump), then the new generation removed."""
    now = states(a)
    targets = {f: {p["chain"]: old["targets"][NAMES[f]].get(p["chain"]) for p in a["places"]
                   if now[f][p["chain"]].switch and p["chain"] in _existed(old, f) and
                   now[f][p["chain"]].target != old["targets"][NAMES[f]].get(p["chain"])}
               for f in TOOLS}
    if any(targets.values()):
        switch_to(a, targets, now)
    out = []
    for f in TOOLS:
        fresh = [p for p in a["places"] if p["chain"] not in _existed(old, f)]
        with contextlib.suppress(Failed):
            _remove(f, a, fresh, [])
    return out + drop_new(a)


def _existed(old: dict, family: int) -> set[str]:
    """The switch chains that existed before the load (their target may be None)."""
    prev = old.get("previous") or {}
    return {c for c, t in old["targets"][NAMES[family]].items() if t} | \
        {p["chain"] for p in prev.get("places", [])}


def drop_new(a: dict) -> list[str]:
    """Remove what an unfinished load built (its generation's chains and sets)."""
    out = []
    for f in TOOLS:
        with contextlib.suppress(Failed):
            if _remove_chains(f, a, [p["gen_chain"] for p in a["places"]]):
                out.append(f"removed the new generation's chains ({NAMES[f]})")
    return out + destroy_sets(a.get("sets", []))


def _remove_chains(family: int, a: dict, chains: list[str]) -> bool:
    """Flush and delete those of ``chains`` that exist, one restore per table."""
    done = False
    for table in TABLES:
        mine = [p for p in a["places"] if p["table"] == table]
        if not mine:
            continue
        present = family_state(family, _where(mine[0], a["flavour"])).chains
        gone = [c for c in chains if c in present and any(
            tx.generation_of(p["chain"], c) is not None for p in mine)]
        if gone:
            restore(family, a["flavour"], tx.remove_text(table, gone))
            done = True
    return done


def retire(old: dict | None, a: dict) -> list[str]:
    """After a committed load: the previous generation's chains and sets, and the
    blocks the previous firewall had and this one has not."""
    old = old or {}
    prev = old.get("previous") or {}
    keep = {p["chain"] for p in a["places"]}
    stale = [t for f in TOOLS for t in old.get("targets", {}).get(NAMES[f], {}).values()
             if t and t not in {p["gen_chain"] for p in a["places"]}]
    stale += [p["gen_chain"] for p in prev.get("places", []) if p["chain"] in keep and
              p["gen_chain"] not in {q["gen_chain"] for q in a["places"]}]
    gone = [p for p in prev.get("places", []) if p["chain"] not in keep]
    for f in TOOLS:
        with contextlib.suppress(Failed):
            _remove_chains(f, a, sorted(set(stale)))
            if gone:
                _remove(f, prev | {"flavour": a["flavour"]}, gone, [])
    out = [f"removed pfc's chain {p['chain']} ({p['table']}): the new firewall has no "
           f"{p['block']} block" for p in gone]
    return out + destroy_sets([s for s in prev.get("sets", []) if s not in a["sets"]])


# --------------------------------------------------------------------------- detach

def _remove(family: int, a: dict, chosen: list[dict], out: list[str]) -> bool:
    """Delete the jumps to, and flush and delete, the switch chains of ``chosen`` and
    their generation chains; one restore per table. False if none was there."""
    done = False
    for table in TABLES:
        here = [p for p in chosen if p["table"] == table]
        if not here:
            continue
        chains, jumps = [], []
        for p in here:
            now = family_state(family, _where(p, a["flavour"]))
            gens = sorted(c for c in now.chains if tx.generation_of(p["chain"], c))
            chains += [c for c in [p["chain"]] + gens if c in now.chains]
            jumps += [f"{p['base']} -j {p['chain']}"] if now.jump else []
        if not chains and not jumps:
            continue
        lines = [f"*{table}"] + [f"-D {j}" for j in jumps]
        lines += [f"-F {c}" for c in chains] + [f"-X {c}" for c in chains] + ["COMMIT", ""]
        restore(family, a["flavour"], "\n".join(lines))
        done = True
    return done


def detach(a: dict) -> list[str]:
    out = []
    for f in TOOLS:
        try:
            if _remove(f, a, a["places"], out):
                out.append(f"removed pfc's chains of {len(a['places'])} blocks and their "
                           f"jumps ({NAMES[f]})")
        except Failed as exc:
            out.append(f"could not remove pfc's chains ({NAMES[f]}): {exc}")
        out += _drop_created(f, a)
    return out + destroy_sets(a.get("sets", []))


def _drop_created(family: int, a: dict) -> list[str]:
    """An iptables-nft table or built-in chain pfc's first load created, if empty."""
    out = []
    for p in a["places"]:
        where = _where(p, a["flavour"])
        with contextlib.suppress(Failed):
            if f"{NAMES[family]} {p['table']} {p['base']}" in a.get("created_bases", []):
                out += [m for m in [drop_base(family, where)] if m]
    for table in sorted({p["table"] for p in a["places"]}):
        with contextlib.suppress(Failed):
            if f"{NAMES[family]} {table}" in a.get("created_tables", []):
                out += [m for m in [drop_table(family, _where(_first(a, table),
                                                              a["flavour"]))] if m]
    return out


# -------------------------------------------------------------------------- inspect

def inspect(a: dict) -> Inspection:
    """Health, what is off or where, and counters: per rule index summed over both
    families, and per block ``default BLOCK``."""
    now = states(a)
    totals: dict = {}
    problems, vanished = [], []
    for f in TOOLS:
        for p in a["places"]:
            s = now[f][p["chain"]]
            if not s.switch or not s.jump:
                vanished.append(f"{p['chain']} ({NAMES[f]}) " +
                                ("was deleted" if not s.switch else "lost its jump"))
                continue
            if s.target != p["gen_chain"]:
                where = s.target or "several rules"
                problems.append(f"{p['chain']} ({NAMES[f]}) goes to {where}, not to pfc's "
                                f"{p['gen_chain']}")
                continue
            own, found = a["lines"][NAMES[f]].get(p["chain"], []), s.rules.get(
                p["gen_chain"], [])
            if len(own) != len(found):
                problems.append(f"{p['gen_chain']} ({NAMES[f]}) has {len(found)} rules, pfc "
                                f"loaded {len(own)}")
                continue
            for owner, (n, b, _) in zip(own, found, strict=True):
                key = f"default {p['block']}" if owner is None else owner
                op, ob = totals.get(key, (0, 0))
                totals[key] = (op + n, ob + b)
    if vanished:
        return Inspection("vanished", CHANGED + "; ".join(vanished), totals)
    if problems:
        return Inspection("changed", CHANGED + "; ".join(problems), totals)
    return Inspection("ok", f"iptables-{a['flavour']}: chains " + ", ".join(
        f"{p['chain']} → {p['gen_chain']}" for p in a["places"]), totals)
