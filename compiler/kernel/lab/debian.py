"""Debian's kernel packages, fetched and unpacked into a cache, never installed.

``fetch("6.1")`` resolves a series to the newest ``linux-image-<abi>-amd64`` of the
Debian suite that carries it, downloads that package, its headers and kbuild with
``apt-get download`` and unpacks them with ``dpkg-deb -x`` into
``CACHE/<abi>/root`` (``CACHE``: ``$PFC_KERNEL_DIR``, else ``~/.cache/pfc/kernels``).
The host's ``/boot``, ``/lib/modules`` and apt sources are never touched: apt runs
with a private ``APT_CONFIG`` (its own sources list, lists, archives and state) per
suite under ``CACHE/apt/<suite>``. The mirror is the one the host's apt sources name
for Debian (``$PFC_DEBIAN_MIRROR`` and ``$PFC_DEBIAN_SECURITY_MIRROR`` override it).

A series already unpacked is used as it is, with no network (``refresh=True`` looks
again for a newer package). Series and suites (what Debian's archive holds):
``5.10`` bullseye, ``6.1`` bookworm, ``6.12`` trixie; any other series is looked for in
trixie, bookworm-backports and sid, in that order.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pfc.kernel.lab.errors import LabError

ARCH = "amd64"
KNOWN_SUITES = {"5.10": ("bullseye",), "6.1": ("bookworm",), "6.12": ("trixie",)}
OTHER_SUITES = ("trixie", "bookworm-backports", "sid")
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
_SERIES = re.compile(r"^\d+\.\d+$")
_ABI = re.compile(r"^[0-9][0-9A-Za-z.+~-]*$")


@dataclass(frozen=True)
class Kernel:
    """One unpacked kernel: ``release`` is its ``uname -r`` (and its modules' dir)."""

    series: str
    release: str
    package_version: str
    suite: str
    root: Path  # holds boot/, lib/modules/, usr/src/

    @property
    def vmlinuz(self) -> Path:
        return self.root / "boot" / f"vmlinuz-{self.release}"

    @property
    def modules(self) -> Path:
        return self.root / "lib" / "modules" / self.release

    @property
    def headers(self) -> Path:
        """The kbuild tree: ``make -C HEADERS M=...`` builds modules against it."""
        return self.root / "usr" / "src" / f"linux-headers-{self.release}"

    @property
    def version(self) -> tuple[int, ...]:
        return version_tuple(self.release)


def version_tuple(release: str) -> tuple[int, ...]:
    """``6.1.0-37-amd64`` → (6, 1, 0); ``6.12.48+deb13-amd64`` → (6, 12, 48)."""
    found = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", release)
    if not found:
        raise LabError(f"`{release}` is not a kernel release")
    return tuple(int(g or 0) for g in found.groups())


def cache_root() -> Path:
    env = os.environ.get("PFC_KERNEL_DIR")
    return Path(env) if env else Path.home() / ".cache" / "pfc" / "kernels"


def check_series(spec: str) -> str:
    if not _SERIES.match(spec):
        raise LabError(f"`{spec}` is not a kernel series: give one like 5.10, 6.1, 6.12")
    return spec


def cached(spec: str) -> Kernel | None:
    """The newest unpacked kernel of series ``spec`` in the cache, or None."""
    found = []
    for marker in cache_root().glob("*/kernel.json"):
        info = json.loads(marker.read_text())
        if info["series"] == spec:
            found.append(_kernel(info, marker.parent / "root"))
    return max(found, key=lambda k: _natural(k.release), default=None)


def fetch(spec: str, refresh: bool = False) -> Kernel:
    """The kernel of series ``spec``, from the cache or fetched into it (module doc)."""
    check_series(spec)
    have = cached(spec)
    if have is not None and not refresh:
        return have
    suites = KNOWN_SUITES.get(spec, OTHER_SUITES)
    for suite in suites:
        apt = PrivateApt(suite)
        image = apt.newest(spec)
        if image is None:
            continue
        release = image.removeprefix("linux-image-")
        if have is not None and have.release == release:
            return have
        return _unpack(spec, suite, apt, image, release)
    raise LabError(f"no Debian kernel of series {spec} in {', '.join(suites)} ({ARCH})")


def _unpack(spec: str, suite: str, apt: PrivateApt, image: str, release: str) -> Kernel:
    if not _ABI.match(release):
        raise LabError(f"unexpected kernel package name `{image}`")
    names = [image, *apt.header_packages(f"linux-headers-{release}")]
    final = cache_root() / release
    cache_root().mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache_root(), prefix=".unpack-") as tmp:
        work = Path(tmp)
        debs = apt.download(names, work / "debs")
        root = work / "root"
        for deb in debs:
            _run(["dpkg-deb", "-x", str(deb), str(root)], f"unpacking {deb.name}")
        if (root / "usr" / "lib" / "modules").is_dir() and not (root / "lib").exists():
            (root / "lib").symlink_to("usr/lib")  # merged /usr (trixie on)
        _run(["depmod", "-b", str(root), release], f"depmod of {release}")
        info = {"series": spec, "release": release, "suite": suite,
                "package_version": apt.version(image), "packages": names}
        (work / "kernel.json").write_text(json.dumps(info, indent=1) + "\n")
        shutil.rmtree(work / "debs")
        if final.exists():
            shutil.rmtree(final)
        work.rename(final)
        final.chmod(0o755)
    return _kernel(info, final / "root")


def _kernel(info: dict, root: Path) -> Kernel:
    return Kernel(info["series"], info["release"], info["package_version"], info["suite"],
                  root)


