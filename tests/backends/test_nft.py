"""The nft backend: what it emits, that nft accepts it (text and JSON, the same ruleset),
that reloading replaces only pfc's table, and that in the kernel, at every hook, it
gives the reference interpreter's verdicts, rewritten bytes and counters on every frame
the hook sees (``pfc.verifier.equiv.compare`` through ``pfc.backends.nft.run``)."""

from __future__ import annotations

import json
import struct
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from pfc import backends
from pfc.backends.nft import run as nftrun
from pfc.build import OptionError, build_artifact
from pfc.frontend import ir
from pfc.frontend.pipeline import compile_path, compile_text
from pfc.kernel import netns
from pfc.oracle import framebuild as fb
from pfc.oracle import gen
from pfc.oracle.interp import evaluate
from pfc.verifier.equiv import compare
from tests.paths import EXAMPLES, ROOT
from tests.strategies import policies, rule_text

BACKEND = backends.get("nft")
HOOKS = ("ingress", "prerouting", "input")
from tests.paths import GOLDEN  # noqa: E402


@pytest.fixture(scope="module")
def root() -> None:
    reason = netns.missing_privileges()
    if reason:
        pytest.skip(reason)


@pytest.fixture(scope="module")
def lab(root):
    with nftrun.session() as s:
        yield s


def artifact(text: str, hook: str = "ingress", fmt: str | None = None, **options):
    options.setdefault("dev", "dut")
    art, diags = build_artifact(compile_text(text, "t.pf"), "nft", fmt, hook=hook, **options)
    assert art is not None, diags
    return art


def rules(art) -> list[str]:
    """The rule lines of pfc's chain (comments and the chain header left out)."""
    body = art.meta["text"].split("policy accept;", 1)[1]
    return [line.strip() for line in body.splitlines()
            if line.strip() and not line.strip().startswith(("#", "}"))]


def _check(art, frames):
    report = compare(art, BACKEND, frames)
    assert report.ok, report.summary()
    assert report.seen > 0
    return report


# --------------------------------------------------------------------- emitting

def test_study_rule_reads_fields_exactly():
    art = artifact("drop udp dst 192.168.0.79 dport 12345\n", dev="eth0")
    assert rules(art)[0] == ('meta protocol ip meta l4proto udp ip frag-off & 0x1fff 0 '
                             'ip daddr 192.168.0.79 udp dport 12345 counter drop '
                             'comment "pfc rule 0"')
    assert 'type filter hook ingress device "eth0" priority 0; policy accept;' in art.text
    assert art.text.index("table netdev pfc\n") < art.text.index("delete table netdev pfc")


def test_the_default_hook_is_ingress_on_a_device_else_prerouting():
    art, diags = build_artifact(compile_text("drop\n", "t.pf"), "nft")
    assert diags == [] and (art.hook, art.meta["family"]) == ("prerouting", "inet")
    art, diags = build_artifact(compile_text("drop\n", "t.pf"), "nft", dev="eth0")
    assert (art.hook, art.meta["family"]) == ("ingress", "netdev")
    with pytest.raises(OptionError, match="needs a device"):
        build_artifact(compile_text("drop\n", "t.pf"), "nft", hook="ingress")


@pytest.mark.parametrize("options", [{"table": "no way"}, {"dev": "eth0; drop"},
                                     {"table": "1abc"}, {"hook": "forward"}])
def test_bad_options_are_usage_errors(options):
    options.setdefault("dev", "eth0")
    with pytest.raises(OptionError):
        build_artifact(compile_text("drop\n", "t.pf"), "nft", **options)


def test_a_rule_of_both_families_becomes_one_rule_per_family():
    art = artifact("count udp dport 53\n")
    assert rules(art)[:2] == [
        "meta protocol ip meta l4proto udp ip frag-off & 0x1fff 0 udp dport 53 "
        'counter name "rule_0"',
        "meta protocol ip6 ip6 nexthdr udp meta l4proto udp udp dport 53 "
        'counter name "rule_0"']
    assert "counter rule_0 {" in art.text and art.meta["counters"] == {0: "rule_0"}


