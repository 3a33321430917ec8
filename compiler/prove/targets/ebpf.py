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


@dataclass
class MapInfo:
    name: str
    kind: str  # "array" | "percpu_array" | "lpm_trie" | "hash" | "array_of_maps"
    key_size: int
    value_size: int
    entries: int
    contents: dict[bytes, bytes] = field(default_factory=dict)


@dataclass
class Program:
    insns: list[tuple[int, int, int, int, int]]  # (opcode, dst, src, off, imm)
    relocations: dict[int, str]  # instruction index -> symbol (map or section)
    rodata: dict[str, bytes] = field(default_factory=dict)


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


def parse_object(data: bytes, program: str) -> Program:
    from elftools.elf.elffile import ELFFile
    from elftools.elf.relocation import RelocationSection

    elf = ELFFile(io.BytesIO(data))
    sym = _program_symbol(elf, program)
    section = elf.get_section(sym["st_shndx"])
    start, size = sym["st_value"], sym["st_size"] or section.data_size - sym["st_value"]
    code = section.data()[start:start + size]
    insns = []
    for i in range(0, len(code), 8):
        op, regs = code[i], code[i + 1]
        off = int.from_bytes(code[i + 2:i + 4], "little", signed=True)
        imm = int.from_bytes(code[i + 4:i + 8], "little", signed=True)
        insns.append((op, regs & 0x0F, regs >> 4, off, imm))
    relocations, rodata = {}, {}
    for rel_section in elf.iter_sections():
        if not isinstance(rel_section, RelocationSection):
            continue
        if elf.get_section(rel_section["sh_info"]).name != section.name:
            continue
        table = elf.get_section(rel_section["sh_link"])
        for rel in rel_section.iter_relocations():
            target = table.get_symbol(rel["r_info_sym"])
            at = rel["r_offset"] - start
            if not 0 <= at < len(code):
                continue
            name = target.name
            if target["st_info"]["type"] == "STT_SECTION" or not name:
                sec = elf.get_section(target["st_shndx"])
                name = sec.name
                rodata[name] = sec.data()
            relocations[at // 8] = name
    return Program(insns, relocations, rodata)


def maps_of(artifact: Artifact) -> dict[str, MapInfo]:
    """Every map the program may name, with what a loader puts in it."""
    from pfc.backends.ebpf import maps as ebpf_maps

    out: dict[str, MapInfo] = {}
    counters = artifact.meta.get("counters")
    slots = max([r.index for r in artifact.policy.rules] + [0]) + 2
    for name in (counters, "pfc_counters"):
        if name:
            out[name] = MapInfo(name, "percpu_array", 4, 16, slots)
    out[READY_MAP] = MapInfo(READY_MAP, "array", 4, 4, 1, {bytes(4): (1).to_bytes(4, "little")})
    for name, info in artifact.meta.get("maps", {}).items():
        out[name] = MapInfo(name, info["type"], info["key_size"], info["value_size"],
                            info["entries"])
    file = artifact.meta.get("maps_file")
    if file and file in artifact.files:
        for record in ebpf_maps.parse(artifact.files[file], file):
            if record.get("inner"):  # the set's slot holds its inner map
                out[record["name"]].contents[bytes(4)] = record["inner"].encode()
            for name, keys, values in ebpf_maps.updates(record):
                _fill(out.setdefault(name, MapInfo(name, "array", 4, 1, 0)), keys, values,
                      record)
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

    if "classifier" in artifact.meta:
        raise Unsupported("the eBPF classifier of a large policy (rules as bit vectors in "
                          "maps, bpf_loop) is not modelled; check it with `pfc verify`")
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
