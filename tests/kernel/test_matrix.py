"""The kernel matrix: the core on Debian's 5.10, 6.1 and 6.12, booted in the kernel lab.

Every example's eBPF objects (xdp, tc, socket) and a 200-rule ClassBench policy
(classified where the kernel has bpf_loop, the linear program on 5.10) are loaded by
each kernel's verifier; ``pfc verify`` runs every example on every target (cbpf,
socket, tc, xdp, nft, iptables) inside each kernel and must agree with the
interpreter; ``pfc load`` refuses, before touching anything, what 5.10 cannot take.
One boot per kernel per test session (tests/kernel/labs.py); docs/kernels.md has the
table these tests keep true.
"""

from __future__ import annotations

import pytest

from pfc.backends.nfmod import build
from tests.kernel.conftest import needs_lab
from tests.kernel.labs import HOOKS, KERNELS, LARGE
from tests.paths import EXAMPLES

pytestmark = [pytest.mark.lab, needs_lab, pytest.mark.timeout(5400)]

POLICIES = [p.stem for p in EXAMPLES] + [LARGE[0]]
# what a kernel lacks, by (kernel, policy): the features named in the one-line refusals
KERNEL_REFUSALS = {("5.10", "rate-limit-log"): ("bpf_ktime_get_coarse_ns (Linux 5.11)",
                                                "atomic compare-and-exchange (Linux 5.12)")}
# ... and the targets it refuses them on (pfc verify: eBPF; nft's payload needs `@ih`)
REFUSED_TARGETS = {("5.10", "rate-limit-log"): set(HOOKS),
                   ("5.10", "ddos-drop-tcp-subnet-payload"): {"nft"}}
NOT_EXPRESSIBLE = {("udp-redirect", "socket")}  # a language limit, on every kernel
# targets whose programs older kernels do not have at all (docs/nfbpf.md: netfilter
# programs and bpf_dynptr_from_skb, Linux 6.4): refused there, naming the kernel
TARGET_SINCE = {"nfbpf": (6, 4)}


def _older(kernel: str, target: str) -> bool:
    since = TARGET_SINCE.get(target)
    return since is not None and tuple(int(x) for x in kernel.split(".")) < since
# nfmod's .ko is built with the kernel's own Debian build tools (linux-kbuild: modpost,
# objtool), binaries that need this glibc; on an older host no module can be built for
# that kernel, and `pfc verify` inside it reports nfmod compiled-only, saying so
KBUILD_GLIBC = {"6.12": (2, 38)}  # Debian 13's; this project's host (Debian 12) has 2.36


def unbuildable(kernel: str) -> str | None:
    """What nfmod's reason says in ``kernel`` when this host cannot build for it."""
    need = KBUILD_GLIBC.get(kernel)
    if need is None or build.host_glibc() >= need:
        return None
    return f"need glibc {'.'.join(map(str, need))}, this host has"


@pytest.mark.parametrize("hook", HOOKS)
@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("kernel", KERNELS)
def test_the_verifier_takes_every_object(matrix, kernel, policy, hook):
    results = matrix[kernel]
    if (policy, hook) in NOT_EXPRESSIBLE:
        assert any("cannot express" in m for m in results.refused_at_compile[(policy, hook)])
        return
    refusal = KERNEL_REFUSALS.get((kernel, policy))
    if refusal:
        messages = results.refused_at_compile[(policy, hook)]
        assert all(f"kernel {kernel} does not have it" in m for m in messages)
        assert all(any(f in m for m in messages) for f in refusal), messages
        return
    found = results.loads[(policy, hook)]
    assert found["loaded"], "\n".join(found["log"])
    assert found["insns"] > 0


@pytest.mark.parametrize("kernel", KERNELS)
def test_the_large_policy_is_classified_where_bpf_loop_is(matrix, kernel):
    """bpf_loop is 5.17: 5.10 verifies the linear program, 6.1 and 6.12 the classifier
    (its verified instruction count is bounded by its loops, not by the rules)."""
    loads = matrix[kernel].loads
    for hook in HOOKS:
        assert loads[(LARGE[0], hook)]["loaded"]


@pytest.mark.parametrize("policy", [p.stem for p in EXAMPLES])
@pytest.mark.parametrize("kernel", KERNELS)
def test_pfc_verify_agrees_inside_the_kernel(matrix, kernel, policy):
    """Every target agrees with the interpreter, or cannot express the policy: for a
    language reason (as on every kernel), or, for eBPF, because this kernel lacks a
    feature (KERNEL_REFUSALS), named in one line each; nfmod is compiled only where
    this host cannot build modules for the kernel (KBUILD_GLIBC), saying so."""
    report = matrix[kernel].verify
    assert "files" in report, report.get("error")
    (entry,) = [f for f in report["files"] if f["file"].endswith(f"/{policy}.pf")]
    for t in entry["targets"]:
        lacking = t["target"] in REFUSED_TARGETS.get((kernel, policy), ()) \
            or _older(kernel, t["target"])
        if t["target"] == "nfmod" and unbuildable(kernel) and t["status"] != \
                "not-expressible":
            assert t["status"] == "compiled-only", t
            assert unbuildable(kernel) in t["reason"], t
        elif t["status"] == "agree":
            assert not lacking and t["frames"] > 0 and t["counters_agree"], t
        elif lacking:
            assert t["status"] == "not-expressible", t
            # a target this kernel lacks may be refused for the language first
            assert f"kernel {kernel} does not have it" in t["reason"] or (
                _older(kernel, t["target"]) and "cannot express" in t["reason"]), t
        else:
            assert t["status"] == "not-expressible", t
            # a language limit: it does not blame this kernel (u32's transport-field
            # refusal speaks of "a header the kernel accepts": semantics, not 5.10)
            assert "cannot express" in t["reason"], t
            assert f"kernel {kernel}" not in t["reason"], t
            assert "does not have it" not in t["reason"], t
    agreeing = {t["target"] for t in entry["targets"] if t["status"] == "agree"}
    assert "nft" in agreeing or "nft" in REFUSED_TARGETS.get((kernel, policy), ())


@pytest.mark.parametrize("kernel", KERNELS)
def test_pfc_load_refuses_what_the_kernel_cannot_take(matrix, kernel):
    done = matrix[kernel].load
    if kernel == "5.10":
        assert done.returncode == 2, (done.stdout, done.stderr)
        assert "need atomic compare-and-exchange (Linux 5.12)" in done.stderr
        assert "running 5.10" in done.stderr
    else:
        assert done.returncode == 0, (done.stdout, done.stderr)
