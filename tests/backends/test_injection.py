"""User strings never change what an emitted file means (fuzz-and-faults.md, defect 1).

The policy's file name reaches every text target in a comment (``# pfc: NAME``, the C
header): a name with a newline used to add rules to nft text, iptables-restore and
ipset files. Each hostile name is compiled for every target and compared with the same
policy under a plain name: only comment lines may differ, and they stay one line of
printable ASCII. In the kernel (a throw-away namespace), the nft text, the
iptables-restore and ipset files and the printed iptables form load exactly the ruleset
the plain name gives.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from pfc import backends
from pfc.backends.base import artifact_name
from pfc.build import build_artifact
from pfc.frontend.pipeline import compile_path
from pfc.kernel import netns

POLICY = "drop udp dport 53\ndrop src { 10.0.0.1, 10.0.0.2 }\ncount tcp\n"
# u32 reads no transport field and no lone protocol byte (docs/u32.md)
POLICIES = {"u32": "drop udp dst 10.0.0.3\ndrop src { 10.0.0.1, 10.0.0.2 }\n"
                   "count tcp src 10.0.0.0/8\n"}
HOSTILE = {
    "iptables": "inj\n*filter\n-A INPUT -p udp --dport 9 -j DROP\nCOMMIT\n#.pf",
    "nft": "inj\nadd table inet evil\n#.pf",
    "ipset": "inj\ncreate pfcevil hash:ip\nadd pfcevil 10.9.9.9\n#.pf",
    "quotes": "q\"u'o`te $(id);x.pf",
    "comment-end": "x\n*/ y\r.pf",
    "unicode": "ünï\u2028cødé\u202e\x1b]0;pwned\x07.pf",
}
TARGETS = [t for t in backends.registry() if t != "cbpf"]  # cbpf: no comments, no name
OPTIONS = {"nft": {"dev": "dut"}}  # netdev ingress on the lab's device


def write(tmp_path: Path, name: str, text: str = POLICY) -> Path:
    """The policy in a file named ``name`` (a ``/`` in it makes a directory: ``*/``
    then reaches the path printed in nft and iptables comments)."""
    path = tmp_path / "policies" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def emitted(path: Path, target: str, fmt: str | None = None) -> dict:
    """The artifact's text forms: its printed text and every text file, in order; and
    under ``<stem>`` the stem of its file names."""
    artifact, diags = build_artifact(compile_path(path), target, fmt,
                                     **OPTIONS.get(target, {}))
    assert artifact is not None, diags
    out = {"<stem>": artifact_name(artifact.policy, "t", "x")[:-4]}
    if artifact.text is not None:
        out["<printed>"] = artifact.text
    for i, (name, data) in enumerate(artifact.files.items()):
        if not name.endswith(".o"):
            out[i] = data.decode()
    return out


def comment(line: str) -> bool:
    """A comment line of nft, iptables-restore, ipset restore or the C header."""
    text = line.strip()
    return text.startswith(("#", "/*", "* ")) or text in ("*", "*/")


def changed_lines(plain: str, hostile: str, stems: tuple[str, str]) -> list[str]:
    """The hostile text's lines that differ from the plain one's other than by the
    file names' stem (allow-listed: ``artifact_name``)."""
    a, b = plain.splitlines(), hostile.splitlines()
    assert len(a) == len(b), "the name added or removed lines"
    return [y for x, y in zip(a, b, strict=True) if x.replace(*stems) != y]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("kind", HOSTILE)
def test_a_hostile_file_name_only_changes_comment_lines(tmp_path, target, kind):
    text = POLICIES.get(target, POLICY)
    plain = emitted(write(tmp_path, "plain.pf", text), target)
    hostile = emitted(write(tmp_path, HOSTILE[kind], text), target)
    assert plain.keys() == hostile.keys()
    stems = (plain.pop("<stem>"), hostile.pop("<stem>"))
    assert re.fullmatch(r"[A-Za-z0-9_.+-]+", stems[1])
    for key, text in hostile.items():
        if target == "ir":  # JSON: the name is a JSON string, read back exactly
            assert json.loads(text)["source"].endswith(HOSTILE[kind])
            continue
        for line in changed_lines(plain[key], text, stems):
            assert comment(line), (key, line)
            assert line.isascii() and line.isprintable(), (key, line)


