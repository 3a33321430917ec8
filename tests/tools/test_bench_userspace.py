"""`pfc bench`'s user-space filter (pfc.bench.userspace, seed 000 §5.1): the policy's
classic BPF run by a process reading an AF_PACKET TPACKET_V3 ring, without and with a
connection table. Its verdicts on generated frames sent through a veth pair agree with
the interpreter's (the one differential helper, like every back end's); the table
counts connections, both directions one; the bench rows drop what the interpreter
says. About 25 s."""

from __future__ import annotations

import dataclasses
import json

import pytest

from pfc import backends
from pfc.bench import userspace
from pfc.build import build_artifact
from pfc.cli.main import main
from pfc.frontend.pipeline import compile_path, compile_text
from pfc.kernel import netns
from pfc.oracle import framebuild as fb
from pfc.oracle import gen
from pfc.verifier.equiv import compare
from tests.paths import EXAMPLES
from tests.tools.test_bench import EDGE, RUN, _dropped_as_expected

REASON = netns.missing_privileges()
pytestmark = [pytest.mark.kernel, pytest.mark.skipif(REASON is not None, reason=REASON or "")]
CBPF = backends.get("cbpf")
SUPPORTED = [e for e in EXAMPLES if build_artifact(compile_path(e), "cbpf")[0] is not None]


def backend(ct: bool):
    return dataclasses.replace(CBPF, run=lambda art, frames: userspace.run(art, frames, ct))


@pytest.mark.parametrize("ct", [False, True], ids=["userspace", "userspace+ct"])
def test_examples_agree_with_the_interpreter(ct: bool) -> None:
    for example in SUPPORTED:
        artifact, _ = build_artifact(compile_path(example), "cbpf")
        report = compare(artifact, backend(ct), gen.sample(artifact.policy, 600, seed=3))
        assert report.ok, f"{example.name}: {report.summary()}"
        assert report.seen > 500


def test_a_wrong_program_is_caught() -> None:
    """The check can fail: a program that passes everything, judged as edge-drop."""
    artifact, _ = build_artifact(compile_path(EDGE), "cbpf")
    wrong = dataclasses.replace(artifact, meta={**artifact.meta, "insns": [(6, 0, 0, 1 << 18)]})
    report = compare(wrong, backend(False), gen.sample(artifact.policy, 300, seed=3))
    assert not report.ok and report.mismatches


def _udp(src: bytes, dst: bytes, sport: int, dport: int) -> bytes:
    segment = fb.udp(src, dst, sport, dport, b"x")
    return fb.ethernet(b"\x02" * 6, b"\x04" * 6, fb.ETH_IP4, fb.ipv4(src, dst, 17, segment))


def test_the_connection_table_counts_each_connection_once() -> None:
    """Three UDP connections, each seen in both directions and twice: three entries,
    twelve packets tracked; a fragment and an ARP frame are judged, not tracked."""
    a, b, c = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2]), bytes([10, 0, 0, 3])
    flows = [(a, b, 1000, 53), (a, c, 1000, 53), (a, b, 1001, 53)]
    frames = [_udp(s, d, sp, dp) for s, d, sp, dp in flows] * 2
    frames += [_udp(d, s, dp, sp) for s, d, sp, dp in flows] * 2
    frag = fb.ethernet(b"\x02" * 6, b"\x04" * 6, fb.ETH_IP4,
                       fb.ipv4(a, b, 17, fb.udp(a, b, 7, 9, b"y"), mf=True))
    arp = fb.ethernet(b"\xff" * 6, b"\x04" * 6, 0x0806, bytes(28))
    artifact, _ = build_artifact(compile_text("pass all\n"), "cbpf")
    with netns.lab() as lab, netns.one_cpu():
        inj = netns.Injector(lab.inj)
        with userspace.Runner(lab.dut, artifact.meta["insns"], ct=True, verdicts=True) as r:
            for frame in [*frames, frag, arp]:
                inj.send(frame)
            assert r.has_seen(arp)
            counts = r.counts()
        inj.close()
    assert (counts.flows, counts.tracked) == (3, 12)
    assert counts.passed == counts.frames >= 14


def test_bench_rows_drop_what_the_interpreter_says(capsys) -> None:
    code = main(["bench", EDGE, "--targets", "cbpf,userspace,userspace+ct", "--baselines",
                 "none", "--format", "json", *RUN])
    out, err = capsys.readouterr()
    assert code == 0, err
    rows = {r["name"]: r for r in json.loads(out)["rows"]}
    assert set(rows) == {"none", "cbpf", "userspace", "userspace+ct"}
    for name, row in rows.items():
        assert row["status"] == "ok", row
        _dropped_as_expected(name, row)
        # the process's own time is counted in the user-space rows only (in jiffies: a
        # short run may count 0)
        assert (row["traffic"]["process_cpu_ns_per_packet"] is not None) == \
            name.startswith("userspace"), row
    assert rows["userspace"]["expected_dropped"] > 0
    assert rows["userspace"]["hook"] == "AF_PACKET ring, user space"
