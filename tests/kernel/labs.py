"""The kernel lab for tests: one guest per kernel per test session, and the matrix's
work for each kernel in one batch.

:class:`Guests` boots a kernel the first time a test asks for it and keeps it until the
session ends (tests/kernel/conftest.py). :func:`matrix_batch` is everything the kernel
matrix (test_matrix.py) asks of one kernel, run in its guest at once: the eBPF objects
of every example (and of a large classified policy) compiled on the host for that
kernel and loaded by its verifier (tests/kernel/lab_load.py: loaded or not, the
verifier's instruction count), ``pfc verify`` over every example and every target
(cbpf, socket, tc, xdp, nft, iptables), and ``pfc load`` of an eBPF artifact with the
newest features. The three kernels' batches run side by side (one thread each, waiting
on their guests), so the matrix costs about the slowest kernel's time on two cores.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks import classbench as cb
from pfc.build import build_artifact
from pfc.frontend.pipeline import compile_path, compile_text
from pfc.kernel import lab
from pfc.verifier import kernels as vk
from tests.paths import EXAMPLES, ROOT

KERNELS = ("5.10", "6.1", "6.12")
HOOKS = ("xdp", "tc", "socket")
FRAMES = 100  # generated frames per policy in the matrix's pfc verify
LARGE = ("classbench-acl200", lambda: cb.generate("acl", 200, seed=1).text())
REFUSED_LOAD = ROOT / "examples" / "rate-limit-log.pf"  # the newest features: 5.12+


class Guests:
    """Booted lab kernels, one per series, kept for the test session."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}
        self._sessions: dict[str, lab.Session] = {}

    def get(self, kernel: str) -> lab.Session:
        with self._lock:
            lock = self._locks.setdefault(kernel, threading.Lock())
        with lock:
            if kernel not in self._sessions:
                self._sessions[kernel] = lab.boot(kernel)
            return self._sessions[kernel]

    def close(self) -> None:
        for session in self._sessions.values():
            session.close()


@dataclass
class KernelResults:
    kernel: str
    release: str = ""
    boot_seconds: float = 0.0
    loads: dict[tuple[str, str], dict] = field(default_factory=dict)  # (policy, hook)
    refused_at_compile: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    verify: dict = field(default_factory=dict)  # pfc verify's JSON report
    verify_seconds: float = 0.0
    load: object = None  # lab.Result of `pfc load` of REFUSED_LOAD
    cpu_seconds: float = 0.0  # qemu's, boot included


def _policies() -> list[tuple[str, object]]:
    out = [(p.stem, compile_path(p)) for p in EXAMPLES]
    name, text = LARGE
    return out + [(name, compile_text(text(), f"{name}.pf"))]


def compile_objects(kernel: str, into: Path) -> tuple[list[Path], dict]:
    """Every policy's eBPF objects for ``kernel``, written into ``into``; and the
    compile-time refusals (a feature the kernel lacks), by (policy, hook)."""
    version = lab.fetch(kernel).version[:2]
    vk.warm_cache([str(p) for p in EXAMPLES], version)
    objects, refused = [], {}
    for name, compiled in _policies():
        for hook in HOOKS:
            artifact, diags = build_artifact(compiled, hook, dev="dut",
                                             extra={"kernel": version})
            if artifact is None:
                refused[(name, hook)] = [d.message for d in diags]
                continue
            path = into / f"{name}.{hook}.o"
            path.write_bytes(artifact.files[f"{name}.{hook}.o"])
            objects.append(path)
    return objects, refused


def matrix_batch(guests: Guests, kernel: str, objects: list[Path]) -> KernelResults:
    vm = guests.get(kernel)
    out = KernelResults(kernel, vm.release, vm.boot_seconds)
    env = vk._env()
    loaded = vm.run([sys.executable, str(ROOT / "tests/kernel/lab_load.py"),
                     *map(str, objects)], cwd=ROOT, env=env)
    assert loaded.returncode == 0, loaded.stderr[-2000:]
    for line in loaded.stdout.splitlines():
        found = json.loads(line)
        name, hook, _ = found["object"].rsplit(".", 2)
        out.loads[(name, hook)] = found
    done = vm.run([sys.executable, "-m", "pfc.cli", "verify", "--frames", str(FRAMES),
                   "--format", "json", *map(str, EXAMPLES)], cwd=ROOT, env=env)
    out.verify_seconds = done.seconds
    out.verify = json.loads(done.stdout) if done.stdout.strip().startswith("{") else {
        "error": f"exit {done.returncode}: {done.stderr[-2000:]}"}
    out.load = vm.run([sys.executable, "-m", "pfc.cli", "load", str(REFUSED_LOAD),
                       "--target", "tc", "--dev", "lo"], cwd=ROOT,
                      env=env | {"PFC_STATE_DIR": str(vm.shared / "state")})
    out.cpu_seconds = vm.cpu_seconds()
    return out


def run_matrix(guests: Guests, into: Path) -> dict[str, KernelResults]:
    """The batches of every kernel, side by side (module doc)."""
    compiled = {}
    for kernel in KERNELS:
        folder = into / kernel
        folder.mkdir(parents=True)
        compiled[kernel] = compile_objects(kernel, folder)
    with ThreadPoolExecutor(len(KERNELS)) as pool:
        futures = {k: pool.submit(matrix_batch, guests, k, compiled[k][0])
                   for k in KERNELS}
        results = {k: f.result() for k, f in futures.items()}
    for k in KERNELS:
        results[k].refused_at_compile = compiled[k][1]
    _report(results)
    return results


def _report(results: dict[str, KernelResults]) -> None:
    """``$PFC_MATRIX_REPORT``: the matrix as JSON (docs/kernels.md is made from it)."""
    where = os.environ.get("PFC_MATRIX_REPORT")
    if not where:
        return
    Path(where).write_text(json.dumps({k: {
        "release": r.release, "boot_seconds": round(r.boot_seconds, 1),
        "verify_seconds": round(r.verify_seconds, 1), "cpu_seconds": round(r.cpu_seconds, 1),
        "loads": {f"{n}.{h}": v for (n, h), v in r.loads.items()},
        "refused_at_compile": {f"{n}.{h}": v for (n, h), v in r.refused_at_compile.items()},
        "verify": r.verify} for k, r in results.items()}, indent=1))
