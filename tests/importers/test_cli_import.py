"""``pfc import``: exit codes, where the policy goes, the refusal listing, JSON, and
inputs that are not rulesets at all (no traceback on any of them)."""

from __future__ import annotations

import io
import json
import sys

import pytest

from pfc.cli.main import main
from tests.importers.helpers import dump

GOOD = dump("-A INPUT -i lo -j ACCEPT", "-A INPUT -p tcp --dport 22 -j ACCEPT",
            policy="DROP")
BAD = dump("-A INPUT -i lo -j ACCEPT", "-A INPUT -m recent --set --name x",
           "-A INPUT -m recent --rcheck --name x -j DROP",
           "-A INPUT -p tcp -j TCPMSS --set-mss 1400", policy="DROP")


@pytest.fixture
def files(tmp_path):
    def write(name: str, text: str | bytes):
        path = tmp_path / name
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
        return str(path)
    return write


def test_a_complete_import_prints_the_policy_and_exits_0(files, capsys):
    assert main(["import", files("rules.v4", GOOD)]) == 0
    out = capsys.readouterr().out
    assert "pass tcp dport 22" in out and out.startswith("# imported by `pfc import`")


def test_refusals_are_listed_by_reason_and_nothing_is_written(files, capsys, tmp_path):
    out = tmp_path / "out.pf"
    assert main(["import", files("rules.v4", BAD), "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert not out.exists()
    assert "rules.v4:7:10: error: cannot import: -m recent" in err  # the first, with a caret
    assert "rules.v4:8:10: cannot import: -m recent" in err  # the others, one line each
    assert "pfc import: 3 rules cannot be imported (2 reasons):" in err
    assert "      2  -m recent:" in err and "      1  -j TCPMSS:" in err


def test_partial_writes_the_policy_with_the_refused_rules_marked(files, capsys, tmp_path):
    out = tmp_path / "out.pf"
    assert main(["import", files("rules.v4", BAD), "-o", str(out), "--partial"]) == 1
    text = out.read_text()
    assert "# rules.v4:7: -m recent:" in text and "pass iif lo" in text


def test_json_report(files, capsys, tmp_path):
    assert main(["import", files("rules.v4", BAD), "--format", "json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["complete"] is False and report["output"] is None
    assert report["rules"] == {"source": 4, "imported": 1, "refused": 3}
    assert report["reasons"][0]["count"] == 2
    assert report["refusals"][0]["line"] == 7 and report["refusals"][0]["column"] == 10


def test_the_twin_dump_and_stdin(files, capsys, monkeypatch):
    v6 = GOOD.replace("iptables-save", "ip6tables-save")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(GOOD.encode())))
    assert main(["import", "-", files("rules.v6", v6)]) == 0
    assert "rules.v6:7" in capsys.readouterr().out


@pytest.mark.parametrize("content, code, message", [
    (b"hello world\nthis is not a firewall\n", 2, "not an iptables-save dump, an nft "
     "ruleset or a pcap-filter expression"),
    (bytes(range(256)) * 40, 2, "not an iptables-save dump"),
    (b"", 2, "not an iptables-save dump"),
])
def test_inputs_that_are_no_ruleset(files, capsys, content, code, message):
    assert main(["import", files("x", content)]) == code
    assert message in capsys.readouterr().err


def test_forced_formats_on_garbage_refuse_line_by_line(files, capsys):
    path = files("x", bytes(range(256)) * 4)
    assert main(["import", path, "--from", "iptables"]) == 1
    assert main(["import", path, "--from", "nft"]) == 1
    assert main(["import", path, "--from", "nft-json"]) == 1
    assert "Traceback" not in capsys.readouterr().err


def test_a_truncated_dump(files, capsys):
    assert main(["import", files("cut.v4", GOOD[:GOOD.index("COMMIT")])]) == 1
    assert "has no COMMIT: the dump is cut short" in capsys.readouterr().err


def test_a_file_larger_than_pfc_reads_is_refused_without_reading_it(tmp_path, capsys):
    big = tmp_path / "big.v4"
    with open(big, "wb") as f:
        f.truncate(100 << 20)  # 100 MB, sparse
    assert main(["import", str(big)]) == 2
    assert "larger than 64 MiB" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["import"], ["import", "a", "b", "c"],
                                  ["import", "a", "b", "--from", "nft"],
                                  ["import", "--expr", "tcp", "--from", "nft"],
                                  ["import", "/nonexistent/rules"]])