def test_negation_keeps_the_transport_guards():
    line = rules(artifact("drop tcp !dport 53 dst 10.0.0.0/8\n"))[0]
    assert line.startswith("meta protocol ip meta l4proto tcp ip frag-off & 0x1fff 0 ")
    assert "tcp dport != 53" in line


def test_inet_hooks_gate_on_nfproto():
    art = artifact("drop ip6 ttl 1\ndrop src 10.0.0.1\n", hook="input", dev=None)
    assert rules(art)[:2] == [
        'meta nfproto ipv6 ip6 hoplimit 1 counter drop comment "pfc rule 0"',
        'meta nfproto ipv4 ip saddr 10.0.0.1 counter drop comment "pfc rule 1"']
    assert "table inet pfc {" in art.text and "hook input priority 0" in art.text


def test_payload_needs_a_tcp_data_offset_of_five():
    line = rules(artifact('drop tcp src 10.0.0.0/8 payload[1:2] == "XY"\n'))[0]
    assert "tcp doff >= 5 @ih,8,16 0x5859" in line
    assert "doff" not in rules(artifact("drop udp src 10.0.0.0/8 payload[0] == 1\n"))[0]


def test_ipv6_len_is_the_payload_length_field():
    lines = rules(artifact("drop ip6 len 40-100\ndrop ip6 len 0-39\ndrop ip6 !len 0-39\n"))
    assert "ip6 length 0-60" in lines[0]
    assert not any("pfc rule 1" in line for line in lines)  # never matches: left out
    assert "ip6 length 0-65535" in lines[1]  # "the field is there"


def test_lists_named_in_the_policy_and_long_lists_are_named_sets(tmp_path: Path):
    (tmp_path / "bad.txt").write_text("".join(f"10.{i}.0.0/16\n" for i in range(40))
                                      + "2001:db8::/32\n")
    (tmp_path / "p.pf").write_text('set bad = file "bad.txt"\ndefine web = { 80, 443 }\n'
                                   "drop src $bad\npass tcp dport $web\n"
                                   f"drop tcp sport {{ {', '.join(map(str, range(1, 80, 2)))} }}\n")
    art, diags = build_artifact(compile_path(tmp_path / "p.pf"), "nft", dev="eth0")
    assert art is not None, diags
    assert art.meta["sets"] == ["bad4", "r2_sport", "web"]  # one IPv6 entry: no set
    assert "ip saddr @bad4" in art.text and "tcp dport @web" in art.text
    assert "type ipv4_addr" in art.text and "flags interval" in art.text


def test_a_list_without_values_of_a_family_never_matches_anything():
    lines = rules(artifact("drop dst { 10.0.0.0/8, 2001:db8::/32 }\n"
                           "drop src { 10.0.0.0/8, 2001:db8::/32 } !dst 10.1.0.0/16\n"))
    assert [line.split(" counter")[0] for line in lines[:4]] == [
        "meta protocol ip ip daddr 0.0.0.0/0 ip daddr 10.0.0.0/8",
        "meta protocol ip6 ip6 daddr ::/0 ip6 daddr 2001:db8::/32",
        # the checker makes this rule IPv4 (`!dst` is): no IPv6 half
        "meta protocol ip ip saddr 0.0.0.0/0 ip saddr 10.0.0.0/8 "
        "ip daddr 0.0.0.0/0 ip daddr != 10.1.0.0/16",
        'counter accept comment "pfc default"']


def test_ipv4_redirect_that_can_meet_udplite_or_icmpv6_is_refused():
    compiled = compile_text("redirect ip dst 192.0.2.1 to 10.0.0.1\n", "t.pf")
    art, diags = build_artifact(compiled, "nft", dev="eth0")
    assert art is None and diags[0].code == "unsupported" and "136" in diags[0].message
    for ok in ("redirect ip dst 192.0.2.1 !proto { 58, 136 } to 10.0.0.1\n",
               "redirect udp dst 192.0.2.1 to 10.0.0.1:53\n",
               "redirect ip6 dst 2001:db8::1 to 2001:db8::2\n"):
        assert artifact(ok).text


