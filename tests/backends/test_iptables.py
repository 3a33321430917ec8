"""The iptables backend: what it emits, that iptables accepts it, that reloading is
idempotent, and that in the kernel (both iptables flavours, both hooks) it gives the
reference interpreter's verdicts and counters on every frame the hook sees."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from pfc import backends
from pfc.backends.iptables import run as iptrun
from pfc.backends.iptables import u32 as u
from pfc.build import OptionError, build_artifact
from pfc.frontend.pipeline import compile_path, compile_text
from pfc.kernel import netns
from pfc.oracle import framebuild as fb
from pfc.oracle import gen
from pfc.verifier.equiv import compare
from tests.paths import EXAMPLES
from tests.strategies import policies

BACKEND = backends.get("iptables")
FLAVOURS = ("nft", "legacy")
HOOKS = ("raw-prerouting", "filter-input")


@pytest.fixture(scope="module")
def root() -> None:
    reason = netns.missing_privileges()
    if reason:
        pytest.skip(reason)


def artifact(text: str, flavour: str = "nft", **options):
    art, diags = build_artifact(compile_text(text, "t.pf"), "iptables", **options)
    assert art is not None, diags
    art.meta["flavour"] = flavour
    return art


def chain_lines(art, family: str = "ipv4") -> list[str]:
    body = art.files[art.meta["files"][family]].decode()
    return [line for line in body.splitlines() if line.startswith("-A PFC")]


def rules(art, family: str = "ipv4") -> list[str]:
    """The rules' lines: every line but the last, the default's."""
    return chain_lines(art, family)[:-1]


def default(art, family: str = "ipv4") -> str:
    return chain_lines(art, family)[-1]


# --------------------------------------------------------------------- emitting

def test_study_rule_reads_fields_exactly():
    art = artifact("drop udp dst 192.168.0.79 dport 12345\n")
    assert rules(art) == ['-A PFC -d 192.168.0.79/32 -p udp ! -f -m u32 --u32 '
                          '"0>>22&0x3C@0&0xFFFF=12345" -j DROP']
    assert rules(art, "ipv6") == []


def test_actions_and_default():
    art = artifact("default drop\npass tcp dport 22\ncount udp\ndrop icmp\n")
    v4 = rules(art)
    assert v4[0].endswith("-j RETURN") and "-j" not in v4[1] and v4[2].endswith("-j DROP")
    assert default(art) == "-A PFC -j DROP"  # the default, last
    assert art.meta["lines"]["IPv4"] == [0, 1, 2, None]
    assert chain_lines(art, "ipv6") == [
        '-A PFC -m u32 --u32 "4>>8&0xFF=6&&40&0xFFFF=22" -j RETURN',
        '-A PFC -m u32 --u32 "4>>8&0xFF=17"', "-A PFC -j DROP"]
    # default pass: a rule with no target counts what no rule decided, then RETURN
    assert default(artifact("drop udp\n")) == "-A PFC"


def test_ipv6_protocol_is_the_fixed_header_next_header():
    """ip6tables `-p` walks extension headers (and legacy hotdrops a broken chain)."""
    for line in rules(artifact("drop tcp\ndrop udp sport 53\npass ip6 proto 58\n"), "ipv6"):
        assert " -p " not in line and "4>>8&0xFF=" in line


def test_lists_become_ipsets_and_negation_stays_exact():
    art = artifact("define bad = { 10.0.0.0/8, 10.1.0.0/16, 192.0.2.1 }\n"
                   "drop !src $bad\ndrop dst { 2001:db8::/32, 198.51.100.0/24 }\n")
    v4 = rules(art)
    assert v4[0] == "-A PFC -m set ! --match-set pfc-bad4 src -j DROP"
    assert v4[1] == "-A PFC -d 198.51.100.0/24 -j DROP"
    assert rules(art, "ipv6") == ["-A PFC -d 2001:db8::/32 -j DROP"]
    ipset = art.files[art.meta["files"]["ipset"]].decode()
    assert "add pfc-bad4.new 10.0.0.0/8" in ipset and "10.1.0.0/16" not in ipset  # inside
    two = rules(artifact("drop src { 10.0.0.1, 10.0.0.2 } src { 10.0.0.2, 10.0.0.3 }\n"))
    assert two == ["-A PFC -s 10.0.0.2/32 -j DROP"]  # the checker merges the two lists


def test_prefix_zero_is_everything_not_an_ipset():
    art = artifact("drop src { 0.0.0.0/0, 10.0.0.0/8 }\ncount !dst 0.0.0.0/0\n")
    assert rules(art) == ["-A PFC -j DROP"]  # the count rule can never match: left out
    assert "never matches IPv4" in art.files[art.meta["files"]["ipv4"]].decode()


def test_rule_that_cannot_match_a_family_is_left_out():
    art = artifact("drop len 20-39\ncount !len 0-65535\ndrop len { 10-20, 30-39 }\n")
    assert rules(art) == ["-A PFC -m length --length 20:39 -j DROP",
                          "-A PFC -m length ! --length 0:65535",
                          '-A PFC -m u32 --u32 "0&0xFFFF=10:20,30:39" -j DROP']
    # No IPv6 packet is shorter than 40 bytes; `len` can exceed 65535 on IPv6.
    assert rules(art, "ipv6") == ['-A PFC -m u32 --u32 "4>>16=65496:65535"']
    text = art.files[art.meta["files"]["ipv6"]].decode()
    assert text.count("never matches IPv6: left out") == 2


def test_ipv6_len_is_the_payload_length_field():
    """ip6tables ``-m length`` reads skb->len since Linux 6.3: wrong for a jumbogram-like
    packet (payload length 0, hop-by-hop header), which ipv6_rcv does not trim."""
    assert rules(artifact("drop ip6 len 40-100\n"), "ipv6") == [
        '-A PFC -m u32 --u32 "4>>16=0:60" -j DROP']


def test_fields_u32_cannot_read_exactly_use_bpf():
    """`sport` alone and TCP payload in the first 3 bytes: u32 would need 4 bytes."""
    v4 = rules(artifact("drop udp sport 53\ndrop icmp icmp-type 8\n"
                        "drop tcp payload[1] == \"X\"\ndrop tcp sport 53 dport 80\n"))
    assert all("-m bpf" in line for line in v4[:3])
    assert "-m bpf" not in v4[3] and "0>>22&0x3C@0>>16=53" in v4[3]


def test_negated_payload_is_disjoint_alternatives():
    art = artifact('count udp !payload[2:6] == "abcdef"\n')
    v4 = rules(art)
    assert len(v4) == 2 and art.meta["lines"]["IPv4"] == [0, 0, None]
    assert v4[0].endswith('"0>>22&0x3C@8&0xFFFF=0x0:0x6161,0x6163:0xFFFF'
                          '&&0>>22&0x3C@12=0x0:0xFFFFFFFF"')
    assert '"0>>22&0x3C@8&0xFFFF=0x6162&&0>>22&0x3C@12=0x0:0x63646565,' in v4[1]


def test_long_lists_split_into_disjoint_lines():
    ports = ", ".join(str(p) for p in range(1, 40, 2))
    art = artifact(f"count tcp dport {{ {ports} }}\n")
    assert len(rules(art)) == 2 and len(rules(art, "ipv6")) == 2


def test_notrack_and_dev():
    art = artifact("drop udp\n", notrack=True, dev="eth0")
    text = art.files[art.meta["files"]["ipv4"]].decode()
    assert "-I PREROUTING 1 -i eth0 -j PFC" in text and "-D PREROUTING -i eth0 -j PFC" in text
    assert "-A PFC-notrack -j CT --notrack" in text and "-A PFC -g PFC-notrack" in text


@pytest.mark.parametrize("options", [
    {"hook": "filter-input", "notrack": True}, {"table": "input"}, {"table": "a b"},
    {"table": "x" * 17}, {"dev": "eth0; reboot"}])
def test_bad_options_are_usage_errors(options):
    with pytest.raises(OptionError):
        build_artifact(compile_text("drop udp\n"), "iptables", **options)


def test_redirect_is_a_capability_error():
    art, diags = build_artifact(compile_path("examples/udp-redirect.pf"), "iptables")
    assert art is None and [d.code for d in diags] == ["unsupported"]
    assert "redirect" in diags[0].message and "tc" in (diags[0].hint or "")


def test_payload_words_end_at_the_field():
    words = u.payload_words(8, b"abcdef")
    assert [(w.pos, w.mask, w.value) for w in words] == [
        (6, 0x0000FFFF, 0x6162), (10, 0xFFFFFFFF, 0x63646566)]
    assert u.payload_words(1, b"X")[0].pos == -2  # IPv4 TCP: needs bpf
    assert u.complement(((0, 5), (10, 10)), 12) == ((6, 9), (11, 12))


def test_bpf_jumps_land_on_their_labels():
    program = u.bpf_ip4_field(0, 2, ((1, 1), (5, 9)))
    assert program == "7,177 0 0 0,72 0 0 0,21 3 0 1,53 0 1 5,37 0 1 9,6 0 0 0,6 0 0 1"


# ----------------------------------------------------------- kernel: loading

def _restore(tool: str, text: str, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([tool, "--noflush", *flags], input=text, text=True,
                          capture_output=True)


def _load_all(art, flavour: str, *flags: str) -> None:
    files, names = art.files, art.meta["files"]
    if names["ipset"] and not flags:
        subprocess.run(["ipset", "restore"], input=files[names["ipset"]].decode(),
                       text=True, check=True)
    for family, tool in ((4, "iptables"), (6, "ip6tables")):
        for key in (f"init{family}", "ipv4" if family == 4 else "ipv6"):
            result = _restore(f"{tool}-{flavour}-restore", files[names[key]].decode(), *flags)
            assert result.returncode == 0, (key, result.stderr)


def _compiled_examples():
    out = []
    for path in EXAMPLES:
        for hook in HOOKS:
            art, _ = build_artifact(compile_path(path), "iptables", hook=hook)
            if art is not None:
                out.append(art)
    return out


@pytest.mark.kernel
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_iptables_restore_accepts_every_example(root, flavour):
    with netns.lab():
        for art in _compiled_examples():
            if art.meta["files"]["ipset"]:
                subprocess.run(["ipset", "restore"], check=True, text=True,
                               input=art.files[art.meta["files"]["ipset"]].decode())
            for family, tool in ((4, "iptables"), (6, "ip6tables")):
                init = art.files[art.meta["files"][f"init{family}"]].decode()
                main = art.files[art.meta["files"]["ipv4" if family == 4 else "ipv6"]].decode()
                tool = f"{tool}-{flavour}-restore"
                assert _restore(tool, init, "--test").returncode == 0
                assert _restore(tool, init).returncode == 0
                result = _restore(tool, main, "--test")
                assert result.returncode == 0, result.stderr



@pytest.mark.kernel
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_thousands_of_merged_rules_load(root, flavour):
    """2,000 one-address rules, merged by ``group_runs`` into one ipset lookup, load
    with the restore tools; the rule's comment lists 16 values, not 2,000 (a 15 kB
    comment line made iptables-nft-restore fail: "Parser cannot handle more
    arguments")."""
    text = "".join(f"drop src 10.{i >> 8}.{i & 255}.9\n" for i in range(2000))
    art = artifact(text, flavour)
    main = art.files[art.meta["files"]["ipv4"]].decode()
    assert max(len(line) for line in main.splitlines()) < 400
    assert "... 1984 more }" in main
    with netns.lab():
        _load_all(art, flavour)


