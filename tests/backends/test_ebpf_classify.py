"""The eBPF classifier for large policies (backends/ebpf/classify, issue 16).

What it must keep: the interpreter's verdict, rewritten bytes and every counter (each
rule's and the default's) on xdp, tc and socket, for policies of hundreds of rules with
overlapping prefixes and port ranges, negations, lists, IPv4 and IPv6, count and
redirect rules and both defaults, on frames aimed at the rules' edges and on the
malformed mix of pfc.oracle.gen (fragments, bad headers, VLAN tags, runts). Small
policies keep the linear program; ``classify="always"`` forces the classifier on small
generated policies, cheaply. ``pfc load`` / ``status`` / ``unload`` take a classified
policy on xdp and tc.
"""

from __future__ import annotations

import random
import zlib

import pytest

from benchmarks import classbench as cb
from pfc import backends
from pfc.backends.ebpf import maps as ebpf_maps
from pfc.backends.ebpf.backend import program_insns
from pfc.backends.ebpf.classify import model, tables
from pfc.backends.ebpf.classify import plan as classify_plan
from pfc.build import build_artifact
from pfc.frontend.pipeline import compile_text
from pfc.oracle import gen
from pfc.verifier.equiv import compare
from tests.backends.test_ebpf import kernel
from tests.paths import GOLDEN

HOOKS = ("xdp", "tc", "socket")
V4 = ["10.0.0.0/8", "10.1.0.0/16", "10.1.2.0/24", "10.1.2.3", "10.1.2.128/25",
      "192.168.0.0/16", "192.168.7.9", "172.16.0.0/12", "0.0.0.0/1", "203.0.113.0/24"]
V6 = ["2001:db8::/32", "2001:db8:1::/48", "2001:db8:1::5", "fe80::/10", "::1",
      "2001:db8:1:2::/64", "8000::/1"]
PORTS = ["53", "80", "443", "1-1023", "1024-65535", "8000-8080", "0", "65535", "22",
         "5000-5010", "{ 53, 80, 8080 }", "{ 1-10, 100-200 }"]


def _addr(rng: random.Random, pool: list[str]) -> str:
    if rng.random() < 0.2:
        return "{ " + ", ".join(rng.sample(pool, 2)) + " }"
    return rng.choice(pool)


def _rule(rng: random.Random, redirect: bool) -> str:
    action = rng.choices(["drop", "pass", "count", "redirect"],
                         [40, 40, 12, 8 if redirect else 0])[0]
    version = rng.choice([4, 4, 6])
    pool = V4 if version == 4 else V6
    protos = ["tcp", "udp"] if action == "redirect" else \
        ["tcp", "udp", "", "ip" if version == 4 else "ip6", "icmp" if version == 4 else "icmp6"]
    proto = rng.choice(protos)
    words = [action] + ([proto] if proto else [])
    for name in ("src", "dst"):
        if rng.random() < 0.6:
            words.append(("!" if rng.random() < 0.1 else "") + f"{name} {_addr(rng, pool)}")
    if not any(w.lstrip("!").startswith(("src", "dst")) for w in words[1:]):
        words.append(f"dst {_addr(rng, pool)}")  # the family comes from an address
    if proto in ("tcp", "udp"):
        for name in ("sport", "dport"):
            if rng.random() < (0.3 if name == "sport" else 0.6):
                words.append(("!" if rng.random() < 0.1 else "") + f"{name} {rng.choice(PORTS)}")
    if proto in ("ip", "ip6") and rng.random() < 0.4:
        neg = "!" if rng.random() < 0.2 else ""
        words.append(f"{neg}proto {rng.choice(['6', '17', '1-17'])}")
    if action == "redirect":
        port = rng.choice(["", ":8083", ":53"])
        target = "10.9.0.1" if version == 4 else "[2001:db8::99]" if port else "2001:db8::99"
        words.append("to " + target + port)
    return " ".join(words)


def mixed_policy(n: int, seed: int, default: str, redirect: bool = True) -> str:
    """``n`` classifiable rules over IPv4 and IPv6, nested prefixes, port ranges,
    lists, negations, count and redirect rules."""
    rng = random.Random(seed)
    return f"default {default}\n" + "\n".join(_rule(rng, redirect) for _ in range(n)) + "\n"