def test_json_is_the_same_commands():
    art = artifact("count tcp dport { 80, 443 }\ndrop\n", fmt="json")
    doc = json.loads(art.text)["nftables"]
    kinds = [next(iter(c)) for c in doc]
    assert kinds[:4] == ["metainfo", "add", "delete", "add"]
    assert {"add": {"counter": {"family": "netdev", "table": "pfc", "name": "rule_0"}}} in doc
    assert art.files == {"t.nft.json": art.text.encode()}


def test_the_form_not_asked_for_is_rendered_on_first_use():
    """``meta`` holds the text and the JSON form; the one not asked for is rendered when
    first read (each costs about a second at 100k set elements) and is the same bytes
    as when asked for, for every kind of set element."""
    from pfc.backends.base import Options
    from pfc.backends.nft import backend as nft

    hosts = ", ".join(f"10.0.{i}.{i}" for i in range(40))
    text = (f"define many = {{ {hosts}, 10.9.0.0/16, 2001:db8::/32, 2001:db8:1::1 }}\n"
            "drop src $many\ndrop tcp dport { 1-10, 22, 80, 443, 8000-9000 }\n"
            "drop udp !sport { 53, 123 }\n" + "".join(
                f"drop icmp icmp-type {t}\n" for t in ("echo-request", "echo-reply")))
    policy = compile_text(text, "t.pf").require()
    for hook in HOOKS:
        options = Options("nft", "json", hook, dev="eth0")
        lowered = nft.lower(BACKEND.lower(policy), options)
        assert lowered.sets
        want = json.dumps(nft.render_json(lowered), indent=1) + "\n"
        assert nft.json_text(lowered) == want
        art = artifact(text, hook, "json", dev="eth0")
        assert art.text == want and art.meta["json"] == want and "text" in art.meta
        assert art.meta["text"] == artifact(text, hook, dev="eth0").text


GOLDEN_CASES = [(e, h, f) for e in EXAMPLES for h, f in
                (("ingress", "json"), ("prerouting", "nft"), ("input", "nft"))]


@pytest.mark.parametrize("example,hook,fmt", GOLDEN_CASES,
                         ids=[f"{e.stem}-{h}-{f}" for e, h, f in GOLDEN_CASES])
def test_golden(example: Path, hook: str, fmt: str, golden):
    """tests/golden/EXAMPLE/nft.HOOK.FMT, ingress on ``eth0``; the default (ingress,
    text) is tests/backends/test_golden.py's nft.nft."""
    from pfc.frontend.diagnostics import render_text
    from pfc.frontend.pipeline import compile_source
    from pfc.frontend.source import SourceFile
    source = SourceFile(str(example.relative_to(ROOT)), example.read_text())
    compiled = compile_source(source, read_set=lambda p: SourceFile(
        str(p), (example.parent / p.name).read_text()))
    art, diags = build_artifact(compiled, "nft", fmt, hook=hook, dev="eth0")
    if art is None:
        text = "\n".join(render_text(d, compiled.sources) for d in diags) + "\n"
        golden(GOLDEN / example.stem / f"nft.{hook}.error", text)
    else:
        golden(GOLDEN / example.stem / f"nft.{hook}.{fmt}", art.text)


# ------------------------------------------------------------------------ kernel

