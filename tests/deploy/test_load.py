"""``pfc load`` / ``unload`` / ``status`` in throw-away namespaces, for every target.

Every test runs in its own namespace (``pfc.kernel.netns.lab``) with its own state directory
(``PFC_STATE_DIR``), drives the CLI through ``pfc.cli.main.main`` and checks the kernel:

- counters in ``status`` equal the interpreter's for the frames sent (every rule and the
  default on nft and iptables; on xdp and tc every slot the artifact's
  ``counter_slots`` names, or its count rules for an artifact without them);
- a replace under continuous traffic judges every frame by the old or the new policy,
  in send order, with none lost to a gap;
- a failing load (broken text, missing device, a rule the target cannot express, clang
  or the verifier failing, the kernel refusing the new rules) leaves the old policy,
  its counters and its state as they were;
- unload leaves ``nft list ruleset``, ``iptables-save``, ``ip link``, ``tc filter`` and
  ``tc qdisc`` exactly as before the first load, and a second unload is a no-op.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import re
import secrets
import struct
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from pfc import backends
from pfc.build import build_artifact
from pfc.cli.main import main
from pfc.deploy import base as deploy_base
from pfc.frontend.pipeline import compile_path, compile_text
from pfc.kernel import bpf, bpf_attach, netns
from pfc.oracle import framebuild as fb
from pfc.oracle.gen import sample
from pfc.oracle.interp import evaluate
from pfc.verifier.equiv import expected_counters
from tests.paths import ROOT  # noqa: E402

ROOT_REASON = netns.missing_privileges()
pytestmark = [pytest.mark.kernel,
              pytest.mark.skipif(ROOT_REASON is not None, reason=ROOT_REASON or "")]

# (target, extra CLI arguments): every way pfc load attaches
WAYS = [("xdp", ["--mode", "native"]), ("xdp", ["--mode", "generic"]), ("tc", []),
        ("nft", []), ("iptables", [])]
WAY_IDS = ["xdp-native", "xdp-generic", "tc", "nft", "iptables"]
MTU_FRAME = 1514

COUNTING = """\
# counters on every kind of rule
default pass
count udp dport 2000-2100
drop udp dport 2050
count tcp flags syn,!ack
pass tcp dport 80
drop tcp dport 81-90
count icmp
drop icmp icmp-type echo-request
count ip6
drop udp src 10.0.0.0/8 dport 53
drop udp dport 3001
drop udp dport 3002
"""


# --------------------------------------------------------------------------- fixtures

@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    """Own state directory (pfc pins nothing: nothing else to clean)."""
    monkeypatch.setenv("PFC_STATE_DIR", str(tmp_path / "state"))
    yield


@pytest.fixture
def lab():
    with netns.lab() as lab:
        yield lab


def pfc(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


def policy_file(tmp_path: Path, text: str, name: str = "policy.pf") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def load(lab, target: str, extra: list[str], path: Path, *more: str):
    return pfc("load", path, "--target", target, "--dev", lab.dut, "--netns", lab.name,
               *extra, *more)


def status(lab) -> list[dict]:
    code, out, err = pfc("status", "--netns", lab.name, "--format", "json")
    assert code in (0, 3, 4), err
    found = json.loads(out)
    assert found["exit"] == code
    return found["loaded"]


def entry(lab, target: str) -> dict:
    (found,) = [e for e in status(lab) if e["target"] == target]
    return found


def counters_of(e: dict) -> dict[int | str, tuple[int, int]]:
    """Every counter status shows: rule index → (packets, bytes), and "default"."""
    out = {r["index"]: (r["packets"], r["bytes"]) for r in e["rules"]
           if r["packets"] is not None}
    d = e["default_counter"]
    return out | ({"default": (d["packets"], d["bytes"])} if d["packets"] is not None
                  else {})


def snapshot() -> dict[str, str]:
    """What a namespace holds, as the tools print it (comments and dates removed)."""
    cmds = {"nft": "nft list ruleset", "ipt4": "iptables-save", "ipt6": "ip6tables-save",
            "link": "ip -d link show", "filter": "tc filter show dev dut ingress",
            "qdisc": "tc qdisc show", "ipset": "ipset list -n"}
    out = {}
    for key, cmd in cmds.items():
        text = subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout
        out[key] = re.sub(r"^#.*\n", "", text, flags=re.MULTILINE)
    return out


# ----------------------------------------------------------------------- traffic

def deliver(lab, frames: list[bytes]) -> list[bytes]:
    """Inject frames; return once the hook has processed every one of them: a marker
    after them is seen by an ETH_P_ALL socket (after XDP, before tc/netfilter, and the
    kernel finishes a frame before it starts the next one on a CPU). Returns every
    frame sent, the marker last (a device-level hook counts it too: the default)."""
    seq = int.from_bytes(secrets.token_bytes(4), "big")
    marker = netns.marker_frame(lab.dut_mac, lab.inj_mac, seq)
    with netns.one_cpu(), contextlib.closing(netns.packet_socket(lab.dut)) as every, \
            contextlib.closing(netns.Injector(lab.inj)) as inj:
        for frame in frames:
            inj.send(frame)
        inj.send(marker)
        netns.recv_until_marker(every, seq, timeout=5.0)
    return [*frames, marker]


def frames_for(lab, policy, n: int, seed: int) -> list[bytes]:
    """Generated frames addressed to the device (IP input needs its MAC), sendable."""
    out = sample(policy, n, seed, eth_dst=lab.dut_mac, eth_src=lab.inj_mac)
    return [f for f in out if 14 <= len(f) <= MTU_FRAME]


def interpreter(target: str, hook: str, policy, frames: list[bytes]):
    backend = backends.get(target)
    outcomes = []
    for frame in frames:
        seen = backend.view(hook, frame)
        if seen is not None:
            outcomes.append(evaluate(policy, seen, skip_tag=seen == frame))
    return outcomes


def decided(policy, outcomes) -> dict[int | str, tuple[int, int]]:
    """(packets, bytes) per terminal rule and "default" (what no terminal rule
    decided): what the counters of terminal rules and of the default count."""
    out: dict[int | str, tuple[int, int]] = {r.index: (0, 0) for r in policy.rules
                                             if r.terminal} | {"default": (0, 0)}
    for o in outcomes:
        key = "default" if o.rule is None else o.rule
        p, b = out[key]
        out[key] = (p + 1, b + o.nbytes)
    return out


def every_counter(artifact) -> bool:
    """Whether the loaded artifact counts every rule and the default (nft, iptables;
    eBPF objects with ``counter_slots``, docs/load.md)."""
    return artifact.target in ("nft", "iptables") or "counter_slots" in artifact.meta


def probe(lab, dport: int, seq: int) -> bytes:
    src, dst = bytes([10, 1, 0, 2]), bytes([10, 1, 0, 1])
    udp = fb.udp(src, dst, 9, dport, struct.pack("!Q", seq))
    return fb.ethernet(lab.dut_mac, lab.inj_mac, fb.ETH_IP4, fb.ipv4(src, dst, 17, udp))


# ----------------------------------------------------------------- load and count

@pytest.mark.parametrize(("target", "extra"), WAYS, ids=WAY_IDS)
def test_status_counters_match_the_interpreter(lab, tmp_path, target, extra):
    path = policy_file(tmp_path, COUNTING)
    code, out, err = load(lab, target, extra, path)
    assert code == 0, err
    assert f"loaded {path}" in out
    e = entry(lab, target)
    assert e["health"] == "ok" and e["dev"] == lab.dut and e["netns"] == lab.name
    assert all(v == (0, 0) for v in counters_of(e).values())
    artifact, _ = build_artifact(compile_path(path), target, None, dev=lab.dut)
    policy = artifact.policy
    frames = deliver(lab, frames_for(lab, policy, 600, seed=7))
    outcomes = interpreter(target, artifact.hook, policy, frames)
    want = expected_counters(policy, outcomes)
    if every_counter(artifact):
        want |= decided(policy, outcomes)
    e = entry(lab, target)
    assert counters_of(e) == want
    assert any(p for p, _ in want.values()), "the frames must move some counter"
    merged = {r["index"]: r["counted_with"] for r in e["rules"] if r["counted_with"]}
    if target in ("nft", "iptables"):  # group_runs merged the last two rules
        last = max(r["index"] for r in e["rules"])
        assert merged == {last: last - 1}


@pytest.mark.parametrize("target", ["xdp", "tc"])
def test_counters_are_readable_from_any_process_without_pins(lab, tmp_path, target):
    """The counter map is found through the attached program's map ids: a fresh
    process reads it, also from `ip netns exec` (a fresh /sys without the host's
    bpffs), and nothing is pinned anywhere."""
    path = policy_file(tmp_path, COUNTING)
    extra = ["--mode", "generic"] if target == "xdp" else []
    assert load(lab, target, extra, path)[0] == 0
    deliver(lab, [probe(lab, 2000, i) for i in range(5)])
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    for argv in (["--netns", lab.name], []):
        prefix = [] if argv else ["ip", "netns", "exec", lab.name]
        proc = subprocess.run([*prefix, str(ROOT / ".venv/bin/pfc"), "status", *argv,
                               "--format", "json"], capture_output=True, text=True, env=env)
        assert proc.returncode == 0, proc.stderr
        (e,) = json.loads(proc.stdout)["loaded"]
        assert counters_of(e)[0] == (5, 5 * 36)  # IPv4 20 + UDP 8 + 8 bytes of payload
    assert not [p for p in Path("/sys/fs/bpf").rglob("*") if lab.name in str(p)]


# ------------------------------------------------------------ replace under traffic

class Tap:
    """Which probe frames got past the hook: a packet socket bound to IPv4 (served
    after XDP, tc and nft netdev ingress), or NFLOG after pfc's jump in raw
    PREROUTING (iptables). A reader thread drains it while traffic runs."""

    def __init__(self, lab, target: str):
        self.lab, self.target, self.seen = lab, target, set()
        self.stop = threading.Event()
        if target == "iptables":
            from pfc.backends.iptables import run as iptrun
            subprocess.run(["iptables", "-t", "raw", "-A", "PREROUTING", "-i", lab.dut,
                            "-j", "NFLOG", "--nflog-group", "4712"], check=True)
            self.log = iptrun.Nflog(4712)
        else:
            self.sock = netns.packet_socket(lab.dut, 0x0800)
            self.sock.settimeout(0.2)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _packets(self) -> list[bytes]:
        if self.target == "iptables":
            return [p for _, p in self.log.packets(timeout=0.2)]
        return [self.sock.recv(2048)[14:]]

    def _read(self) -> None:
        while not self.stop.is_set():
            try:
                packets = self._packets()
            except TimeoutError:
                continue
            for ip in packets:
                if len(ip) >= 36 and ip[9] == 17:
                    self.seen.add(struct.unpack("!Q", ip[28:36])[0])

    def drops(self) -> int:
        if self.target == "iptables":
            return 0  # ENOBUFS would have raised in the reader
        stats = self.sock.getsockopt(263, 6, 8)  # SOL_PACKET, PACKET_STATISTICS
        return struct.unpack("II", stats)[1]

    def wait_for(self, seq: int, timeout: float = 5.0) -> None:
        end = time.monotonic() + timeout
        while seq not in self.seen:
            assert time.monotonic() < end, f"probe {seq} never arrived"
            time.sleep(0.01)

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        (self.log if self.target == "iptables" else self.sock).close()


class Sender(threading.Thread):
    """Sends probes round-robin to ports 1001 (only the old policy drops them), 1002
    (only the new one does) and 1003 (neither), each with its sequence number."""

    PORTS = (1001, 1002, 1003)

    def __init__(self, lab):
        super().__init__(daemon=True)
        self.lab, self.sent, self.stop = lab, [], threading.Event()

    def run(self) -> None:
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
        inj = netns.Injector(self.lab.inj)
        try:
            seq = 0
            while not self.stop.is_set():
                port = self.PORTS[seq % 3]
                inj.send(probe(self.lab, port, seq))
                self.sent.append((seq, port))
                seq += 1
                if seq % 64 == 0:
                    time.sleep(0.0005)  # pace: the observer must not overflow
        finally:
            inj.close()

    def wait_sent(self, n: int) -> None:
        while len(self.sent) < n:
            time.sleep(0.005)


POLICIES = ("drop udp dport 1001\ncount udp\n", "drop udp dport 1002\ncount udp\n")
SWAPS = 4


def judge(sent: list[tuple[int, int]], seen: set[int]) -> list[tuple[int, str]]:
    """Per probe, in send order: (port, who judged it): 'P0' (drops 1001) or 'P1'
    (drops 1002) for those two ports, told apart by arrival; 'both' for a 1003 that
    arrived and 'lost' for one that did not (both policies pass it)."""
    out = []
    for seq, port in sent:
        arrived = seq in seen
        if port == 1003:
            out.append((port, "both" if arrived else "lost"))
        elif port == 1001:
            out.append((port, "P1" if arrived else "P0"))
        else:
            out.append((port, "P0" if arrived else "P1"))
    return out


def runs(labels: list[str]) -> list[str]:
    return [x for i, x in enumerate(labels) if i == 0 or labels[i - 1] != x]


def swap_under_traffic(lab, tmp_path, target: str, extra: list[str]) -> dict:
    """Load P0, then replace P1, P0, P1, P0 while a thread sends probes; return the
    judgement of every probe and how many were sent while each load ran."""
    paths = [policy_file(tmp_path, text, f"p{i}.pf") for i, text in enumerate(POLICIES)]
    assert load(lab, target, extra, paths[0])[0] == 0
    tap, sender = Tap(lab, target), Sender(lab)
    during = []
    try:
        sender.start()
        sender.wait_sent(2000)
        for n in range(1, SWAPS + 1):
            start = len(sender.sent)
            code, _, err = load(lab, target, extra, paths[n % 2])
            assert code == 0, err
            during.append(len(sender.sent) - start)
            sender.wait_sent(len(sender.sent) + 2000)
        sender.stop.set()
        sender.join()
        tap.wait_for(max(s for s, p in sender.sent if p == 1003))
        assert tap.drops() == 0, "the observer dropped frames: the test is inconclusive"
        return {"judged": judge(sender.sent, tap.seen), "during": during,
                "path": paths[SWAPS % 2]}
    finally:
        sender.stop.set()
        tap.close()


@pytest.mark.parametrize(("target", "extra"), WAYS, ids=WAY_IDS)
def test_replace_under_traffic_has_no_gap(lab, tmp_path, target, extra):
    result = swap_under_traffic(lab, tmp_path, target, extra)
    judged = result["judged"]
    lost = [i for i, (_, who) in enumerate(judged) if who == "lost"]
    assert lost == [], f"{len(lost)} frames both policies pass were lost, e.g. {lost[:5]}"
    order = [who for _, who in judged if who in ("P0", "P1")]
    assert runs(order) == ["P0", "P1"] * (SWAPS // 2) + ["P0"], \
        "frames were judged by neither policy, or out of order, around a swap"
    assert min(result["during"]) > 0, "no frame was sent while a load ran"
    after = entry(lab, target)
    assert after["policy"] == str(result["path"]) and after["health"] == "ok"
    # the last policy's counters started at zero: they count the 1002s and 1003s it judged
    last = max(i for i, (_, who) in enumerate(judged) if who == "P1")
    low = sum(1 for i, (port, who) in enumerate(judged) if i > last + 1 and port != 1001)
    assert low <= counters_of(after)[1][0] <= low + 2
    print(f"{target} {extra}: {len(judged)} probes, sent during the loads: "
          f"{result['during']}, none lost or misjudged")


def test_the_gap_detector_sees_a_gap(lab, tmp_path, monkeypatch):
    """The harness above can fail: a replace done as detach + attach is caught."""
    from pfc.deploy import bpf as load_bpf

    real = bpf_attach.xdp_attach

    def with_gap(ifindex, prog_fd, mode, old_prog_fd=None):
        if old_prog_fd is not None:
            bpf_attach.xdp_detach(ifindex, mode)
            time.sleep(0.02)
            old_prog_fd = None
        return real(ifindex, prog_fd, mode, old_prog_fd)

    monkeypatch.setattr(load_bpf.bpf_attach, "xdp_attach", with_gap)
    result = swap_under_traffic(lab, tmp_path, "xdp", ["--mode", "generic"])
    order = [who for _, who in result["judged"] if who in ("P0", "P1")]
    assert len(runs(order)) > SWAPS + 1


# -------------------------------------------------------------- failing loads

def kernel_view(target: str) -> str:
    snap = snapshot()
    return {"xdp": snap["link"], "tc": snap["filter"] + snap["qdisc"], "nft": snap["nft"],
            "iptables": snap["ipt4"] + snap["ipt6"] + snap["ipset"]}[target]


def assert_unchanged(lab, target: str, before: dict, kernel: str) -> None:
    after = entry(lab, target)
    assert (after["attach"], after["sha256"], after["loaded_at"]) == \
        (before["attach"], before["sha256"], before["loaded_at"])
    assert counters_of(after) == counters_of(before)
    assert after["health"] == "ok"
    assert re.sub(r"\[\d+:\d+\]|packets \d+ bytes \d+", "", kernel_view(target)) == \
        re.sub(r"\[\d+:\d+\]|packets \d+ bytes \d+", "", kernel)


OLD_POLICY = "define bad = { 10.9.0.0/16, 10.8.0.1 }\ncount udp\ndrop udp dport 1001\n" \
             "drop src $bad\n"


def loaded_with_traffic(lab, tmp_path, target, extra) -> tuple[dict, str]:
    old = policy_file(tmp_path, OLD_POLICY, "old.pf")
    assert load(lab, target, extra, old)[0] == 0
    deliver(lab, [probe(lab, 1003, i) for i in range(4)] + [probe(lab, 1001, 9)])
    before = entry(lab, target)
    assert counters_of(before)[0][0] == 5
    return before, kernel_view(target)


def still_filtering(lab, target: str, before: dict) -> None:
    """The old program still runs: its count rule (only the old policy has one) moves."""
    deliver(lab, [probe(lab, 1001, 99)])
    assert counters_of(entry(lab, target))[0][0] == counters_of(before)[0][0] + 1


@pytest.mark.parametrize(("target", "extra"), WAYS, ids=WAY_IDS)
def test_a_failing_load_leaves_the_old_policy(lab, tmp_path, target, extra, monkeypatch):
    before, kernel = loaded_with_traffic(lab, tmp_path, target, extra)
    broken = policy_file(tmp_path, "drop udp dport\n", "broken.pf")
    code, _, err = load(lab, target, extra, broken)
    assert code == 1 and "error" in err
    good = policy_file(tmp_path, "drop udp dport 1002\n", "new.pf")
    code, _, err = pfc("load", good, "--target", target, "--dev", "nosuch0",
                       "--netns", lab.name, *extra)
    assert code == 2 and f"device `nosuch0` does not exist in namespace `{lab.name}`" in err
    if target == "iptables":  # the one loadable target that cannot express a feature
        code, _, err = load(lab, target, extra, policy_file(
            tmp_path, "count udp\nredirect udp dst 10.0.0.1 to 10.0.0.2\n", "cannot.pf"))
        assert code == 1 and "target `iptables` cannot express `redirect` rules" in err
    assert_unchanged(lab, target, before, kernel)
    still_filtering(lab, target, before)


@pytest.mark.parametrize("target", ["xdp", "tc"])
def test_clang_or_verifier_failure_leaves_the_old_policy(lab, tmp_path, target, monkeypatch):
    extra = ["--mode", "generic"] if target == "xdp" else []
    before, kernel = loaded_with_traffic(lab, tmp_path, target, extra)
    new = policy_file(tmp_path, "drop udp dport 1002\n# another program\n", "new.pf")
    from pfc.kernel import toolchain

    def clang_fails(*args, **kwargs):
        raise toolchain.ToolchainError("clang exited with status 1", "x.c:3:1: error: boom")

    with monkeypatch.context() as m:
        m.setattr(toolchain, "compile_c", clang_fails)
        code, _, err = load(lab, target, extra, new)
    assert code == 1 and "clang rejected" in err

    def verifier_refuses(elf, name="pfc"):
        raise bpf.BpfError(errno.EACCES, f"cannot load BPF object {name}", "",
                           "0: R1=ctx\ninvalid access to packet")

    logs = set(Path(tempfile.gettempdir()).glob("pfc-verifier-*"))
    with monkeypatch.context() as m:
        m.setattr(bpf, "Object", verifier_refuses)
        code, _, err = load(lab, target, extra, new)
    assert code == 2 and "the kernel refused program" in err
    assert "the verifier log ends: 0: R1=ctx | invalid access to packet;" in err
    assert set(Path(tempfile.gettempdir()).glob("pfc-verifier-*")) == logs  # none left
    assert_unchanged(lab, target, before, kernel)
    still_filtering(lab, target, before)


def test_xdp_attach_refused_by_the_kernel_keeps_the_old_program(lab, tmp_path, monkeypatch):
    before, kernel = loaded_with_traffic(lab, tmp_path, "xdp", ["--mode", "native"])

    def changed_meanwhile(*args, **kwargs):
        raise bpf.BpfError(errno.EEXIST, "XDP attach", "Active program does not match")

    with monkeypatch.context() as m:
        m.setattr(bpf_attach, "xdp_attach", changed_meanwhile)
        code, _, err = load(lab, "xdp", ["--mode", "native"],
                            policy_file(tmp_path, "drop udp dport 1002\n", "new.pf"))
    assert code == 2 and "changed while pfc was loading" in err
    assert_unchanged(lab, "xdp", before, kernel)
    still_filtering(lab, "xdp", before)


def test_nft_transaction_failure_keeps_the_old_table(lab, tmp_path, monkeypatch):
    """The last command of the batch fails: the kernel aborts the whole transaction."""
    from pfc.deploy import nft as load_nft

    before, kernel = loaded_with_traffic(lab, tmp_path, "nft", [])
    real = load_nft._run

    def fail_at_the_end(doc: dict):
        bad = {"add": {"rule": {"family": "netdev", "table": "pfc", "chain": "no_such",
                                "expr": [{"drop": None}]}}}
        return real({"nftables": doc["nftables"] + [bad]})

    with monkeypatch.context() as m:
        m.setattr(load_nft, "_run", fail_at_the_end)
        code, _, err = load(lab, "nft", [], policy_file(tmp_path, "drop udp dport 1002\n"))
    assert code == 2 and "nftables refused the ruleset" in err
    assert_unchanged(lab, "nft", before, kernel)
    still_filtering(lab, "nft", before)


def test_iptables_ipv6_failure_leaves_both_families_and_sets(lab, tmp_path, monkeypatch):
    """IPv4's new chain built, IPv6's refused: nothing was switched, the new chains and
    sets are removed, and the error says what the kernel holds, as checked."""
    from pfc.deploy import iptables as load_ipt

    before, kernel = loaded_with_traffic(lab, tmp_path, "iptables", [])
    real = load_ipt.restore

    def ipv6_fails(family, flavour, text):
        if family == 6 and "1002" in text:
            raise load_ipt.Failed("ip6tables-restore: line 3 failed")
        return real(family, flavour, text)

    new = policy_file(tmp_path, "define bad = { 10.7.0.0/16, 10.6.0.1 }\n"
                                "drop udp dport 1002\ncount udp\ndrop src $bad\n", "new.pf")
    with monkeypatch.context() as m:
        m.setattr(load_ipt, "restore", ipv6_fails)
        code, _, err = load(lab, "iptables", [], new)
    assert code == 2 and "refused the IPv6 rules" in err
    assert "the kernel holds what it held before (checked: chain PFC" in err
    assert "restored" not in err
    assert_unchanged(lab, "iptables", before, kernel)
    (old_set,) = before["attach"]["sets"]
    members = subprocess.run(["ipset", "list", old_set], capture_output=True,
                             text=True).stdout
    assert "10.9.0.0/16" in members and "10.7.0.0/16" not in members
    still_filtering(lab, "iptables", before)


# -------------------------------------------------------------------- unload

USER_STATE = {
    "xdp": [],
    "tc": ["tc qdisc add dev dut clsact",
           "tc filter add dev dut ingress pref 5 protocol ip u32 match u32 0 0 classid 1:1"],
    "nft": ["nft add table inet mine", "nft add chain inet mine c "
            "'{ type filter hook input priority 0; }'", "nft add rule inet mine c counter"],
    "iptables": ["iptables -t raw -A PREROUTING -s 10.9.9.9 -j DROP",
                 "ip6tables -A INPUT -s 2001:db8::9 -j DROP"],
}


@pytest.mark.parametrize("user", [False, True], ids=["clean", "with-user-rules"])
@pytest.mark.parametrize(("target", "extra"), WAYS, ids=WAY_IDS)
def test_unload_leaves_the_namespace_as_before(lab, tmp_path, target, extra, user):
    for cmd in USER_STATE[target] if user else []:
        subprocess.run(cmd, shell=True, check=True)
    before = snapshot()
    path = ROOT / "examples/web-server.pf"
    assert load(lab, target, extra, path)[0] == 0
    assert load(lab, target, extra, path)[0] == 0  # a replace, then unload
    assert snapshot() != before
    code, out, _ = pfc("unload", "--target", target, "--dev", lab.dut, "--netns", lab.name)
    assert code == 0 and out
    assert snapshot() == before
    assert status(lab) == []
    code, out, _ = pfc("unload", "--target", target, "--dev", lab.dut, "--netns", lab.name)
    assert code == 0 and "nothing loaded" in out


# ------------------------------------------------------- what pfc did not load

def foreign(lab, target: str) -> None:
    """Put something at pfc's place that pfc did not load."""
    if target in ("xdp", "tc"):
        art, _ = build_artifact(compile_text("drop udp dport 7\n", "other.pf"), target)
        with bpf.Object(next(iter(art.files.values())), "other") as obj:
            fd = obj.programs[art.meta["program"]].fd
            if target == "xdp":
                bpf_attach.xdp_attach(lab.dut_index, fd, "generic")
            else:
                bpf_attach.tc_hook_create(lab.dut_index)
                bpf_attach.tc_attach(lab.dut_index, fd, 0x7066, 1, replace=False)
    elif target == "nft":
        subprocess.run("nft add table netdev pfc", shell=True, check=True)
    else:
        subprocess.run("iptables -t raw -N PFC", shell=True, check=True)


