"""What eBPF objects need of the kernel (backends/ebpf/kernels.py), the lowering a
kernel option chooses, and the refusals: one line per missing feature, on the rule
that brings it. The lab (tests/kernel/test_matrix.py) checks the same on 5.10, 6.1
and 6.12 themselves."""

from __future__ import annotations

import pytest

from benchmarks import classbench as cb
from pfc.backends.ebpf import kernels
from pfc.build import build_artifact
from pfc.frontend.pipeline import compile_path, compile_text
from tests.paths import ROOT

EXAMPLES = ROOT / "examples"


def _build(compiled, hook, kernel=None):
    extra = {"kernel": kernel} if kernel else {}
    return build_artifact(compiled, hook, dev="dut", extra=extra)


@pytest.mark.parametrize("hook", ["xdp", "tc", "socket"])
def test_features_read_from_the_object(hook):
    plain, _ = _build(compile_path(EXAMPLES / "edge-drop.pf"), hook)
    assert plain.meta["kernel_needs"] == {}
    flow, _ = _build(compile_path(EXAMPLES / "rate-limit-log.pf"), hook)
    want = {"ringbuf": "5.8", "ktime_coarse": "5.11", "cmpxchg": "5.12"}
    if hook == "xdp":
        want["xdp_bytes"] = "5.18"
    assert flow.meta["kernel_needs"] == want


def _large():
    rules = cb.generate("acl", 200, seed=1)
    return compile_text(rules.text(), "acl200.pf")


@pytest.mark.parametrize("hook", ["xdp", "tc", "socket"])
def test_without_bpf_loop_a_large_policy_is_the_linear_program(hook):
    compiled = _large()
    classified, _ = _build(compiled, hook)
    assert classified.meta.get("classifier") and "bpf_loop" in classified.meta["kernel_needs"]
    linear, diags = _build(compiled, hook, (5, 10))
    assert not diags and "classifier" not in linear.meta
    assert linear.meta["kernel_needs"] == {}
    newer, _ = _build(compiled, hook, (6, 1))
    assert newer.meta.get("classifier")


def test_a_kernel_without_a_feature_is_one_line_per_feature_on_its_rule():
    compiled = compile_path(EXAMPLES / "rate-limit-log.pf")
    artifact, diags = _build(compiled, "tc", (5, 10))
    assert artifact is None
    assert [d.message for d in diags] == [
        "target `tc`: token buckets (limit, log rate) need bpf_ktime_get_coarse_ns "
        "(Linux 5.11); kernel 5.10 does not have it",
        "target `tc`: token buckets (limit, log rate) need atomic compare-and-exchange "
        "(Linux 5.12); kernel 5.10 does not have it"]
    first_rate = compiled.require().rules[0]  # line 7: the first rule with a rate
    assert first_rate.line == 7 and {d.span for d in diags} == {first_rate.span}
    artifact, diags = _build(compiled, "tc", (5, 12))
    assert artifact is not None and not diags


def test_always_classify_without_bpf_loop_is_refused():
    artifact, diags = build_artifact(_large(), "xdp", extra={"kernel": (5, 15),
                                                             "classify": "always"})
    assert artifact is None
    assert diags[0].message.endswith("need bpf_loop (Linux 5.17); kernel 5.15 does not "
                                     "have it")


def test_format_c_is_checked_too():
    compiled = compile_path(EXAMPLES / "rate-limit-log.pf")
    artifact, diags = build_artifact(compiled, "socket", "c", extra={"kernel": (5, 10)})
    assert artifact is None and len(diags) == 2


@pytest.mark.parametrize("text, want", [("5.10", (5, 10)), ("6.1.0-37-amd64", (6, 1)),
                                        ("6.12.48+deb13-amd64", (6, 12)),
                                        ("6.18.44-fc-v1045", (6, 18))])
def test_kernel_versions(text, want):
    assert kernels.parse_kernel(text) == want


@pytest.mark.parametrize("text", ["5.1x", "6", "x", "", "5.10 "])
def test_bad_kernel_versions(text):
    if text == "5.10 ":  # surrounding blanks are forgiven
        assert kernels.parse_kernel(text) == (5, 10)
        return
    with pytest.raises(ValueError, match="is not a kernel version"):
        kernels.parse_kernel(text)


def test_probes_decide_before_the_release(monkeypatch):
    """A distribution kernel may carry a feature its version predates (RHEL 9's 5.14
    has bpf_loop): the probe's answer wins; the release decides when no probe can."""
    from pfc.kernel import bpf_probe

    monkeypatch.setattr(kernels, "running", lambda: (5, 14))
    monkeypatch.setattr(bpf_probe, "helper", lambda hook, helper: helper == 181)
    monkeypatch.setattr(bpf_probe, "atomic_fetch", lambda: None)
    assert kernels.lacking_here(["bpf_loop", "cmpxchg", "xdp_bytes"], "xdp") == \
        ["xdp_bytes"]
    monkeypatch.setattr(kernels, "running", lambda: (5, 10))
    assert kernels.lacking_here(["bpf_loop", "cmpxchg"], "xdp") == ["cmpxchg"]


def test_nft_payload_needs_the_inner_header_base():
    """nft's payload matches are ``@ih`` (Linux 5.16): Debian 11's 5.10 answered
    "Operation not supported" in the lab; with a kernel option that old, one line on
    each payload rule instead."""
    compiled = compile_path(EXAMPLES / "ddos-drop-tcp-subnet-payload.pf")
    artifact, diags = build_artifact(compiled, "nft", extra={"kernel": (5, 10)})
    assert artifact is None and [d.message for d in diags] == [
        "target `nft`: payload matches need nft_payload's inner header (`@ih`, Linux "
        "5.16); kernel 5.10 does not have it"]
    assert build_artifact(compiled, "nft", extra={"kernel": (5, 16)})[0] is not None
    assert build_artifact(compile_path(EXAMPLES / "edge-drop.pf"), "nft",
                          extra={"kernel": (5, 10)})[0] is not None