def _save(flavour: str, family: int, table: str = "raw") -> str:
    tool = "iptables" if family == 4 else "ip6tables"
    return subprocess.run([f"{tool}-{flavour}-save", "-t", table], capture_output=True,
                          text=True, check=True).stdout


@pytest.mark.kernel
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_reload_is_idempotent_and_leaves_other_rules_alone(root, flavour):
    first = artifact("drop udp dport 53\ncount tcp\n", flavour)
    second = artifact("drop src { 10.0.0.0/8, 192.0.2.0/24 }\n", flavour)
    with netns.lab():
        mine = "-A PREROUTING -s 203.0.113.7/32 -j DROP"
        assert _restore(f"iptables-{flavour}-restore", f"*raw\n{mine}\nCOMMIT\n").returncode == 0
        _load_all(first, flavour)
        for art in (first, first, second, second):
            for key in ("ipset", "ipv4", "ipv6"):
                name = art.meta["files"][key]
                if not name:
                    continue
                tool = ["ipset", "restore"] if key == "ipset" else [
                    f"{'iptables' if key == 'ipv4' else 'ip6tables'}-{flavour}-restore",
                    "--noflush"]
                subprocess.run(tool, input=art.files[name].decode(), text=True, check=True)
        saved = _save(flavour, 4)
        assert saved.count("-j PFC") == 1 and mine in saved
        assert [ln for ln in saved.splitlines() if ln.startswith("-A PFC")] == \
            ["-A PFC -m set --match-set pfc.r0.src4 src -j DROP", "-A PFC"]
        assert _save(flavour, 6).count("-j PFC") == 1
        # the first policy's IPv6 rules are gone: only the default's counting rule
        assert [ln for ln in _save(flavour, 6).splitlines() if ln.startswith("-A PFC")] == \
            ["-A PFC"]