def test_nft_json_keeps_the_name_out_of_the_ruleset(tmp_path):
    """The JSON form has no comments: the name must not appear at all."""
    text = emitted(write(tmp_path, HOSTILE["nft"]), "nft", "json")["<printed>"]
    assert "evil" not in text and json.loads(text)["nftables"]


# ------------------------------------------------------------------ in the kernel

def _run(argv: list[str], text: str | None = None, check: bool = True) -> str:
    done = subprocess.run(argv, input=text, capture_output=True, text=True)
    if check:
        assert done.returncode == 0, (argv, done.stderr)
    return done.stdout


def nft_loaded(text: str) -> str:
    """``nft -c`` accepts the text; loaded in a fresh namespace, the whole ruleset."""
    with netns.lab():
        _run(["nft", "-c", "-f", "-"], text)
        _run(["nft", "-f", "-"], text)
        return _run(["nft", "list", "ruleset"])


def iptables_loaded(files: dict[str, str], meta: dict) -> str:
    """The ipset, .init and main files loaded in a fresh namespace (``--test`` first):
    what iptables-save, ip6tables-save and ipset list show."""
    names = meta["files"]
    with netns.lab():
        if names["ipset"]:
            _run(["ipset", "restore"], files[names["ipset"]])
        for tool, init, main in (("iptables", "init4", "ipv4"), ("ip6tables", "init6", "ipv6")):
            for key in (init, main):
                _run([f"{tool}-nft-restore", "--noflush", "--test"], files[names[key]])
                _run([f"{tool}-nft-restore", "--noflush"], files[names[key]])
        return listing()


def listing() -> str:
    saved = [_run([tool, "-c"]) for tool in ("iptables-nft-save", "ip6tables-nft-save")]
    rules = [ln for text in saved for ln in text.splitlines() if not ln.startswith("#")]
    return "\n".join(rules + [_run(["ipset", "list", "-n"])])


def _artifact(path: Path, target: str):
    artifact, diags = build_artifact(compile_path(path), target, **OPTIONS.get(target, {}))
    assert artifact is not None, diags
    return artifact


@pytest.mark.kernel
@pytest.mark.parametrize("kind", HOSTILE)
def test_nft_text_loads_exactly_the_intended_ruleset(tmp_path, kind):
    if netns.missing_privileges():
        pytest.fail(netns.missing_privileges())
    plain = _artifact(write(tmp_path, "plain.pf"), "nft").text
    hostile = _artifact(write(tmp_path, HOSTILE[kind]), "nft").text
    assert nft_loaded(hostile) == nft_loaded(plain)


@pytest.mark.kernel
@pytest.mark.parametrize("kind", HOSTILE)
def test_iptables_files_load_exactly_the_intended_rules(tmp_path, kind):
    plain = _artifact(write(tmp_path, "plain.pf"), "iptables")
    hostile = _artifact(write(tmp_path, HOSTILE[kind]), "iptables")
    as_text = {name: data.decode() for name, data in hostile.files.items()}
    got = iptables_loaded(as_text, hostile.meta)
    assert got == iptables_loaded({n: d.decode() for n, d in plain.files.items()},
                                  plain.meta)
    assert "--dport 9" not in got and "pfcevil" not in got and "-A INPUT" not in got


@pytest.mark.kernel
@pytest.mark.parametrize("kind", ["iptables", "ipset", "unicode"])
def test_printed_iptables_form_loads_exactly_the_intended_rules(tmp_path, kind):
    """``pfc compile … | iptables-restore --noflush`` (after the ipset file)."""
    plain = _artifact(write(tmp_path, "plain.pf"), "iptables")
    hostile = _artifact(write(tmp_path, HOSTILE[kind]), "iptables")
    shown = []
    for art in (hostile, plain):
        with netns.lab():
            _run(["ipset", "restore"], art.files[art.meta["files"]["ipset"]].decode())
            _run(["iptables-nft-restore", "--noflush"], art.text)
            shown.append(listing())
    assert shown[0] == shown[1] and "-A INPUT" not in shown[0]
