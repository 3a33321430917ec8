"""``pfc set`` on an iptables policy: the generation's ipsets (``pfc-NAME4.gN``), each
replaced by ``ipset swap`` with a new set of the same type filled by ``ipset restore``
(atomic: the rules reference the set by index, its name and contents are exchanged),
then destroyed; and read back for drift.

Both families or neither: every new set is built first (one ``ipset restore`` each; a
refusal leaves the live sets untouched), then they are swapped in, IPv4 first; if a
swap fails, those already swapped are swapped back (the temporary set holds the old
contents then). A kill between the two swaps is finished by the next pfc command
(:mod:`.pending`). ``hash:net`` refuses a ``/0``: a family whose new contents are
every address (``0.0.0.0/0``, ``::/0``) is reloaded, and the compiler makes its match
always true, as it does for a set file holding ``/0``."""

from __future__ import annotations

import re
import secrets

from pfc.deploy import journal, state
from pfc.deploy.base import LoadError
from pfc.deploy.sets.contents import BITS, Contents, merge, parse_entries, prefixes, texts


def live_name(record: state.Record, name: str, version: int) -> str | None:
    """The generation's ipset of family ``version``; None if there is none (its
    entries are in the rules)."""
    from pfc.deploy import ipt_text as tx

    sname = tx.gen_sets([f"pfc-{name}{version}"], record.attach.get("gen") or 0)[
        f"pfc-{name}{version}"]
    return sname if sname in record.attach.get("sets", []) else None


def restore_text(tmp: str, header: str, version: int, ranges: list[tuple[int, int]]) -> str:
    """``ipset restore`` input: the ``create`` line, then one ``add`` per prefix."""
    add = f"\nadd {tmp} "
    lines = texts(version, ranges)
    return header + (add + add.join(lines) if lines else "") + "\n"


def change(record: state.Record, name: str, old: Contents, new: Contents,
           interrupted: bool = False) -> str | None:
    """``ipset swap`` of every changed family (``interrupted``: of every family), both
    or neither; None when a family with changes has no ipset (its entries are in the
    rules) or would need a ``/0``: the caller reloads."""
    live = {}
    for v in (4, 6):
        sname = live_name(record, name, v)
        if sname is not None:
            live[v] = sname
        elif new[v] != old[v]:
            return None
        if sname is not None and new[v] == [(0, (1 << BITS[v]) - 1)]:
            return None  # hash:net refuses /0: the compiler's match-all instead
    todo = {v: s for v, s in live.items() if new[v] != old[v] or interrupted}
    built: dict[int, str] = {}
    try:
        for v, sname in todo.items():
            built[v] = _build(sname, v, new[v])
        journal.point("set-prepared")
        _swap_all(todo, built, old)
    finally:
        _destroy(list(built.values()))
    return "ipset swap (both families or neither)" if len(todo) > 1 else "ipset swap"


def _build(sname: str, v: int, ranges: list[tuple[int, int]]) -> str:
    """A new set like ``sname`` holding ``ranges``; LoadError (nothing swapped yet)."""
    from pfc.deploy.ipt_kernel import Failed, call

    tmp = f"pfc-tmp-{secrets.token_hex(4)}"
    try:
        kind = re.search(r"^Type: (\S+)", call(["ipset", "list", "-t", sname]),
                         re.MULTILINE).group(1)
        count = len(prefixes(v, ranges))
        header = (f"create {tmp} {kind} family {'inet6' if v == 6 else 'inet'} "
                  f"hashsize {1 << max(10, count.bit_length())} "
                  f"maxelem {max(65536, 2 * count)}")
        call(["ipset", "restore"], restore_text(tmp, header, v, ranges))
    except Failed as exc:
        _destroy([tmp])
        raise LoadError(f"ipset refused the new IPv{v} set: {exc}; nothing was swapped: "
                        "the sets are as they were",
                        hint="`pfc status` shows what the kernel's sets hold") from None
    return tmp


def _swap_all(todo: dict[int, str], built: dict[int, str], old: Contents) -> None:
    """Swap every built set in; on a failure, swap back those already swapped and
    say what the kernel's sets hold, as read back."""
    from pfc.deploy.ipt_kernel import Failed, call

    done = []
    for v, sname in todo.items():
        try:
            if done:
                journal.point("set-family")
            call(["ipset", "swap", built[v], sname])
        except Failed as exc:
            back = []
            for w in reversed(done):
                try:
                    call(["ipset", "swap", built[w], todo[w]])
                    back.append(f"swapped the IPv{w} set back")
                except Failed as again:
                    back.append(f"could not swap the IPv{w} set back ({again})")
            raise LoadError(f"ipset refused to swap the IPv{v} set: {exc}; "
                            + "; ".join(back + [_holds(todo, old)]),
                            hint="`pfc status` shows what the kernel's sets hold") from None
        done.append(v)


def _holds(live: dict[int, str], old: Contents) -> str:
    """What the kernel's sets hold now, read back, compared with the old contents."""
    have = {v: held(sname) for v, sname in live.items()}
    same = all(h is not None and merge(h[v]) == old[v] for v, h in have.items())
    return ("checked: the sets hold what they held before" if same else
            "checked: the sets do NOT hold what they held before (`pfc status`)")


def sweep() -> list[str]:
    """Destroy the temporary sets a killed ``pfc set`` left (``pfc-tmp-*``: with the
    state lock held, no pfc change is building one)."""
    from pfc.deploy.ipt_kernel import sets_present

    stale = sorted(n for n in sets_present() if n.startswith("pfc-tmp-"))
    _destroy(stale)
    return [f"destroyed the temporary ipset {n} of an interrupted `pfc set`" for n in stale]


def _destroy(names: list[str]) -> None:
    from pfc.deploy.ipt_kernel import call

    for tmp in names:
        call(["sh", "-c", 'ipset destroy "$1" 2>/dev/null || true', "pfc-destroy", tmp])


def held(sname: str) -> Contents | None:
    """What ipset ``sname`` holds; None if it is gone."""
    from pfc.deploy.ipt_kernel import Failed, call

    try:
        out = call(["ipset", "list", sname])
    except Failed:
        return None
    return parse_entries(sname, out.split("Members:", 1)[-1].split("\n"))