# --------------------------------------------------------- kernel: the study rule

def _udp(dst: str, dport: int, dst_mac: bytes) -> bytes:
    src, dst_b = bytes([10, 0, 0, 1]), bytes(int(x) for x in dst.split("."))
    ip = fb.ipv4(src, dst_b, 17, fb.udp(src, dst_b, 4000, dport, b"flood"))
    return fb.ethernet(dst_mac, iptrun.SEND_MAC, fb.ETH_IP4, ip)


@pytest.mark.kernel
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_edge_drop_from_the_cli_drops_exactly_the_flood(root, flavour, tmp_path: Path):
    """`pfc compile` printed output piped into `iptables-restore --noflush` on a system
    without pfc's chain (finding 22) loads the policy: the flood is dropped and nothing
    else. Piped again, where the chain exists, it refuses and changes nothing; the
    file `-o` wrote replaces the loaded policy, leaving one jump."""
    pfc = [".venv/bin/pfc", "compile", "examples/edge-drop.pf", "--target", "iptables"]
    subprocess.run(pfc + ["-o", f"{tmp_path}/"], check=True, capture_output=True)
    printed = subprocess.run(pfc, check=True, capture_output=True, text=True).stdout
    with iptrun.session() as s:
        tool = f"iptables-{flavour}-restore"
        mine = "-A PREROUTING -s 203.0.113.7/32 -j DROP"
        assert _restore(tool, f"*raw\n{mine}\nCOMMIT\n").returncode == 0
        first = _restore(tool, printed)
        assert first.returncode == 0, first.stderr  # a fresh system: loads
        loaded = _save(flavour, 4)
        assert loaded.count("-j PFC") == 1 and mine in loaded
        again = _restore(tool, printed)
        assert again.returncode != 0 and _save(flavour, 4) == loaded  # refused, unchanged
        if flavour == "nft":
            assert "Chain already exists" in again.stderr
        main = (tmp_path / "edge-drop.iptables.restore").read_text()
        assert _restore(tool, main).returncode == 0
        assert _save(flavour, 4).count("-j PFC") == 1 and mine in _save(flavour, 4)
        assert _restore(tool, f"*raw\n-D {mine[3:]}\nCOMMIT\n").returncode == 0
        s.flavours.add(flavour)
        s._observe({"flavour": flavour, "table": "raw", "base": "PREROUTING"})
        frames = [_udp("192.168.0.79", 12345, s.lab.dut_mac),
                  _udp("192.168.0.79", 12346, s.lab.dut_mac),
                  _udp("192.168.0.80", 12345, s.lab.dut_mac)]
        assert [x is not None for x in s.judge(frames)] == [False, True, True]


