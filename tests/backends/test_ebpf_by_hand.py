"""eBPF objects used without pfc's loader: they fail closed, and the docs' recipe works.

- An object whose sets are maps filled at load time has the ready map ``pfc_ready``
  (contract-ebpf.md §2): loaded without filling — in a test run, or attached as it is
  with ``ip link set ... obj`` / ``tc filter ... obj`` — it drops every frame and counts
  it in the ``not_ready`` slot; ``open_filled`` makes it enforce the policy.
- docs/ebpf.md's first recipe, run line by line as written (``eth0`` the lab's device),
  attaches both hooks, and their counters show the flood dropped by XDP.
- A program too long for 16-bit jumps is refused by ``pfc compile``, not by the kernel.
"""

from __future__ import annotations

import ipaddress
import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from pfc.backends.ebpf import backend as ebpf_backend
from pfc.backends.ebpf import counters as ebpf_counters
from pfc.backends.ebpf import maps as ebpf_maps
from pfc.backends.ebpf import run as ebpf_run
from pfc.build import build_artifact
from pfc.frontend.ir import Verdict
from pfc.frontend.pipeline import compile_text
from pfc.kernel import bpf, netns
from pfc.oracle import framebuild as fb
from pfc.oracle.interp import evaluate
from tests.backends.test_ebpf import HOOKS, build, check, kernel
from tests.paths import EXAMPLES, ROOT

SET = "define a = { " + ", ".join(f"10.{2 * i}.0.0/16" for i in range(40)) + " }\n"
POLICY = SET + "drop src $a\ncount udp\n"  # 40 prefixes, none adjacent: an LPM_TRIE map


def udp(src: str, dst: str = "192.168.0.79", dport: int = 4000,
        dst_mac: bytes = bytes(6)) -> bytes:
    s, d = ipaddress.ip_address(src).packed, ipaddress.ip_address(dst).packed
    ip = fb.ipv4(s, d, 17, fb.udp(s, d, 9, dport, b"by-hand"))
    return fb.ethernet(dst_mac, bytes.fromhex("020000000001"), fb.ETH_IP4, ip)


# ------------------------------------------------------------------- test runs

@kernel
@pytest.mark.parametrize("hook", HOOKS)
def test_an_object_whose_maps_are_not_filled_drops_everything(hook):
    art = build(POLICY, hook)
    assert art.meta["ready_map"] == "pfc_ready" and "not_ready" in art.meta["counter_slots"]
    frames = [udp("10.4.0.1"), udp("192.0.2.1"), udp("192.0.2.2")]  # a member, two not
    assert [evaluate(art.policy, f).verdict for f in frames] == [
        Verdict.DROP, Verdict.PASS, Verdict.PASS]
    raw = bpf.Object(ebpf_maps.object_bytes(art), art.meta["program"])  # never filled
    try:
        prog = raw.programs[art.meta["program"]]
        got = [ebpf_run.test_run(hook, prog, f)[0] for f in frames]
        counts = ebpf_counters.read(art.meta, raw.maps["pfc_counters"])
    finally:
        raw.close()
    assert got == [Verdict.DROP] * 3
    assert counts.pop("not_ready")[0] == 3 and all(c == (0, 0) for c in counts.values())
    report = check(art, frames)  # the runner loads with open_filled: the policy holds
    assert report.counters_got["default"][0] == 2 and report.counters_got[1][0] == 2
    filled = ebpf_counters.read(art.meta, ebpf_run.loaded(art).maps["pfc_counters"])
    assert filled["not_ready"] == (0, 0)


def test_objects_without_maps_to_fill_have_no_ready_map():
    art = build("drop udp dport 53\n", "xdp", "c")
    assert "ready_map" not in art.meta and "pfc_ready" not in art.text
    assert art.meta["counter_slots"] == {"rules": {"0": 0}, "default": 1}
    assert not art.diagnostics  # nothing to say about loading it


def test_compile_notes_how_to_load_an_object_with_maps():
    art = build(POLICY, "tc", "c")
    (note,) = art.diagnostics
    assert note.severity == "note" and note.code == "maps-at-load"
    assert "drops every packet until the maps are filled" in note.message
    assert "pfc load" in note.hint and "bpftool batch file" in note.hint


