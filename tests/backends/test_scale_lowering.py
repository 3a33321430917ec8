"""Set-based lowering at scale, in the kernel (issue 9): nft and iptables agree with the
reference interpreter on policies whose lists become sets.

- a 3k-entry ``set ... file`` (IPv4 and IPv6, hosts and shorter prefixes, prefixes
  inside prefixes, host bits set), used plainly and negated, with a ports file of
  values and ranges; frames at every edge of a sample of the entries;
- ~300 one-address rules that ``group_runs`` merges into sets, with a ``count`` and
  rules of another shape in the middle that must stop the runs. The oracle is the
  interpreter on the policy as written, not as grouped;
- a 100k-entry set: nft's ruleset passes ``nft -c -f`` and iptables' ipset file
  loads with ``ipset restore`` in a throw-away namespace.
"""

from __future__ import annotations

import ipaddress
import random
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from pfc import backends
from pfc.backends.iptables import run as iptrun
from pfc.backends.nft import run as nftrun
from pfc.build import build_artifact
from pfc.frontend.pipeline import Compiled, compile_path
from pfc.kernel import netns
from pfc.oracle import framebuild as fb
from pfc.oracle import gen
from pfc.passes.group import group_runs
from pfc.verifier.equiv import compare

NFT = backends.get("nft")
IPTABLES = backends.get("iptables")
MAC = bytes.fromhex("020000000001")
PORTS = ["53", "80", "443", "1000-1999", "5000", "8000-8100", "60000-65535"]


@pytest.fixture(scope="module")
def root() -> None:
    reason = netns.missing_privileges()
    if reason:
        pytest.skip(reason)


# ------------------------------------------------------------------------ policies

def block_lines(seed: int = 9) -> list[str]:
    """~3k entries: IPv4 and IPv6 hosts, /24s, /16s with hosts and /24s inside them,
    IPv6 /64s inside /48s, a few entries with host bits set, comments, blank lines."""
    rng = random.Random(seed)
    v4 = ipaddress.IPv4Address
    lines = ["# generated blocklist", ""]
    wide = [f"172.{16 + i}.0.0/16" for i in range(12)]
    lines += wide
    for _ in range(1400):
        lines.append(str(v4(rng.getrandbits(32) & 0xDFFFFFFF | 0x01000000)))
    for _ in range(450):
        lines.append(str(v4(rng.getrandbits(24) << 8 | 0x01000000)) + "/24")
    for net in wide:  # inside the /16s: overlapping entries
        base = int(ipaddress.ip_network(net).network_address)
        lines += [str(v4(base | rng.getrandbits(16))) for _ in range(15)]
        lines += [f"{v4(base | rng.getrandbits(8) << 8)}/24" for _ in range(5)]
    lines += [f"10.{i}.{i}.{i}/24   # host bits set: means 10.{i}.{i}.0/24" for i in range(9)]
    v6 = ipaddress.IPv6Address
    lines += [f"2001:db8:{i:x}::/48" for i in range(8)]
    for _ in range(550):
        lines.append(str(v6(0x20010DB8 << 96 | rng.getrandbits(96))))
    for _ in range(150):
        lines.append(f"{v6(0x20010DB8 << 96 | rng.getrandbits(32) << 64)}/64")
    for i in range(8):  # inside the /48s
        lines += [f"{v6((0x20010DB8 << 96) | (i << 80) | rng.getrandbits(64))}"
                  for _ in range(10)]
    return lines


def write_policy(path: Path, body: str, sets: dict[str, list[str]]) -> Compiled:
    for name, lines in sets.items():
        (path.parent / name).write_text("\n".join(lines) + "\n")
    path.write_text(body)
    compiled = compile_path(path)
    assert compiled.ok, compiled.diagnostics
    return compiled


SET_POLICY = """\
set block = file "block.txt"
set ports = file "ports.txt"
default pass
count udp dport $ports
pass tcp !dst $block dport $ports
drop udp !src $block sport $ports
drop src $block
drop ip6 dst $block
count tcp !src $block
"""


