"""The Debian package (#27): built with Debian's tooling, installed with apt into a
clean Debian 12 root, run there.

``dpkg-buildpackage -us -uc -b`` builds pfc_*.deb from a copy of the checkout (the
vendored wheels of debian/vendor.txt come from a wheelhouse downloaded once). mmdebstrap
makes a Debian 12 root holding the packages of debian/control's Depends. The cache, in
~/.cache/pfc/install/: the wheelhouse (deb-wheels/), the root as debian12-HASH.tar (HASH:
of the Depends), the downloaded .debs (apt-archives/). Each run unpacks the root into a
tmp directory, runs ``apt install ./pfc_*.deb`` in it (chroot, in a mount namespace of
its own), and runs pfc there: --version, check, compile of an example for every target,
every module and dependency imported from the launcher's path, a chart drawn with
Debian's matplotlib, pfc.service and the man page in place.

Slow, so marked ``slow``, and it needs root; `make test` runs it like every test
(.ci/run). Measured on a busy 2-core machine: with a warm cache ~2.5 minutes (the build
~45 s, lintian ~25 s); a cold cache adds ~15 minutes (mmdebstrap downloads ~250 MB of
packages and writes a 1.4 GB root).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest

from pfc.cli.main import COMMANDS
from pfc.kernel import toolchain
from tests.paths import ROOT

CACHE = Path.home() / ".cache" / "pfc" / "install"
MIRRORS = ("deb http://deb.debian.org/debian bookworm main",
           "deb http://deb.debian.org/debian bookworm-updates main",
           "deb http://deb.debian.org/debian-security bookworm-security main")
SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
TARGETS = ("cbpf", "socket", "tc", "xdp", "nft", "iptables", "ir")
TOOLS = ("dpkg-buildpackage", "dh", "mmdebstrap", "lintian", "unshare")

needs_root_and_tools = pytest.mark.skipif(
    os.geteuid() != 0 or any(shutil.which(t, path=SYSTEM_PATH) is None for t in TOOLS),
    reason="needs root (chroot, mmdebstrap) and Debian's packaging tools: "
           "apt install debhelper dh-python pybuild-plugin-pyproject python3-pip "
           "mmdebstrap lintian (scripts/setup does)")


def sh(argv: list, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess:
    """Run with Debian's own PATH and nothing of the test run's environment."""
    base = {"PATH": SYSTEM_PATH, "HOME": str(Path.home()), "LANG": "C.UTF-8"}
    proc = subprocess.run([str(a) for a in argv], cwd=cwd, env=base | env, text=True,
                          capture_output=True)
    if proc.returncode != 0:
        pytest.fail(f"{' '.join(map(str, argv))} exited {proc.returncode}\n"
                    f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return proc


def depends() -> list[str]:
    """The package names of debian/control's Depends (no substitutions, no versions)."""
    text = (ROOT / "debian" / "control").read_text()
    field = re.search(r"^Depends:(.*?)(?=^\S)", text, re.S | re.M).group(1)
    names = [re.sub(r"\(.*?\)", "", d).strip() for d in field.split(",")]
    return sorted({n for n in names if n and not n.startswith("${")} | {"python3"})


def test_the_man_page_names_every_command():
    page = (ROOT / "debian" / "pfc.1").read_text()
    section = page.split(".SH COMMANDS\n")[1].split(".SH ")[0]
    named = re.findall(r"^\.B (\w+)$", section, re.M)
    assert named == [c.name for c in COMMANDS]


def test_the_include_path_needs_no_gcc(monkeypatch):
    """The package pulls clang, not gcc: the asm/ headers' directory comes from clang
    (without it, every eBPF compile in the Debian root failed on <asm/types.h>)."""
    which = shutil.which
    monkeypatch.setattr(shutil, "which", lambda tool, *a, **k:
                        None if tool == "gcc" else which(tool, *a, **k))
    toolchain.multiarch.cache_clear()
    try:
        assert toolchain.multiarch() == sysconfig.get_config_var("MULTIARCH")
        assert f"-I/usr/include/{toolchain.multiarch()}" in toolchain.command("x.xdp")
    finally:
        toolchain.multiarch.cache_clear()


def test_depends_are_read_from_control():
    names = depends()
    assert {"clang", "libbpf-dev", "python3-nftables", "python3-matplotlib"} <= set(names)
    assert not [n for n in names if " " in n or "$" in n]


