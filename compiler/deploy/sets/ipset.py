"""``pfc set`` on an iptables policy: the generation's ipsets (``pfc-NAME4.gN``), each
replaced by ``ipset swap`` with a new set of the same type filled by ``ipset restore``
(atomic: the rules reference the set by index, its name and contents are exchanged),
then destroyed; and read back for drift."""

from __future__ import annotations

import re
import secrets

from pfc.deploy import state
from pfc.deploy.base import LoadError
from pfc.deploy.sets.contents import Contents, parse_entries, prefixes, texts


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
    """``ipset swap`` per changed family (``interrupted``: per family); None when a
    family with changes has no ipset (its entries are in the rules): the caller
    reloads."""
    from pfc.deploy.ipt_kernel import Failed, call

    live = {}
    for v in (4, 6):
        sname = live_name(record, name, v)
        if sname is not None:
            live[v] = sname
        elif new[v] != old[v]:
            return None
    for v, sname in live.items():
        if new[v] == old[v] and not interrupted:
            continue
        tmp = f"pfc-tmp-{secrets.token_hex(4)}"
        kind = re.search(r"^Type: (\S+)", call(["ipset", "list", "-t", sname]),
                         re.MULTILINE).group(1)
        count = len(prefixes(v, new[v]))
        header = (f"create {tmp} {kind} family {'inet6' if v == 6 else 'inet'} "
                  f"hashsize {1 << max(10, count.bit_length())} "
                  f"maxelem {max(65536, 2 * count)}")
        try:
            call(["ipset", "restore"], restore_text(tmp, header, v, new[v]))
            call(["ipset", "swap", tmp, sname])
        except Failed as exc:
            raise LoadError(f"ipset refused the set change: {exc}; the set is as it was",
                            hint="`pfc status` shows whether the set changed outside pfc") \
                from None
        finally:
            call(["sh", "-c", f"ipset destroy {tmp} 2>/dev/null || true"])
    return "ipset swap"


def held(sname: str) -> Contents | None:
    """What ipset ``sname`` holds; None if it is gone."""
    from pfc.deploy.ipt_kernel import Failed, call

    try:
        out = call(["ipset", "list", sname])
    except Failed:
        return None
    return parse_entries(sname, out.split("Members:", 1)[-1].split("\n"))
