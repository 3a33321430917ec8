"""Large policies on nft (issue 16): ``pfc.passes.classify`` (blocks of disjoint
regions) and its nftables form (``backends/nft/maps.py``).

- The lowering alone: the blocks, read the way the nft chain reads them (the frame's
  family, length, transport header; a region lookup per group), give the
  interpreter's verdict, deciding rule and count rules on generated policies
  (ClassBench-style and a mixed IPv4/IPv6 one with negations, count rules, rules no
  map can hold in between, both defaults), with thresholds forced small so that small
  policies take the map path and cut into many groups.
- In the kernel: the same policies compiled for nft (text and JSON), loaded in a
  throw-away namespace, give the interpreter's verdicts and counters on frames aimed
  at the rules' corners plus the malformed mix (``pfc.oracle.gen``).
- Policies under ``MIN_RULES`` keep the ordered chain (the goldens check the text).
"""

from __future__ import annotations

import random
import subprocess

import pytest

from benchmarks import classbench as cb
from pfc import backends
from pfc.backends.nft import run as nftrun
from pfc.build import build_artifact
from pfc.frontend import ir
from pfc.frontend.pipeline import compile_text
from pfc.kernel import netns
from pfc.oracle import gen, interp, packets
from pfc.passes import classify as cl
from pfc.passes.group import group_runs
from pfc.passes.split_families import split_families
from pfc.verifier.equiv import compare

MIN_LENGTH = {4: 20, 6: 40}


@pytest.fixture
def small(monkeypatch):
    """Thresholds forced small: the map path on small policies, many groups."""
    monkeypatch.setattr(cl, "MIN_RULES", 4)
    monkeypatch.setattr(cl, "MIN_RUN", 4)
    monkeypatch.setattr(cl, "MAX_NEW", 3)


def mixed(seed: int, n: int, default: str) -> str:
    """A policy of IPv4 and IPv6 rules over a few overlapping prefixes and port ranges,
    negations, count rules, source-port-only and protocol-only rules, and now and then
    a rule no map holds (ttl, flags, redirect)."""
    rng = random.Random(seed)
    v4 = ["10.1.0.0/16", "10.1.2.0/24", "10.1.2.3", "10.1.2.128/25", "192.168.0.0/16"]
    v6 = ["2001:db8::/32", "2001:db8:1::/48", "2001:db8:1::5", "fd00::/8"]
    out = [f"default {default}"]
    for _ in range(n):
        roll = rng.random()
        if roll < 0.05:
            out.append(rng.choice(["drop tcp flags syn dport 22", "pass ttl 1-5",
                                   "redirect udp dst 10.1.2.3 dport 53 to 10.1.9.9:5353",
                                   "drop all"]))
            continue
        action = "count" if roll < 0.15 else rng.choice(["drop", "pass"])
        proto = rng.choice(["tcp", "udp", "tcp", "icmp", "", "ip6", "icmp6"])
        pool = v6 if proto in ("ip6", "icmp6") or (proto in ("tcp", "udp", "")
                                                   and rng.random() < 0.4) else v4
        words = [action] + ([proto] if proto else [])
        for field in ("src", "dst"):
            if rng.random() < 0.5:
                words.append(("!" if rng.random() < 0.1 else "") + f"{field} "
                             + rng.choice(pool))
        if proto in ("tcp", "udp"):
            for field in ("sport", "dport"):
                if rng.random() < 0.5:
                    lo = rng.choice([0, 53, 80, 1000, 1024, 65000])
                    hi = lo + rng.choice([0, 0, 1, 100, 535])
                    words.append(("!" if rng.random() < 0.1 else "") + f"{field} "
                                 + (str(lo) if lo == hi else f"{lo}-{min(hi, 65535)}"))
        elif not proto and rng.random() < 0.2:
            words.append("proto { 50, 51 }" if pool is v4 else "proto 17")
        if len(words) == 1:
            words.append("dst " + rng.choice(pool))
        out.append(" ".join(words))
    return "\n".join(out) + "\n"


def lowered(text: str) -> tuple[ir.Policy, list[cl.Item]]:
    policy = split_families(group_runs(compile_text(text, "c.pf").require()))
    return policy, cl.classify(policy)


# ------------------------------------------------------------------ the lowering alone