# ---------------------------------------------------------------------------- builds

@pytest.fixture(scope="module")
def deb(tmp_path_factory) -> Path:
    return build_deb(tmp_path_factory.mktemp("deb"))


def source_files() -> list[str]:
    files = sh(["git", "ls-files", "-co", "--exclude-standard", "-z"], ROOT).stdout
    return sorted(rel for rel in filter(None, files.split("\0")) if (ROOT / rel).is_file())


def source_digest() -> str:
    """Of every file the .deb is built from, names and contents (not the tests)."""
    h = hashlib.sha256()
    for rel in source_files():
        if not rel.startswith("tests/"):
            h.update(rel.encode() + b"\0" + (ROOT / rel).read_bytes() + b"\0")
    return h.hexdigest()[:16]


def build_deb(base: Path) -> Path:
    """pfc_*.deb, built by dpkg-buildpackage from a copy of the checkout in ``base``;
    kept in the cache under the sources' digest (the last one only), so this test and
    the container image's (tests/tools/test_fleet_image.py) build it once."""
    digest = source_digest()
    kept = CACHE / f"deb-{digest}"
    if kept.is_dir() and list(kept.glob("pfc_*.deb")):
        return next(kept.glob("pfc_*.deb"))
    src = base / "pfc"
    for rel in source_files():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, src / rel)
    wheels = CACHE / "deb-wheels"
    sh(["python3", "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps",
        "--only-binary", ":all:", "-d", wheels, "-r", src / "debian" / "vendor.txt"], base)
    sh(["dpkg-buildpackage", "-us", "-uc", "-b"], src, PFC_WHEELHOUSE=str(wheels))
    built, = base.glob("pfc_*.deb")
    for old in CACHE.glob("deb-*/"):
        if old.name != "deb-wheels":
            shutil.rmtree(old)
    kept.mkdir(parents=True)
    return Path(shutil.copy2(built, kept))


def debian12_root() -> Path:
    """The cached tarball of a Debian 12 root with every Depends installed."""
    names = depends()
    key = hashlib.sha256(" ".join(names + list(MIRRORS)).encode()).hexdigest()[:12]
    tarball = CACHE / f"debian12-{key}.tar"
    if tarball.exists():
        return tarball
    archives = CACHE / "apt-archives"
    archives.mkdir(parents=True, exist_ok=True)
    partial = tarball.with_suffix(".partial.tar")
    sh(["mmdebstrap", "--variant=apt", "--include=" + ",".join(names),
        "--skip=download/empty",
        "--setup-hook=mkdir -p \"$1\"/var/cache/apt/archives/",
        f"--setup-hook=sync-in {archives}/ /var/cache/apt/archives/",
        f"--customize-hook=sync-out /var/cache/apt/archives/ {archives}",
        "bookworm", partial, *MIRRORS])
    partial.rename(tarball)
    return tarball


@pytest.fixture(scope="module")
def chroot(deb, tmp_path_factory) -> Path:
    """A fresh Debian 12 root with pfc installed by apt from the .deb."""
    root = tmp_path_factory.mktemp("debian12")
    sh(["tar", "-xf", debian12_root(), "-C", root])
    shutil.copy(deb, root / "tmp")
    shutil.copy("/etc/resolv.conf", root / "etc" / "resolv.conf")
    in_root(root, f"apt-get install -y -q ./{deb.name}", cwd="/tmp")
    return root


def in_root(root: Path, script: str, cwd: str = "/root") -> subprocess.CompletedProcess:
    """``script`` in ``root`` as chroot, with Debian's PATH and nothing of the test
    run's environment, in mount and PID namespaces of its own: /proc, /sys, /dev and
    an empty /run are mounted there, and gone with it."""
    mounts = (f"mount -t sysfs sysfs {root}/sys && mount --rbind /dev {root}/dev && "
              f"mount -t tmpfs tmpfs {root}/run")
    inner = f"cd {cwd}\n{script}"
    return sh(["unshare", "--mount", "--pid", "--fork", f"--mount-proc={root}/proc",
               "sh", "-ec", f"{mounts}\nexec chroot {root} sh -ec \"$0\"", inner],
              DEBIAN_FRONTEND="noninteractive")


# ----------------------------------------------------------------------------- tests

