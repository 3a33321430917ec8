"""``pfc set add|del|replace``: change a loaded policy's address set in place, in one
atomic step, without reloading the policy (a blocklist a bouncer updates all day).

The set is a ``set NAME = file "PATH"`` of the loaded policy (address sets only; a
``define`` list is policy text: edit the file and ``pfc apply``). The new contents are
computed (``add``: the set and the entries; ``del``: the set without them, an entry
removes the addresses it covers exactly as listed; ``replace``: the entries), collapsed
per family, and put in the kernel:

- ``nft``: the table's sets ``NAME4`` / ``NAME6``: one transaction deleting the
  elements that go and adding those that come (libnftables, one batch: every packet
  sees the old set or the new one; the rules, their counters and the other sets are not
  touched);
- ``iptables``: the generation's ipsets (``pfc-NAME4.gN``): a new set of the same type
  is filled (``ipset restore``), ``ipset swap``-ed with the live one (atomic: the rules
  reference the set by index, its name and contents are exchanged), then destroyed;
- ``xdp``, ``tc``, and a family whose entries the nft/iptables backend compiled into
  the rules (small sets are inlined): the policy is recompiled from pfc's copy with the
  new contents and replaced atomically (``pfc load``'s replace: no gap), which restarts
  its counters and takes the compiler's time (seconds at 100k entries).

The new contents become the set file's text in pfc's copy of the loaded policy
(:mod:`pfc.deploy.snapshot`), which keeps the digest of what ``apply`` applied: ``pfc
apply`` with an unchanged config leaves live sets alone, ``pfc status`` compares the
kernel's sets with them, and ``--dry-run`` diffs against them. A ``pfc load`` or an
``apply`` of a changed policy loads the set file's contents: a live change lasts until
the policy is loaded again (write it to the file too, as ``replace --file`` does
naturally).
"""

from __future__ import annotations

import json
import re
import secrets
import socket
import time
from dataclasses import dataclass, replace
from pathlib import Path

from pfc.deploy import snapshot, state
from pfc.deploy.base import LoadError, check_privileges, in_netns
from pfc.frontend.matches import merge_ranges, subtract_ranges
from pfc.frontend.source import SourceFile
from pfc.frontend.values import read_set_file

Net = tuple[int, int, int]  # (family 4|6, address as an integer, prefix length)
OPS = ("add", "del", "replace")
_FAMILY = {4: (socket.AF_INET, 32), 6: (socket.AF_INET6, 128)}


