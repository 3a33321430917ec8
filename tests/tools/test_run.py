"""`pfc run`'s lines and summary: where a redirect sends a packet, and how many log
events each rule sent (issue 29, m18)."""

from __future__ import annotations

from pathlib import Path

from pfc.cli.main import main
from pfc.oracle import framebuild as fb
from pfc.oracle.pcap import write_pcap

MAC = b"\x02\0\0\0\0\x01"
CLIENT = bytes((192, 0, 2, 2))
POLICY = """\
log udp dport 53 prefix "dns" rate 2/second
drop tcp dport 23 audit
redirect udp dst 192.168.64.2 dport 8080 to 10.0.1.2:8083
redirect udp dport 5353 to 10.99.0.53
"""


def _udp(dst: bytes, dport: int) -> bytes:
    return fb.ethernet(MAC, MAC, 0x0800, fb.ipv4(CLIENT, dst, 17, fb.udp(
        CLIENT, dst, 40000, dport, b"q")))


def _run(capsys, tmp_path: Path, frames: list[bytes], *args: str) -> list[str]:
    policy, pcap = tmp_path / "p.pf", tmp_path / "p.pcap"
    policy.write_text(POLICY)
    write_pcap(pcap, frames)  # frame i at i µs: the log bucket never refills a token
    assert main(["run", str(policy), str(pcap), *args]) == 0
    return capsys.readouterr().out.splitlines()


def test_a_redirect_line_shows_the_new_destination(capsys, tmp_path: Path) -> None:
    lines = _run(capsys, tmp_path, [_udp(bytes((192, 168, 64, 2)), 8080),
                                    _udp(bytes((1, 2, 3, 4)), 5353)])
    assert lines[0].endswith("line 3: redirect udp dst 192.168.64.2 dport 8080 to "
                             "10.0.1.2:8083 → 10.0.1.2:8083")
    assert lines[1].endswith("line 4: redirect udp dport 5353 to 10.99.0.53 "
                             "→ 10.99.0.53:5353")  # the port kept


def test_the_summary_counts_the_events_each_rule_sent(capsys, tmp_path: Path) -> None:
    """Seven DNS queries at once: the log rule's bucket (burst 5) lets 5 events out;
    the audited drop sends one per packet."""
    telnet = fb.ethernet(MAC, MAC, 0x0800, fb.ipv4(CLIENT, bytes((10, 0, 0, 1)), 6, fb.tcp(
        CLIENT, bytes((10, 0, 0, 1)), 40000, 23, 0x02, b"")))
    lines = _run(capsys, tmp_path, [_udp(bytes((1, 1, 1, 1)), 53)] * 7 + [telnet] * 2,
                 "--summary")
    header = next(line for line in lines if "decided" in line)
    assert header.split("┃")[-2].strip() == "events"
    rows = {cells[1].strip().split()[0]: cells for line in lines
            if len(cells := line.split("│")) > 6 and cells[1].strip()}
    assert rows["1"][6].strip() == "5"  # log: 5 events of 7 packets
    assert rows["2"][6].strip() == "2"  # audit: every packet
    assert rows["3"][6].strip() == "-"  # a redirect sends none


def test_no_events_column_without_log_or_audit(capsys, tmp_path: Path) -> None:
    policy, pcap = tmp_path / "d.pf", tmp_path / "d.pcap"
    policy.write_text("drop udp dport 53\n")
    write_pcap(pcap, [_udp(bytes((1, 1, 1, 1)), 53)])
    assert main(["run", str(policy), str(pcap), "--summary"]) == 0
    assert "events" not in capsys.readouterr().out