def _natural(text: str) -> tuple:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text))


def _run(argv: list[str], what: str, env: dict | None = None, cwd: Path | None = None
         ) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd)
    except FileNotFoundError as exc:
        raise LabError(f"{what}: {argv[0]} is not installed (scripts/setup)") from exc
    if done.returncode:
        last = (done.stderr.strip() or done.stdout.strip()).splitlines()[-3:]
        raise LabError(f"{what} failed: {' / '.join(last)}")
    return done.stdout


class PrivateApt:
    """apt-get and apt-cache on one Debian suite, with state of their own."""

    def __init__(self, suite: str):
        self.suite = suite
        self.dir = cache_root() / "apt" / suite
        self.config = self.dir / "apt.conf"
        self._updated = False

    def _env(self) -> dict:
        if not self.config.exists():
            self._write_config()
        return os.environ | {"APT_CONFIG": str(self.config), "LC_ALL": "C"}

    def _write_config(self) -> None:
        for sub in ("lists/partial", "archives/partial", "state", "cache"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        (self.dir / "state" / "status").touch()
        (self.dir / "sources.list").write_text(sources_list(self.suite))
        d = self.dir
        self.config.write_text("\n".join((
            f'Dir::Etc::SourceList "{d}/sources.list";',
            'Dir::Etc::SourceParts "/nonexistent";',
            f'Dir::State "{d}/state";', f'Dir::State::Lists "{d}/lists";',
            f'Dir::State::status "{d}/state/status";',
            f'Dir::Cache "{d}/cache";', f'Dir::Cache::Archives "{d}/archives";',
            f'APT::Architecture "{ARCH}";', f'APT::Architectures {{ "{ARCH}"; }};',
            'Acquire::Languages "none";', 'APT::Get::List-Cleanup "false";',
            'Debug::NoLocking "true";', "")))

    def update(self) -> None:
        if not self._updated:
            _run(["apt-get", "update", "-qq"], f"apt-get update ({self.suite})",
                 env=self._env())
            self._updated = True

    def newest(self, spec: str) -> str | None:
        """The newest ``linux-image-SPEC.*-amd64`` package (signed image) or None."""
        self.update()
        names = _run(["apt-cache", "pkgnames", "linux-image-"], "apt-cache pkgnames",
                     env=self._env()).split()
        pattern = re.compile(rf"^linux-image-{re.escape(spec)}[.-][0-9][0-9A-Za-z.+~-]*"
                             rf"-{ARCH}$")
        images = [n for n in names if pattern.match(n) and "-rt-" not in n
                  and "-cloud-" not in n]
        return max(images, key=_natural, default=None)

    def version(self, package: str) -> str:
        out = _run(["apt-cache", "show", "--no-all-versions", package],
                   f"apt-cache show {package}", env=self._env())
        found = re.search(r"^Version: (\S+)", out, re.MULTILINE)
        return found.group(1) if found else "?"

    def header_packages(self, headers: str) -> list[str]:
        """The headers package and the kernel packages it depends on (common, kbuild)."""
        out = _run(["apt-cache", "depends", "--no-recommends", "--no-suggests",
                    "--no-conflicts", "--no-breaks", "--no-replaces", "--no-enhances",
                    headers], f"apt-cache depends {headers}", env=self._env())
        deps = re.findall(r"^\s+Depends: (linux-\S+)$", out, re.MULTILINE)
        return [headers, *sorted({d for d in deps if not d.startswith("<")})]

    def download(self, names: list[str], into: Path) -> list[Path]:
        into.mkdir(parents=True)
        _run(["apt-get", "download", "-qq", *names], "apt-get download", env=self._env(),
             cwd=into)
        return sorted(into.glob("*.deb"))


def sources_list(suite: str) -> str:
    """One suite of Debian's archive, and its security suite when it has one."""
    main, security = mirrors()
    lines = [f"deb [signed-by={KEYRING}] {main} {suite} main"]
    if suite in ("bullseye", "bookworm", "trixie"):
        lines.append(f"deb [signed-by={KEYRING}] {security} {suite}-security main")
    return "\n".join(lines) + "\n"


def mirrors() -> tuple[str, str]:
    """The Debian mirror and security mirror: the environment's, else the host's apt
    sources' (a Debian host names both)."""
    main = os.environ.get("PFC_DEBIAN_MIRROR")
    security = os.environ.get("PFC_DEBIAN_SECURITY_MIRROR")
    uris = host_uris()
    main = main or next((u for u in uris if u.rstrip("/").endswith("/debian")), None)
    security = security or next(
        (u for u in uris if u.rstrip("/").endswith("/debian-security")), None)
    if not main or not security:
        raise LabError("no Debian mirror: the host's apt sources name none; set "
                       "PFC_DEBIAN_MIRROR and PFC_DEBIAN_SECURITY_MIRROR")
    return main, security


def host_uris() -> list[str]:
    """Every archive URI in the host's apt sources (one-line and deb822 formats)."""
    etc = Path("/etc/apt")
    texts = [p.read_text(errors="replace") for p in
             [etc / "sources.list", *sorted((etc / "sources.list.d").glob("*"))]
             if p.is_file() and p.suffix in (".list", ".sources")]
    uris = []
    for text in texts:
        uris += re.findall(r"^\s*URIs:\s*(\S+)", text, re.MULTILINE)
        uris += re.findall(r"^\s*deb\s+(?:\[[^]]*\]\s+)?(\S+)", text, re.MULTILINE)
    return uris