def build(text: str, hook: str, mode: str = "auto", fmt: str = "o"):
    compiled = compile_text(text, "large.pf")
    artifact, diags = build_artifact(compiled, hook, fmt, extra={"classify": mode})
    assert artifact is not None, diags[:3]
    return artifact


def check(artifact, frames):
    report = compare(artifact, backends.get(artifact.target), frames)
    assert report.ok, report.summary()
    return report


# ------------------------------------------------------------------------ no kernel

@pytest.mark.parametrize("hook", ["xdp", "tc", "socket"])
def test_golden_classifier_source(hook, golden):
    """What the classifier emits (the flow cache in front of it included) for a small
    mixed policy, forced: tests/golden/classifier/HOOK.c (the rules are in its maps)."""
    text = mixed_policy(12, 4, "drop", redirect=hook != "socket")
    golden(GOLDEN / "classifier" / f"{hook}.c", build(text, hook, "always", fmt="c").text)


def test_small_policies_keep_the_linear_program_and_large_ones_are_classified():
    small = mixed_policy(classify_plan.MIN_RULES - 1, 1, "pass")
    large = mixed_policy(classify_plan.MIN_RULES + 40, 1, "pass")
    assert "classifier" not in build(small, "xdp", fmt="c").meta
    art = build(large, "xdp", fmt="c")
    assert art.meta["classifier"]["rules"] == len(art.policy.rules)
    assert "pfc_c_rules" in art.meta["maps"] and art.meta["ready_map"] == "pfc_ready"
    assert "classifier" not in build(large, "xdp", "never", fmt="c").meta


def test_a_rule_the_model_lacks_keeps_the_linear_program():
    text = mixed_policy(classify_plan.MIN_RULES + 10, 2, "drop") + "drop udp ttl 1-3\n"
    art = build(text, "tc", fmt="c")
    assert "classifier" not in art.meta
    assert model.conds(art.policy) is None


@pytest.mark.parametrize("rule", ['log udp dport 53 prefix "dns"',
                                  "drop udp dport 7000 limit rate 100/second per src",
                                  "drop tcp dport 23 audit"])
def test_log_limit_and_audit_keep_the_linear_program(rule):
    """The classifier carries verdicts and counters only: a rule with an event or a
    bucket, and an audited default, keep the linear program (which has them)."""
    text = mixed_policy(classify_plan.MIN_RULES + 10, 5, "pass") + rule + "\n"
    assert "classifier" not in build(text, "xdp", "always", fmt="c").meta
    audited = compile_text(mixed_policy(classify_plan.MIN_RULES + 10, 5, "drop"), "a.pf")
    artifact, _ = build_artifact(audited, "xdp", "c", audit=True)
    assert artifact is not None and "classifier" not in artifact.meta


def test_program_size_does_not_grow_with_the_rules():
    """The program's size is bounded by the number of rule shapes (at most 9 groups),
    not by the number of rules: the rules are map contents."""
    sizes = [program_insns(build(mixed_policy(n, 3, "pass", redirect=False), "xdp").files[
        "large.xdp.o"], "xdp") for n in (1500, 4000)]
    assert max(sizes) < 8000, sizes


def test_the_maps_file_and_its_data_fill_every_map():
    art = build(mixed_policy(120, 4, "drop"), "tc", "always", fmt="c")
    records = ebpf_maps.maps_of(art)
    assert {r["name"] for r in records} == set(art.meta["maps"])
    blob = art.files["large.tc.maps.bin"]
    for record in records:
        [(name, keys, values)] = ebpf_maps.updates(record, blob)
        assert len(values) == record["count"] * record["value_size"]
        assert len(keys) == record["count"] * (record["key_size"])
    text = ebpf_maps.bpftool_batch(records, "/sys/fs/bpf/x", {"large.tc.maps.bin": blob})
    assert text.rstrip().endswith("value hex 01 00 00 00")


def test_classbench_policies_are_classified_by_default():
    rules = cb.generate("fw", 300, seed=5)
    art, _ = build_artifact(compile_text(rules.text(), "fw.pf"), "xdp", "c")
    assert art.meta["classifier"]["rules"] == len(art.policy.rules) > 250


# ---------------------------------------------------------------------- in the kernel

def _frames(art, n: int, seed: int) -> list[bytes]:
    return gen.sample(art.policy, n, seed=seed)