@pytest.mark.parametrize("target", ["xdp", "tc"])
def test_its_own_program_unreadable_without_sys_admin_is_not_called_foreign(
        lab, tmp_path, monkeypatch, target):
    """With CAP_BPF but not CAP_SYS_ADMIN the kernel refuses BPF_PROG_GET_FD_BY_ID, so
    pfc cannot read back the program it loaded: the replace says that, naming the
    capability, instead of "pfc did not load it" (fleet finding); nothing changes."""
    path = policy_file(tmp_path, "drop udp dport 1001\n")
    extra = ["--mode", "generic"] if target == "xdp" else []
    assert load(lab, target, extra, path)[0] == 0
    before = entry(lab, target)["attach"]["prog_id"]
    with monkeypatch.context() as m:
        m.setattr(deploy_base, "effective_caps",
                  lambda: {deploy_base.CAP_NET_ADMIN, deploy_base.CAP_BPF})
        m.setattr(deploy_base, "current_netns", lambda: lab.name)
        m.setattr(bpf_attach, "prog_info_by_id", lambda prog_id: None)  # EPERM
        code, _, err = load(lab, target, extra, policy_file(tmp_path, "drop udp dport 2\n"))
        assert code == 2 and "CAP_SYS_ADMIN" in err and "did not load" not in err, err
    assert entry(lab, target)["attach"]["prog_id"] == before