def test_bad_usage_exits_2(argv, capsys):
    assert main(argv) == 2


@pytest.mark.parametrize("content, line", [
    ("table inet f {\n  chain i {\n    type filter hook input priority 0; policy drop;\n"
     "    tcp dport 22 accept\n  }\n}\n", "pass tcp dport 22"),
    ('{"nftables": [{"table": {"family": "inet", "name": "f"}}, {"chain": {"family": '
     '"inet", "table": "f", "name": "i", "type": "filter", "hook": "input", "prio": 0, '
     '"policy": "drop"}}]}', "default drop"),
    ("ip and tcp dst port 22\n", "pass tcp src 0.0.0.0/0 dport 22"),
])
def test_the_format_is_told_from_the_text(files, capsys, content, line):
    assert main(["import", files("x", content)]) == 0
    assert line in capsys.readouterr().out


def test_an_nft_file_with_its_include_under_root_and_a_flowtable(files, capsys, tmp_path):
    """`include "/etc/..."` read under --root; a flowtable and `flow add` left out with
    a note each, the rest imported (exit 0) with the file's own `# comment`, fmt-clean."""
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "defs.nft").write_text("define lan = { 10.0.0.0/8, 192.168.0.0/16 }\n")
    main_file = files("main.nft", (
        'include "/etc/defs.nft"\ntable inet f {\n'
        "  flowtable ft { hook ingress priority 0; devices = { eth0, eth1 }; }\n"
        "  set web { type inet_service; elements = { 80, 443 } }\n  chain fwd {\n"
        "    type filter hook forward priority 0; policy drop;\n"
        "    ip protocol tcp flow add @ft\n"
        "    ip saddr . tcp dport { 10.0.0.1 . 22, 10.0.0.2 . 2222 } accept\n"
        "    ip saddr $lan tcp dport @web accept  # web from the LAN\n  }\n}\n"))
    out = tmp_path / "out.pf"
    assert main(["import", main_file, "--root", str(tmp_path), "-o", str(out)]) == 0
    err, text = capsys.readouterr().err, out.read_text()
    assert "main.nft:3:3: note: flowtable left out" in err
    assert "main.nft:7:21: note: `flow add` (flowtable offload) left out" in err
    assert "pass tcp src 10.0.0.2 dport 2222" in text
    assert "define web = { 80, 443 }" in text  # a named set keeps its name
    assert "pass tcp src { 10.0.0.0/8, 192.168.0.0/16 } dport $web  # main.nft:9: " \
           "web from the LAN" in text  # the person's comment carried over
    assert main(["fmt", "--check", str(out)]) == 0


def test_a_large_named_set_is_written_beside_the_policy(files, capsys, tmp_path):
    from pfc.importers.nft import LARGE_SET
    elements = ", ".join(f"10.{i // 256}.{i % 256}.0/24" for i in range(LARGE_SET + 1))
    ruleset = files("rules.nft", "table inet t {\n  set blocked { type ipv4_addr; flags "
                    f"interval; elements = {{ {elements} }} }}\n  chain c {{\n    type "
                    "filter hook input priority 0; policy accept;\n    ip saddr @blocked "
                    "drop\n  }\n}\n")
    out = tmp_path / "fw.pf"
    assert main(["import", ruleset, "-o", str(out)]) == 0
    assert "wrote" in capsys.readouterr().err
    assert (tmp_path / "fw.blocked.set").read_text().count("\n") == LARGE_SET + 2
    assert main(["check", str(out)]) == 0