@pytest.fixture(scope="module")
def set_policy(tmp_path_factory) -> Compiled:
    path = tmp_path_factory.mktemp("sets") / "sets.pf"
    return write_policy(path, SET_POLICY, {"block.txt": block_lines(),
                                           "ports.txt": PORTS})


def runs_policy() -> str:
    """Runs of one-address rules, cut by a count rule, a rule with another protocol, a
    rule with another action and a family change."""
    rules = ["default pass"]
    rules += [f"drop src 10.0.{k}.{j}" for k in range(8) for j in range(1, 16)]
    rules += ["count udp dport 53"]
    rules += [f"drop src 10.1.{k}.{j}" for k in range(4) for j in range(1, 16)]
    rules += ["drop tcp src 10.1.200.1"]
    rules += [f"drop src 10.2.{k}.{j}" for k in range(3) for j in range(1, 16)]
    rules += ["pass src 10.3.0.0/16"]
    rules += [f"drop src 2001:db8::{k:x}" for k in range(1, 41)]
    rules += [f"drop udp dst 192.0.2.{j} dport 53" for j in range(1, 31)]
    return "\n".join(rules) + "\n"


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Compiled:
    return write_policy(tmp_path_factory.mktemp("runs") / "runs.pf", runs_policy(), {})


def test_group_runs_merges_the_runs_and_stops_at_other_rules(runs) -> None:
    grouped = group_runs(runs.require())
    assert len(runs.require().rules) == 298
    shapes = [(type(r.action).__name__, r.proto, len(r.matches[0].prefixes)
               if r.matches and hasattr(r.matches[0], "prefixes") else None)
              for r in grouped.rules]
    assert shapes == [("Drop", None, 120), ("Count", 17, None), ("Drop", None, 60),
                      ("Drop", 6, 1), ("Drop", None, 45), ("Pass", None, 1),
                      ("Drop", None, 40), ("Drop", 17, 30)]


# ------------------------------------------------------------------------ frames

def edge_frames(compiled: Compiled, count: int, seed: int) -> list[bytes]:
    """UDP and TCP frames from and to the edges of a sample of the policy's prefixes
    (first and last address, one outside each edge), on ports of the ports list and
    next to it, plus ``gen.sample`` frames biased to the policy's constants."""
    rng = random.Random(seed)
    nets = sorted({p for r in compiled.require().rules for m in r.matches
                   for p in getattr(m, "prefixes", ())}, key=lambda n: (n.version, n))
    picked = rng.sample(nets, min(count, len(nets)))
    ports = [53, 54, 80, 443, 999, 1000, 1999, 2000, 5000, 8100, 8101, 59999, 60000, 65535]
    frames = []
    for net in picked:
        first = net.network_address
        last = first + (net.num_addresses - 1)
        edges = [a for a in (first, last, first - 1 if int(first) else None,
                             last + 1 if int(last) < 2 ** net.max_prefixlen - 1 else None)
                 if a is not None]
        other = rng.choice(picked)
        for address in edges:
            partner = other.network_address if other.version == net.version \
                else _some(net.version, rng)
            src, dst = (address, partner) if rng.random() < 0.5 else (partner, address)
            frames.append(_frame(src, dst, rng.choice((6, 17)), rng.choice(ports),
                                 rng.choice(ports)))
    return frames + gen.sample(compiled.require(), 1200, seed=seed, fragments=False)


def _some(version: int, rng: random.Random):
    if version == 4:
        return ipaddress.IPv4Address(0x0B000000 | rng.getrandbits(24))
    return ipaddress.IPv6Address(0x20010DB9 << 96 | rng.getrandbits(64))


def _frame(src, dst, proto: int, sport: int, dport: int) -> bytes:
    s, d = src.packed, dst.packed
    l4 = fb.udp(s, d, sport, dport, b"scale") if proto == 17 else \
        fb.tcp(s, d, sport, dport, 0x02, b"scale")
    if src.version == 4:
        return fb.ethernet(MAC, MAC, fb.ETH_IP4, fb.ipv4(s, d, proto, l4))
    return fb.ethernet(MAC, MAC, fb.ETH_IP6, fb.ipv6(s, d, proto, l4))