@pytest.mark.parametrize("target", ["xdp", "tc", "nft", "iptables"])
def test_refuses_what_pfc_did_not_load_unless_forced(lab, tmp_path, target):
    foreign(lab, target)
    path = policy_file(tmp_path, "drop udp dport 1001\n")
    extra = ["--mode", "generic"] if target == "xdp" else []
    code, _, err = load(lab, target, extra, path)
    assert code == 2 and "pfc did not load it" in err and "--force" in err
    assert status(lab) == []
    code, _, err = load(lab, target, extra, path, "--force")
    assert code == 0 and "which pfc had not loaded (--force)" in err
    assert entry(lab, target)["health"] == "ok"
    deliver(lab, [probe(lab, 1001, 1)])


def test_status_tells_when_the_program_vanished_or_changed(lab, tmp_path):
    path = policy_file(tmp_path, "drop udp dport 1001\ncount udp\n")
    assert load(lab, "xdp", ["--mode", "generic"], path)[0] == 0
    assert load(lab, "tc", [], path)[0] == 0
    assert load(lab, "nft", [], path)[0] == 0
    assert load(lab, "iptables", [], path)[0] == 0
    subprocess.run("ip link set dev dut xdpgeneric off", shell=True, check=True)
    subprocess.run("nft delete table netdev pfc", shell=True, check=True)
    subprocess.run("iptables -t raw -D PREROUTING -i dut -j PFC", shell=True, check=True)
    foreign(lab, "xdp")
    health = {e["target"]: (e["health"], e["detail"]) for e in status(lab)}
    assert health["xdp"][0] == "changed" and "not pfc's" in health["xdp"][1]
    assert health["tc"][0] == "ok"
    assert health["nft"][0] == "vanished"
    assert health["iptables"][0] == "vanished" and "jump" in health["iptables"][1]
    code, out, _ = pfc("status", "--netns", lab.name)
    assert code == 4 and "CHANGED" in out and "VANISHED" in out  # changed wins: 4
    assert out.count("changed outside pfc: ") == 3  # xdp, nft, iptables
    subprocess.run("tc filter del dev dut ingress", shell=True, check=True)
    health = {e["target"]: e["health"] for e in status(lab)}
    assert health["tc"] == "vanished"
    code, out, _ = pfc("unload", "--target", "xdp", "--dev", "dut", "--netns", lab.name)
    assert code == 0 and "left it as it is" in out
    assert bpf_attach.xdp_query(lab.dut_index).prog_id  # the foreign program stays


