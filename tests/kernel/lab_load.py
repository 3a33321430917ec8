"""Run inside a lab guest: load each eBPF object given and print one JSON line each.

``python tests/kernel/lab_load.py OBJ...``: for every object, whether the kernel took
it, the verifier's processed-instruction count (``BPF_LOG_STATS``) and, when refused,
the last lines of the verifier's log. Only ``pfc.kernel.bpf`` is imported: the guest
loads what the host compiled.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from pfc.kernel import bpf

STATS = 4  # BPF_LOG_STATS


def judge(path: Path) -> dict:
    out = {"object": path.name}
    try:
        with bpf.Object(path.read_bytes(), path.stem.replace(".", "_")[:15],
                        log_level=STATS) as obj:
            counts = [int(n) for n in re.findall(r"processed (\d+) insns", obj.log)]
            out |= {"loaded": True, "insns": sum(counts), "programs": len(obj.programs)}
    except bpf.BpfError as exc:
        out |= {"loaded": False, "errno": exc.errno, "log": _full_log(path) or
                [t for t in (exc.log or exc.messages).splitlines() if t.strip()][-40:]}
    return out


def _full_log(path: Path) -> list[str]:
    """The verifier's instruction-level log (level 1) of a refused object, last lines."""
    try:
        with bpf.Object(path.read_bytes(), "pfc_log", log_level=1):
            return []
    except bpf.BpfError as exc:
        return [t for t in exc.log.splitlines() if t.strip()][-40:]


def main(paths: list[str]) -> int:
    for p in paths:
        print(json.dumps(judge(Path(p))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
