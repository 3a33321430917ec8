"""``pfc verify --kernel 6.1,5.10``: the same verification, inside lab kernels.

Each kernel of the list (a series such as ``5.10``, ``6.1``, ``6.12``, or ``host``) is
booted once in the kernel lab (:mod:`pfc.kernel.lab`) and ``pfc verify`` itself runs
there, on the host's files (shared read-only), with ``--format json``: every target's
artifact is compiled for that kernel (the lowerings it has, see
:mod:`pfc.backends.ebpf.kernels`), loaded and judged by that kernel's verifier and
datapath exactly as on the host. Before booting, the artifacts are compiled on the host
for that kernel so that the guest finds clang's objects in pfc's cache (clang under
emulation is slow); the guest's own compile is still the one judged. Failing frames'
pcaps come back into ``--pcap-out`` (``./pfc-verify``), one folder per kernel.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from pfc.backends.ebpf import kernels as ebpf_kernels
from pfc.build import build_artifact
from pfc.frontend.pipeline import compile_path
from pfc.kernel import lab

HOST = "host"


@dataclass
class KernelRun:
    """One kernel's verification: its JSON report (``docs/json.md``) or why none."""

    kernel: str
    release: str = ""
    returncode: int = 0
    report: dict | None = None
    error: str = ""
    boot_seconds: float = 0.0
    pcaps: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.report is not None and bool(self.report.get("ok")) and not self.error

    def to_json(self) -> dict:
        return {"kernel": self.kernel, "release": self.release, "ok": self.ok,
                "exit": self.returncode, "error": self.error or None,
                "files": (self.report or {}).get("files", [])}


def parse_kernels(spec: str) -> list[str]:
    """``6.1,5.10,host`` → the list; ValueError naming a bad entry."""
    chosen = [k.strip() for k in spec.split(",")]
    if not any(chosen) or not all(chosen):
        raise ValueError("--kernel: give at least one kernel (5.10, 6.1, 6.12, host)")
    for k in chosen:
        if k != HOST:
            try:
                lab.debian.check_series(k)
            except lab.LabError as exc:
                raise ValueError(f"--kernel: {exc}") from exc
    return chosen


def verify_args(files: list[str], targets: str, frames: int | None, seed: int,
                pcap: str | None, pcap_out: Path) -> list[str]:
    """``pfc verify``'s arguments for the guest (JSON out, pcaps into ``pcap_out``)."""
    argv = [*files, "--targets", targets, "--seed", str(seed), "--format", "json",
            "--pcap-out", str(pcap_out)]
    if frames is not None:
        argv += ["--frames", str(frames)]
    if pcap is not None:
        argv += ["--pcap", pcap]
    return argv


def warm_cache(files: list[str], kernel: tuple[int, int]) -> None:
    """Compile every eBPF artifact and nfmod module of ``files`` for ``kernel`` on the
    host (module doc);
    any failure is left for the guest's own run to report."""
    for path in files:
        if path == "-":
            continue
        try:
            compiled = compile_path(path)
            if not compiled.ok:
                continue
            for hook in ("xdp", "tc", "socket", "nfmod"):  # nfmod: the .ko, cached
                build_artifact(compiled, hook, dev="dut", extra={"kernel": kernel})
        except Exception:  # noqa: BLE001 - the guest reports it, with its own words
            continue


def run(kernel: str, files: list[str], argv: list[str], pcap_out: Path,
        cwd: str | None = None) -> KernelRun:
    """``pfc verify ARGV`` in lab kernel ``kernel`` (a series), one boot."""
    result = KernelRun(kernel)
    try:
        image = lab.fetch(kernel)
        warm_cache(files, image.version[:2])
        with lab.boot(image) as vm:
            result.release, result.boot_seconds = vm.release, vm.boot_seconds
            guest_pcaps = vm.shared / "pcap"
            done = vm.run([sys.executable, "-m", "pfc.cli", "verify",
                           *_with_pcap_out(argv, guest_pcaps)], cwd=cwd, env=_env())
            result.pcaps = _collect(guest_pcaps, pcap_out / kernel)
    except lab.LabError as exc:
        result.error, result.returncode = str(exc), 2
        return result
    result.returncode = done.returncode
    try:
        result.report = json.loads(done.stdout)
    except ValueError:
        last = (done.stderr.strip() or done.stdout.strip()).splitlines()[-1:] or ["?"]
        result.error = f"pfc verify exited {done.returncode} in {kernel}: {last[0]}"
        return result
    if "error" in result.report and "files" not in result.report:
        result.error = str(result.report["error"])
    _rewrite_pcaps(result.report, guest_pcaps, pcap_out / kernel)
    return result


def run_host(argv: list[str], pcap_out: Path, cwd: str | None = None) -> KernelRun:
    """The same ``pfc verify`` on the running kernel (``host`` in the list), as a
    child process, so that its report has the same shape as a guest's."""
    import subprocess

    result = KernelRun(HOST, release=os.uname().release)
    done = subprocess.run([sys.executable, "-m", "pfc.cli", "verify",
                           *_with_pcap_out(argv, pcap_out / HOST)], capture_output=True,
                          text=True, cwd=cwd)
    result.returncode = done.returncode
    try:
        result.report = json.loads(done.stdout)
    except ValueError:
        last = (done.stderr.strip() or done.stdout.strip()).splitlines()[-1:] or ["?"]
        result.error = f"pfc verify exited {done.returncode}: {last[0]}"
    return result


def _with_pcap_out(argv: list[str], where: Path) -> list[str]:
    out = list(argv)
    out[out.index("--pcap-out") + 1] = str(where)
    return out


def _env() -> dict[str, str]:
    """The host's HOME and cache (pfc's object cache is read there), PATH as the host's."""
    keep = ("HOME", "XDG_CACHE_HOME", "PATH", "TMPDIR")
    return {k: os.environ[k] for k in keep if k in os.environ}


def _collect(guest: Path, into: Path) -> list[str]:
    if not guest.is_dir() or not any(guest.iterdir()):
        return []
    into.mkdir(parents=True, exist_ok=True)
    copied = []
    for item in guest.iterdir():
        target = into / item.name
        (shutil.copytree if item.is_dir() else shutil.copy2)(item, target)
        copied.append(str(target))
    return copied


def _rewrite_pcaps(report: dict, guest: Path, into: Path) -> None:
    """Failing frames' pcap paths (and replay lines) as they are on the host."""
    for entry in report.get("files", []):
        for target in entry.get("targets", []):
            if target.get("pcap"):
                target["pcap"] = target["pcap"].replace(str(guest), str(into))
            target["replay"] = [line.replace(str(guest), str(into))
                                for line in target.get("replay", [])]


def running_kernel() -> str:
    return ebpf_kernels.shown(ebpf_kernels.running())
