"""The lab's initramfs: busybox, the modules that reach the host's files, and /init.

/init (``INIT``, run by busybox sh) loads virtio, 9p and overlay,
mounts the host's ``/`` read-only over 9p (tag ``host``) under a RAM overlay, mounts
the session's exchange folder read-write over 9p (tag ``xchg``) at the same path as on
the host, binds the kernel's own modules at ``/lib/modules/RELEASE`` (so ``modprobe``
in the guest finds nf_tables and friends) and puts its config at
``/boot/config-RELEASE`` (libbpf reads ``__kconfig`` externs such as ``CONFIG_HZ``
there, as on a Debian host), and runs the agent (:mod:`.agent`)
as the new root (``switch_root``: the kernel's own helpers, such as ``modprobe`` for a
module it wants, then run from the host's userland too). When the agent ends, the
guest powers off.

The archive is written here (``newc``, uncompressed: the kernel unpacks it as it is)
and cached beside the kernel, keyed by a hash of what it holds.
"""

from __future__ import annotations

import hashlib
import lzma
import os
import shutil
import stat
import struct
import subprocess
from pathlib import Path

from pfc.kernel.lab.debian import Kernel
from pfc.kernel.lab.errors import LabError

BUSYBOX = "/bin/busybox"
MODULES = ("virtio_pci", "9pnet_virtio", "9p", "overlay")
AGENT = "agent.sh"

INIT = r"""#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in $(cat /modules.order); do
    insmod "/modules/$m" 2>/dev/null || echo "pfc-lab: insmod $m failed"
done
fail() { echo "pfc-lab: $*"; poweroff -f; }
X=$(sed -n 's/.*pfc.xchg=\([^ ]*\).*/\1/p' /proc/cmdline)
R=$(uname -r)
echo "pfc-lab: modules $(cat /proc/uptime)"
mkdir -p /lower /rw /new
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144,cache=loose host /lower \
    || fail "cannot mount the host's files (9p)"
mount -t tmpfs -o mode=0755 rw /rw
mkdir -p /rw/upper /rw/work
mount -t overlay overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work /new \
    || fail "cannot mount the overlay"
mount -t proc proc /new/proc
mount -t sysfs sys /new/sys
mount -t devtmpfs dev /new/dev
mkdir -p /new/dev/pts /new/dev/shm /new/run /new/sys/fs/bpf
mount -t devpts devpts /new/dev/pts
mount -t tmpfs shm /new/dev/shm
mount -t tmpfs run /new/run
mount -t bpf bpf /new/sys/fs/bpf
mount -t tracefs tracefs /new/sys/kernel/tracing 2>/dev/null
mkdir -p "/new$X" && mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 xchg "/new$X" \
    || fail "cannot mount the exchange folder (9p)"
echo "pfc-lab: mounted $(cat /proc/uptime)"
K=$(cat "/new$X/kernel.root")
mkdir -p "/new/usr/lib/modules/$R" \
    && mount -o bind "/new$K/lib/modules/$R" "/new/usr/lib/modules/$R"
mkdir -p /new/boot && cp "/new$K/boot/config-$R" /new/boot/
exec switch_root /new /bin/sh "$X/agent.sh" "$X"
"""


def build(kernel: Kernel) -> Path:
    """The initramfs for ``kernel`` (built once, then cached)."""
    files = _contents(kernel)
    digest = hashlib.sha256()
    for name, (mode, data) in sorted(files.items()):
        digest.update(f"{name}\0{mode}\0".encode() + hashlib.sha256(data).digest())
    path = kernel.root.parent / f"initramfs-{digest.hexdigest()[:16]}.cpio"
    if not path.exists():
        for old in kernel.root.parent.glob("initramfs-*.cpio"):
            old.unlink()
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(newc(files))
        tmp.rename(path)
    return path


def _contents(kernel: Kernel) -> dict[str, tuple[int, bytes]]:
    if not os.path.exists(BUSYBOX):
        raise LabError(f"{BUSYBOX} is missing: install busybox-static (scripts/setup)")
    files: dict[str, tuple[int, bytes]] = {}
    for d in ("bin", "dev", "proc", "sys", "modules"):
        files[d] = (stat.S_IFDIR | 0o755, b"")
    files["bin/busybox"] = (stat.S_IFREG | 0o755, Path(BUSYBOX).read_bytes())
    files["init"] = (stat.S_IFREG | 0o755, INIT.encode())
    order = module_order(kernel, MODULES)
    for rel in order:
        data = unsigned(_module_bytes(kernel.modules / rel))
        files[f"modules/{_plain_name(rel)}"] = (stat.S_IFREG | 0o644, data)
    listing = "".join(_plain_name(rel) + "\n" for rel in order)
    files["modules.order"] = (stat.S_IFREG | 0o644, listing.encode())
    return files