def text(n: Net) -> str:
    """``1.2.3.4`` for a host, ``10.0.0.0/8`` for a prefix."""
    af, bits = _FAMILY[n[0]]
    addr = socket.inet_ntop(af, n[1].to_bytes(bits // 8, "big"))
    return addr if n[2] == bits else f"{addr}/{n[2]}"


@dataclass
class Change:
    """One place's set change: what was done and how long the kernel part took."""

    target: str
    dev: str
    name: str
    size: int  # entries (collapsed prefixes) after the change
    added: int
    removed: int
    how: str  # "nft transaction", "ipset swap", "policy replaced (...)"
    seconds: float


def _fast(entry: str) -> Net | None:
    addr, _, length = entry.partition("/")
    for version, (af, bits) in _FAMILY.items():
        try:
            raw = socket.inet_pton(af, addr)
        except OSError:
            continue
        n = int(length) if length.isdigit() else (bits if not length else -1)
        if not 0 <= n <= bits:
            return None
        value = int.from_bytes(raw, "big")
        return version, value & ~((1 << (bits - n)) - 1), n
    return None


def parse_entries(name: str, entries: list[str], label: str = "<command line>") \
        -> list[Net]:
    """Addresses and prefixes (the set file format: one a line, ``#`` comments; on the
    command line, one an argument; host bits are cleared). LoadError naming the first
    bad entry, with the compiler's message for it."""
    out = []
    for number, raw in enumerate(entries, 1):
        entry = raw.split("#", 1)[0].strip()
        if not entry:
            continue
        net = _fast(entry)
        if net is None:
            atoms, diags = read_set_file(SourceFile(label, entry), name)
            why = diags[0].message if diags else "`pfc set` changes address sets only"
            raise LoadError(f"{label}: entry {number} `{entry}`: {why}",
                            hint="one address or prefix per line (or argument), `#` "
                                 "starts a comment; address sets only")
        out.append(net)
    return out


def _prefixes(version: int, lo: int, hi: int) -> list[Net]:
    """The fewest prefixes covering exactly lo..hi."""
    bits, out = _FAMILY[version][1], []
    while lo <= hi:
        size = (lo & -lo).bit_length() - 1 if lo else bits
        while lo + (1 << size) - 1 > hi:
            size -= 1
        out.append((version, lo, bits - size))
        lo += 1 << size
    return out


def _intervals(nets: list[Net], version: int) -> list[tuple[int, int]]:
    bits = _FAMILY[version][1]
    return list(merge_ranges([(a, a + (1 << (bits - n)) - 1)
                              for v, a, n in nets if v == version]))


def collapse(nets: list[Net]) -> dict[int, list[Net]]:
    return {v: [p for lo, hi in _intervals(nets, v) for p in _prefixes(v, lo, hi)]
            for v in (4, 6)}


def new_contents(op: str, old: list[Net], given: list[Net]) -> dict[int, list[Net]]:
    """The set after ``op``: ``del`` removes the addresses the entries cover."""
    if op == "replace":
        return collapse(given)
    if op == "add":
        return collapse(old + given)
    out = {}
    for v in (4, 6):
        rest = subtract_ranges(_intervals(old, v), _intervals(given, v))
        out[v] = [p for lo, hi in rest for p in _prefixes(v, lo, hi)]
    return out


# --------------------------------------------------------------------- the copy

_SET_DECL = r'^\s*set\s+{}\s*=\s*file\s+"([^"]*)"'


def set_file(copy: snapshot.Copy, name: str) -> str:
    """The path (as the compiler read it) of set ``name``'s file in the copy."""
    m = re.search(_SET_DECL.format(re.escape(name)), copy.sources[copy.main], re.MULTILINE)
    if m is None:
        raise LoadError(f"the loaded policy {copy.main} has no `set {name} = file ...`",
                        hint="`pfc set` changes sets read from a file; see `pfc status` "
                             "for the policy loaded there")
    path = Path(m.group(1))
    key = str(path if path.is_absolute() else Path(copy.main).parent / path)
    if key not in copy.sources:
        raise LoadError(f"pfc's copy of {copy.main} lacks set file {key}",
                        hint="load the policy again with this pfc")
    return key


def with_contents(copy: snapshot.Copy, key: str, nets: dict[int, list[Net]]) -> snapshot.Copy:
    body = "# pfc set: the live contents\n" + "".join(
        f"{text(n)}\n" for version in (4, 6) for n in nets[version])
    return replace(copy, sources=copy.sources | {key: body},
                   origin=copy.origin or copy.digest)


def copy_contents(copy: snapshot.Copy, key: str, name: str) -> list[Net]:
    return parse_entries(name, copy.sources[key].split("\n"), key)


# ------------------------------------------------------------------------ targets

def _nft_change(record: state.Record, name: str, old: dict[int, list[Net]],
                new: dict[int, list[Net]]) -> str | None:
    """One nft transaction; None when a family with entries has no set in the table
    (compiled into the rules): the caller reloads."""
    from pfc.deploy import nft as load_nft

    a = record.attach
    nft = load_nft._nft()
    nft.set_terse_output(True)  # the sets' names and flags, not their 100k elements
    rc, out, _ = nft.cmd(f"list table {a['family']} {a['table']}")
    found = [i["set"] for i in json.loads(out).get("nftables", []) if "set" in i] \
        if rc == 0 else []
    have = {s["name"]: "interval" in s.get("flags", []) for s in found}
    old = {v: _elements(old[v], have.get(f"{name}{v}", True)) for v in (4, 6)}
    new = {v: _elements(new[v], have.get(f"{name}{v}", True)) for v in (4, 6)}
    lines = nft_lines(f"{a['family']} {a['table']}", name, old, new, have)
    if lines is None:
        return None
    if lines:
        rc, _, err = load_nft._cmd("\n".join(lines))
        if rc != 0:  # the kernel's elements are not pfc's (changed outside): all anew
            rc, _, err = load_nft._cmd("\n".join(_nft_refill(a, name, new, have)))
        if rc != 0:
            raise LoadError(f"nftables refused the set change: {load_nft._first(err)}; "
                            "the set is as it was (one transaction)",
                            hint="`pfc status` shows whether the set changed outside pfc")
    return "nft transaction"


def nft_lines(table: str, name: str, old: dict[int, list[Net]], new: dict[int, list[Net]],
              have: dict[str, bool]) -> list[str] | None:
    """The transaction that turns ``old`` into ``new`` in sets ``NAME4``/``NAME6`` of
    ``table`` (``have``: set name → has ``flags interval``); None when a family with
    changes has no set (compiled into the rules) or a set of addresses would get a
    prefix. Added entries are added; removing entries from an interval set is a
    ``flush set`` and a refill in the same transaction, because libnftables 1.0 deletes
    interval elements in time that grows with the set (measured on a 100k-entry set:
    100 deletions 10 s, 1,000 deletions 103 s; flush and 100k adds 0.8 s). Hash sets
    delete fast (1,000 of 100k: 0.02 s) and keep the delta."""
    lines = []
    for version in (4, 6):
        sname = f"{name}{version}"
        before = set(old[version])
        gone = before - set(new[version])
        come = [n for n in new[version] if n not in before]
        if not (gone or come):
            continue
        bits = _FAMILY[version][1]
        if sname not in have or (not have[sname] and any(n[2] != bits for n in come)):
            return None  # compiled into the rules, or prefixes into a set of addresses
        where = f"{table} {sname}"
        if gone and have[sname]:
            lines.append(f"flush set {where}")
            come = new[version]
        elif gone:
            lines.append(f"delete element {where} {{ {', '.join(map(text, gone))} }}")
        if come:
            lines.append(f"add element {where} {{ {', '.join(map(text, come))} }}")
    return lines


def _elements(nets: list[Net], interval: bool) -> list[Net]:
    """A set without ``flags interval`` holds addresses: small prefixes (from merged
    neighbours) become their addresses; a larger one stays (the caller reloads)."""
    if interval:
        return nets
    out = []
    for v, a, n in nets:
        host = _FAMILY[v][1]
        if host - n <= 8:
            out += [(v, a + i, host) for i in range(1 << (host - n))]
        else:
            out.append((v, a, n))
    return out


def _nft_refill(a: dict, name: str, new: dict[int, list[Net]], have: dict) -> list[str]:
    lines = []
    for version in (4, 6):
        if f"{name}{version}" in have:
            where = f"{a['family']} {a['table']} {name}{version}"
            lines.append(f"flush set {where}")
            if new[version]:
                lines.append(f"add element {where} {{ {', '.join(map(text, new[version]))} }}")
    return lines


def _ipt_change(record: state.Record, name: str, old: dict[int, list[Net]],
                new: dict[int, list[Net]]) -> str | None:
    """``ipset swap`` per family; None when a family with entries has no ipset (its
    entries are in the rules): the caller reloads."""
    from pfc.deploy import ipt_text as tx
    from pfc.deploy.ipt_kernel import Failed, call

    a = record.attach
    live = {}
    for version in (4, 6):
        real = tx.gen_sets([f"pfc-{name}{version}"], a.get("gen") or 0)
        sname = next(iter(real.values()))
        if sname in a.get("sets", []):
            live[version] = sname
        elif new[version] or old[version]:
            return None
    for version, sname in live.items():
        tmp = f"pfc-tmp-{secrets.token_hex(4)}"
        header = call(["ipset", "list", "-t", sname])
        kind = re.search(r"^Type: (\S+)", header, re.MULTILINE).group(1)
        family = "inet6" if version == 6 else "inet"
        size = max(65536, 2 * len(new[version]))
        hashsize = 1 << max(10, len(new[version]).bit_length())
        body = f"create {tmp} {kind} family {family} hashsize {hashsize} maxelem {size}\n" \
            + "".join(f"add {tmp} {text(n)}\n" for n in new[version])
        try:
            call(["ipset", "restore"], body)
            call(["ipset", "swap", tmp, sname])
        except Failed as exc:
            raise LoadError(f"ipset refused the set change: {exc}; the set is as it was",
                            hint="`pfc status` shows whether the set changed outside pfc") \
                from None
        finally:
            call(["sh", "-c", f"ipset destroy {tmp} 2>/dev/null || true"])
    return "ipset swap"


def change(op: str, name: str, entries: list[Net], dev: str, target: str,
           netns: str | None = None) -> Change:
    """``pfc set OP NAME ...`` on the policy pfc loaded at (netns, dev, target)."""
    if op not in OPS:
        raise LoadError(f"unknown set operation `{op}`", hint="add, del or replace")
    check_privileges(target, netns, "set")
    with in_netns(netns) as ns:
        with state.locked():
            record = state.read(ns, dev, target)
            copy = snapshot.read_loaded(ns, dev, target)
            if record is None or copy is None:
                raise LoadError(f"no policy of pfc's with a copy is loaded as {target} on "
                                f"{dev} (namespace {ns})", hint="pfc load or pfc apply it "
                                "first; `pfc status` shows what is loaded")
            key = set_file(copy, name)
            old = collapse(copy_contents(copy, key, name))
            new = new_contents(op, old[4] + old[6], entries)
            counts = _counts(old, new)
            started = time.perf_counter()
            how = None
            if target == "nft":
                how = _nft_change(record, name, old, new)
            elif target == "iptables":
                how = _ipt_change(record, name, old, new)
            if how is not None:
                snapshot.write_loaded(ns, dev, target, with_contents(copy, key, new))
                return Change(target, dev, name, len(new[4]) + len(new[6]), *counts, how,
                              time.perf_counter() - started)
        return _reload(copy, key, name, new, counts, dev, target, ns)


def _counts(old: dict[int, list[Net]], new: dict[int, list[Net]]) -> tuple[int, int]:
    before, after = set(old[4] + old[6]), set(new[4] + new[6])
    return len(after - before), len(before - after)


def _reload(copy: snapshot.Copy, key: str, name: str, new: dict[int, list[Net]],
            counts: tuple[int, int], dev: str, target: str, ns: str) -> Change:
    """The policy recompiled from the copy with the new contents, replaced atomically."""
    from pfc.deploy.preview import load_compiled
    from pfc.frontend.diagnostics import CompileError

    changed = with_contents(copy, key, new)
    started = time.perf_counter()
    o = changed.options
    try:
        load_compiled(snapshot.compile_copy(changed), target, dev, ns, False, o.get("mode"),
                      o.get("hook"), o.get("table") or "pfc")
    except CompileError as exc:
        raise LoadError(f"the policy with the new set does not compile: "
                        f"{exc.diagnostics[0].message}", hint="nothing was changed") \
            from None
    with in_netns(ns), state.locked():
        snapshot.write_loaded(ns, dev, target, changed)
    return Change(target, dev, name, len(new[4]) + len(new[6]), *counts,
                  "policy replaced atomically (recompiled; counters restart)",
                  time.perf_counter() - started)


# -------------------------------------------------------------------------- drift

def _nft_kernel(a: dict, sname: str) -> list[Net] | None:
    from pfc.deploy import nft as load_nft

    rc, out, _ = load_nft._cmd(f"list set {a['family']} {a['table']} {sname}")
    if rc != 0:
        return None
    nets: list[Net] = []
    for item in json.loads(out).get("nftables", []):
        for e in item.get("set", {}).get("elem", []):
            e = e.get("elem", {}).get("val", e) if isinstance(e, dict) and "elem" in e else e
            if isinstance(e, str):
                nets += parse_entries(sname, [e])
            elif "prefix" in e:
                nets += parse_entries(sname, [f"{e['prefix']['addr']}/{e['prefix']['len']}"])
            elif "range" in e:
                lo, hi = parse_entries(sname, e["range"])
                nets += _prefixes(lo[0], lo[1], hi[1])
    return nets


def _ipset_kernel(sname: str) -> list[Net] | None:
    from pfc.deploy.ipt_kernel import Failed, call

    try:
        out = call(["ipset", "list", sname])
    except Failed:
        return None
    return parse_entries(sname, out.split("Members:", 1)[-1].split("\n"))


def drift(record: state.Record) -> str | None:
    """How the kernel's sets of an nft/iptables policy differ from what pfc loaded or
    last set (pfc's copy), one line; None when they agree (or there are none)."""
    if record.target not in ("nft", "iptables"):
        return None
    copy = snapshot.read_loaded(record.netns, record.dev, record.target)
    if copy is None:
        return None
    out = []
    for name in re.findall(r'^\s*set\s+(\w[\w-]*)\s*=\s*file', copy.sources[copy.main],
                           re.MULTILINE):
        want = collapse(copy_contents(copy, set_file(copy, name), name))
        for v in (4, 6):
            if record.target == "nft":
                sname = f"{name}{v}"
                have = _nft_kernel(record.attach, sname)
            else:
                from pfc.deploy import ipt_text as tx
                sname = tx.gen_sets([f"pfc-{name}{v}"], record.attach.get("gen") or 0)[
                    f"pfc-{name}{v}"]
                have = _ipset_kernel(sname) if sname in record.attach.get("sets", []) \
                    else None
            if have is None:
                continue
            got = collapse(have)[v]
            if got != want[v]:
                plus, minus = len(set(got) - set(want[v])), len(set(want[v]) - set(got))
                out.append(f"set {sname} holds {len(got)} prefixes, pfc put {len(want[v])} "
                           f"(+{plus} -{minus})")
    return "; ".join(out) or None


def drifted(entries: list) -> None:
    """``pfc status``: mark entries whose sets changed outside pfc (health ``changed``)."""
    from pfc.deploy.base import Inspection

    for s in entries:
        if s.inspection.health != "ok":
            continue
        with in_netns(s.record.netns):
            detail = drift(s.record)
        if detail:
            s.inspection = Inspection("changed", f"changed outside pfc: {detail}",
                                      s.inspection.counters)