# -------------------------------------------------------------------- errors

def test_native_xdp_unsupported_suggests_generic(lab, tmp_path):
    subprocess.run("ip link add br0 type bridge && ip link set br0 up", shell=True,
                   check=True)
    path = policy_file(tmp_path, "drop udp dport 1001\n")
    code, _, err = pfc("load", path, "--target", "xdp", "--dev", "br0", "--netns", lab.name,
                       "--mode", "native")
    assert code == 2 and "does not support native XDP" in err and "--mode generic" in err
    assert status(lab) == []
    code, _, err = pfc("load", path, "--target", "xdp", "--dev", "br0", "--netns", lab.name)
    assert code == 0, err
    assert entry(lab, "xdp")["attach"]["mode"] == "generic"


def test_mode_change_is_refused(lab, tmp_path):
    path = policy_file(tmp_path, "drop udp dport 1001\n")
    assert load(lab, "xdp", ["--mode", "generic"], path)[0] == 0
    code, _, err = load(lab, "xdp", ["--mode", "native"], path)
    assert code == 2 and "cannot be atomic" in err
    assert load(lab, "xdp", [], path)[0] == 0  # no --mode: keeps generic
    assert entry(lab, "xdp")["attach"]["mode"] == "generic"


@pytest.mark.parametrize(("caps", "needed"), [(set(), "CAP_NET_ADMIN"),
                                              ({12}, "CAP_BPF")])