def module_order(kernel: Kernel, wanted: tuple[str, ...]) -> list[str]:
    """The modules ``wanted`` and what they depend on (modules.dep), dependencies
    first; built-in ones (absent from modules.dep) are left out."""
    dep_file = kernel.modules / "modules.dep"
    if not dep_file.exists():
        raise LabError(f"{dep_file} is missing: fetch the kernel again")
    deps: dict[str, list[str]] = {}
    for line in dep_file.read_text().splitlines():
        target, _, rest = line.partition(":")
        deps[target] = rest.split()
    by_name = {_module_name(path): path for path in deps}
    order: list[str] = []

    def visit(path: str) -> None:
        for dep in deps[path]:
            visit(dep)
        if path not in order:
            order.append(path)

    for name in wanted:
        if name in by_name:
            visit(by_name[name])
    return order


def _module_name(path: str) -> str:
    base = path.rsplit("/", 1)[-1]
    return base.split(".ko", 1)[0].replace("-", "_")


def _plain_name(path: str) -> str:
    return path.rsplit("/", 1)[-1].split(".ko", 1)[0] + ".ko"


def _module_bytes(path: Path) -> bytes:
    """A module's ELF, uncompressed (busybox insmod reads plain .ko)."""
    if path.suffix == ".xz":
        return lzma.decompress(path.read_bytes())
    if path.suffix == ".zst":
        if shutil.which("zstd") is None:
            raise LabError(f"{path.name} is zstd-compressed: install zstd")
        return subprocess.run(["zstd", "-dc", str(path)], capture_output=True,
                              check=True).stdout
    if path.suffix == ".gz":
        import gzip

        return gzip.decompress(path.read_bytes())
    return path.read_bytes()


def _decompress(payload: bytes) -> bytes | None:
    """A bzImage payload uncompressed: xz, or zstd (its last 4 bytes are the size the
    kernel's build appends); None when neither applies."""
    if payload.startswith(b"\xfd7zXZ\x00"):
        return lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(payload)
    if payload.startswith(b"\x28\xb5\x2f\xfd") and shutil.which("zstd"):
        done = subprocess.run(["zstd", "-dc"], input=payload[:-4], capture_output=True)
        return done.stdout if done.returncode == 0 else None
    return None


SIG_MAGIC = b"~Module signature appended~\n"


def unsigned(module: bytes) -> bytes:
    """The module without its appended signature: the kernel (signatures not enforced
    in Debian's) then skips checking it, which under TCG costs ~0.2 s a module."""
    if not module.endswith(SIG_MAGIC):
        return module
    info = len(module) - len(SIG_MAGIC) - 12  # struct module_signature
    (sig_len,) = struct.unpack_from(">I", module, info + 8)
    return module[:info - sig_len]


def newc(files: dict[str, tuple[int, bytes]]) -> bytes:
    """A cpio archive in the ``newc`` format the kernel unpacks (directories first)."""
    out = bytearray()
    entries = sorted(files.items(), key=lambda kv: (kv[0].count("/"), kv[0]))
    for ino, (name, (mode, data)) in enumerate([*entries, ("TRAILER!!!", (0, b""))], 1):
        _entry(out, ino, name, mode, data)
    out += b"\0" * (-len(out) % 512)
    return bytes(out)


def _entry(out: bytearray, ino: int, name: str, mode: int, data: bytes) -> None:
    raw = name.encode() + b"\0"
    fields = (ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(raw), 0)
    out += b"070701" + "".join(f"{f:08X}" for f in fields).encode() + raw
    out += b"\0" * (-len(out) % 4)
    out += data
    out += b"\0" * (-len(out) % 4)


def vmlinux(kernel: Kernel) -> Path:
    """The kernel's uncompressed ELF image, cached beside it: qemu boots it through its
    PVH entry (``CONFIG_PVH``, set in Debian's kernels) with no decompressor, which
    under TCG saves ~14 s of a ~24 s boot for an xz-compressed kernel (Debian 11 and
    12; docs/kernels.md). zstd (Debian 13) needs the ``zstd`` tool; without it, or for
    another format, the compressed image boots as it is."""
    path = kernel.root.parent / "vmlinux"
    if path.exists():
        return path
    image = kernel.vmlinuz.read_bytes()
    if image[0x202:0x206] != b"HdrS":
        raise LabError(f"{kernel.vmlinuz.name} is not a bzImage")
    setup = (image[0x1F1] or 4) + 1
    offset, length = struct.unpack_from("<II", image, 0x248)
    payload = image[setup * 512 + offset:setup * 512 + offset + length]
    elf = _decompress(payload)
    if elf is None:
        return kernel.vmlinuz  # the guest's own decompressor, slower under TCG
    if not elf.startswith(b"\x7fELF"):
        raise LabError(f"{kernel.vmlinuz.name}: the payload is not an ELF image")
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(elf)
    tmp.rename(path)
    return path