def check(art, backend, frames, oracle: Compiled | None = None) -> None:
    """Kernel vs interpreter; ``oracle``: judge by the policy as written (the artifact
    carries the grouped one), its counters folded as the grouped rules count them."""
    lowered = art.policy
    if oracle is not None:
        art = replace(art, policy=oracle.require())
    report = compare(art, backend, frames)
    assert not report.mismatches, report.summary()
    want = report.counters_expected
    if oracle is not None:
        want = folded(want, lowered)
    assert report.counters_got == want, report.summary()
    assert report.seen > len(frames) // 2


def folded(counters: dict, lowered) -> dict:
    """Counters of the policy as written, as its grouped form counts them: a merged run
    under its first rule's index (``deploy.load.rule_rows``), the run's other rules 0."""
    kept = sorted(r.index for r in lowered.rules)
    out = dict.fromkeys(counters, (0, 0))
    for key, (packets, nbytes) in counters.items():
        into = max(i for i in kept if i <= key) if isinstance(key, int) else key
        out[into] = (out[into][0] + packets, out[into][1] + nbytes)
    return out


def nft_artifact(compiled: Compiled, hook: str):
    art, diags = build_artifact(compiled, "nft", hook=hook, dev="dut")
    assert art is not None, diags
    return art


def ipt_artifact(compiled: Compiled, flavour: str):
    art, diags = build_artifact(compiled, "iptables")
    assert art is not None, diags
    art.meta["flavour"] = flavour
    return art


# ------------------------------------------------------------------------ kernel

@pytest.fixture(scope="module")
def nft_lab(root):
    with nftrun.session() as s:
        yield s


@pytest.fixture(scope="module")
def ipt_lab(root):
    with iptrun.session() as s:
        yield s


@pytest.mark.kernel
@pytest.mark.parametrize("hook", ["ingress", "prerouting"])
def test_nft_large_sets_agree_with_the_interpreter(nft_lab, set_policy, hook) -> None:
    art = nft_artifact(set_policy, hook)
    assert {"block4", "block6", "ports"} <= set(art.meta["sets"])
    check(art, NFT, edge_frames(set_policy, 250, seed=1))


@pytest.mark.kernel
@pytest.mark.parametrize("flavour", ["nft", "legacy"])
def test_iptables_large_sets_agree_with_the_interpreter(ipt_lab, set_policy,
                                                         flavour) -> None:
    art = ipt_artifact(set_policy, flavour)
    ipset = art.files[art.meta["files"]["ipset"]].decode()
    assert ipset.count("\nadd ") > 2500
    check(art, IPTABLES, edge_frames(set_policy, 250, seed=2))


@pytest.mark.kernel
def test_nft_grouped_runs_agree_with_the_policy_as_written(nft_lab, runs) -> None:
    art = nft_artifact(runs, "prerouting")
    assert len(art.meta["sets"]) >= 3  # the runs of 120, 60 and 45 are named sets
    check(art, NFT, edge_frames(runs, 200, seed=3), oracle=runs)


@pytest.mark.kernel
def test_iptables_grouped_runs_agree_with_the_policy_as_written(ipt_lab, runs) -> None:
    art = ipt_artifact(runs, "legacy")
    assert art.files[art.meta["files"]["ipset"]].decode().count("create ") >= 6
    check(art, IPTABLES, edge_frames(runs, 200, seed=4), oracle=runs)


# ------------------------------------------------------------------------ 100k

def big_policy(path: Path, entries: int = 100_000, seed: int = 5) -> Compiled:
    """``entries`` IPv4 entries, a third of them /24s (as the issue's measurement)."""
    rng = random.Random(seed)
    lines = []
    for i in range(entries):
        address = ipaddress.IPv4Address(rng.getrandbits(32) | 0x01000000)
        lines.append(f"{address}/24" if i % 3 == 0 else str(address))
    return write_policy(path / "big.pf", 'set block = file "block.txt"\ndefault pass\n'
                        "drop src $block\ncount udp dport 53\n", {"block.txt": lines})