def test_missing_privileges_name_the_capability(lab, tmp_path, monkeypatch, caps, needed):
    monkeypatch.setattr(deploy_base, "effective_caps", lambda: caps)
    code, _, err = load(lab, "xdp", [], policy_file(tmp_path, "drop udp dport 1\n"))
    assert code == 2 and needed in err and "hint:" in err
    code, _, err = pfc("status")  # nothing of eBPF loaded here: CAP_BPF not asked
    assert (code == 2 and needed in err) if not caps else code == 0, err


def test_status_asks_cap_bpf_only_where_ebpf_is_loaded(lab, tmp_path, monkeypatch):
    """nft and iptables alone: CAP_NET_ADMIN reads their status (a pod given only
    NET_ADMIN, packaging/kubernetes); an xdp record needs CAP_BPF to be read back."""
    path = policy_file(tmp_path, "drop udp dport 1\n")
    assert load(lab, "nft", [], path)[0] == 0
    monkeypatch.setattr(deploy_base, "current_netns", lambda: lab.name)  # no setns asked
    with monkeypatch.context() as m:
        m.setattr(deploy_base, "effective_caps", lambda: {deploy_base.CAP_NET_ADMIN})
        code, out, err = pfc("status", "--netns", lab.name)
        assert code == 0 and "nft" in out, err
    assert load(lab, "xdp", [], path)[0] == 0
    monkeypatch.setattr(deploy_base, "effective_caps", lambda: {deploy_base.CAP_NET_ADMIN})
    code, _, err = pfc("status", "--netns", lab.name)
    assert code == 2 and "CAP_BPF" in err