def key_of(view: packets.FrameView) -> dict[str, int | None]:
    def u16(at: int) -> int | None:
        return int.from_bytes(view.data[at:at + 2], "big") if at + 2 <= len(view.data) \
            else None
    ready = view.l4 is not None and view.l4proto in (ir.TCP, ir.UDP)
    out = {"proto": view.l4proto, "sport": u16(view.l4) if ready else None,
           "dport": u16(view.l4 + 2) if ready else None}
    for name in ("src", "dst"):
        raw = packets.ip_field_bytes(view, name)
        out[name] = int.from_bytes(raw, "big") if raw is not None else None
    return out


def lookup(groups: tuple[cl.Group, ...], key: dict) -> list:
    """The outcomes the groups give in order, as the block chain takes them."""
    found = []
    for g in groups:
        point = [key[f] for f in g.key]
        hits = [out for box, out in g.regions
                if all(lo <= v <= hi for v, (lo, hi) in zip(point, box, strict=True))]
        assert len(hits) <= 1, "regions of a group overlap"
        found += hits
        if hits and hits[0].decider is not None:
            break
    return found


def block_outcomes(blk: cl.Block, view: packets.FrameView) -> tuple[list, list[ir.Rule]]:
    """(region outcomes, rules run as chain rules) of a block on a frame."""
    if len(view.data) - view.l3 < MIN_LENGTH[blk.version]:
        return [], [r for r in blk.short if interp.rule_matches(r, view)]
    key = key_of(view)
    if key["dport"] is not None:
        return lookup(blk.dport, key), []
    if key["sport"] is not None and blk.sport:
        return lookup(blk.sport, key), []
    return lookup(blk.ip, key), []


def judge(policy: ir.Policy, items: list[cl.Item], frame: bytes):
    """(verdict, deciding rule, count rules) of the lowered policy on ``frame``."""
    view = packets.read_frame(frame)
    counted: list[int] = []
    for item in items:
        if isinstance(item, ir.Rule):
            outs, rules = [], [item] if interp.rule_matches(item, view) else []
        elif view.version != item.version:
            continue
        else:
            outs, rules = block_outcomes(item, view)
        for out in outs:
            counted += out.counts
            if out.decider is not None:
                return _verdict(out.decider), out.decider.index, tuple(counted)
        for rule in rules:
            if not rule.terminal:
                counted.append(rule.index)
            else:
                return _verdict(rule), rule.index, tuple(counted)
    return policy.default, None, tuple(counted)


def _verdict(rule: ir.Rule) -> ir.Verdict:
    return ir.Verdict.DROP if isinstance(rule.action, ir.Drop) else ir.Verdict.PASS


def agree(text: str, frames: list[bytes]) -> int:
    policy, items = lowered(text)
    assert any(isinstance(i, cl.Block) for i in items)
    for frame in frames:
        want = interp.evaluate(policy, frame)
        assert judge(policy, items, frame) == (want.verdict, want.rule, want.counted), \
            frame.hex()
    return sum(len(g.regions) for b in items if isinstance(b, cl.Block)
               for g in (*b.dport, *b.sport, *b.ip))


@pytest.mark.parametrize("flavour", cb.FLAVOURS)
def test_classbench_blocks_agree_with_the_interpreter(small, flavour):
    rules = cb.generate(flavour, 150, seed=3, negated=0.1, count=0.1)
    policy = compile_text(rules.text(), "c.pf").require()
    frames = cb.trace(rules, 400, seed=3, malformed=0.3, policy=policy)
    assert agree(rules.text(), frames) > 150


@pytest.mark.parametrize("seed", range(4))
def test_mixed_blocks_agree_with_the_interpreter(small, seed):
    text = mixed(seed, 60, "drop" if seed % 2 else "pass")
    policy = compile_text(text, "m.pf").require()
    agree(text, gen.sample(policy, 600, seed=seed))


def test_regions_cut_only_where_rules_overlap():
    rules = cb.generate("acl", 2000, seed=1)
    _, items = lowered(rules.text())
    blk = next(i for i in items if isinstance(i, cl.Block) and i.version == 4)
    regions = sum(len(g.regions) for g in blk.dport)
    assert len(blk.dport) < 30 and regions < 3 * len(blk.rules)


