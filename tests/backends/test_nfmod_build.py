"""Building the .ko against Debian's headers (backends/nfmod/build.py): the compiler
the headers name, falling back to the host's gcc, and the kernel's build tools that
cannot run on an older glibc, on made-up header trees."""

from __future__ import annotations

from pathlib import Path

import pytest

from pfc.backends.nfmod import build

KERNELVARIABLES = {
    "5.10": "override ARCH = x86\nCC = $(if $(DEBIAN_KERNEL_USE_CCACHE),$(CCACHE)) "
            "$(CROSS_COMPILE)gcc-10\nifneq ($(DEB_BUILD_ARCH),$(DEB_HOST_ARCH))\n"
            "override CROSS_COMPILE = $(DEB_HOST_GNU_TYPE)-\nendif\n",
    "6.12": "CC = $(if $(DEBIAN_KERNEL_USE_CCACHE),$(CCACHE)) $(CROSS_COMPILE)gcc-14\n"
            "override CROSS_COMPILE = x86_64-linux-gnu-\n",
}


def _tree(tmp: Path, series: str, glibc: bytes = b"GLIBC_2.2.5\0GLIBC_2.34\0") -> Path:
    tree = tmp / series
    (tree / "scripts" / "mod").mkdir(parents=True)
    (tree / "Makefile").write_text("include /usr/src/nowhere-common/Makefile\n")
    (tmp / "nowhere-common").mkdir()
    (tmp / "nowhere-common" / "Makefile").write_text("")
    (tree / ".kernelvariables").write_text(KERNELVARIABLES[series])
    (tree / "scripts" / "mod" / "modpost").write_bytes(b"\x7fELF" + glibc)
    return tree


def test_the_compiler_the_headers_name(tmp_path: Path) -> None:
    assert build.kernel_cc(_tree(tmp_path / "a", "5.10")) == "gcc-10"
    assert build.kernel_cc(_tree(tmp_path / "b", "6.12")) == "x86_64-linux-gnu-gcc-14"


def test_the_hosts_gcc_when_that_compiler_is_missing(tmp_path: Path, monkeypatch) -> None:
    tree = _tree(tmp_path, "5.10")
    monkeypatch.setattr(build.shutil, "which", lambda name: None)
    argv = build.make_argv(tree, tmp_path / "m")
    assert "CC=gcc" in argv and argv[-2:] == [f"M={tmp_path / 'm'}", "modules"]
    monkeypatch.setattr(build.shutil, "which", lambda name: f"/usr/bin/{name}")
    assert "CC=gcc" not in build.make_argv(tree, tmp_path / "m")


def test_build_tools_needing_a_newer_glibc_are_refused_by_name(tmp_path: Path,
                                                                monkeypatch) -> None:
    tree = _tree(tmp_path, "6.12", b"GLIBC_2.34\0GLIBC_2.38\0GLIBC_2.3\0")
    monkeypatch.setattr(build, "host_glibc", lambda: (2, 36))
    with pytest.raises(build.NoToolchain, match=r"kernel R's build tools \(Debian's "
                       r"linux-kbuild: modpost\) need glibc 2\.38, this host has 2\.36"):
        build.check_tools(tree, "R")
    monkeypatch.setattr(build, "host_glibc", lambda: (2, 38))
    build.check_tools(tree, "R")
