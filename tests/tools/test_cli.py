"""`pfc` as a Unix tool: every command of the new-user trial's findings 3, 7, 13, 15, 16,
17, 18, 19, 25 and of fuzz-and-faults §12's CLI lines, run as users ran them.

Subprocesses where the process matters (a closed pipe, /dev/full, another user, exit
codes); ``pfc.cli.main.main`` in-process elsewhere. Captures are built byte by byte here
(``_pcap``, ``_pcapng``), so the reader is tested against the formats, not against
itself.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether

from pfc import backends
from pfc.backends.base import check_dev
from pfc.cli.main import COMMANDS, build_parser, main
from pfc.kernel.netns import missing_privileges
from pfc.oracle.pcap import read_pcap, write_pcap
from tests.paths import ROOT

EDGE = str(ROOT / "examples" / "edge-drop.pf")
REDIRECT = str(ROOT / "examples" / "udp-redirect.pf")
PFC = [sys.executable, "-m", "pfc.cli"]
kernel = pytest.mark.skipif(missing_privileges() is not None,
                            reason=str(missing_privileges()))
FLOOD = bytes(Ether(dst="02:00:00:00:00:01") / IP(src="10.0.0.1", dst="192.168.0.79")
              / UDP(sport=5353, dport=12345))


def pfc(*args: str, stdin: bytes | None = None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([*PFC, *args], input=stdin, capture_output=True, timeout=300,
                          **kw)


def _no_traceback(proc: subprocess.CompletedProcess) -> None:
    assert b"Traceback" not in proc.stderr, proc.stderr.decode()


def _one_line(proc: subprocess.CompletedProcess, *needles: str) -> str:
    err = proc.stderr.decode()
    _no_traceback(proc)
    assert len(err.strip().splitlines()) == 1, err
    for needle in needles:
        assert needle in err, err
    return err


# ------------------------------------------------------------------- captures, by hand

def _pcap(linktype: int, records: list[bytes], snaplen: int = 65535) -> bytes:
    out = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, snaplen, linktype)
    for i, data in enumerate(records):
        out += struct.pack("<IIII", i, 0, len(data), len(data)) + data
    return out


def _block(kind: int, body: bytes, length: int | None = None) -> bytes:
    body += bytes(-len(body) % 4)
    total = len(body) + 12 if length is None else length
    return struct.pack("<II", kind, total) + body + struct.pack("<I", total)


def _shb() -> bytes:
    return _block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))


def _idb(linktype: int = 1) -> bytes:
    return _block(1, struct.pack("<HHI", linktype, 0, 262144))


def _epb(data: bytes, iface: int = 0) -> bytes:
    return _block(6, struct.pack("<IIIII", iface, 0, 0, len(data), len(data)) + data)


def _sll(pkttype: int, packet: bytes, proto: int = 0x0800) -> bytes:
    return struct.pack(">HHH8sH", pkttype, 1, 6, b"\x02\x00\x00\x00\x00\x07", proto) + packet


def _sll2(pkttype: int, packet: bytes, proto: int = 0x0800) -> bytes:
    return struct.pack(">HHIHBB8s", proto, 0, 3, 1, pkttype, 6,
                       b"\x02\x00\x00\x00\x00\x07") + packet


# ------------------------------------------------------------------ item 1: the boundary

def _boom(*args, **kwargs):
    raise RuntimeError("trampolines did not converge")


def test_an_internal_error_is_one_line_and_exit_70(capsys, monkeypatch) -> None:
    monkeypatch.setattr("pfc.api.check", _boom)
    assert main(["check", EDGE]) == 70
    out, err = capsys.readouterr()
    assert err == (f"pfc check: internal error: RuntimeError: trampolines did not converge "
                   f"({EDGE}); run with --debug for the traceback\n")
    assert main(["check", EDGE, "--format", "json"]) == 70
    report = json.loads(capsys.readouterr().out)
    assert report["version"] == 1 and report["error"].startswith("internal error: ")


@pytest.mark.parametrize("where", ["before", "after"])
def test_debug_prints_the_traceback(capsys, monkeypatch, where: str) -> None:
    monkeypatch.setattr("pfc.api.check", _boom)
    argv = ["--debug", "check", EDGE] if where == "before" else ["check", EDGE, "--debug"]
    assert main(argv) == 70
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "_boom" in err
    assert "run with --debug" not in err


def test_ctrl_c_stays_130(capsys, monkeypatch) -> None:
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr("pfc.api.check", interrupted)
    assert main(["check", EDGE]) == 130


def test_commands_that_run_until_stopped_end_with_0_on_ctrl_c(monkeypatch) -> None:
    """A decision (new-user finding m15), written in the exit codes of --help and
    README: Ctrl-C is how `pfc log` and `pfc status --watch` end."""
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr("pfc.api.log_events", interrupted)
    monkeypatch.setattr("pfc.cli.status._report", interrupted)
    assert main(["log", "--dev", "lo"]) == 0
    assert main(["status", "--watch"]) == 0
    assert main(["status"]) == 130
    help_text = pfc("--help").stdout.decode()
    assert "`pfc log` and `pfc status --watch`, which run until" in help_text
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert "`pfc log` and `pfc status --watch` run until stopped" in readme


def test_an_internal_error_in_a_real_process(tmp_path: Path) -> None:
    code = ("import sys, pfc.api\n"
            "def boom(*a, **k): raise ValueError('x' * 5000)\n"
            "pfc.api.check = boom\n"
            "from pfc.cli.main import main\n"
            f"sys.exit(main(['check', {EDGE!r}]))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert proc.returncode == 70
    _one_line(proc, "pfc check: internal error: ValueError: xxx", "--debug")


def test_help_documents_the_exit_codes() -> None:
    proc = pfc("--help")
    text = proc.stdout.decode()
    for code in ("0 ", "1 ", "2 ", "70 ", "130 "):
        assert f"\n  {code}" in text, text
    assert "internal error" in text
    assert "exit codes" in pfc("check", "--help").stdout.decode()


# ------------------------------------------------------------- finding 3: exact options

def _parsers(parser: argparse.ArgumentParser):
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _parsers(sub)


def test_no_parser_accepts_abbreviations() -> None:
    parsers = list(_parsers(build_parser()))
    assert len(parsers) == len(COMMANDS) + 1
    assert all(p.allow_abbrev is False for p in parsers)
    for command in COMMANDS:  # built with every command's options too
        assert all(p.allow_abbrev is False for p in _parsers(build_parser([command.name])))


def test_verify_pcap_o_is_not_pcap_out(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["verify", EDGE, "--pcap-o", "x", "--frames", "10"])
    assert exc.value.code == 2
    assert "unrecognized arguments: --pcap-o" in capsys.readouterr().err


@pytest.mark.kernel
@kernel
def test_verify_runs_every_target_on_the_users_capture(capsys, tmp_path: Path) -> None:
    """Finding 3's command: the capture's frames are verified (and `--frames N` adds N
    generated ones), not silently replaced by generated frames."""
    cap = tmp_path / "cap-eth.pcap"
    write_pcap(cap, [FLOOD] * 7 + [bytes(Ether() / IPv6() / UDP(dport=53))] * 3)
    code = main(["verify", EDGE, "--targets", "xdp,nft", "--pcap", str(cap),
                 "--format", "json", "--pcap-out", str(tmp_path / "out")])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["ok"], report
    [f] = report["files"]
    assert (f["pcap_frames"], f["generated_frames"]) == (10, 0)
    assert [(r["target"], r["frames"], r["disagree"]) for r in f["targets"]] == [
        ("xdp", 10, 0), ("nft", 10, 0)]
    code = main(["verify", EDGE, "--targets", "tc", "--pcap", str(cap), "--frames", "15",
                 "--format", "json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["files"][0]["targets"][0]["frames"] == 25


@pytest.mark.kernel
@kernel
def test_verify_pcap_finds_a_bug_on_the_users_frame(capsys, monkeypatch, tmp_path) -> None:
    """A planted emitter bug that only the user's frame shows (port 12346, which the
    off-by-one XDP program drops): exit 1, and the failing-frame pcap holds it."""
    import dataclasses

    from tests.tools.test_verify import _off_by_one

    xdp = backends.get("xdp")
    broken = dataclasses.replace(xdp, emit=lambda policy, opts: dataclasses.replace(
        xdp.emit(_off_by_one(policy), opts), policy=policy))
    monkeypatch.setitem(backends.registry(), "xdp", broken)
    frame = bytes(Ether() / IP(dst="192.168.0.79") / UDP(dport=12346))
    cap = tmp_path / "mine.pcap"
    write_pcap(cap, [frame])
    code = main(["verify", EDGE, "--targets", "xdp", "--pcap", str(cap),
                 "--pcap-out", str(tmp_path / "out"), "--format", "json"])
    [row] = json.loads(capsys.readouterr().out)["files"][0]["targets"]
    assert code == 1 and row["status"] == "disagree"
    assert (row["frames"], row["disagree"]) == (1, 1)  # the user's frame, only it
    assert row["pcap"] == str(tmp_path / "out" / "edge-drop-xdp-fail.pcap")
    assert read_pcap(row["pcap"])


def test_verify_pcap_errors_are_usage_errors(capsys, tmp_path: Path) -> None:
    empty = tmp_path / "empty.pcap"
    write_pcap(empty, [])
    assert main(["verify", EDGE, "--pcap", str(empty)]) == 2
    assert "holds no frames" in capsys.readouterr().err
    assert main(["verify", EDGE, "--pcap", str(tmp_path / "nope.pcap")]) == 2
    assert "cannot read" in capsys.readouterr().err


# ------------------------------------------------------------ finding 7: pipes, outputs

def _closed_pipe(*args: str) -> subprocess.CompletedProcess:
    """Run pfc with its stdout's reader gone before it writes (as `| head` does once
    it has its lines)."""
    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.run([*PFC, *args], stdout=write, stderr=subprocess.PIPE,
                              timeout=300)
    finally:
        os.close(write)
    return proc


@pytest.fixture(scope="module")
def frames_pcap(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("frames") / "frames.pcap"
    assert pfc("frames", EDGE, "-n", "300", "-o", str(path)).returncode == 0
    return path


@pytest.mark.parametrize("args", [
    pytest.param(("run", EDGE, "FRAMES", "--format", "json"), id="7a-run-json"),
    pytest.param(("run", EDGE, "FRAMES"), id="7a-run-text"),
    pytest.param(("check", "--format", "json", EDGE, REDIRECT), id="7b-check-json"),
    pytest.param(("verify", REDIRECT, "--format", "json", "--frames", "20", "--targets",
                  "cbpf"), id="7c-verify-json"),
    pytest.param(("frames", EDGE, "-n", "100000", "-o", "/dev/stdout"), id="7d-frames"),
    pytest.param(("frames", EDGE, "-n", "1000", "-o", "-"), id="frames-dash"),
    pytest.param(("status", "--format", "json"), id="12-status-json"),
    pytest.param(("targets",), id="targets"),
])
def test_a_closed_pipe_ends_quietly_with_0(args, frames_pcap: Path) -> None:
    args = tuple(str(frames_pcap) if a == "FRAMES" else a for a in args)
    proc = _closed_pipe(*args)
    assert proc.returncode == 0, proc.stderr.decode()
    _no_traceback(proc)
    assert b"Exception ignored" not in proc.stderr and b"Broken pipe" not in proc.stderr


@pytest.mark.parametrize("args,needle", [
    (("compile", EDGE, "--target", "cbpf", "-o", "/proc/uxa-nope"), "/proc/uxa-nope"),
    (("compile", EDGE, "--target", "cbpf", "-o", "/dev/full"), "No space left on device"),
    (("frames", EDGE, "-n", "10", "-o", "/dev/full"), "No space left on device"),
    (("compile", EDGE, "--target", "cbpf", "-o", "/proc/uxa-nope/"), "/proc/uxa-nope"),
])
def test_output_errors_are_one_line_and_exit_2(args, needle: str) -> None:
    proc = pfc(*args)
    assert proc.returncode == 2
    _one_line(proc, needle)


@pytest.mark.parametrize("command", [("frames", EDGE, "-n", "10"),  # finding 7e
                                     ("compile", EDGE, "--target", "cbpf")])
def test_no_directory_is_made_for_an_output_file(tmp_path: Path, command) -> None:
    target = tmp_path / "nonexistent-dir" / "x.out"
    proc = pfc(*command, "-o", str(target))
    assert proc.returncode == 2
    _one_line(proc, f"cannot write `{target}`: No such file or directory")
    assert not target.parent.exists()
    proc = pfc("compile", EDGE, "--target", "cbpf", "-o", f"{tmp_path / 'made'}/")
    assert proc.returncode == 0 and (tmp_path / "made" / "edge-drop.cbpf.asm").exists()


def test_binary_output_is_never_written_to_a_terminal() -> None:
    controller, terminal = os.openpty()
    try:
        proc = subprocess.run([*PFC, "frames", EDGE, "-n", "5", "-o", "-"], stdout=terminal,
                              stderr=subprocess.PIPE, timeout=120)
    finally:
        os.close(terminal)
        os.close(controller)
    assert proc.returncode == 2
    _one_line(proc, "is binary: not writing it to a terminal")


@pytest.mark.parametrize("args", [
    ("compile", EDGE, "--target", "nft", "--dev", "eth0"),
    ("check", "--format", "json", EDGE),
    ("targets", "--format", "json"),
])
def test_standard_output_on_a_full_disk(args) -> None:
    with open("/dev/full", "wb") as full:
        proc = subprocess.run([*PFC, *args], stdout=full, stderr=subprocess.PIPE,
                              timeout=120)
    assert proc.returncode == 2
    _one_line(proc, "cannot write to standard output: No space left on device")


def test_plot_into_a_missing_directory_creates_nothing(tmp_path: Path) -> None:
    """Finding 24: `--plot /nonexistent/x.png` made /nonexistent/. Refused before any
    measuring (so it needs no privileges)."""
    target = tmp_path / "nonexistent" / "x.png"
    assert main(["bench", EDGE, "--plot", str(target)]) == 2
    assert not target.parent.exists()


def _venv_site() -> str:
    return sysconfig.get_paths()["purelib"]


def _as_nobody(args: list[str], home: str, cwd: str) -> subprocess.CompletedProcess:
    """``pfc ARGS`` as user nobody with HOME=``home``, through the system Python (the
    venv's interpreter lives under /root, which nobody cannot enter) and this venv's
    packages."""
    code = ("import site, sys\n"
            f"site.addsitedir({_venv_site()!r})\n"
            "from pfc.cli.main import main\n"
            f"sys.exit(main({args!r}))\n")
    env = {"HOME": home, "PATH": os.environ["PATH"], "LANG": "C.UTF-8"}
    return subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                           "/usr/bin/python3", "-c", code], capture_output=True, env=env,
                          cwd=cwd, timeout=300)


nobody = pytest.mark.skipif(
    shutil.which("setpriv") is None or not Path("/usr/bin/python3").exists()
    or os.geteuid() != 0, reason="needs root, setpriv and /usr/bin/python3")


@pytest.fixture
def shared_dir():
    """A directory user nobody can reach (pytest's tmp_path is private to root)."""
    path = Path(tempfile.mkdtemp(prefix="pfc-cli-test-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@nobody
def test_as_nobody_with_home_root_compile_works_and_read_only_dirs_are_one_line(
        shared_dir: Path) -> None:
    """Finding 7h/7i: HOME=/root, which nobody cannot enter: the clang cache falls back
    (no PermissionError), and a read-only output directory is one line, exit 2."""
    policy = shared_dir / "edge.pf"
    shutil.copy(EDGE, policy)
    proc = _as_nobody(["compile", str(policy), "--target", "xdp", "-o", "-"], "/root",
                      str(shared_dir))
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stdout[:4] == b"\x7fELF"
    read_only = shared_dir / "ro"
    read_only.mkdir(mode=0o555)
    read_only.chmod(0o555)
    proc = _as_nobody(["compile", str(policy), "--target", "cbpf", "-o", f"{read_only}/"],
                      "/root", str(shared_dir))
    assert proc.returncode == 2
    _one_line(proc, "Permission denied")


def test_the_clang_cache_falls_back_when_unusable(monkeypatch, tmp_path: Path) -> None:
    from pfc.kernel import toolchain

    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    monkeypatch.setattr(toolchain.tempfile, "gettempdir", lambda: str(tmp_path))
    assert toolchain.cache_dir() == tmp_path / f"pfc-cache-{os.getuid()}"
    assert (tmp_path / f"pfc-cache-{os.getuid()}").stat().st_mode & 0o777 == 0o700
    # someone else's (or a shared, writable) temporary directory is never used
    (tmp_path / f"pfc-cache-{os.getuid()}").chmod(0o777)
    assert toolchain.cache_dir() is None
    compiled = toolchain.compile_c("char _license[] __attribute__((section(\"license\")))"
                                   " = \"GPL\";\n", "p")
    assert compiled.obj.startswith(b"\x7fELF") and not compiled.cached


# ------------------------------------------------------- finding 13: every file checked

def test_check_goes_on_past_an_unreadable_file(tmp_path: Path) -> None:
    a, b = tmp_path / "a.pf", tmp_path / "b.pf"
    a.write_text("drop udp dport 53\n")
    b.write_text("drop udpp dport 53\n")
    missing = tmp_path / "missing.pf"
    proc = pfc("check", str(a), str(missing), str(b))
    err = proc.stderr.decode()
    assert proc.returncode == 2
    assert f"pfc check: error: cannot read `{missing}`: no such file" in err
    assert f"{b}:1:6: error" in err  # b.pf was checked after the unreadable one
    proc = pfc("check", "--format", "json", str(a), str(missing), str(b))
    report = json.loads(proc.stdout)
    assert proc.returncode == 2 and report["version"] == 1 and not report["ok"]
    files = {Path(f["file"]).name: f for f in report["files"]}
    assert files["a.pf"]["ok"] and files["a.pf"]["error"] is None
    assert "no such file" in files["missing.pf"]["error"]
    assert files["b.pf"]["diagnostics"][0]["line"] == 1
    assert pfc("check", str(a), str(b)).returncode == 1  # all readable: errors are 1


# ------------------------------------------------- finding 15: ignored/conflicting flags

@pytest.mark.parametrize("target,flags,named", [
    ("cbpf", ["--dev", "eth0"], "--dev"), ("xdp", ["--dev", "eth0"], "--dev"),
    ("tc", ["--dev", "eth0"], "--dev"), ("socket", ["--dev", "eth0"], "--dev"),
    ("ir", ["--dev", "eth0"], "--dev"), ("xdp", ["--table", "mine"], "--table"),
    ("cbpf", ["--table", "mine"], "--table"), ("cbpf", ["--notrack"], "--notrack"),
    ("nft", ["--notrack"], "--notrack"),
])
def test_an_ignored_option_is_a_warning_and_changes_nothing(capsys, target, flags,
                                                            named) -> None:
    fmt = ["--format", "c"] if target in ("xdp", "tc", "socket") else []
    dev = ["--dev", "eth0"] if target == "nft" else []
    assert main(["compile", EDGE, "--target", target, *fmt, *dev]) == 0
    plain = capsys.readouterr().out
    assert main(["compile", EDGE, "--target", target, *fmt, *dev, *flags]) == 0
    out, err = capsys.readouterr()
    assert out == plain
    assert f"pfc compile: warning: {named} is ignored by target `{target}`: " in err


def test_options_a_target_reads_give_no_warning(capsys) -> None:
    for target, flags in (("nft", ["--dev", "eth0", "--table", "mine"]),
                          ("iptables", ["--dev", "eth0", "--table", "mine", "--notrack"])):
        assert main(["compile", EDGE, "--target", target, *flags]) == 0
        assert "warning" not in capsys.readouterr().err
    from pfc.cli.compile import READS
    assert set(READS) <= set(backends.registry())


@pytest.mark.parametrize("target", ["xdp", "tc"])
def test_load_says_table_is_ignored_by_xdp_and_tc(capsys, target) -> None:
    """Said before anything else happens (here: the device does not exist)."""
    assert main(["load", EDGE, "--target", target, "--dev", "pfcnosuch0",
                 "--table", "mine"]) != 0
    err = capsys.readouterr().err
    assert err.startswith(f"pfc load: warning: --table mine is ignored by target "
                          f"`{target}`: it attaches a program to the device's ")


def test_nft_input_with_a_device_is_a_usage_error(capsys) -> None:
    assert main(["compile", EDGE, "--target", "nft", "--hook", "input", "--dev", "eth0"]) == 2
    err = capsys.readouterr().err
    assert "`input` hook filters every device, not only eth0" in err
    assert main(["compile", EDGE, "--target", "nft", "--hook", "ingress",
                 "--dev", "eth0"]) == 0


# --------------------------------------------------------- finding 16: a missing --dev

def test_nft_without_a_device_is_never_a_source_error(capsys, tmp_path: Path) -> None:
    empty = tmp_path / "empty.pf"
    empty.write_text("")
    for path in (EDGE, str(empty)):
        assert main(["compile", path, "--target", "nft"]) == 0
        out, err = capsys.readouterr()
        assert "inet prerouting" in out and "^" not in err
        assert main(["compile", path, "--target", "nft", "--hook", "ingress"]) == 2
        err = capsys.readouterr().err
        assert "needs a device: pass --dev DEV" in err and "^" not in err


# --------------------------------------------------- finding 17 and §12: pfc run, pcaps

def test_run_lines_show_addresses_protocol_and_ports(capsys, tmp_path: Path) -> None:
    cap = tmp_path / "c.pcap"
    v6 = bytes(Ether() / IPv6(src="2001:db8::1", dst="2001:db8::2") / UDP(sport=1, dport=2))
    write_pcap(cap, [FLOOD, v6, bytes(Ether(type=0x0806) / bytes(28)), b"\x00" * 9])
    assert main(["run", EDGE, str(cap)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "10.0.0.1:5353 → 192.168.0.79:12345 udp  line 7: drop udp dst $dut dport " \
           "12345" in lines[0]
    assert "drop" in lines[0].split()
    assert "[2001:db8::1]:1 → [2001:db8::2]:2 udp" in lines[1]
    assert "ethertype 0x0806 (ARP)" in lines[2] and "runt (9 bytes)" in lines[3]


@pytest.mark.parametrize("linktype,record", [
    (113, _sll(0, bytes(IP(src="10.0.0.1", dst="192.168.0.79") / UDP(sport=5353,
                                                                     dport=12345)))),
    (276, _sll2(0, bytes(IP(src="10.0.0.1", dst="192.168.0.79") / UDP(sport=5353,
                                                                      dport=12345)))),
    (101, bytes(IP(src="10.0.0.1", dst="192.168.0.79") / UDP(sport=5353, dport=12345))),
    (228, bytes(IP(src="10.0.0.1", dst="192.168.0.79") / UDP(sport=5353, dport=12345))),
], ids=["LINUX_SLL", "LINUX_SLL2", "RAW", "IPV4"])
def test_cooked_and_raw_ip_captures_are_judged(capsys, tmp_path, linktype, record) -> None:
    cap = tmp_path / "any.pcap"
    cap.write_bytes(_pcap(linktype, [record]))
    assert main(["run", EDGE, str(cap), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    [packet] = report["packets"]
    assert packet["verdict"] == "drop" and packet["line"] == 7
    assert packet["summary"] == "10.0.0.1:5353 → 192.168.0.79:12345 udp"
    assert main(["run", EDGE, str(cap), "--summary"]) == 0
    assert "judged behind an Ethernet header pfc built" in capsys.readouterr().err


def test_cooked_frames_keep_their_source_mac_and_outgoing_mark(capsys, tmp_path) -> None:
    packet = bytes(IP(src="10.0.0.1", dst="192.168.0.79") / UDP(dport=9))
    cap = tmp_path / "any.pcap"
    cap.write_bytes(_pcap(113, [_sll(1, packet), _sll(4, packet)]))
    broadcast, sent = read_pcap(cap)
    assert broadcast == b"\xff" * 6 + b"\x02\x00\x00\x00\x00\x07\x08\x00" + packet
    assert main(["run", EDGE, str(cap)]) == 0
    out, err = capsys.readouterr()
    assert "(outgoing)" in out.splitlines()[1] and "(outgoing)" not in out.splitlines()[0]
    assert "1 packets were sent by the capturing host" in err


def test_an_unsupported_link_type_names_tcpdump_i(tmp_path: Path) -> None:
    cap = tmp_path / "wifi.pcap"
    cap.write_bytes(_pcap(127, [bytes(40)]))
    proc = pfc("run", EDGE, str(cap))
    assert proc.returncode == 2
    _one_line(proc, "link type 127 is not supported", "tcpdump -i DEV")


@pytest.mark.parametrize("content,needle", [
    (_shb() + _block(1, b"", length=0xFFFFFFF0), "invalid length 4294967280"),
    (_shb() + _idb() + _epb(FLOOD)[:-6], "truncated block"),
    (_shb() + _epb(FLOOD), "an Interface Description Block is missing"),
    (_pcap(1, [FLOOD])[:-len(FLOOD) - 5], "truncated record header"),
    (_pcap(1, [FLOOD])[:-5], "truncated record"),
    (b"", "the file is empty"),
], ids=["pcapng-huge-block", "pcapng-cut-block", "epb-without-idb", "cut-record-header",
        "cut-record-body", "empty"])
def test_damaged_captures_are_clean_errors(tmp_path: Path, content: bytes, needle) -> None:
    cap = tmp_path / "bad.pcap"
    cap.write_bytes(content)
    proc = pfc("run", EDGE, str(cap))
    assert proc.returncode == 2
    _one_line(proc, needle)


def test_a_70000_byte_frame_with_a_large_snaplen_is_read(capsys, tmp_path: Path) -> None:
    big = FLOOD + bytes(70_000 - len(FLOOD))  # a jumbo frame: padding past IP's length
    cap = tmp_path / "big.pcap"
    cap.write_bytes(_pcap(1, [big], snaplen=262144))
    assert read_pcap(cap) == [big]
    ng = tmp_path / "big.pcapng"
    ng.write_bytes(_shb() + _idb() + _epb(big) + _epb(FLOOD))
    assert read_pcap(ng) == [big, FLOOD]
    assert main(["run", EDGE, str(cap), "--format", "json"]) == 0
    [packet] = json.loads(capsys.readouterr().out)["packets"]
    assert (packet["length"], packet["verdict"]) == (70_000, "drop")


# --------------------------------------------------------- finding 18: `-` is stdin/out

def test_dash_reads_the_policy_from_standard_input() -> None:
    text = Path(EDGE).read_bytes()
    assert pfc("check", "-", stdin=text).returncode == 0
    proc = pfc("check", "-", stdin=b"drop udpp dport 53\n")
    assert proc.returncode == 1 and proc.stderr.startswith(b"<stdin>:1:6: error")
    proc = pfc("compile", "-", "--target", "cbpf", "--format", "asm", stdin=text)
    assert proc.returncode == 0 and proc.stdout.startswith(b"(000) ldh")
    proc = pfc("fmt", "-", stdin=b"drop  udp dport {53,80}\n")
    assert proc.returncode == 0 and proc.stdout == b"drop udp dport { 53, 80 }\n"
    proc = pfc("fmt", "--check", "-", stdin=b"drop  udp dport 53\n")
    assert proc.returncode == 1 and b"--- <stdin>" in proc.stdout


def test_an_endless_standard_input_is_refused_not_read_forever() -> None:
    with open("/dev/zero", "rb") as zero:
        proc = subprocess.run([*PFC, "check", "-"], stdin=zero, capture_output=True,
                              timeout=120)
    assert proc.returncode == 2
    _one_line(proc, "standard input holds more than 64 MiB")


def test_dash_for_outputs_and_for_runs_capture(tmp_path: Path) -> None:
    frames = pfc("frames", EDGE, "-n", "50", "-o", "-")
    assert frames.returncode == 0 and frames.stdout[:4] == b"\xd4\xc3\xb2\xa1"
    assert not Path("-").exists()
    proc = pfc("run", EDGE, "-", "--format", "json", stdin=frames.stdout)
    assert proc.returncode == 0 and len(json.loads(proc.stdout)["packets"]) == 50
    obj = pfc("compile", EDGE, "--target", "cbpf", "--format", "bin", "-o", "-")
    assert obj.returncode == 0 and len(obj.stdout) % 8 == 0 and obj.stdout
    proc = pfc("run", "-", "-", stdin=Path(EDGE).read_bytes())
    assert proc.returncode == 2
    _one_line(proc, "standard input (`-`) can be read once")


# ----------------------------------------------------------------- item 11: device names

@pytest.mark.parametrize("name", ["eth0", "veth-a.10", "br_lan", "a@b", "x" * 15])
def test_valid_interface_names(name: str) -> None:
    assert check_dev(name) == name


@pytest.mark.parametrize("name", [".", "..", "a/b", "eth 0", "eth0\n", "", "x" * 16,
                                  "eth0:1", "é", "a\x1bb", "\t"])
def test_invalid_interface_names(name: str) -> None:
    with pytest.raises(ValueError, match="invalid device name") as exc:
        check_dev(name)
    assert "\x1b" not in str(exc.value) and "\n" not in str(exc.value)


def test_unload_dev_dotdot_is_a_usage_error(capsys) -> None:
    """fuzz-and-faults §12: `pfc unload --target xdp --dev ..` was a traceback."""
    assert main(["unload", "--target", "xdp", "--dev", ".."]) == 2
    assert "invalid device name `..`" in capsys.readouterr().err


# ------------------------------------------------------------------------- JSON: version

def _json_keys(value, into: set[str]) -> set[str]:
    if isinstance(value, dict):
        for key, inner in value.items():
            into.add(key)
            _json_keys(inner, into)
    elif isinstance(value, list):
        for inner in value:
            _json_keys(inner, into)
    return into


def test_every_json_output_has_a_version_and_documented_fields(capsys, tmp_path) -> None:
    """Finding 25: check, run, targets, compile diagnostics (and verify, status, bench
    in their own tests) carry "version": 1; every key they use is in docs/json.md."""
    docs = (ROOT / "docs" / "json.md").read_text()
    cap = tmp_path / "f.pcap"
    write_pcap(cap, [FLOOD])
    outputs = []
    for argv in (["check", "--format", "json", EDGE], ["run", REDIRECT, str(cap),
                 "--format", "json"], ["targets", "--format", "json"]):
        main(argv)
        outputs.append(json.loads(capsys.readouterr().out))
    main(["compile", EDGE, "--target", "xdp", "--format", "c", "--dev", "x",
          "--diagnostics", "json"])
    outputs.append(json.loads(capsys.readouterr().err))
    assert outputs[-1]["warnings"] and outputs[-1]["ok"]
    for report in outputs:
        assert next(iter(report)) == "version" and report["version"] == 1
        for key in _json_keys(report, set()):
            assert re.search(rf"[`.]{re.escape(key)}`", docs), key


def test_compile_diagnostics_as_json(capsys, tmp_path: Path) -> None:
    bad = tmp_path / "bad.pf"
    bad.write_text("count udp dport 53\n")
    assert main(["compile", str(bad), "--target", "cbpf", "--diagnostics", "json"]) == 1
    out, err = capsys.readouterr()
    report = json.loads(err)
    assert out == "" and not report["ok"]
    [diag] = report["diagnostics"]
    assert (diag["severity"], diag["line"], diag["column"]) == ("error", 1, 1)
    assert main(["compile", str(bad), "--target", "nft", "--hook", "nope",
                 "--diagnostics", "json"]) == 2
    report = json.loads(capsys.readouterr().err)
    assert "no hook `nope`" in report["error"]


def test_a_usage_error_in_json_mode_is_json(capsys) -> None:
    assert main(["run", EDGE, "/nonexistent.pcap", "--format", "json"]) == 2
    out, err = capsys.readouterr()
    assert json.loads(out)["error"].startswith("/nonexistent.pcap: cannot read")
    assert err.startswith("pfc run: error: ")


# ------------------------------------------------------------ display: markup, controls

def test_rule_text_is_never_rich_markup(capsys, tmp_path: Path) -> None:
    """fuzz-and-faults defect 5 (the run side): `[/]` crashed `pfc run`'s summary, and
    `[bold]` vanished from it."""
    policy = tmp_path / "markup.pf"
    policy.write_text('drop udp payload[0:3] == "[/]"\ncount udp payload[0:6] == "[bold]"\n')
    cap = tmp_path / "f.pcap"
    write_pcap(cap, [FLOOD])
    assert main(["run", str(policy), str(cap), "--summary"]) == 0
    out = capsys.readouterr().out
    assert '"[/]"' in out and '"[bold]"' in out


def test_control_characters_in_file_names_are_escaped(tmp_path: Path) -> None:
    name = tmp_path / "evil\x1b]0;pwned\x07.pf"
    proc = pfc("check", str(name))
    assert proc.returncode == 2
    err = _one_line(proc, "\\x1b]0;pwned\\x07.pf")
    assert "\x1b" not in err and "\x07" not in err


def test_verify_says_line_not_parenthesis(capsys, monkeypatch) -> None:
    monkeypatch.setattr("pfc.verifier.run.missing_privileges", lambda: "needs root (test)")
    # nothing ran (needs root): exit 2, docs/verify.md
    assert main(["verify", REDIRECT, "--targets", "all", "--frames", "10"]) == 2
    out = capsys.readouterr().out
    assert "socket: not expressible: line 4: redirect udp dst 192.168.64.2" in out
    assert not re.search(r"\(\d+\)", out)


# --------------------------------------------------- finding 19: 80-column terminals

def _render(renderable, width: int = 80) -> str:
    from rich.console import Console

    console = Console(width=width, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(renderable)
    return console.export_text()


def _words_intact(text: str, words: list[str]) -> None:
    """No ellipsis, and every word of ``words`` on one line (a folded word is not)."""
    assert "…" not in text, text
    for word in words:
        for part in word.split():
            assert part in text, (part, text)


def test_targets_at_80_columns_cut_no_hook_name() -> None:
    from pfc.cli.compile import targets_table

    text = _render(targets_table())
    assert max(len(line) for line in text.splitlines()) <= 80
    _words_intact(text, [h for b in backends.registry().values() for h in b.hooks]
                  + [f for b in backends.registry().values() for f in b.formats]
                  + ["SO_ATTACH_FILTER", "iptables-restore", "SO_ATTACH_BPF"])


def test_targets_name_the_blocks_each_target_carries() -> None:
    from pfc.cli.compile import targets_json

    blocks = {t["name"]: {b["block"]: b["hook"] for b in t["blocks"]}
              for t in targets_json()["targets"]}
    assert blocks["xdp"] == {"ingress": "xdp"}
    assert "nat postrouting" in blocks["iptables"] and "ingress" not in blocks["iptables"]
    assert set(blocks["nft"]) >= {"input", "forward", "output", "ingress", "egress"}
    from pfc.cli.compile import blocks_table

    text = _render(blocks_table())
    assert "xdp → xdp" not in text and "xdp" in text and "nat postrouting" in text
    _words_intact(text, ["nat postrouting", "raw prerouting", "iptables"])


def test_verify_at_80_columns_cuts_no_status_word() -> None:
    from pfc.cli.verify import verify_table
    from pfc.verifier.equiv import Report
    from pfc.verifier.run import TargetResult

    results = [TargetResult("iptables", "raw-prerouting", "not-expressible",
                            not_expressible=[(4, "redirect udp to 10.0.0.1:80")]),
               TargetResult("iptables", "filter-input", "compiled-only", reason="root"),
               TargetResult("nft", "prerouting", "agree",
                            Report("nft", "prerouting", 2000, 1866, 1866)),
               TargetResult("xdp", "xdp", "disagree", Report("xdp", "xdp", 2000, 2000, 1999))]
    text = _render(verify_table("examples/udp-redirect.pf", results))
    assert max(len(line) for line in text.splitlines()) <= 80
    _words_intact(text, ["raw-prerouting", "filter-input", "prerouting", "not expressible",
                         "compiled only", "agree", "DISAGREE", "1866", "2000", "skipped"])


def _bench_report() -> dict:
    def row(name, hook, test_run, pps, dropped, expected, lost, cpu, latency, status="ok"):
        traffic = None if pps is None else {
            "sent": 10**6, "seconds": 2.0, "pps": pps, "passed": 0, "dropped": dropped,
            "lost_in_veth": lost, "dropped_pps": dropped // 2, "cpu_ns_per_packet": cpu,
            "latency_us": latency and {"median": latency[0], "p99": latency[1],
                                       "probes": 9, "sent": 9}}
        return {"name": name, "kind": "baseline" if name in ("none", "xdp-filter")
                else "target", "hook": hook, "status": status, "test_run_ns": test_run,
                "traffic": traffic, "expected_dropped": expected,
                "ratio_to_none": traffic and {"cpu_ns_per_packet": 0.84}}
    return {"file": "examples/edge-drop.pf", "duration": 2.0, "repeat": 100000,
            "kernel": "6.18.0", "started": "2026-11-25T02:07:00+00:00", "elapsed_s": 25.3,
            "frames": [{"hex": "0270" * 40, "verdict": "drop"}], "notes": [],
            "rows": [row("none", "-", None, 268_000, 0, 0, 0, 2740.0, (56.3, 128.1)),
                     row("xdp", "xdp", {"drop": 35, "pass": 35, "mean": 35}, 351_000,
                         346_483, 351_338, 4_855, 2306.0, (34.8, 5432.0)),
                     row("iptables", "iptables raw-prerouting", None, 177_484, 177_484,
                         177_484, 0, 2952.0, (56.0, 116.8)),
                     row("xdp-filter", "xdp", None, None, None, None, None, None, None,
                         status="refused: xdp-filter cannot express rule 0 (line 7)")]}


def test_bench_at_80_columns_cuts_no_number() -> None:
    from pfc.bench.report import table_rows
    from pfc.cli.bench import renderable

    report = _bench_report()
    text = _render(renderable(report, 80))
    assert max(len(line) for line in text.splitlines()) <= 80
    _words_intact(text, [c for row in table_rows(report) for c in row if c])
    assert "refused" in text and "177,484" in text and "iptables raw-prerouting" in text
    wide = _render(renderable(report, 200), 200)
    assert "target/baseline" in wide and "…" not in wide  # a table when it fits


def test_bench_plot_has_values_refused_rows_and_a_dated_title(tmp_path: Path) -> None:
    """Finding 24: values on the bars, a single-run note, refused rows shown,
    kernel/date/duration in the title; and no directory is made for it."""
    from pfc.bench.report import figure, plot

    fig = figure(_bench_report())
    labels = {t.get_text() for ax in fig.axes for t in ax.texts}
    assert {"35", "2,740", "2,306", "0.351", "refused"} <= labels
    title = fig._suptitle.get_text()
    assert "Linux 6.18.0" in title and "2026-11-25 02:07" in title and "2.0 s" in title
    assert any("one run" in t.get_text() for t in fig.texts)
    assert plot(_bench_report(), tmp_path / "b.png").read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(OSError):
        plot(_bench_report(), tmp_path / "missing" / "b.png")
    assert not (tmp_path / "missing").exists()


def test_status_and_verify_json_carry_the_version(capsys, monkeypatch) -> None:
    docs = (ROOT / "docs" / "json.md").read_text()
    assert main(["status", "--format", "json", "--dev", "pfcnosuchdev0"]) in (0, 2)
    out = capsys.readouterr().out
    assert json.loads(out)["version"] == 1
    monkeypatch.setattr("pfc.verifier.run.missing_privileges", lambda: "needs root (test)")
    # nothing ran (needs root): exit 2, docs/verify.md
    assert main(["verify", REDIRECT, "--frames", "10", "--format", "json"]) == 2
    report = json.loads(capsys.readouterr().out)
    assert next(iter(report)) == "version" and report["version"] == 1
    for key in _json_keys(report, set()):
        assert re.search(rf"[`.]{re.escape(key)}`", docs), key


# ------------------------------------------------- round 3: internal errors read well

def test_a_clang_failure_reads_as_lines_and_names_the_program_once(
        capsys, monkeypatch, tmp_path: Path) -> None:
    """Internal-error notes: clang's output line by line (not `\\x0a`), and no "the
    generated program for the program"."""
    from pfc.kernel import toolchain

    def broken(source, stem="prog", use_cache=True):
        raise toolchain.ToolchainError("clang exited with status 1",
                                       "clang: error: one\nclang: error: two\n", "clang x")

    monkeypatch.setattr(toolchain, "compile_c", broken)
    assert main(["compile", EDGE, "--target", "xdp", "-o", str(tmp_path) + "/"]) == 1
    err = capsys.readouterr().err
    assert "\\x0a" not in err and "for the program" not in err
    assert "clang rejected the generated program; this is a pfc bug" in err
    assert "\n    clang: error: two\n" in err
