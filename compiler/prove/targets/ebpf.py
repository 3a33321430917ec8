"""eBPF: the program in the artifact's ELF object, and the data its maps hold.

The object is read with pyelftools: the program's instructions (the function named
``meta["program"]``), and its relocations, which tie each ``ld_imm64`` to the map (or
read-only data section) it loads. Maps: the counters map ``pfc_counters`` (a per-CPU
array, zero on load), the set maps of the artifact's maps file with the contents a
loader puts there (``pfc.backends.ebpf.maps.updates``: LPM tries, bitmap arrays), any
other array zero-filled; ``pfc_ready`` (set once the maps are filled) holds 1.
:mod:`pfc.prove.targets.ebpf_vm` executes the instructions.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field, replace
from pathlib import Path

from pfc.backends.base import Artifact
from pfc.prove.frame import Behaviour, Frame
from pfc.prove.targets.cbpf import Unsupported

READY_MAP = "pfc_ready"
# The classifier's flow cache (a per-CPU array memoising decisions; an all-zero entry
# never hits): read as zeros, stores to it ignored, so the proof covers the miss path,
# which computes every decision (docs/prove.md).
FLOW_CACHE = "pfc_flow_cache"


@dataclass
class MapInfo:
    name: str
    kind: str  # "array" | "percpu_array" | "lpm_trie" | "hash" | "array_of_maps"
    key_size: int
    value_size: int
    entries: int
    contents: dict[bytes, bytes] = field(default_factory=dict)
    counts: bool = False  # pfc's counters: a store counts a rule


@dataclass
class Program:
    insns: list[tuple[int, int, int, int, int]]  # (opcode, dst, src, off, imm)
    relocations: dict[int, str]  # instruction index -> symbol (map or section)
    rodata: dict[str, bytes] = field(default_factory=dict)
    calls: dict[int, int] = field(default_factory=dict)  # call (src 1) -> its callee
    funcs: dict[int, int] = field(default_factory=dict)  # ld_imm64 -> a function address


def _program_symbol(elf, program: str):
    symtab = elf.get_section_by_name(".symtab")
    if symtab is None:
        raise Unsupported("the object has no symbol table")
    found = [s for s in symtab.iter_symbols() if s.name == program
             and s["st_info"]["type"] == "STT_FUNC"]
    if not found:
        raise Unsupported(f"the object has no program `{program}`")
    return found[0]


def program_span(data: bytes, program: str) -> tuple[int, int]:
    """(file offset of the program's first instruction, its instruction count)."""
    from elftools.elf.elffile import ELFFile

    elf = ELFFile(io.BytesIO(data))
    sym = _program_symbol(elf, program)
    section = elf.get_section(sym["st_shndx"])
    size = sym["st_size"] or section.data_size - sym["st_value"]
    return section["sh_offset"] + sym["st_value"], size // 8


def _decode(code: bytes) -> list[tuple[int, int, int, int, int]]:
    insns = []
    for i in range(0, len(code), 8):
        op, regs = code[i], code[i + 1]
        off = int.from_bytes(code[i + 2:i + 4], "little", signed=True)
        imm = int.from_bytes(code[i + 4:i + 8], "little", signed=True)
        insns.append((op, regs & 0x0F, regs >> 4, off, imm))
    return insns


def _is_code(section) -> bool:
    return bool(section["sh_flags"] & 0x4) and section["sh_type"] == "SHT_PROGBITS"


def parse_object(data: bytes, program: str) -> Program:
    """The program's function, then every subprogram (``.text``: ``bpf_loop``
    callbacks, global functions) as libbpf appends them: one list of instructions.
    BPF-to-BPF calls (``call`` with src 1) and function addresses (``ld_imm64`` of a
    ``.text`` symbol: ``BPF_PSEUDO_FUNC``) are resolved to indices into that list, as
    ``bpf_object__reloc_code`` computes them."""
    from elftools.elf.elffile import ELFFile

    elf = ELFFile(io.BytesIO(data))
    sym = _program_symbol(elf, program)
    section = elf.get_section(sym["st_shndx"])
    start, size = sym["st_value"], sym["st_size"] or section.data_size - sym["st_value"]
    insns = _decode(section.data()[start:start + size])
    parts = {section.name: (0, start, len(insns))}  # name -> (base, skip, count)
    text = elf.get_section_by_name(".text")
    if text is not None and text.data_size and text.name != section.name:
        parts[".text"] = (len(insns), 0, text.data_size // 8)
        insns += _decode(text.data())
    out = Program(insns, {}, {})
    for name, (base, skip, count) in parts.items():
        _relocate(elf, elf.get_section_by_name(name), base, skip, count, parts, out)
    for base, _, count in parts.values():  # calls inside one section
        for i in range(base, base + count):
            op, _, src, _, imm = insns[i]
            if op == 0x85 and src == 1 and i not in out.calls:
                out.calls[i] = i + imm + 1
    return out


def _relocate(elf, section, base: int, skip: int, count: int, parts: dict,
              out: Program) -> None:
    from elftools.elf.relocation import RelocationSection

    for rel_section in elf.iter_sections():
        if not isinstance(rel_section, RelocationSection):
            continue
        if elf.get_section(rel_section["sh_info"]).name != section.name:
            continue
        table = elf.get_section(rel_section["sh_link"])
        for rel in rel_section.iter_relocations():
            target = table.get_symbol(rel["r_info_sym"])
            at = (rel["r_offset"] - 8 * skip) // 8
            if not 0 <= at < count:
                continue
            pc = base + at
            sec = elf.get_section(target["st_shndx"]) if isinstance(
                target["st_shndx"], int) else None
            if sec is not None and _is_code(sec):
                _code_reloc(out, pc, sec.name, target["st_value"], parts)
                continue
            name = target.name
            if target["st_info"]["type"] == "STT_SECTION" or not name:
                name = sec.name
                out.rodata[name] = sec.data()
            out.relocations[pc] = name


def _code_reloc(out: Program, pc: int, section: str, value: int, parts: dict) -> None:
    """A call of, or the address of, a function in a code section."""
    if section not in parts:
        raise Unsupported(f"instruction {pc} refers to code in section {section}")
    base, skip, _ = parts[section]
    op, _, _, _, imm = out.insns[pc]
    if op == 0x85:
        out.calls[pc] = base + (value - 8 * skip) // 8 + imm + 1
    elif op == 0x18:
        out.funcs[pc] = base + (value - 8 * skip + imm) // 8
    else:
        raise Unsupported(f"instruction {pc} refers to code in an unknown way")


def maps_of(artifact: Artifact) -> dict[str, MapInfo]:
    """Every map the program may name, with what a loader puts in it."""
    from pfc.backends.ebpf import maps as ebpf_maps

    out: dict[str, MapInfo] = {}
    counters = artifact.meta.get("counters")
    slots = max([r.index for r in artifact.policy.rules] + [0]) + 2
    for name in (counters, "pfc_counters"):
        if name:
            out[name] = MapInfo(name, "percpu_array", 4, 16, slots, counts=True)
    out[READY_MAP] = MapInfo(READY_MAP, "array", 4, 4, 1, {bytes(4): (1).to_bytes(4, "little")})
    for name, info in artifact.meta.get("maps", {}).items():
        out[name] = MapInfo(name, info["type"], info["key_size"], info["value_size"],
                            info["entries"])
    file = artifact.meta.get("maps_file")
    if file and file in artifact.files:
        try:
            records = ebpf_maps.parse(artifact.files[file], file)
        except ValueError as exc:
            raise Unsupported(f"{file}: not a maps file the loader reads ({exc})") from exc
        for record in records:
            if record.get("inner"):  # the set's slot holds its inner map
                out[record["name"]].contents[bytes(4)] = record["inner"].encode()
            try:  # the classifier's maps: their bytes are in the data file beside
                fills = ebpf_maps.updates(record, artifact.files.get(record.get("file", "")))
            except (KeyError, TypeError, ValueError) as exc:
                raise Unsupported(f"{file}: a record the loader cannot read ({exc})") from exc
            for name, keys, values in fills:
                _fill(out.setdefault(name, MapInfo(name, "array", 4, 1, 0)), keys, values,
                      record)
    out.setdefault(FLOW_CACHE, MapInfo(FLOW_CACHE, "zero", 4, 0, 0))
    out[FLOW_CACHE].contents.clear()
    return out


def _fill(info: MapInfo, keys: bytes, values: bytes, record: dict) -> None:
    if record["type"] == "lpm_trie":
        count = len(record["prefixes"])
    else:
        count = len(keys) // info.key_size
    for i in range(count):
        key = keys[i * info.key_size:(i + 1) * info.key_size]
        info.contents[key] = values[i * info.value_size:(i + 1) * info.value_size]


def behaviour(artifact: Artifact, frame: Frame) -> Behaviour:
    from pfc.backends.ebpf.maps import object_bytes
    from pfc.prove.targets import ebpf_step

    program = parse_object(object_bytes(artifact), artifact.meta["program"])
    return ebpf_step.run(program, maps_of(artifact), artifact.hook, frame,
                       frozenset(r.index for r in artifact.policy.count_rules))


def adopt(artifact: Artifact, path: Path, data: bytes) -> Artifact:
    """An object (``.o``) given by path, with the maps file beside it if there is one
    (``STEM.HOOK.maps.json``), or a maps file given by path."""
    files = dict(artifact.files)
    names = list(files)
    if path.name.endswith(".maps.json"):
        json.loads(data)
        files[artifact.meta["maps_file"]] = data
        return replace(artifact, files=files)
    if not data.startswith(b"\x7fELF"):
        raise ValueError(f"{path}: not an ELF object")
    obj = next(n for n in names if n.endswith(".o"))
    files[obj] = data
    beside = path.with_name(path.name[:-2] + ".maps.json")
    if artifact.meta.get("maps_file") and beside.exists():
        files[artifact.meta["maps_file"]] = beside.read_bytes()
    return replace(artifact, files=files, format="o")