def test_usage_errors(lab, tmp_path):
    path = policy_file(tmp_path, "drop udp dport 1001\n")
    code, _, err = pfc("load", path, "--target", "socket", "--dev", "dut")
    assert code == 2 and "attach_socket" in err
    for target in ("cgroup", "nfbpf"):
        code, _, err = pfc("load", path, "--target", target, "--dev", "dut")
        assert code == 2 and "does not attach" in err and f"docs/{target}.md" in err
    code, _, err = pfc("load", path, "--target", "xdp", "--dev", "dut", "--netns", "nosuchns")
    assert code == 2 and "network namespace `nosuchns` does not exist" in err
    code, _, err = pfc("load", path, "--target", "tc", "--dev", "dut", "--mode", "native")
    assert code == 2 and "--mode" in err
    code, _, err = pfc("load", path, "--target", "xdp", "--dev", "bad name")
    assert code == 2 and "invalid device name" in err


def test_one_chain_or_table_serves_one_device(lab, tmp_path):
    subprocess.run("ip link add d2 type veth peer name i2 && ip link set d2 up && "
                   "ip link set i2 up", shell=True, check=True)
    path = policy_file(tmp_path, "drop udp dport 1001\n")
    for target in ("nft", "iptables"):
        assert load(lab, target, [], path)[0] == 0
        code, _, err = pfc("load", path, "--target", target, "--dev", "d2",
                           "--netns", lab.name)
        assert code == 2 and "one device" in err and "--table" in err
        code, _, err = pfc("load", path, "--target", target, "--dev", "d2",
                           "--netns", lab.name, "--table", "pfc2")
        assert code == 0, err
    assert len(status(lab)) == 4


