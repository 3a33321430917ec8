"""Target ``nfbpf`` (BPF_PROG_TYPE_NETFILTER programs at the netfilter hooks) in the
kernel, against the interpreter: every hook, every shape of rule its test runs can be
given (tests/backends/v2gen.py: each subset of the fields, negations, both defaults,
``pass ... limit``), the v1 examples; what it cannot carry is a capability error.

A netfilter program's test run (``bpf_prog_test_run_nf``) gives it the namespace's
loopback as the output device, no input device and no mark (:func:`loopback`): the
interpreter is told the same. tests/backends/test_nfbpf_link.py attaches programs to real hooks.
"""

from __future__ import annotations

import random

import pytest

from pfc import backends
from pfc.backends.ebpf import firewall
from pfc.backends.ebpf import run as ebpf_run
from pfc.backends.nfbpf import backend as nfbpf
from pfc.build import build_artifact, build_policy, build_ruleset
from pfc.frontend.pipeline import compile_path, compile_text
from pfc.kernel import netns
from pfc.oracle import gen
from pfc.oracle.context import Context
from pfc.verifier.equiv import compare
from tests.backends import v2gen, v2judge
from tests.backends.v2judge import Shot
from tests.paths import GOLDEN, ROOT

REASON = netns.missing_privileges()
BACKEND = backends.get("nfbpf")


def kernel(fn):
    fn = pytest.mark.kernel(fn)
    return pytest.mark.skipif(REASON is not None, reason=REASON or "")(fn)


def loopback(shot: Shot) -> Context:
    """The interpreter's context of a netfilter test run, at every hook: the loopback
    is the output device and there is no input device; the mark is 0. Measured on
    Linux 6.18: ``bpf_prog_test_run_nf`` picks the devices by the hook of its default
    state (``NF_INET_LOCAL_OUT``), before it takes the caller's hook number."""
    return Context(oif="lo")


def run(artifact, views, metas):
    return ebpf_run.run(artifact, views)  # the device and mark are the test run's own


# ------------------------------------------------------------------------ no kernel

def test_the_target_carries_the_filter_blocks_at_their_hooks():
    assert BACKEND.carries == {"raw prerouting": "nf-raw-prerouting",
                               "prerouting": "nf-prerouting", "input": "nf-input",
                               "forward": "nf-forward", "raw output": "nf-raw-output",
                               "output": "nf-output", "postrouting": "nf-postrouting"}
    assert nfbpf.netfilter("nf-raw-prerouting") == {
        "hook": "prerouting", "hooknum": 0, "priority": -300, "versions": [4, 6]}
    assert nfbpf.netfilter("nf-postrouting")["priority"] == -150


@pytest.mark.parametrize("rule,what", [
    ("pass ct state established", "`ct state` matches"),
    ("reject", "`reject` rules"),
    ("mark tcp to 7", "`mark ... to N` rules"),
    ("drop ether-src 02:00:00:00:00:01", "`ether-src`/`ether-dst` matches"),
    ("drop dst-type local", "`dst-type`/`src-type` matches"),
    ("log tcp", "`log` rules"),
])
def test_what_a_netfilter_program_cannot_do_is_a_capability_error(rule: str, what: str):
    compiled = compile_text(f"input {{\n    {rule}\n}}\n", "fw.pf")
    artifacts, diags = build_ruleset(compiled.ruleset, ["nfbpf"], "c")
    assert artifacts == [] and len(diags) == 1, [d.message for d in diags]
    assert diags[0].message.startswith(
        f"target `nfbpf` cannot express {what} (rule at line 2): ")


def test_the_object_needs_linux_6_4():
    compiled = compile_text("drop udp dport 53\n", "v1.pf")
    art, _ = build_artifact(compiled, "nfbpf")
    assert art.meta["kernel_needs"] == {"netfilter": "6.4"}
    art, diags = build_artifact(compiled, "nfbpf", extra={"kernel": (6, 1)})
    assert art is None and diags[0].message == (
        "target `nfbpf`: netfilter hook programs need netfilter programs "
        "(BPF_PROG_TYPE_NETFILTER, bpf_dynptr_from_skb) (Linux 6.4); kernel 6.1 does not "
        "have it")


