"""``pfc load --target u32``: tc u32 (+ gact, matchall) filters on clsact ingress.

pfc owns the preferences ``0x4000``–``0x7fff`` of a device's ingress and uses two
ranges of it in turn (``BASES``): a load puts the new policy's filters in the range the
old one does not use, then (the record written) deletes the old range. Nothing else
on the device is touched; filters of others in pfc's range are refused unless
``--force`` (then they are replaced like pfc's own).

No gap, and each packet judged by one policy: tc runs filters in preference order and
every policy ends with its default (a matchall filter), so filters behind a complete
policy are never reached. New filters are added in ascending preference (one
``tc -batch``: its lines are in that order) and old ones deleted in descending order,
so at every instant the device holds a *prefix* of one policy followed by the whole
of the other: a packet that one of the prefix's filters takes gets the first policy's
verdict for it (first match), any other the second policy's. Not atomic as one
nft transaction is (a packet can meet the new policy's first rules and the old one's
default), but never neither policy. ``count`` rules (``gact continue``) of both can
count one packet during the swap.

All or nothing: the intent is written first (:mod:`pfc.deploy.journal`); a batch that
fails midway (``tc -batch`` stops at its first refused line) is rolled back by deleting
whatever of the new range the kernel shows, in descending order, and the error says
what the kernel holds then. ``clsact`` is created if missing and deleted on unload only
if pfc created it and no filter is left. Counters: each filter's gact statistics
(``tc -s -j filter show``), summed per rule.
"""

from __future__ import annotations

import collections
import json
import shutil
import subprocess

from pfc.backends.base import DEFAULT_COUNTER
from pfc.backends.u32 import backend as u32
from pfc.deploy import journal, state
from pfc.deploy.base import Inspection, Loader, LoadError, Plan, Recovery, device_index

LOW, HIGH = 0x4000, 0x8000  # pfc's preferences: [LOW, HIGH)
BASES = (LOW, 0x6000)  # the two ranges; a policy's filters are BASE + 1 ...
SPAN = 0x2000


def tc(args: list[str], stdin: str | None = None) -> str:
    if shutil.which("tc") is None:
        raise LoadError("tc is not installed", hint="Debian: apt install iproute2")
    done = subprocess.run(["tc", *args], input=stdin, capture_output=True, text=True)
    if done.returncode != 0:
        lines = [t.strip() for t in done.stderr.strip().splitlines() if t.strip()]
        why = " ... ".join(dict.fromkeys(lines[:1] + lines[-1:]))
        raise LoadError(f"tc {' '.join(args[:2])} refused: {why or done.returncode}",
                        hint="`tc filter show dev DEV ingress` shows what is there")
    return done.stdout


def clsact_exists(dev: str) -> bool:
    listed = json.loads(tc(["-j", "qdisc", "show", "dev", dev]) or "[]")
    return any(q.get("kind") == "clsact" for q in listed)


def listing(dev: str) -> dict[int, dict]:
    """The device's ingress filters by preference: kind, nodes (filters with actions),
    and their actions' packets and bytes."""
    if not clsact_exists(dev):
        return {}
    out: dict[int, dict] = {}
    for item in json.loads(tc(["-s", "-j", "filter", "show", "dev", dev, "ingress"])
                           or "[]"):
        e = out.setdefault(item["pref"], {"kind": item.get("kind"), "nodes": 0,
                                          "packets": 0, "bytes": 0})
        actions = item.get("options", {}).get("actions")
        if actions is None:
            continue
        e["nodes"] += 1
        for action in actions:
            e["packets"] += action.get("stats", {}).get("packets", 0)
            e["bytes"] += action.get("stats", {}).get("bytes", 0)
    return out


def _nodes(attach: dict | None) -> dict[int, int]:
    return {int(p): n for p, n in ((attach or {}).get("nodes") or {}).items()}


def _complete(now: dict[int, dict], nodes: dict[int, int]) -> bool:
    return bool(nodes) and all(p in now and now[p]["nodes"] == n and
                               now[p]["kind"] in ("u32", "matchall")
                               for p, n in nodes.items())


def _delete(dev: str, prefs, now: dict[int, dict]) -> list[int]:
    """Delete the filters at ``prefs`` that the kernel shows, highest first (module
    doc: what stays is a prefix)."""
    gone = []
    for p in sorted((p for p in prefs if p in now), reverse=True):
        tc(["filter", "del", "dev", dev, "ingress", "pref", str(p)])
        gone.append(p)
    return gone


def _span(prefs) -> str:
    prefs = sorted(prefs)
    return f"{prefs[0]}" if len(prefs) == 1 else f"{prefs[0]}-{prefs[-1]}"


def batch(plan: Plan, base: int) -> tuple[list[str], dict]:
    """The filter lines of the artifact's policy from ``base`` and its record part."""
    body, prefs = u32.lines(plan.artifact.policy, plan.dev, base)
    filters = [line for line in body if line.startswith("filter ")]
    nodes = collections.Counter(int(line.split(" pref ")[1].split()[0]) for line in filters)
    if max(nodes) >= base + SPAN:
        raise LoadError(f"the policy needs {max(nodes) - base} tc preferences; pfc's u32 "
                        f"range holds {SPAN - 1}", hint="split the policy, or use nft")
    return filters, {"base": base, "nodes": {str(p): n for p, n in sorted(nodes.items())},
                     "prefs": {str(k): v for k, v in prefs.items()}}


