"""The kernel lab (pfc.kernel.lab): its parts without qemu, then a booted 6.1 guest —
commands, exit status, output, time limits, modules, and no qemu left behind."""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pfc.kernel import lab
from pfc.kernel.lab import debian, initramfs
from tests.kernel.conftest import needs_lab
from tests.paths import ROOT

# ------------------------------------------------------------------ without qemu


def test_the_archive_is_what_cpio_reads(tmp_path):
    files = {"bin": (0o040755, b""), "bin/x": (0o100755, b"#!/bin/sh\n"),
             "init": (0o100755, b"hello")}
    archive = tmp_path / "a.cpio"
    archive.write_bytes(initramfs.newc(files))
    listed = subprocess.run(["cpio", "-it", "--quiet"], stdin=archive.open("rb"),
                            capture_output=True, text=True, check=True).stdout.split()
    assert listed == ["bin", "init", "bin/x"]
    out = tmp_path / "out"
    out.mkdir()
    subprocess.run(["cpio", "-id", "--quiet"], stdin=archive.open("rb"), cwd=out,
                   check=True)
    assert (out / "init").read_bytes() == b"hello" and os.access(out / "bin/x", os.X_OK)


def test_module_order_puts_dependencies_first(tmp_path):
    root = tmp_path / "root"
    mods = root / "lib/modules/6.1.0-1-amd64"
    mods.mkdir(parents=True)
    (mods / "modules.dep").write_text(
        "kernel/fs/9p/9p.ko: kernel/net/9p/9pnet.ko kernel/fs/netfs/netfs.ko\n"
        "kernel/net/9p/9pnet.ko:\nkernel/fs/netfs/netfs.ko:\n"
        "kernel/net/9p/9pnet_virtio.ko: kernel/net/9p/9pnet.ko\n"
        "kernel/fs/overlayfs/overlay.ko:\n")
    kernel = debian.Kernel("6.1", "6.1.0-1-amd64", "6.1.1-1", "bookworm", root)
    order = initramfs.module_order(kernel, ("9pnet_virtio", "9p", "overlay", "absent"))
    assert order == ["kernel/net/9p/9pnet.ko", "kernel/net/9p/9pnet_virtio.ko",
                     "kernel/fs/netfs/netfs.ko", "kernel/fs/9p/9p.ko",
                     "kernel/fs/overlayfs/overlay.ko"]


def test_a_signature_is_cut_off():
    body, sig = b"\x7fELF" + bytes(60), b"S" * 300
    info = struct.pack(">BBBBBxxxI", 0, 0, 2, 0, 0, len(sig))
    signed = body + sig + info + initramfs.SIG_MAGIC
    assert initramfs.unsigned(signed) == body
    assert initramfs.unsigned(body) == body


def test_a_private_apt_names_the_suite_and_its_security_suite(monkeypatch):
    monkeypatch.setenv("PFC_DEBIAN_MIRROR", "http://mirror.example/debian")
    monkeypatch.setenv("PFC_DEBIAN_SECURITY_MIRROR", "http://mirror.example/debian-security")
    text = debian.sources_list("bookworm")
    assert "http://mirror.example/debian bookworm main" in text
    assert "http://mirror.example/debian-security bookworm-security main" in text
    assert "security" not in debian.sources_list("sid")


def test_versions_and_series():
    assert debian.version_tuple("6.12.48+deb13-amd64") == (6, 12, 48)
    assert debian.check_series("5.10") == "5.10"
    with pytest.raises(lab.LabError, match="not a kernel series"):
        debian.check_series("6.1; rm -rf /")


# ------------------------------------------------------------------ in a guest

@pytest.fixture(scope="module")
def vm(guests):
    return guests.get("6.1")


@pytest.mark.lab
@needs_lab
@pytest.mark.timeout(1800)
def test_commands_run_in_the_guest(vm, tmp_path):
    assert vm.release.startswith("6.1.")
    done = vm.run("uname -r; echo err >&2; pwd; echo $PFC_X; cat; exit 3", cwd=tmp_path,
                  env={"PFC_X": "a b'c"}, stdin=b"in\n")
    assert done.returncode == 3
    assert done.stdout.split("\n")[:4] == [vm.release, str(tmp_path), "a b'c", "in"]
    assert done.stderr == "err\n"
    listed = vm.run(["ls", str(ROOT / "examples")])
    assert "edge-drop.pf" in listed.stdout.split()
    written = vm.run(f"echo hi > {vm.shared}/from-guest")
    assert written.returncode == 0 and (vm.shared / "from-guest").read_text() == "hi\n"
    host = vm.run(f"echo no > {tmp_path}/x")  # the host's files are read-only to it...
    assert host.returncode == 0 and not (tmp_path / "x").exists()  # ...writes stay inside


