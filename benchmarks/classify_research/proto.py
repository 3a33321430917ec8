"""Building, loading and measuring the prototypes: C text with the sizes a build
chose, clang (pfc.kernel.toolchain), libbpf (pfc.kernel.bpf), maps filled from Python,
and what the kernel says about the result (verified instructions, memory).

Needs root (CAP_BPF) and Linux >= 5.17 (``bpf_loop``).
"""

from __future__ import annotations

import ctypes
import time
from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.classify_research.model import ACTIONS, Cond
from pfc.kernel import bpf, toolchain

HERE = Path(__file__).resolve().parent


def u32s(values: Iterable[int]) -> bytes:
    """Native-endian u32s, as map keys and values are laid out."""
    return array("I", values).tobytes()


@dataclass
class Build:
    """One prototype's tables: the C file, its -D sizes, and the bytes of every map."""

    name: str
    source: str
    defines: dict[str, int | None]
    fills: dict[str, tuple[bytes, bytes]]  # map name -> (keys, values), concatenated
    stats: dict[str, int] = field(default_factory=dict)
    build_s: float = 0.0


def c_text(build: Build, hook: str) -> str:
    lines = [f"#define PFC_{hook.upper()} 1", f"#define NRULES {build.stats['rules']}"]
    for name, value in build.defines.items():
        lines.append(f"#define {name}" + ("" if value is None else f" {value}"))
    common = (HERE / "common.h").read_text()
    return "\n".join(lines) + "\n" + common + "\n" + (HERE / build.source).read_text()


@dataclass
class Loaded:
    """A prototype in the kernel; ``close()`` frees it."""

    name: str
    hook: str
    obj: bpf.Object
    compile_s: float
    load_s: float
    fill_s: float
    insns: int  # the program's instructions (xlated)
    verified_insns: int  # what the verifier processed
    map_bytes: int  # sum of the maps' memlock
    maps: dict[str, int]  # map -> memlock bytes

    @property
    def prog(self) -> bpf.Program:
        return self.obj.programs["pfc_classify"]

    def close(self) -> None:
        self.obj.close()


def fdinfo(fd: int) -> dict[str, str]:
    out = {}
    for line in Path(f"/proc/self/fdinfo/{fd}").read_text().splitlines():
        key, _, value = line.partition(":")
        out[key.strip()] = value.strip()
    return out


def xlated_insns(fd: int) -> int:
    """``bpf_prog_info.xlated_prog_len`` / 8 (bpf_obj_get_info_by_fd)."""
    so = bpf.lib()
    fn = so.bpf_obj_get_info_by_fd
    fn.restype, fn.argtypes = ctypes.c_int, [ctypes.c_int, ctypes.c_void_p,
                                             ctypes.POINTER(ctypes.c_uint32)]
    buf = ctypes.create_string_buffer(256)
    size = ctypes.c_uint32(256)
    if fn(fd, buf, ctypes.byref(size)) < 0:
        return -1
    return int.from_bytes(buf.raw[20:24], "little") // 8


def actions(cs: list[Cond], default: str) -> tuple[bytes, bytes]:
    keys = list(range(len(cs) + 1))  # the default at NRULES
    values = [ACTIONS[c.action] for c in cs] + [ACTIONS[default]]
    return u32s(keys), u32s(values)


def load(build: Build, cs: list[Cond], default: str, hook: str) -> Loaded:
    """Compile, load (verifier), fill; raises BpfError/ToolchainError on refusal."""
    t0 = time.perf_counter()
    built = toolchain.compile_c(c_text(build, hook), f"{Path(build.source).stem}_{hook}")
    t1 = time.perf_counter()
    obj = bpf.Object(built.obj, build.name.replace("-", "_")[:15])
    t2 = time.perf_counter()
    for name, (keys, values) in {**build.fills, "pfc_actions": actions(cs, default)}.items():
        obj.maps[name].update_batch(keys, values)
    t3 = time.perf_counter()
    prog = obj.programs["pfc_classify"]
    info = fdinfo(prog.fd)
    maps = {name: int(fdinfo(m.fd).get("memlock", 0)) for name, m in obj.maps.items()
            if not name.startswith(".")}
    return Loaded(build.name, hook, obj, t1 - t0, t2 - t1, t3 - t2, xlated_insns(prog.fd),
                  int(info.get("verified_insns", -1)), sum(maps.values()), maps)