def test_device_names_compare_their_bytes_and_nul_or_a_prefix():
    exact = firewall.name_words("eth0")
    assert exact == (int.from_bytes(b"eth0", "little"), 0, 0xFF_FFFF_FFFF, 0)
    prefix = firewall.name_words("eth*")
    assert prefix == (int.from_bytes(b"eth", "little"), 0, 0xFF_FFFF, 0)
    long = firewall.name_words("abcdefghijklmno")  # 15 bytes and the NUL: both words
    assert long[1] == int.from_bytes(b"ijklmno", "little") and long[3] == (1 << 64) - 1


# ------------------------------------------------------------------------- kernel

@kernel
@pytest.mark.parametrize("hook", nfbpf.HOOKS)
def test_every_shape_of_rule_at_every_netfilter_hook(hook: str) -> None:
    """A count rule per subset of the hook's fields (negations at random), terminal
    rules with drop, pass and ``pass ... limit``; generated and aimed frames: verdicts
    and every counter. The defaults alternate over the hooks (both are covered)."""
    default = ("pass", "drop")[nfbpf.HOOKS.index(hook) % 2]
    rng = random.Random(hook)
    policy = v2gen.shapes(hook, default, rng)
    art, diags = build_policy(policy, "nfbpf", "o", hook=hook)
    assert art is not None, [d.message for d in diags]
    shots = [Shot(s.frame) for s in v2gen.shots(policy, 300, rng, devices=(None,))]
    got = v2judge.judge(art, BACKEND, shots, {"lo": 1}, run,
                        view=lambda f: BACKEND.view(hook, f), context=loopback)
    assert got.ok, "\n".join(got.problems[:10])
    # every mark is 0 in a test run, so rules on other marks hold on no frame
    assert got.seen > 150 and got.held > 0.2


@kernel
def test_the_v1_examples_at_the_input_hook() -> None:
    """Every v1 example the target carries (sets as maps, payload, ranges, flags), on
    generated frames: what IP input lets through, judged as ``pfc verify`` does."""
    judged = 0
    for example in sorted((ROOT / "examples").glob("*.pf")):
        compiled = compile_path(example)
        if compiled.policy is None:
            continue  # a whole firewall: test_every_shape_... covers the blocks
        art, _ = build_artifact(compiled, "nfbpf")
        if art is None:
            continue  # log and redirect: capability errors (golden files)
        report = compare(art, BACKEND, gen.sample(art.policy, 200, seed=25))
        assert report.ok, f"{example.name}: {report.summary()}"
        judged += 1
    assert judged >= 8


@kernel
def test_a_limit_keeps_a_bucket_per_ip_version() -> None:
    """``drop limit rate 1/second burst 1`` at a netfilter hook: one bucket per IP
    version, as the interpreter (the first of each passes, the second is dropped)."""
    from tests.backends.test_ebpf_v2 import udp4, udp6

    art, diags = build_artifact(compile_text("drop limit rate 1/second burst 1\n", "l.pf"),
                                "nfbpf")
    assert art is not None, diags
    report = compare(art, BACKEND, [udp4(), udp6(), udp4(), udp6()])
    assert report.ok, report.summary()
    assert report.counters_expected[0][0] == 2  # the second of each version


GOLDEN_FW = """forward {
    default drop
    pass tcp dport { 22, 443 } iif eth* oif wan0
    drop udp !oif { ppp0, wan* } mark 7-9
    count icmp icmp-code 3
    pass udp dport 53 limit rate 10/second
}
"""


def test_golden_program(golden) -> None:
    """The C of a forward block with every word the target prints (names compared at
    run time, mark, icmp-code, a limit): ``--update-golden`` rewrites it."""
    arts, diags = build_ruleset(compile_text(GOLDEN_FW, "fw.pf").ruleset, ["nfbpf"], "c")
    assert not diags and len(arts) == 1
    golden(GOLDEN / "nfbpf-v2" / "forward.c", arts[0].text)