def _nft(*args: str, text: str | None = None, ns: str) -> str:
    result = subprocess.run(["ip", "netns", "exec", ns, "nft", *args], input=text,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.kernel
@pytest.mark.parametrize("example", EXAMPLES, ids=[e.stem for e in EXAMPLES])
def test_nft_accepts_every_example_at_every_hook(root, example: Path):
    compiled = compile_path(example)
    with netns.lab() as lab:
        for hook in HOOKS:
            for fmt in ("nft", "json"):
                art, diags = build_artifact(compiled, "nft", fmt, hook=hook, dev=lab.dut)
                if art is None:
                    assert all(d.code == "unsupported" for d in diags)
                    continue
                flag = ["-j"] if fmt == "json" else []
                _nft(*flag, "-c", "-f", "-", text=art.text, ns=lab.name)


@pytest.mark.kernel
def test_text_and_json_load_the_same_ruleset(root):
    text = (ROOT / "examples" / "web-server.pf").read_text()
    compiled = compile_text(text.replace('file "blocklist.txt"', "= { 192.0.2.0/24 }")
                            .replace("set blocklist =", "define blocklist"), "w.pf")
    with netns.lab() as lab:
        listed = []
        for fmt, flag in (("nft", []), ("json", ["-j"])):
            art, diags = build_artifact(compiled, "nft", fmt, dev=lab.dut)
            assert art is not None, diags
            _nft("flush", "ruleset", ns=lab.name)
            _nft(*flag, "-f", "-", text=art.text, ns=lab.name)
            listed.append(_nft("list", "ruleset", ns=lab.name))
    assert listed[0] == listed[1] and "counter name \"rule_4\"" in listed[0]


@pytest.mark.kernel
def test_reload_replaces_pfc_table_and_leaves_others_alone(root):
    with netns.lab() as lab:
        mine = f'table netdev mine {{ chain c {{ type filter hook ingress device "{lab.dut}" ' \
               "priority 5; counter; }\n}\n"
        _nft("-f", "-", text=mine, ns=lab.name)
        before = _nft("list", "table", "netdev", "mine", ns=lab.name)
        first = artifact("drop udp dport 53\ndrop tcp\n", dev=lab.dut)
        second = artifact("count icmp\n", dev=lab.dut)
        for art in (first, first, second):
            _nft("-f", "-", text=art.text, ns=lab.name)
        listed = _nft("list", "table", "netdev", "pfc", ns=lab.name)
        assert "rule_0" in listed and "udp dport" not in listed
        assert _nft("list", "table", "netdev", "mine", ns=lab.name) == before
        assert _nft("list", "tables", ns=lab.name).split() == [
            "table", "netdev", "mine", "table", "netdev", "pfc"]


@pytest.mark.kernel
def test_edge_drop_from_the_cli_drops_exactly_the_flood(root, tmp_path: Path):
    """``pfc compile examples/edge-drop.pf --target nft --dev eth0``, loaded with
    ``nft -f`` in a namespace whose device is called eth0, judged frame by frame."""
    out = tmp_path / "edge.nft"
    cli = subprocess.run([str(ROOT / ".venv/bin/pfc"), "compile", "examples/edge-drop.pf",
                          "--target", "nft", "--dev", "eth0", "-o", str(out)], cwd=ROOT,
                         capture_output=True, text=True)
    assert cli.returncode == 0, cli.stderr
    art, _ = build_artifact(compile_path(ROOT / "examples/edge-drop.pf"), "nft", dev="eth0")
    art.text = out.read_text()
    frames = gen.sample(art.policy, 1500, seed=9)
    with nftrun.session(dut="eth0") as s:
        assert s.lab.dut == "eth0"
        report = compare(art, BACKEND, frames)
    assert report.ok, report.summary()
    floods = [f for f in frames if evaluate(art.policy, f).verdict is ir.Verdict.DROP]
    assert len(floods) > 10 and report.seen > 1000


# --------------------------------------------------------------------- differential

@pytest.mark.kernel
@pytest.mark.parametrize("hook", HOOKS)
@pytest.mark.parametrize("example", EXAMPLES, ids=[e.stem for e in EXAMPLES])
def test_examples_agree_with_the_interpreter(lab, example: Path, hook: str):
    compiled = compile_path(example)
    art, diags = build_artifact(compiled, "nft", hook=hook, dev=lab.lab.dut)
    assert art is not None, diags
    _check(art, gen.sample(compiled.policy, 1500, seed=7))


@pytest.mark.kernel
@pytest.mark.parametrize("hook", HOOKS)
@settings(derandomize=True, max_examples=100, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(text=policies(max_rules=5))
def test_generated_policies_agree_with_the_interpreter(lab, text: str, hook: str):
    art, diags = build_artifact(compile_text(text, "g.pf"), "nft", hook=hook,
                                dev=lab.lab.dut)
    assume(art is not None)  # an IPv4 redirect that can meet UDP-Lite/ICMPv6
    _check(art, gen.sample(art.policy, 500, seed=len(text)))


@st.composite
def _redirect_policies(draw) -> str:
    """Policies with at least one redirect rule (tcp/udp/ip/ip6, with and without a
    port, any matches), among other rules."""
    rules = draw(st.lists(rule_text(count=True), min_size=0, max_size=3))
    redirect = draw(rule_text().filter(lambda r: r.startswith("redirect")))
    at = draw(st.integers(0, len(rules)))
    return "\n".join(rules[:at] + [redirect] + rules[at:]) + "\n"


@pytest.mark.kernel
@pytest.mark.parametrize("hook", HOOKS)
@settings(derandomize=True, max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                 HealthCheck.filter_too_much])
@given(text=_redirect_policies())
def test_generated_redirects_agree_with_the_interpreter(lab, text: str, hook: str):
    art, diags = build_artifact(compile_text(text, "r.pf"), "nft", hook=hook,
                                dev=lab.lab.dut)
    assume(art is not None)
    _check(art, gen.sample(art.policy, 500, seed=len(text)))


def _tcp4(sport: int, dport: int, payload: bytes = b"XY", cut: int | None = None) -> bytes:
    src, dst = bytes([10, 1, 2, 3]), bytes([10, 9, 8, 7])
    ip = fb.ipv4(src, dst, 6, fb.tcp(src, dst, sport, dport, 2, payload))
    return fb.ethernet(b"\x02" * 6, b"\x04" * 6, fb.ETH_IP4, ip[:cut])


@pytest.mark.kernel
@pytest.mark.parametrize("hook", HOOKS)
def test_negations_of_adjacent_fields_are_not_merged(lab, hook: str):
    """nft 1.0.6 merges `tcp dport != 53 tcp sport != 80` into one 4-byte compare
    ("either differs"); pfc writes single negated values as ranges, never merged."""
    art = artifact("drop tcp !dport 53 !sport 80\ndrop tcp !payload[0] == 0x58 "
                   "!payload[1] == 0x59\n", hook=hook, dev=lab.lab.dut)
    frames = [_tcp4(s, d, p) for s in (80, 81) for d in (53, 54)
              for p in (b"XY", b"XZ", b"AY", b"AB")]
    report = _check(art, frames)
    assert report.seen == len(frames)
    assert "tcp dport != 53-53" in art.text and "@ih,8,8 != 0x59-0x59" in art.text


@pytest.mark.kernel
def test_a_prefix_needs_all_of_the_address(lab):
    """nft 1.0.6 loads only a prefix's leading bytes (`ip daddr 10.0.0.0/8`: one
    byte); pfc first loads the whole address, so a cut address never matches."""
    art = artifact("drop dst 10.0.0.0/8\ndrop !src 10.1.2.3/31\n")
    frames = [_tcp4(1, 2, cut=n) for n in range(10, 21)]
    report = _check(art, [fb.ethernet(b"\x02" * 6, b"\x04" * 6, fb.ETH_IP4, f[14:])
                          for f in frames])
    assert report.seen == len(frames)


@pytest.mark.kernel
@pytest.mark.parametrize("fmt", ["nft", "json"])
def test_both_formats_run_the_same(lab, fmt: str):
    art = artifact("count udp\nredirect udp dst 192.168.64.2 dport 8080 to 10.0.1.2:8083\n"
                   "drop tcp flags syn,!ack\ndrop udp !payload[0:8] == 0x0102030405060708\n"
                   "drop tcp !payload[2:2] == 0x5859\n", fmt=fmt)
    _check(art, gen.sample(art.policy, 800, seed=3))


def _redirect_frames() -> list[bytes]:
    """The checksum edges of redirect (``nft_redirect``'s quirks), with IPv4 header
    checksums IP input accepts: UDP checksum 0, UDP / TCP / IPv4 header checksums whose
    update sums to zero (UDP 0xffff, TCP and IPv4 0x0000 in pfc, 0xffff from nft),
    TCP headers cut before the checksum, with and without the port, fragments."""
    from pfc.oracle.interp import evaluate
    src, dst = bytes([10, 0, 0, 1]), bytes([192, 168, 64, 2])
    policy = compile_text("redirect ip dst 192.168.64.2 to 10.0.1.2\n").require()

    def eth(ip: bytes) -> bytes:
        return fb.ethernet(b"\x02" * 6, b"\x04" * 6, fb.ETH_IP4, ip)

    def zero_result(make, at: int) -> bytes:
        for value in range(65536):
            frame = make(value)
            if evaluate(policy, frame).frame[at:at + 2] in (b"\0\0", b"\xff\xff"):
                return frame
        raise AssertionError("no value gives a zero sum")

    def udp(csum: int, ident: int = 0) -> bytes:
        seg = bytearray(fb.udp(src, dst, 1, 8080, b"hi"))
        seg[6:8] = struct.pack("!H", csum)
        return eth(fb.ipv4(src, dst, 17, bytes(seg), ident=ident))

    def tcp(csum: int, ident: int = 0) -> bytes:
        seg = bytearray(fb.tcp(src, dst, 1, 8080, 2, b"hi"))
        seg[16:18] = struct.pack("!H", csum)
        return eth(fb.ipv4(src, dst, 6, bytes(seg), ident=ident))

    out = [udp(c) for c in (0, 1, 0xFFFF)] + [tcp(c) for c in (0, 1, 0xFFFF)]
    out += [zero_result(udp, 14 + 26), zero_result(tcp, 14 + 36),
            zero_result(lambda i: udp(5, i), 24), zero_result(lambda i: tcp(5, i), 24)]
    for cut in range(0, 20):
        seg = fb.tcp(src, dst, 1, 8080, 2, b"")[:cut]
        for opts in (b"", b"\x01" * 8):
            out.append(eth(fb.ipv4(src, dst, 6, seg, options=opts)))
    out.append(eth(fb.ipv4(src, dst, 17, fb.udp(src, dst, 1, 8080, b"x"), mf=True)))
    out.append(eth(fb.ipv4(src, dst, 6, b"\0" * 24, frag_offset=2)))
    return out


@pytest.mark.kernel
@pytest.mark.parametrize("hook", HOOKS)
@pytest.mark.parametrize("rule", [
    "redirect udp dst 192.168.64.2 dport 8080 to 10.0.1.2:8083",
    "redirect tcp dst 192.168.64.2 dport 8080 to 10.0.1.2:8083",
    "redirect tcp dst 192.168.64.2 to 10.0.1.2",
    "redirect ip dst 192.168.64.2 !proto { 58, 136 } to 10.0.1.2",
])
def test_redirect_checksum_edges_agree(lab, hook: str, rule: str):
    art = artifact(rule + "\n", hook=hook, dev=lab.lab.dut)
    frames = _redirect_frames()
    report = _check(art, frames)
    assert report.seen == len(frames) - (2 if hook == "input" else 0)  # fragments


@pytest.mark.kernel
def test_large_set_file_agrees_with_the_interpreter(lab, tmp_path: Path):
    """A 20 000-entry `set ... file` (nested and adjacent prefixes, both families) is
    one named interval set per family, loaded and judged like any other rule."""
    import random
    r = random.Random(4)
    lines = [f"{r.randrange(1, 224)}.{r.randrange(256)}.{r.randrange(256)}.0/"
             f"{r.choice((24, 28, 32, 16))}" for _ in range(20000)]
    lines += [f"2001:db8:{i:x}::/48" for i in range(200)]
    (tmp_path / "bad.txt").write_text("\n".join(lines) + "\n")
    (tmp_path / "p.pf").write_text('set bad = file "bad.txt"\ncount src $bad\n'
                                   "drop udp src $bad\n")
    compiled = compile_path(tmp_path / "p.pf")
    art, diags = build_artifact(compiled, "nft", dev=lab.lab.dut)
    assert art is not None, diags
    assert art.meta["sets"] == ["bad4", "bad6"]
    _check(art, gen.sample(compiled.policy, 1500, seed=5))


@pytest.mark.kernel
def test_runner_judges_thousands_of_frames_in_one_run(lab):
    """6,000 frames through one ruleset agree; the rate is printed (`pytest -s`), not
    asserted: timing bounds do not belong in unit tests."""
    import time
    art = artifact("count udp\ndrop tcp dport { 22, 80 }\npass\n")
    frames = [f for f in gen.sample(art.policy, 6000, seed=3)]
    start = time.perf_counter()
    report = _check(art, frames)
    assert report.seen > 5000
    print(f"nft runner: {report.seen / (time.perf_counter() - start):.0f} frames/s")