def test_status_watch_and_text(lab, tmp_path, monkeypatch):
    path = policy_file(tmp_path, COUNTING)
    assert load(lab, "tc", [], path)[0] == 0
    from pfc.cli import status as cmd_load

    calls = []

    def sleep(seconds):
        calls.append(seconds)
        if len(calls) > 1:
            raise KeyboardInterrupt

    monkeypatch.setattr(cmd_load.time, "sleep", sleep)
    code, out, _ = pfc("status", "--watch", "--interval", "0.5", "--format", "json")
    assert code == 0 and calls == [0.5, 0.5]
    lines = [json.loads(line) for line in out.splitlines()]
    assert len(lines) == 2 and lines[0]["loaded"][0]["target"] == "tc"
    calls.clear()
    code, out, _ = pfc("status", "--watch", "--netns", lab.name)
    assert code == 0 and "count udp dport 2000-2100" in out
    code, out, _ = pfc("status", "--dev", "nosuch")
    assert code == 0 and "nothing loaded by pfc" in out


def test_iptables_legacy_flavour(lab, tmp_path, monkeypatch):
    """A system whose iptables is legacy gets pfc's chain in the legacy tables."""
    from pfc.deploy import iptables as load_ipt

    monkeypatch.setattr(load_ipt, "system_flavour", lambda: "legacy")
    save = "iptables-legacy-save; ip6tables-legacy-save"
    before = subprocess.run(save, shell=True, capture_output=True, text=True).stdout
    path = policy_file(tmp_path, COUNTING)
    assert load(lab, "iptables", [], path)[0] == 0
    assert load(lab, "iptables", [], path)[0] == 0
    e = entry(lab, "iptables")
    assert e["attach"]["flavour"] == "legacy" and e["health"] == "ok"
    assert "-A PFC" not in subprocess.run("iptables-nft-save", shell=True, capture_output=True,
                                          text=True).stdout
    artifact, _ = build_artifact(compile_path(path), "iptables", None, dev=lab.dut)
    frames = deliver(lab, frames_for(lab, artifact.policy, 300, seed=11))
    outcomes = interpreter("iptables", artifact.hook, artifact.policy, frames)
    want = expected_counters(artifact.policy, outcomes) | decided(artifact.policy, outcomes)
    assert counters_of(entry(lab, "iptables")) == want
    assert pfc("unload", "--target", "iptables", "--dev", lab.dut, "--netns", lab.name)[0] == 0
    after = subprocess.run(save, shell=True, capture_output=True, text=True).stdout
    assert rules_only(after) == rules_only(before)