@pytest.mark.kernel
def test_printed_text_loads_only_the_ipv4_rules(root):
    """The IPv6 file's u32 offsets are IPv6's: piping the whole printed text into
    iptables-restore must not put them into the IPv4 table."""
    art, _ = build_artifact(compile_path("examples/web-server.pf"), "iptables")
    with netns.lab():
        if art.meta["files"]["ipset"]:
            subprocess.run(["ipset", "restore"], check=True, text=True,
                           input=art.files[art.meta["files"]["ipset"]].decode())
        piped = _restore("iptables-legacy-restore", art.text)
        assert piped.returncode == 0, piped.stderr
        loaded = [ln for ln in _save("legacy", 4).splitlines() if ln.startswith("-A PFC")]
        assert len(loaded) == len(chain_lines(art)) and not any("0x4>>0x8" in ln
                                                                 for ln in loaded)
        assert _save("legacy", 4).count("-j PFC") == 1
        assert "-A PFC" not in _save("legacy", 6)


# ------------------------------------------------------ kernel: differential

@pytest.fixture(scope="module")
def lab(root):
    with iptrun.session() as s:
        yield s


def _check(art, frames):
    report = compare(art, BACKEND, frames)
    assert report.ok, report.summary()
    return report


@pytest.mark.kernel
@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("hook", HOOKS)
@pytest.mark.parametrize("example", [e for e in EXAMPLES if "redirect" not in e.name],
                         ids=lambda e: e.stem)