@pytest.mark.slow
@pytest.mark.timeout(3600)
@needs_root_and_tools
def test_lintian_is_clean(deb):
    """Errors and warnings only (docs/operate.md explains the one override)."""
    out = sh(["lintian", "--fail-on", "error,warning", deb]).stdout
    assert [line for line in out.splitlines() if line[:2] in ("E:", "W:")] == []


@pytest.mark.slow
@pytest.mark.timeout(3600)
@needs_root_and_tools
def test_the_package_installs_and_runs_in_debian12(chroot):
    assert in_root(chroot, "pfc --version").stdout.strip() == "pfc 0.1.0"
    shutil.copytree(ROOT / "examples", chroot / "root" / "examples")
    in_root(chroot, "pfc check examples/*.pf")
    for target in TARGETS:
        out = in_root(chroot, f"pfc compile examples/edge-drop.pf --target {target} "
                              f"-o out/{target}/")
        assert "wrote " in out.stdout + out.stderr
    assert (chroot / "root" / "out" / "xdp" / "edge-drop.xdp.o").stat().st_size > 0


IMPORTS = """
import importlib, sys
sys.path[0:0] = ["/usr/lib/pfc", "/usr/lib/pfc/vendor"]  # as /usr/bin/pfc
from importlib import metadata
from packaging.requirements import Requirement
bad = []
for req in map(Requirement, metadata.requires("pfc")):
    if req.marker and not req.marker.evaluate({"extra": ""}):
        continue
    have = metadata.version(req.name)
    if not req.specifier.contains(have, prereleases=True):
        bad.append(f"{req}: {have}")
for name in sys.argv[1:]:
    if not name.endswith(".__main__"):
        importlib.import_module(name)
import z3, pygls, lsprotocol, lark, hypothesis, matplotlib, numpy, nftables
from pfc.bench.report import plot
row = {"name": "xdp", "kind": "target", "status": "ok", "test_run_ns": {"mean": 35.0},
       "traffic": {"cpu_ns_per_packet": 120.0, "pps": 1.5e6}}
plot({"rows": [row], "file": "x.pf", "duration": 1}, __import__("pathlib").Path("c.png"))
print(bad, z3.__file__, nftables.__file__, matplotlib.__version__)
"""


@pytest.mark.slow
@pytest.mark.timeout(3600)
@needs_root_and_tools
def test_every_module_and_requirement_resolves_in_debian12(chroot):
    from tests.tools.test_install import _module_names
    (chroot / "root" / "imports.py").write_text(IMPORTS)
    out = in_root(chroot, "python3 -I imports.py " + " ".join(_module_names())).stdout
    assert out.startswith("[] /usr/lib/pfc/vendor/z3/"), out
    assert "/usr/lib/python3/dist-packages/nftables/" in out
    assert (chroot / "root" / "c.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
@pytest.mark.kernel
@pytest.mark.timeout(3600)
@needs_root_and_tools
def test_verify_in_the_kernel_with_debian12s_libraries(chroot):
    """Every target run in the kernel from the Debian root: its pyroute2 0.7.2,
    python3-nftables, scapy 2.5, clang 14 and libbpf 1.1."""
    shutil.copytree(ROOT / "examples", chroot / "root" / "verify", dirs_exist_ok=True)
    out = in_root(chroot, "pfc verify verify/edge-drop.pf --frames 200 --format json")
    rows = json.loads(out.stdout)["files"][0]["targets"]
    kernel = ("cbpf", "socket", "tc", "xdp", "nft", "iptables")  # nfmod, u32: not run
    assert {r["target"]: r["status"] for r in rows if r["target"] in kernel} == \
        dict.fromkeys(kernel, "agree")


@pytest.mark.slow
@pytest.mark.timeout(3600)
@needs_root_and_tools
def test_the_unit_and_the_man_page_are_installed(chroot):
    unit = (chroot / "lib/systemd/system/pfc.service").read_text()
    assert "ExecStart=/usr/bin/pfc apply" in unit
    assert (chroot / "etc/systemd/system/sysinit.target.wants/pfc.service").is_symlink()
    assert not (chroot / "etc/pfc/pfc.conf").exists()  # the unit waits for a config
    assert oct((chroot / "var/lib/pfc").stat().st_mode & 0o777) == "0o700"
    assert (chroot / "usr/share/man/man1/pfc.1.gz").exists()
    assert (chroot / "usr/share/doc/pfc/examples/pfc.conf.example").exists()