def test_pfc_compile_prints_the_note_on_stderr(tmp_path):
    pfc = str(ROOT / ".venv" / "bin" / "pfc")
    done = subprocess.run([pfc, "compile", str(ROOT / "examples" / "ddos-blocklist.pf"),
                           "--target", "xdp", "-f", "c", "-o", f"{tmp_path}/"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "note: the list of the rule at line 9 is a map" in done.stderr
    assert "drops every packet until the maps are filled" in done.stderr
    quiet = subprocess.run([pfc, "compile", str(ROOT / "examples" / "edge-drop.pf"),
                            "--target", "xdp", "-f", "c"], capture_output=True, text=True)
    assert quiet.returncode == 0 and "note:" not in quiet.stderr


# ---------------------------------------------------- attached as it is, by hand

def _run(command: str, cwd: Path | None = None) -> str:
    done = subprocess.run(command, shell=True, cwd=cwd, capture_output=True, text=True)
    assert done.returncode == 0, (command, done.stderr)
    return done.stdout


def attached(dev: str) -> dict[str, int]:
    """Program id per hook on ``dev`` (``bpftool net show``)."""
    shown = json.loads(_run(f"bpftool -j net show dev {dev}"))[0]
    return {hook: progs[0]["id"] for hook in ("xdp", "tc")
            if (progs := shown.get(hook))}


def slot_counts(prog_id: int) -> dict[int, int]:
    """Packets per slot of the program's ``pfc_counters``, summed over CPUs."""
    for map_id in json.loads(_run(f"bpftool -j prog show id {prog_id}"))["map_ids"]:
        if json.loads(_run(f"bpftool -j map show id {map_id}"))["name"] == "pfc_counters":
            dump = json.loads(_run(f"bpftool -j map dump id {map_id}"))
            return {e["formatted"]["key"]: sum(v["value"]["packets"]
                                              for v in e["formatted"]["values"])
                    for e in dump}
    raise AssertionError(f"program {prog_id} has no pfc_counters map")


def await_counts(prog_id: int, want: dict[int, int], seconds: float = 10.0) -> dict:
    """The program's slot counts once they reach ``want`` (frames are judged in softirq
    after ``send`` returns), or the last ones seen after ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        got = slot_counts(prog_id)
        if all(got.get(k, 0) >= n for k, n in want.items()) or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


def send(lab, frames: list[bytes]) -> None:
    inject = netns.Injector(lab.inj)
    try:
        for frame in frames:
            inject.send(frame)
    finally:
        inject.close()


@kernel
@pytest.mark.parametrize("hook", ["xdp", "tc"])
def test_a_set_object_attached_as_it_is_drops_everything(tmp_path, hook):
    """Finding 5: `ip link set dev D xdpgeneric obj F sec xdp` of an object whose
    blocklist is a map let the blocklisted sources through. Now every frame is dropped
    (counted as not_ready), members or not."""
    art = build(POLICY, hook)
    obj = tmp_path / "set.o"
    obj.write_bytes(art.files[next(iter(art.files))])
    slots = art.meta["counter_slots"]
    with netns.lab() as lab:
        if hook == "xdp":
            _run(f"ip link set dev {lab.dut} xdpgeneric obj {obj} sec xdp")
        else:
            _run(f"tc qdisc add dev {lab.dut} clsact")
            _run(f"tc filter add dev {lab.dut} ingress bpf da obj {obj} sec tc")
        prog = attached(lab.dut)[hook]
        send(lab, [udp("10.4.0.1", dst_mac=lab.dut_mac)]
             + [udp(f"192.0.2.{i}", dst_mac=lab.dut_mac) for i in range(1, 5)])
        got = await_counts(prog, {slots["not_ready"]: 5})
    assert got[slots["not_ready"]] == 5
    assert got[slots["default"]] == got[slots["rules"]["0"]] == 0


def recipe() -> list[str]:
    """The commands of docs/ebpf.md's first code block, comments removed."""
    text = (ROOT / "docs" / "ebpf.md").read_text()
    block = re.search(r"```\n(.*?)```", text, re.S).group(1)
    return [line.split("#")[0].strip() for line in block.splitlines() if line.strip()]


@kernel
def test_the_first_recipe_of_docs_ebpf_md_works_as_written(tmp_path):
    shutil.copy(EXAMPLES[0].parent / "edge-drop.pf", tmp_path / "edge.pf")
    pfc = str(ROOT / ".venv" / "bin" / "pfc")
    with netns.lab() as lab:
        for command in recipe():
            command = re.sub(r"^pfc ", pfc + " ", command).replace("eth0", lab.dut)
            _run(command, cwd=tmp_path)
        progs = attached(lab.dut)
        assert progs.keys() == {"xdp", "tc"}
        flood = [udp("10.0.0.1", dport=12345, dst_mac=lab.dut_mac) for _ in range(3)]
        other = [udp("10.0.0.1", dport=12346, dst_mac=lab.dut_mac) for _ in range(2)]
        send(lab, flood + other)
        xdp = await_counts(progs["xdp"], {0: 3, 1: 2})
        tc = await_counts(progs["tc"], {1: 2})
    assert (xdp[0], xdp[1]) == (3, 2)  # the rule dropped the flood, the default passed
    assert (tc[0], tc[1]) == (0, 2)  # tc saw only what XDP passed


# ----------------------------------------------------------- programs too long

def test_program_size_is_read_from_the_object(tmp_path):
    art = build("drop udp dst 192.168.0.79 dport 12345\n", "xdp")
    obj = next(data for name, data in art.files.items() if name.endswith(".o"))
    (tmp_path / "x.o").write_bytes(obj)
    shown = subprocess.run(["llvm-objdump", "-d", str(tmp_path / "x.o")],
                           capture_output=True, text=True, check=True).stdout
    last = max(int(m.group(1)) for m in re.finditer(r"^\s+(\d+):", shown, re.M))
    assert ebpf_backend.program_insns(obj, "xdp") == last + 1  # the last is one slot
    assert ebpf_backend.program_insns(obj, "tc") == 0


def test_a_program_too_long_to_jump_over_is_refused(monkeypatch):
    """A policy whose program passes 32767 instructions (h3_cbpf_340_rules.pf: 37,817
    for XDP) used to compile and then fail to load ("jump out of range"); now compile
    refuses it (shown here with the limit lowered, which keeps the test fast)."""
    monkeypatch.setattr(ebpf_backend, "MAX_JUMP", 40)
    compiled = compile_text("drop udp dport 1 sport 2\ndrop udp dport 3 sport 4\n", "t.pf")
    artifact, diags = build_artifact(compiled, "xdp")
    assert artifact is None and diags[0].code == "too-large"
    assert "BPF instructions; the program cannot jump over more than 40" in diags[0].message
    assert build_artifact(compiled, "xdp", "c")[0] is not None  # the C alone: no object