def u32_attach(plan: Plan, previous: state.Record | None,
               txn: journal.Txn) -> tuple[dict, list[str]]:
    dev, messages = plan.dev, []
    existed = clsact_exists(dev)
    now = listing(dev) if existed else {}
    ours = _nodes(previous.attach) if previous else {}
    foreign = sorted(p for p in now if LOW <= p < HIGH and p not in ours)
    if foreign and not plan.force:
        raise LoadError(f"tc filters pfc did not load sit in pfc's u32 preferences on "
                        f"{dev} ingress ({_span(foreign)})",
                        hint="--force replaces them; or move them out of 16384-32767")
    in_use = [p for p in ours if p in now] + foreign
    base = BASES[1] if any(BASES[0] < p < BASES[1] for p in in_use) else BASES[0]
    filters, new = batch(plan, base)
    carried = bool(previous and previous.attach.get("qdisc_created"))
    new |= {"dev": dev, "qdisc_existed": existed, "qdisc_created": not existed or carried}
    old = {"nodes": {str(p): 1 for p in in_use}} if in_use else None
    if foreign:
        messages.append(f"replaced tc filters pfc had not loaded at preferences "
                        f"{_span(foreign)} on {dev} (--force)")
    txn.begin(old, new)
    if not existed:
        tc(["qdisc", "add", "dev", dev, "clsact"])
        txn.step("qdisc")
    _delete(dev, [p for p in foreign if base < p < base + SPAN], now)
    tc(["-batch", "-"], "\n".join(filters) + "\n")
    txn.step("added")
    return new, messages


def u32_retire(old: dict | None, new: dict) -> list[str]:
    """After the record: the previous policy's filters (and --force's) are deleted."""
    dev = new.get("dev")
    stale = set(_nodes(old)) - set(_nodes(new))
    if not stale or dev is None:
        return []
    gone = _delete(dev, stale, listing(dev))
    return [f"removed the previous u32 filters (preferences {_span(gone)})"] if gone else []


def u32_detach(record: state.Record, force: bool = False) -> list[str]:
    dev = record.dev
    if device_index(dev) is None:
        return [f"device {dev} is gone (and its filters with it)"]
    now, nodes = listing(dev), _nodes(record.attach)
    if not any(p in now for p in nodes):
        out = [f"pfc's u32 filters were no longer on {dev}; nothing to remove"]
    elif _complete(now, nodes) or force:
        gone = _delete(dev, nodes, now)
        out = [f"removed pfc's u32 filters (preferences {_span(gone)}) from {dev} ingress"]
    else:
        out = [f"the filters at pfc's u32 preferences on {dev} are not the ones pfc "
               "loaded (changed outside pfc); left them as they are (--force removes "
               "them)"]
    if record.attach.get("qdisc_created"):
        out.append(_drop_qdisc(dev))
    return out


def _drop_qdisc(dev: str) -> str:
    left = listing(dev)
    if left:
        return (f"kept the clsact qdisc pfc created on {dev}: other filters use it "
                f"(preferences {', '.join(map(str, sorted(left)))})")
    tc(["qdisc", "del", "dev", dev, "clsact"])
    return f"deleted the clsact qdisc pfc had created on {dev}"


def counters(attach: dict, now: dict[int, dict]) -> dict[int | str, tuple[int, int]]:
    out: dict[int | str, tuple[int, int]] = {}
    for key, prefs in (attach.get("prefs") or {}).items():
        found = [now.get(p, {"packets": 0, "bytes": 0}) for p in prefs]
        index = DEFAULT_COUNTER if key == "default" else int(key)
        out[index] = (sum(f["packets"] for f in found), sum(f["bytes"] for f in found))
    return out


def u32_inspect(record: state.Record) -> Inspection:
    dev = record.dev
    if device_index(dev) is None:
        return Inspection("vanished", f"device {dev} no longer exists", None)
    now, nodes = listing(dev), _nodes(record.attach)
    if not any(p in now for p in nodes):
        return Inspection("vanished", f"pfc's u32 filters are gone from {dev}", None)
    if not _complete(now, nodes):
        return Inspection("changed", f"the filters at preferences {_span(nodes)} on {dev} "
                          "differ from what pfc loaded (changed outside pfc)",
                          counters(record.attach, now))
    return Inspection("ok", f"{sum(nodes.values())} tc u32/matchall filters at preferences "
                      f"{_span(nodes)} on {dev} ingress", counters(record.attach, now))


def u32_recover(intent: journal.Intent) -> Recovery:
    dev = intent.dev
    if device_index(dev) is None:
        return Recovery("other", f"device {dev} no longer exists")
    now, new = listing(dev), _nodes(intent.new)
    if _complete(now, new):
        return Recovery("new", f"every new u32 filter is on {dev}", attach=intent.new)
    gone = _delete(dev, new, now)
    removed = [f"removed the new u32 filters a failed load left (preferences "
               f"{_span(gone)})"] if gone else []
    old = _nodes(intent.old)
    if old and not all(p in now for p in old):
        return Recovery("other", f"the previous u32 filters are not all on {dev}",
                        removed=removed)
    if not intent.new.get("qdisc_existed", True) and not listing(dev):
        removed.append(_drop_qdisc(dev))
    what = "the previous u32 filters are in place" if old else "no u32 filter of pfc's"
    return Recovery("old", f"{what} on {dev}", removed=removed)


def u32_discover(dev: str) -> dict | None:
    if device_index(dev) is None:
        return None
    now = {p: e for p, e in listing(dev).items() if LOW <= p < HIGH}
    if not now:
        return None
    return {"nodes": {str(p): e["nodes"] for p, e in now.items()}, "prefs": {}, "dev": dev,
            "base": BASES[0] if min(now) < BASES[1] else BASES[1]}


LOADER = Loader(u32_attach, u32_detach, u32_inspect, u32_recover, u32_retire, u32_discover)