def test_examples_agree_with_the_interpreter(lab, example, hook, flavour):
    compiled = compile_path(example)
    art, _ = build_artifact(compiled, "iptables", hook=hook)
    art.meta["flavour"] = flavour
    report = _check(art, gen.sample(compiled.policy, 1500, seed=7))
    assert report.seen > 100


@pytest.mark.kernel
@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("hook", HOOKS)
@settings(derandomize=True, max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow])
@given(text=policies(redirect=False))
def test_generated_policies_agree_with_the_interpreter(lab, text, hook, flavour):
    policy = compile_text(text).require()
    art = artifact(text, flavour, hook=hook)
    _check(art, gen.sample(policy, 400, seed=len(text)))


@pytest.mark.kernel
@settings(derandomize=True, max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=policies(redirect=False))
def test_notrack_keeps_the_verdicts(lab, text):
    policy = compile_text(text).require()
    art = artifact(text, "legacy", notrack=True)
    _check(art, gen.sample(policy, 200, seed=1))


EDGE_POLICY = """\
drop udp sport 53
drop icmp icmp-type 8
drop tcp payload[1] == "X"
count tcp dport 80
count udp !sport 1-52
drop udp dst 2001:db8::/32 dport 53
count tcp dst 2001:db8::/32
count tcp !payload[0:3] == "aXb"
"""


