"""The restore texts pfc's iptables loader runs, built from the artifact (no kernel here).

Layout in the kernel, per family (docs/load.md): the base chain jumps to pfc's *switch*
chain (``-i DEV -j PFC``, inserted once, first), which holds one rule, ``-g PFC.N``:
a goto to the chain of generation N, which holds the policy's rules (and
``PFC.N-notrack`` with ``--notrack``); its ipsets are ``NAME.gN``. A load builds the
next generation's sets and chains beside the running ones (no traffic reaches them),
then rewrites the switch chain of both families, then removes the old generation. A
RETURN or the end of ``PFC.N`` goes back to the base chain (goto), as the artifact's
chain did.

Only the artifact's own lines are used: the ``-A`` lines of its chain(s) inside its
table's section of the restore file, and the ``create``/``add`` lines of its sets in
the ipset file; anything else in those files (comments, other tables, other chains,
other sets) never reaches the kernel.
"""

from __future__ import annotations

import re

DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"
GENERATIONS = len(DIGITS) ** 2  # labels of one or two characters: chain names fit 28
NOTRACK = "-notrack"
MAX_SET = 31  # ipset's name limit


def label(gen: int) -> str:
    """Generation ``gen`` (1 ≤ gen < GENERATIONS) as 1-2 base-36 characters."""
    hi, lo = divmod(gen, len(DIGITS))
    return (DIGITS[hi] if hi else "") + DIGITS[lo]


def gen_chain(chain: str, gen: int) -> str:
    return f"{chain}.{label(gen)}"


def generation_of(chain: str, name: str | None) -> int | None:
    """The generation of ``name`` if it is one of ``chain``'s generation chains."""
    m = re.fullmatch(re.escape(chain) + r"\.([0-9a-z]{1,2})", name or "")
    return int(m.group(1), 36) if m else None


def gen_sets(names: list[str], gen: int) -> dict[str, str]:
    """The artifact's set names → this generation's: ``NAME.gN`` (cut and numbered
    when that would pass ipset's 31 characters)."""
    out = {}
    for i, name in enumerate(sorted(names)):
        base, tail = name, f".g{label(gen)}"
        if len(name) + len(tail) > MAX_SET:
            tail = f"~{i}{tail}"
            base = name[:MAX_SET - len(tail)]
        out[name] = base + tail
    return out


def is_sub_chain(gen_chain: str, name: str) -> bool:
    """Whether ``name`` is one of the tree chains of generation chain ``gen_chain``
    (``PFC.N-tK``; a large policy, backends/iptables/ipt_tree.py)."""
    return re.fullmatch(re.escape(gen_chain) + r"-t[0-9a-z]+", name) is not None


def pack_owners(owners: list) -> str:
    """A tree chain's line owners (rule index, ``"log"``, None: the default) as one
    string for the record: ``"3,3,log,-"`` (a list of 65k JSON values per policy made
    each journal write take a second)."""
    return ",".join("-" if o is None else str(o) for o in owners)


def unpack_owners(text: str | list) -> list:
    if isinstance(text, list):
        return text
    return [None if w == "-" else int(w) if w.isdigit() else w for w in text.split(",")] \
        if text else []


def is_gen_set(name: str) -> bool:
    return re.search(r"\.g[0-9a-z]{1,2}$", name) is not None


# ------------------------------------------------------------------------- rules

def rule_lines(text: str, table: str, chains: set[str]) -> list[str]:
    """The ``-A CHAIN ...`` lines of ``chains`` in the ``*table`` section of a
    restore file, in order."""
    out, inside = [], False
    for line in text.splitlines():
        if line.startswith("*"):
            inside = line[1:].strip() == table
        elif line.strip() == "COMMIT":
            inside = False
        elif inside and line.startswith("-A ") and line.split()[1] in chains:
            out.append(line.rstrip())
    return out


def chain_of(line: str) -> str:
    return line.split()[1]


def rewrite(line: str, chains: dict[str, str], sets: dict[str, str]) -> str:
    """A rule line with pfc's chain names (``-A``, ``-j``, ``-g``) and set names
    (``--match-set``) replaced by this generation's."""
    def chain(m: re.Match) -> str:
        return m.group(1) + chains.get(m.group(2), m.group(2))

    def one_set(m: re.Match) -> str:
        return m.group(1) + sets.get(m.group(2), m.group(2))

    line = re.sub(r"((?:^|\s)(?:-A|-j|-g) )(\S+)", chain, line)
    return re.sub(r"((?:^|\s)--match-set )(\S+)", one_set, line)


def chain_text(table: str, chains: list[str], lines: list[str]) -> str:
    """Create (or flush) ``chains`` and fill them: one atomic restore."""
    return "\n".join([f"*{table}", *[f":{c} - [0:0]" for c in chains], *lines,
                      "COMMIT", ""])


def switch_text(where: dict, target: str | None, add_jump: bool) -> str:
    """The switch chain rewritten to go to ``target`` (None: left empty), and the
    jump to it inserted first in the base chain when it is missing."""
    lines = [f"*{where['table']}", f":{where['chain']} - [0:0]"]
    if add_jump:
        lines.append(f"-I {where['base']} 1 {jump(where)}")
    if target:
        lines.append(f"-A {where['chain']} -g {target}")
    return "\n".join(lines + ["COMMIT", ""])


def jump(where: dict) -> str:
    return (f"-i {where['dev']} " if where.get("dev") else "") + f"-j {where['chain']}"


def remove_text(table: str, chains: list[str], base_jump: str | None = None) -> str:
    """Delete ``base_jump`` (a ``BASE -i DEV -j CHAIN`` spec) and flush and delete
    ``chains``, in one restore."""
    lines = [f"*{table}"] + ([f"-D {base_jump}"] if base_jump else [])
    lines += [f"-F {c}" for c in chains] + [f"-X {c}" for c in chains]
    return "\n".join(lines + ["COMMIT", ""])


# -------------------------------------------------------------------------- sets

def set_parts(text: str, names: list[str]) -> dict[str, tuple[str, list[str]]]:
    """Per set of the artifact: its ``create`` arguments (type and options, without
    ``-exist``) and its members, from the ipset restore file (members added to a
    temporary name ``NAME.SUFFIX`` count as the set's)."""
    out: dict[str, tuple[str, list[str]]] = {}
    members: dict[str, list[str]] = {n: [] for n in names}
    by_length = sorted(names, key=len, reverse=True)
    for line in text.splitlines():
        words = line.split()
        if len(words) < 3 or words[0] not in ("create", "add"):
            continue
        owner = _owner(words[1], names, by_length)
        if owner is None:
            continue
        if words[0] == "create" and words[1] == owner:
            out[owner] = (" ".join(w for w in words[2:] if w != "-exist"), [])
        elif words[0] == "add":
            members[owner].append(" ".join(words[2:]))
    return {n: (args, sorted(set(members[n]))) for n, (args, _) in out.items()}


def _owner(name: str, names: list[str], by_length: list[str]) -> str | None:
    if name in names:
        return name
    return next((n for n in by_length if name.startswith(n + ".")), None)


def set_text(parts: dict[str, tuple[str, list[str]]], new_names: dict[str, str]) -> str:
    """``ipset restore`` input creating this generation's sets (no ``-exist``: a name
    that exists stops the restore there; a rollback destroys what it had created)."""
    lines = []
    for name, (args, members) in parts.items():
        lines.append(f"create {new_names[name]} {args}")
        lines += [f"add {new_names[name]} {m}" for m in members]
    return "\n".join(lines + [""])