@pytest.mark.kernel
def test_100k_set_passes_nft_check_and_ipset_restore(root, tmp_path) -> None:
    compiled = big_policy(tmp_path)
    art = nft_artifact(compiled, "prerouting")
    (tmp_path / "big.nft").write_text(art.text)
    ipt = ipt_artifact(compiled, "legacy")
    ipset = ipt.files[ipt.meta["files"]["ipset"]]
    with netns.lab():  # this process (and the tools it starts) inside the namespace
        def run(*argv: str, data: bytes | None = None) -> subprocess.CompletedProcess:
            return subprocess.run(argv, input=data, capture_output=True)
        checked = run("nft", "-c", "-f", str(tmp_path / "big.nft"))
        assert checked.returncode == 0, checked.stderr[-500:]
        restored = run("ipset", "restore", data=ipset)
        assert restored.returncode == 0, restored.stderr[-500:]
        listed = run("ipset", "list", "-t", "pfc-block4").stdout.decode()
        entries = int(listed.split("Number of entries:")[1].split()[0])
        assert entries == ipset.count(b"\nadd pfc-block4.new ")


# ------------------------------------------------------------------ fast paths

ODD = ["10.0.0.1", "10.0.0.1/8", "10.0.0.1/024", "0.0.0.0/0", "1.2.3.4/33", "1.2.3.4/",
       "1.2.3.4/ 3", "1.2.3.4/255.0.0.0", "01.2.3.4", "1.2.3", "256.1.1.1", "::/0",
       "2001:db8::1/64", "::ffff:1.2.3.4", "1::/129", "fe80::1%eth0", "::01.2.3.4",
       "1:2:3:4:5:6:7::8", "1.2.3.4/+8", "1.2.3.4/٣"]


def test_fast_set_entries_read_as_ipaddress_does() -> None:
    """``values.fast_network`` gives ``ip_network(strict=False)``'s network, or None
    (then the general path decides and words any error)."""
    from pfc.frontend.values import fast_network

    rng = random.Random(3)
    texts = list(ODD)
    for _ in range(3000):
        v6 = rng.random() < 0.5
        bits = 128 if v6 else 32
        cls = ipaddress.IPv6Address if v6 else ipaddress.IPv4Address
        text = str(cls(rng.getrandbits(bits) >> rng.choice((0, 16, bits - 8))))
        texts.append(f"{text}/{rng.randint(0, bits)}" if rng.random() < 0.7 else text)
    for text in texts:
        try:
            want = ipaddress.ip_network(text, strict=False)
        except ValueError:
            want = None
        got = fast_network(text)
        if got is not None:
            assert got == want and type(got) is type(want), text
        else:  # left to the general path: only the odd forms (netmask, scope id)
            assert want is None or text in ("1.2.3.4/255.0.0.0", "fe80::1%eth0"), text


def test_set_file_spans_and_errors_survive_the_fast_path(tmp_path) -> None:
    (tmp_path / "s.txt").write_text("  10.0.0.1  # host\r\n\n2001:db8::/32\n"
                                    "10.0.0.0/255.0.0.0\nnot-an-address\n")
    (tmp_path / "p.pf").write_text('set s = file "s.txt"\ndrop src $s\n')
    compiled = compile_path(tmp_path / "p.pf")
    [diag] = compiled.diagnostics
    source = compiled.sources[str(tmp_path / "s.txt")]
    here = diag.notes[0].span  # the error sits on the `set`; the place is a note's
    assert diag.code == "bad-set-entry" and source.position(here.start) == (5, 1)
    ok = (tmp_path / "s.txt").read_text().replace("not-an-address\n", "")
    (tmp_path / "s.txt").write_text(ok)
    compiled = compile_path(tmp_path / "p.pf")
    [match] = compiled.require().rules[0].matches
    assert [str(p) for p in match.prefixes] == ["10.0.0.1/32", "2001:db8::/32", "10.0.0.0/8"]