def _short_frames() -> list[bytes]:
    """Transport headers cut at every length under every IPv4 header length (xt_tcpudp
    hotdrops them, u32 cannot read them all), 0-3 byte TCP payloads, and IPv6 packets
    with truncated extension headers (ip6tables-legacy's ``-p`` hotdrops those)."""
    s4, d4 = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])
    s6, d6 = bytes.fromhex("20010db8" + "0" * 23 + "1"), bytes.fromhex("20010db8" + "0" * 23 + "2")
    heads = {6: fb.tcp(s4, d4, 53, 80, 0x02, b""), 17: fb.udp(s4, d4, 53, 53, b"x" * 8),
             1: fb.icmp(8, 0, b"abcd", b"")}
    frames = []
    for words in (0, 1, 10):
        options = b"\x01" * 4 * words
        for proto, head in heads.items():
            for n in range(0, len(head) + 1):
                frames.append(fb.ipv4(s4, d4, proto, head[:n], options=options))
        for payload in (b"", b"a", b"b", b"aX", b"aY", b"bX", b"aXb", b"aXbc", b"aYbc"):
            for opts in (b"", b"\x01" * 8):
                segment = fb.tcp(s4, d4, 1, 80, 0x10, payload, options=opts)
                frames.append(fb.ipv4(s4, d4, 6, segment, options=options))
    udp6 = fb.udp(s6, d6, 53, 53, b"")
    for nh, body in ((17, udp6), (17, udp6[:3]), (43, b"\x11"), (60, b"\x11\x05"),
                     (60, b"\x11\x00" + bytes(6) + udp6), (6, b"\x00" * 3), (44, b"\x11")):
        frames.append(fb.ipv6(s6, d6, nh, body))
    ether = {4: fb.ETH_IP4, 6: fb.ETH_IP6}
    return [fb.ethernet(bytes(6), bytes(6), ether[f[0] >> 4], f) for f in frames]


@pytest.mark.kernel
@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("hook", HOOKS)
def test_short_headers_agree_with_the_interpreter(lab, hook, flavour):
    """What random frames rarely hit: each of these frames decides a rule only through
    the exact-presence reads (bpf for `sport`/`icmp-type` alone and short payloads)."""
    report = _check(artifact(EDGE_POLICY, flavour, hook=hook), _short_frames())
    assert report.seen > 150 and report.counters_expected[3][0] > 10
    assert report.counters_expected[7][0] > 5


@pytest.mark.kernel
def test_large_set_file_agrees_with_the_interpreter(lab, tmp_path: Path):
    """`set NAME = file` with 70 000 entries: one ipset, loaded and judged quickly."""
    lines = [f"10.{i >> 8 & 255}.{i & 255}.{i % 7}" for i in range(0, 70000 * 3, 3)]
    (tmp_path / "big.txt").write_text("\n".join(lines + ["2001:db8::/64"]) + "\n")
    (tmp_path / "big.pf").write_text('set big = file "big.txt"\ndrop src $big\ncount udp\n')
    compiled = compile_path(tmp_path / "big.pf")
    art, _ = build_artifact(compiled, "iptables")
    assert len(rules(art)) == 2 and "maxelem 131072" in art.text
    art.meta["flavour"] = "legacy"
    _check(art, gen.sample(compiled.policy, 1000, seed=5))


@pytest.mark.kernel
def test_input_view_predicts_what_reaches_filter_input(lab):
    """``view("filter-input")`` says which packets past PREROUTING reach INPUT: no
    frame the view calls seen is missing there, and the kernel delivers none it calls
    unseen among these (fragments, martians, multicast, IP options)."""
    policy = compile_text("count\n").require()
    frames = [f for f in gen.sample(policy, 3000, seed=11)
              if BACKEND.view("raw-prerouting", f) is not None]
    seen = [BACKEND.view("raw-prerouting", f) for f in frames]
    art = artifact("count\n", "legacy", hook="filter-input")
    observed = iptrun.run(art, seen)
    predicted = [BACKEND.view("filter-input", f) is not None for f in frames]
    got = [v.value == "pass" for v in observed.verdicts]
    wrong = [f.hex() for f, p, g in zip(seen, predicted, got, strict=True) if p != g]
    assert not wrong, f"{len(wrong)} frames, e.g. {wrong[:3]}"
    assert sum(predicted) > 1000 and sum(not p for p in predicted) > 50


@pytest.mark.kernel
def test_runner_judges_thousands_of_frames_in_one_run(lab):
    """4,000 frames through one ruleset agree; the rate is printed (`pytest -s`), not
    asserted: timing bounds do not belong in unit tests."""
    import time
    art = artifact("drop udp dport 53\ncount tcp\n", "legacy")
    frames = gen.sample(art.policy, 4000, seed=3)
    start = time.perf_counter()
    _check(art, frames)
    print(f"iptables runner: {len(frames) / (time.perf_counter() - start):.0f} frames/s")