def rules_only(save: str) -> list[str]:
    """The rules and user chains of an iptables-save text. A legacy table, once used in
    a namespace, stays registered (empty, policies ACCEPT) until the namespace goes:
    kernel state pfc cannot remove, and no rule."""
    builtin = {"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"}
    return [ln for ln in save.splitlines() if ln.startswith("-") or
            (ln.startswith(":") and ln.split()[0][1:] not in builtin)]


def test_iptables_legacy_waits_for_the_xtables_lock(lab, tmp_path, monkeypatch):
    """Docker, fail2ban or a second iptables run hold /run/xtables.lock for a moment:
    pfc's legacy restores wait for it (``-w``) instead of failing the load with
    "Another app is currently holding the xtables lock"."""
    from pfc.deploy import iptables as load_ipt

    monkeypatch.setattr(load_ipt, "system_flavour", lambda: "legacy")
    path = policy_file(tmp_path, COUNTING)
    holder = subprocess.Popen(["flock", "/run/xtables.lock", "sh", "-c",
                               "echo held; sleep 2"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"  # the lock is taken before the load
        code, _, err = load(lab, "iptables", [], path)
    finally:
        holder.wait()
    assert code == 0, err
    assert entry(lab, "iptables")["health"] == "ok"
    assert pfc("unload", "--target", "iptables", "--dev", lab.dut, "--netns", lab.name)[0] == 0