@pytest.mark.lab
@needs_lab
@pytest.mark.timeout(1800)
def test_a_command_out_of_time_is_ended(vm):
    done = vm.run("sleep 30", timeout=1)
    assert done.timed_out and done.returncode == 124
    assert vm.run("true").returncode == 0  # the guest goes on


@pytest.mark.lab
@needs_lab
@pytest.mark.timeout(1800)
def test_the_guest_loads_its_own_modules(vm):
    done = vm.run("modprobe nf_tables && nft add table inet t && nft list tables && "
                  "grep -c . /proc/modules")
    assert done.returncode == 0, done.stderr
    assert "table inet t" in done.stdout


@pytest.mark.lab
@needs_lab
@pytest.mark.timeout(1800)
def test_no_qemu_outlives_its_parent(tmp_path):
    """SIGKILL the Python process that booted a guest: the kernel kills qemu too
    (PR_SET_PDEATHSIG), nothing is left running."""
    script = ("import sys; from pfc.kernel import lab; vm = lab.boot('6.1'); "
              "print(vm.pid, flush=True); sys.stdin.read()")
    parent = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, cwd=ROOT)
    qemu_pid = int(parent.stdout.readline())
    assert Path(f"/proc/{qemu_pid}/cmdline").read_bytes().startswith(b"qemu-system")
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    while _alive(qemu_pid):  # the kernel delivers the parent's death: awaited
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


# ------------------------------------------------------------------ pfc verify --kernel

def _pfc(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pfc.cli", *argv], capture_output=True,
                          text=True, cwd=ROOT)


@pytest.mark.parametrize("spec", ["6.x", "", "6.1,,7", "6.1;reboot"])
def test_verify_kernel_usage_errors(spec):
    done = _pfc("verify", "--kernel", spec, "examples/edge-drop.pf")
    assert done.returncode == 2, done.stderr
    assert "kernel" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.lab
@needs_lab
@pytest.mark.timeout(3600)
def test_verify_inside_a_lab_kernel_and_the_host(tmp_path):
    done = _pfc("verify", "--kernel", "5.10,host", "--targets", "tc,nft", "--frames", "40",
                "--format", "json", "--pcap-out", str(tmp_path), "examples/edge-drop.pf",
                "examples/rate-limit-log.pf")
    report = json.loads(done.stdout)
    assert [k["kernel"] for k in report["kernels"]] == ["5.10", "host"]
    guest, host = report["kernels"]
    assert guest["release"].startswith("5.10.") and host["release"] == os.uname().release
    statuses = {(k["kernel"], f["file"].rsplit("/", 1)[-1], t["target"]): t["status"]
                for k in report["kernels"] for f in k["files"] for t in f["targets"]}
    assert statuses == {
        ("5.10", "edge-drop.pf", "tc"): "agree", ("5.10", "edge-drop.pf", "nft"): "agree",
        ("5.10", "rate-limit-log.pf", "tc"): "error",  # named: 5.10 lacks its features
        ("5.10", "rate-limit-log.pf", "nft"): "agree",
        ("host", "edge-drop.pf", "tc"): "agree", ("host", "edge-drop.pf", "nft"): "agree",
        ("host", "rate-limit-log.pf", "tc"): "agree",
        ("host", "rate-limit-log.pf", "nft"): "agree"}
    assert done.returncode == 1 and not report["ok"]
    assert not guest["ok"] and host["ok"]


@pytest.mark.lab
@needs_lab
@pytest.mark.timeout(1800)
def test_a_guest_booted_in_a_thread_outlives_the_thread():
    """PR_SET_PDEATHSIG follows the thread that forked qemu: a guest booted from a pool's
    thread must not die when that thread ends (the matrix boots its guests so)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        vm = pool.submit(lab.boot, "5.10").result()
    try:
        assert vm.run("true").returncode == 0
    finally:
        vm.close()
