"""Target nfmod: the emitted C (what it reads, counts, refuses) and the .ko built against
the lab's 6.1 headers. Its kernel runs (every example agreeing with the interpreter,
seed 001's rewrite included, in 5.10 and 6.1; compiled only in 6.12, named) are the
kernel matrix's `pfc verify` (tests/kernel/test_matrix.py), which runs every target in
the guest it boots once per kernel: a boot of its own here cost ~2 minutes more."""

from __future__ import annotations

import pytest

from pfc import backends
from pfc.backends.nfmod import build, lower
from pfc.build import build_artifact
from pfc.frontend.pipeline import compile_source
from pfc.frontend.source import SourceFile
from pfc.kernel import lab
from tests.paths import ROOT


def _artifact(text: str, **kw):
    compiled = compile_source(SourceFile("t.pf", text))
    return build_artifact(compiled, "nfmod", **kw)


def test_registered_with_its_hooks() -> None:
    b = backends.get("nfmod")
    assert b.hooks[0] == "prerouting" and set(b.hooks) >= {"input", "forward", "output"}


def test_rules_become_c_in_order_with_counters() -> None:
    artifact, diags = _artifact("default drop\ndrop udp dst 10.0.0.0/8 dport 53\n"
                                "count tcp\npass src { 1.2.3.4, 2001:db8::/32 }\n")
    assert artifact is not None, diags
    c = artifact.text
    assert "pfc_l4_field(skb, p, 17, 2, 2, &v1) && (v1 == 53)" in c
    assert c.index("pfc_rule_0(skb, &p)") < c.index("pfc_rule_1(skb, &p)")
    assert artifact.meta["slots"] == ["0", "1", "2", "default"]
    assert "return NF_DROP;\n}" in c  # the default
    assert "0x0a000000, 0x0affffff" in c  # 10/8 as an interval
    assert "0x20010db800000000ULL" in c  # the IPv6 prefix's first address


def test_large_lists_are_binary_searched_tables() -> None:
    ports = ", ".join(str(p) for p in range(1000, 1020, 2))
    artifact, _ = _artifact(f"drop udp dport {{ {ports} }}\n")
    assert "pfc_in_ranges(v0, pfc_ranges0, 10)" in artifact.text
    assert "static_assert(ARRAY_SIZE(pfc_ranges0) == 10);" in artifact.text
    assert lower.merged([(5, 6), (1, 2), (3, 4), (9, 9)]) == [(1, 6), (9, 9)]


def test_negated_match_needs_the_field() -> None:
    artifact, _ = _artifact("drop tcp !dport 22\n")
    assert "(pfc_l4_field(skb, p, 6, 2, 2, &v0) && !(v0 == 22))" in artifact.text


def test_stateful_rules_are_refused_naming_who_can() -> None:
    artifact, diags = _artifact("drop tcp dport 22 limit rate 5/second\n")
    assert artifact is None
    assert "target `nfmod` cannot express `limit`" in diags[0].message
    assert "nft" in diags[0].hint


def test_user_text_cannot_end_the_comment() -> None:
    compiled = compile_source(SourceFile("a*/b.pf", "drop udp dport 1\n"))
    artifact, _ = build_artifact(compiled, "nfmod")
    assert "a* /b.pf" in artifact.text and "a*/b" not in artifact.text


def test_module_name_follows_table() -> None:
    artifact, _ = _artifact("drop\n", table="edge-1")
    assert artifact.meta["module"] == "edge_1_nf"
    assert set(artifact.files) == {"edge_1_nf.c", "Kbuild", "Makefile"}
    assert artifact.files["Kbuild"] == b"obj-m := edge_1_nf.o\n"


def _lab_61():
    kernel = lab.cached("6.1")
    if kernel is None:
        pytest.skip("the 6.1 lab kernel is not fetched (pfc verify --kernel 6.1 fetches it)")
    return kernel


def test_debian_split_headers_build_the_ko() -> None:
    kernel = _lab_61()
    argv = build.make_argv(build.headers(kernel.release), ROOT)
    assert "-f" in argv  # Debian's arch Makefile includes the common one by path
    artifact, diags = _artifact("redirect udp dst 192.168.64.2 dport 8080 to 10.0.1.2:8083\n",
                                extra={"kernel": (6, 1)})
    assert artifact is not None, diags
    ko = artifact.files["pfc_nf.ko"]
    assert ko[:4] == b"\x7fELF" and f"vermagic={kernel.release}".encode() in ko


def test_no_headers_for_another_kernel_is_an_error() -> None:
    artifact, diags = _artifact("drop\n", extra={"kernel": (4, 19)})
    assert artifact is None and "no headers for kernel 4.19" in diags[0].message


def test_no_headers_for_the_running_kernel_is_a_warning(monkeypatch) -> None:
    def missing(release):
        raise build.NoHeaders(f"no headers for kernel {release}")
    monkeypatch.setattr(build, "headers", missing)
    monkeypatch.setattr(build.toolchain, "cache_dir", lambda: None)
    from pfc.backends.ebpf import kernels
    artifact, _ = _artifact("drop\n", extra={"kernel": kernels.running()})
    assert artifact is not None and "pfc_nf.ko" not in artifact.files
    assert "no .ko" in artifact.diagnostics[-1].message
