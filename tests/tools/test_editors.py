"""editors/: the VS Code extension's TextMate grammar (run by a small TextMate engine)
and manifest, and Neovim driven headless with the shipped configuration and with the
snippets of editors/neovim.md, against the real language server."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from lsprotocol import types

from pfc.frontend import ir
from pfc.frontend.parse import KEYWORDS
from pfc.lsp.server import targets_setting
from pfc.lsp.tokens import TOKEN_TYPES
from tests.paths import EDITORS

GRAMMAR = json.loads((EDITORS / "vscode/syntaxes/pfc.tmLanguage.json").read_text())


def tm_scopes(line: str) -> list[tuple[str, str]]:
    """A small TextMate engine (one line): (text, scope) pairs. At each point the
    earliest match wins, the first pattern on a tie, and inside a begin/end region its
    end wins a tie with its own patterns, as in VS Code. A region with a ``name`` (a
    string) is one token; one without is its begin captures, then what its own
    patterns match, up to its end."""
    tokens, _ = _scan(line, 0, GRAMMAR["patterns"], None)
    return tokens


def _rules(patterns: list[dict]) -> list[dict]:
    return [GRAMMAR["repository"][p["include"][1:]] if "include" in p else p
            for p in patterns]


def _scan(line: str, pos: int, patterns: list[dict], end: str | None
          ) -> tuple[list[tuple[str, str]], int]:
    """Tokens from ``pos`` until ``end`` matches (or the line ends); where it stopped."""
    out: list[tuple[str, str]] = []
    rules = _rules(patterns)
    while pos < len(line):
        stop = re.compile(end).search(line, pos) if end else None
        found = [(m.start(), i, r, m) for i, r in enumerate(rules)
                 if (m := re.compile(r.get("match") or r["begin"]).search(line, pos))]
        if stop is not None and (not found or stop.start() <= min(found)[0]):
            return out, stop.end()
        if not found:
            break
        _, _, rule, m = min(found, key=lambda f: (f[0], f[1]))
        if "begin" in rule and "name" in rule:
            _, after = _scan(line, m.end(), rule.get("patterns", []), rule["end"])
            out.append((line[m.start():after], rule["name"]))
        elif "begin" in rule:
            out += _captures(rule.get("beginCaptures", {}), m)
            inner, after = _scan(line, m.end(), rule.get("patterns", []), rule["end"])
            out += inner
        else:
            out += _captures(rule["captures"], m) if "captures" in rule \
                else [(m.group(), rule["name"])]
            after = m.end()
        pos = after if after > pos else pos + 1
    return out, len(line)


def _captures(captures: dict, m: re.Match) -> list[tuple[str, str]]:
    return [(m.group(int(k)), c["name"]) for k, c in captures.items()]


def test_textmate_grammar_colours_a_rule() -> None:
    line = 'drop tcp dst $lan dport 80-90 !flags syn,!rst payload[1] == "X\\"" # note'
    assert tm_scopes(line) == [
        ("drop", "keyword.control.action.pfc"), ("tcp", "support.type.protocol.pfc"),
        ("dst", "support.function.field.pfc"), ("$lan", "variable.other.pfc"),
        ("dport", "support.function.field.pfc"), ("80", "constant.numeric.pfc"),
        ("-", "keyword.operator.pfc"), ("90", "constant.numeric.pfc"),
        ("!", "keyword.operator.pfc"), ("flags", "support.function.field.pfc"),
        ("syn", "constant.language.flag.pfc"), ("!", "keyword.operator.pfc"),
        ("rst", "constant.language.flag.pfc"), ("payload", "support.function.field.pfc"),
        ("1", "constant.numeric.pfc"), ("==", "keyword.operator.pfc"),
        ('"X\\""', "string.quoted.double.pfc"), ("# note", "comment.line.number-sign.pfc")]
    assert tm_scopes("define web = { 80 }")[:2] == [
        ("define", "keyword.other.declaration.pfc"), ("web", "variable.other.definition.pfc")]
    assert tm_scopes("redirect udp to [2001:db8::1]:53 icmp-type x")[3] == (
        "2001:db8::1", "constant.numeric.address.pfc")


def test_textmate_grammar_redirect_after_icmp_type_is_an_icmp_type() -> None:
    icmp = "constant.language.icmp-type.pfc"
    action = "keyword.control.action.pfc"
    assert tm_scopes("drop icmp icmp-type redirect dst 10.0.0.1") == [
        ("drop", action), ("icmp", "support.type.protocol.pfc"),
        ("icmp-type", "support.function.field.pfc"), ("redirect", icmp),
        ("dst", "support.function.field.pfc"), ("10.0.0.1", "constant.numeric.address.pfc")]
    listed = tm_scopes("drop icmp icmp-type { echo-request, redirect, 5 } # redirect")
    assert ("redirect", icmp) in listed and ("5", "constant.numeric.pfc") in listed
    assert listed[-1] == ("# redirect", "comment.line.number-sign.pfc")
    assert tm_scopes("pass icmp !icmp-type redirect")[3:] == [
        ("icmp-type", "support.function.field.pfc"), ("redirect", icmp)]
    assert tm_scopes("redirect udp dport 53 to 10.0.0.2:53")[0] == ("redirect", action)


@pytest.mark.parametrize("name", sorted(ir.PROTO_NUMBERS))
def test_textmate_grammar_protocol_names_after_proto(name: str) -> None:
    scopes = tm_scopes(f"drop proto {name} ttl 1")
    assert scopes[2] == (name, "support.type.protocol.pfc"), scopes
    assert scopes[3] == ("ttl", "support.function.field.pfc")
    listed = tm_scopes(f"drop !proto {{ {name}, 47 }} dport 1")
    assert (name, "support.type.protocol.pfc") in listed
    assert ("47", "constant.numeric.pfc") in listed and listed[-2][0] == "dport"


def test_textmate_grammar_knows_every_keyword_and_name() -> None:
    for word in (*KEYWORDS, *ir.TCP_FLAGS, *ir.ICMP_TYPES, *ir.ICMP6_TYPES):
        scopes = tm_scopes(f"x {word} x")
        assert (word, ) == tuple(t for t, _ in scopes if t == word), (word, scopes)


def test_vscode_extension_declares_the_servers_token_types() -> None:
    package = json.loads((EDITORS / "vscode/package.json").read_text())
    contributes = package["contributes"]
    assert contributes["languages"][0]["extensions"] == [".pf"]
    assert (EDITORS / "vscode" / contributes["grammars"][0]["path"]).is_file()
    standard = {t.value for t in types.SemanticTokenTypes}
    custom = {t["id"] for t in contributes["semanticTokenTypes"]}
    assert custom == set(TOKEN_TYPES) - standard
    config = json.loads((EDITORS / "vscode/language-configuration.json").read_text())
    assert config["comments"]["lineComment"] == "#"
    assert "pfc.targets" in contributes["configuration"]["properties"]




def test_vscode_extension_is_packageable() -> None:
    """MIT LICENSE at the root (and in the extension, which `vsce` wants), a lock file
    for the manifest's dependencies (no node_modules in the tree), and a .vscodeignore
    that keeps every file the manifest names."""
    vscode = EDITORS / "vscode"
    package = json.loads((vscode / "package.json").read_text())
    license_text = (EDITORS.parent / "LICENSE").read_text()
    assert package["license"] == "MIT" and license_text.startswith("MIT License")
    assert (vscode / "LICENSE").read_text() == license_text
    lock = json.loads((vscode / "package-lock.json").read_text())
    assert lock["packages"][""]["dependencies"] == package["dependencies"]
    assert not (vscode / "node_modules").exists() or "node_modules/" in (
        vscode / ".gitignore").read_text().split()
    ignored = [line for line in (vscode / ".vscodeignore").read_text().splitlines()
               if line and not line.startswith("#")]
    contributes = package["contributes"]
    needed = [package["main"], *(g["path"] for g in contributes["grammars"]),
              *(lang["configuration"] for lang in contributes["languages"])]
    for path in (p.removeprefix("./") for p in needed):
        assert (vscode / path).is_file(), path
        assert not [g for g in ignored if fnmatch.fnmatch(path, g)], path


def test_helix_snippet_is_valid_and_configures_the_server() -> None:
    block = re.search(r"```toml\n(.*?)```", (EDITORS / "helix.md").read_text(), re.S)
    config = tomllib.loads(block.group(1))
    (language,) = config["language"]
    assert language["name"] == "pfc" and language["file-types"] == ["pf"]
    assert language["comment-token"] == "#" and language["language-servers"] == ["pfc"]
    server = config["language-server"]["pfc"]
    assert [server["command"], *server["args"]] == ["pfc", "lsp"]
    assert targets_setting(server["config"]) == ("xdp", "nft")


# ------------------------------------------------------------------ Neovim, headless

NVIM = shutil.which("nvim")
PROBE = Path(__file__).with_name("nvim_probe.lua")
SHIPPED_INIT = EDITORS / "neovim" / "init.lua"
# A syntax error (line 3) and a rule the comment's target cannot express (line 4): as
# `pfc check --target iptables`, only the syntax error is reported.
BROKEN = ("# pfc: targets iptables\n"
          "define dut = 192.168.0.79\n"
          "drop udp dst $dut dprot 53\n"
          "redirect udp dport 80 to 10.0.0.2:8080\n")


def nvim_version() -> tuple[int, int]:
    assert NVIM, "no nvim on PATH: scripts/setup installs Debian's neovim"
    first = subprocess.run([NVIM, "--version"], capture_output=True, text=True,
                           check=True, timeout=60).stdout.split("\n")[0]
    major, minor = re.match(r"NVIM v(\d+)\.(\d+)", first).groups()
    return int(major), int(minor)


def apis() -> list[str]:
    """The server-starting APIs of editors/neovim/lua/pfc.lua this Neovim has."""
    version = nvim_version()
    return ["start_client"] + (["start"] if version >= (0, 10) else []) \
        + (["config"] if version >= (0, 11) else [])


def run_nvim(tmp_path: Path, init: Path, text: str, before: str = "") -> dict:
    """Open ``text`` as policy.pf in ``nvim --headless -u init`` (``before`` as --cmd),
    with an empty HOME and pfc's venv first on PATH; what nvim_probe.lua saw."""
    home = tmp_path / "home"
    (tmp_path / "policy.pf").write_text(text)
    out = tmp_path / "probe.json"
    out.unlink(missing_ok=True)
    env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home / "config"),
           "XDG_DATA_HOME": str(home / "data"), "XDG_STATE_HOME": str(home / "state"),
           "XDG_CACHE_HOME": str(home / "cache"),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "PFC_PROBE_OUT": str(out), "PFC_PROBE_TIMEOUT": "90000",
           "PFC_HOVER_LINE": "2", "PFC_HOVER_CHAR": "10",  # on `dst`
           "PFC_COMPLETE_LINE": "2", "PFC_COMPLETE_CHAR": "9"}  # after `drop udp `
    command = [NVIM, "--headless", *(["--cmd", before] if before else []), "-u", str(init),
               "-i", "NONE", "-n", "policy.pf", "-c", f"luafile {PROBE}"]
    run = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300, check=False)
    assert out.exists(), (run.returncode, run.stdout[-2000:], run.stderr[-2000:])
    return json.loads(out.read_text())