@pytest.mark.parametrize("options", ["limit rate 10/second", "limit rate 5/minute per src",
                                     "audit"])
def test_limited_and_audited_drops_stay_rules_of_their_own(options):
    """A limit or an audit changes what `drop` does: never a plain map verdict."""
    limited, _ = lowered(f"drop udp dst 10.1.0.0/16 dport 53 {options}\n")
    plain, _ = lowered("drop udp dst 10.1.0.0/16 dport 53\n")
    assert cl.mappable(limited.rules[0]) is None
    assert cl.mappable(plain.rules[0]) is not None


def test_small_policies_keep_the_ordered_chain():
    text = mixed(1, cl.MIN_RULES - 1, "pass")
    _, items = lowered(text)
    assert all(isinstance(i, ir.Rule) for i in items)


# ------------------------------------------------------------------------ in the kernel

@pytest.fixture(scope="module")
def lab():
    reason = netns.missing_privileges()
    if reason:
        pytest.skip(reason)
    with nftrun.session() as s:
        yield s


def check(lab, text: str, frames: list[bytes], fmt: str = "nft",
          hook: str = "ingress") -> None:
    art, diags = build_artifact(compile_text(text, "k.pf"), "nft", fmt, hook=hook,
                                dev=lab.lab.dut)
    assert art is not None, diags
    assert "vmap @b" in (art.text if fmt == "nft" else art.meta["text"])
    report = compare(art, backends.get("nft"), frames)
    assert report.ok, report.summary()


@pytest.mark.kernel
@pytest.mark.parametrize("flavour,default,fmt", [("acl", "drop", "nft"),
                                                 ("fw", "pass", "json"),
                                                 ("ipc", "drop", "nft")])
def test_classbench_on_nft_agrees_with_the_interpreter(lab, flavour, default, fmt):
    rules = cb.generate(flavour, 300, seed=5, default=default, negated=0.08, count=0.08)
    policy = compile_text(rules.text(), "c.pf").require()
    check(lab, rules.text(), cb.trace(rules, 500, seed=5, malformed=0.4, policy=policy),
          fmt)


@pytest.mark.kernel
@pytest.mark.parametrize("hook", ["ingress", "prerouting", "input"])
def test_mixed_families_on_nft_agree_with_the_interpreter(lab, small, hook):
    text = mixed(11, 80, "drop")
    check(lab, text, gen.sample(compile_text(text, "m.pf").require(), 700, seed=11),
          hook=hook)


@pytest.mark.kernel
def test_pfc_load_replaces_and_unloads_map_rulesets(tmp_path, monkeypatch):
    """``pfc load`` replaces pfc's table in place (one transaction) from maps to maps
    to the ordered chain and back, and ``unload`` leaves nothing: the in-place batch
    deletes the maps before the chains their elements jump to."""
    from pfc.cli.main import main

    reason = netns.missing_privileges()
    if reason:
        pytest.skip(reason)
    monkeypatch.setenv("PFC_STATE_DIR", str(tmp_path / "state"))
    texts = [cb.generate("acl", 120, seed=1).text(), cb.generate("fw", 120, seed=1).text(),
             "drop udp dport 53\n", cb.generate("ipc", 120, seed=1).text()]
    with netns.lab() as lab:
        for n, text in enumerate(texts):
            path = tmp_path / f"p{n}.pf"
            path.write_text(text)
            assert main(["load", str(path), "--target", "nft", "--dev", lab.dut,
                         "--netns", lab.name]) == 0
        assert main(["unload", "--target", "nft", "--dev", lab.dut,
                     "--netns", lab.name]) == 0
        listed = subprocess.run(["ip", "netns", "exec", lab.name, "nft", "list", "tables"],
                                capture_output=True, text=True, check=True).stdout
        assert "pfc" not in listed


def test_cbpf_refuses_thousands_of_rules_naming_the_count_and_the_ebpf_hooks():
    rules = cb.generate("fw", 3000, seed=1, negated=0, count=0)
    art, diags = build_artifact(compile_text(rules.text(), "fw.pf"), "cbpf")
    assert art is None and diags[0].code == "too-large"
    assert "the policy's 3,000 rules need about" in diags[0].message
    assert all(h in diags[0].hint for h in ("socket", "tc", "xdp", "nft"))