@kernel
@pytest.mark.parametrize("hook", HOOKS)
@pytest.mark.parametrize("default", ["pass", "drop"])
def test_large_mixed_policies_agree_with_the_interpreter(hook, default):
    """300 rules, IPv4 and IPv6, negations, lists, count and redirect rules (not on a
    socket filter): verdicts, rewritten bytes and every counter on 1,200 frames."""
    seed = zlib.crc32(f"{hook}{default}".encode())
    art = build(mixed_policy(300, seed, default, redirect=hook != "socket"), hook)
    assert "classifier" in art.meta
    report = check(art, _frames(art, 1200, seed))
    assert report.seen > 1000


@kernel
@pytest.mark.parametrize("hook", HOOKS)
def test_classbench_policy_agrees_on_aimed_and_malformed_frames(hook):
    rules = cb.generate("ipc", 400, seed=9, default="drop" if hook == "tc" else "pass")
    compiled = compile_text(rules.text(), "ipc.pf")
    art, diags = build_artifact(compiled, hook)
    assert art is not None and "classifier" in art.meta, diags
    frames = cb.trace(rules, 900, seed=4, malformed=0.3, policy=compiled.require())
    check(art, frames)


@kernel
@pytest.mark.parametrize("hook", HOOKS)
def test_forced_classifier_on_small_policies(hook):
    """The classifier on small policies (1-20 rules, every corner of the model): the
    same meaning as the linear program, cheaply."""
    for seed in range(8):
        rng = random.Random(seed)
        text = mixed_policy(rng.randint(1, 20), seed + 100, rng.choice(["pass", "drop"]),
                            redirect=hook != "socket")
        art = build(text, hook, "always")
        if "classifier" not in art.meta:  # no rule constrains a field
            continue
        check(art, _frames(art, 250, seed))


def test_vectors_beyond_an_l2_are_compressed():
    """8k ClassBench ipc1 rules: their dense vectors would take ~4 MiB, more than
    ``tables.DENSE_MAX`` (about an L2, which a new flow's lookups miss): compressed,
    2.6 MiB of maps instead of 6.3; a policy whose vectors fit stays dense."""
    from benchmarks import cbsets

    cs = model.conds(compile_text(cbsets.policy_text("ipc1", cbsets.rules("ipc1", 8000)),
                                  "ipc1.pf").require())
    built = tables.build(cs)
    assert not built.dense
    assert tables.memory(built) < 3 << 20
    small = model.conds(compile_text(mixed_policy(300, 7, "pass"), "m.pf").require())
    assert tables.build(small).dense


# ------------------------------------------------------------------- pfc load, status

@kernel
@pytest.mark.parametrize(("target", "extra"), [("xdp", ["--mode", "generic"]), ("tc", [])],
                         ids=["xdp", "tc"])
def test_load_status_unload_a_classified_policy(tmp_path, monkeypatch, target, extra):
    """``pfc load`` fills the classifier's maps before attaching; ``status`` shows every
    rule's and the default's counters as the interpreter counts the frames sent;
    ``unload`` removes it."""
    from pfc.kernel import netns
    from tests.deploy import test_load as dl

    monkeypatch.setenv("PFC_STATE_DIR", str(tmp_path / "state"))
    path = tmp_path / "large.pf"
    path.write_text(mixed_policy(200, 11, "pass", redirect=False))
    with netns.lab() as lab:
        code, _, err = dl.load(lab, target, extra, path)
        assert code == 0, err
        artifact, _ = build_artifact(compile_text(path.read_text(), str(path)), target,
                                     None, dev=lab.dut)
        assert "classifier" in artifact.meta
        frames = dl.deliver(lab, dl.frames_for(lab, artifact.policy, 400, seed=5))
        outcomes = dl.interpreter(target, artifact.hook, artifact.policy, frames)
        from pfc.verifier.equiv import expected_counters

        want = expected_counters(artifact.policy, outcomes) | dl.decided(artifact.policy,
                                                                         outcomes)
        e = dl.entry(lab, target)
        assert e["health"] == "ok"
        assert dl.counters_of(e) == want
        code, _, err = dl.pfc("unload", "--target", target, "--dev", lab.dut,
                              "--netns", lab.name)
        assert code == 0, err
        assert not [x for x in dl.status(lab) if x["target"] == target]