def assert_broken_file_seen(seen: dict, label: str) -> None:
    assert seen["filetype"] == "pfc" and seen["commentstring"] == "# %s", (label, seen)
    assert seen["attached"] and seen["got_diagnostics"], (label, seen)
    (diag,) = seen["diagnostics"]
    assert (diag["lnum"], diag["col"], diag["source"]) == (2, 18, "pfc"), (label, diag)
    assert "hint: did you mean `dport`?" in diag["message"], (label, diag)
    assert "destination address" in seen["hover"], (label, seen["hover"])
    assert "dport" in seen["completion"] and "flags" not in seen["completion"], label


def test_neovim_with_the_shipped_configuration(tmp_path: Path) -> None:
    """editors/neovim/init.lua + lua/pfc.lua, once per API this Neovim has."""
    for api in apis():
        seen = run_nvim(tmp_path, SHIPPED_INIT, BROKEN, f"let g:pfc_api = '{api}'")
        assert_broken_file_seen(seen, api)
        if api == "start_client" and nvim_version() < (0, 10):
            assert seen["omnifunc"] == "v:lua.vim.lsp.omnifunc"


def test_neovim_targets_setting_reaches_the_server(tmp_path: Path) -> None:
    seen = run_nvim(tmp_path, SHIPPED_INIT, "redirect udp dport 80 to 10.0.0.2:8080\n",
                    "lua vim.g.pfc_targets = { 'iptables' }")
    (diag,) = seen["diagnostics"]
    assert "`iptables`" in diag["message"] and diag["lnum"] == 0, diag


def neovim_md_snippets() -> dict[str, str]:
    """The first ```lua block of each `## ` section of editors/neovim.md, by heading."""
    text = (EDITORS / "neovim.md").read_text()
    out = {}
    for section in re.split(r"^## ", text, flags=re.M)[1:]:
        heading, _, body = section.partition("\n")
        block = re.search(r"```lua\n(.*?)```", body, flags=re.S)
        if block:
            out[heading.strip()] = block.group(1)
    return out


def test_neovim_md_snippets_work(tmp_path: Path) -> None:
    """editors/neovim.md's file type snippet plus each version's section this Neovim
    can run (0.7's runs on every version), as the whole init.lua."""
    snippets = neovim_md_snippets()
    sections = {"Neovim 0.7 to 0.9 (Debian 12)": (0, 7), "Neovim 0.10": (0, 10),
                "Neovim 0.11 and later": (0, 11)}
    assert set(sections) | {"File type (every version)", "Colours"} == set(snippets)
    for heading, needs in sections.items():
        if nvim_version() < needs:
            continue
        init = tmp_path / "init.lua"
        init.write_text(snippets["File type (every version)"] + snippets[heading])
        assert_broken_file_seen(run_nvim(tmp_path, init, BROKEN), heading)
