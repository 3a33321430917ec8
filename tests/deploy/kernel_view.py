"""Which of two policies the kernel holds, from its own listings (for the kill tests).

``OLD`` and ``NEW`` differ in a port (1001, 1002) and in an address list (an ipset for
iptables); :func:`which` reads the kernel of the calling thread's namespace: the
attached program's tag (xdp, tc), ``nft list table``, ``iptables-save`` and
``ip6tables-save`` with ``ipset list`` (iptables), and says "old", "new", "none"
(nothing of pfc's) or "mix".
"""

from __future__ import annotations

import re
import subprocess

from pfc.backends.ebpf import maps as ebpf_maps
from pfc.build import build_artifact
from pfc.frontend.pipeline import compile_text
from pfc.kernel import bpf_attach

OLD = ("define bad = { 10.9.0.0/16, 10.8.0.1, 10.8.0.3 }\ncount udp\n"
       "drop udp dport 1001\ndrop src $bad\n")
NEW = ("define bad = { 10.7.0.0/16, 10.6.0.1, 10.6.0.3 }\ncount udp\n"
       "drop udp dport 1002\ndrop src $bad\n")
MARKS = {"old": ("1001", "0x3e9", "10.9.0.0/16"), "new": ("1002", "0x3ea", "10.7.0.0/16")}


def tags(target: str) -> dict[str, str]:
    """The tag of OLD's and NEW's program for ``target`` (xdp, tc): loaded, not
    attached (the tag is the kernel's hash of the instructions)."""
    out = {}
    for name, text in (("old", OLD), ("new", NEW)):
        artifact, _ = build_artifact(compile_text(text, f"{name}.pf"), target)
        with ebpf_maps.open_filled(artifact) as obj:
            out[name] = bpf_attach.prog_info(obj.programs[artifact.meta["program"]].fd).tag
    return out


def _run(*argv: str) -> str:
    return subprocess.run(argv, capture_output=True, text=True).stdout


def which(target: str, dev_index: int, known: dict[str, str] | None = None) -> str:
    if target in ("xdp", "tc"):
        prog = bpf_attach.xdp_query(dev_index).prog_id if target == "xdp" else \
            bpf_attach.tc_query(dev_index, 0x7066, 1)
        if not prog:
            return "none"
        info = bpf_attach.prog_info_by_id(prog)
        return next((k for k, tag in (known or {}).items() if info and info.tag == tag),
                    "mix")
    if target == "nft":
        text = _run("nft", "list", "table", "netdev", "pfc")
        if not text:
            return "none"
        return _one([k for k, (port, _, net) in MARKS.items()
                     if f"dport {port}" in text and net in text])
    return _iptables()


def _iptables() -> str:
    seen = []
    for tool in ("iptables-save", "ip6tables-save"):
        text = _run(tool, "-t", "raw")
        goto = re.search(r"^-A PFC -g (\S+)$", text, re.MULTILINE)
        if goto is None:
            seen.append("none")
            continue
        rules = "\n".join(ln for ln in text.splitlines()
                          if ln.startswith(f"-A {goto.group(1)} "))
        sets = re.findall(r"--match-set (\S+)", rules)
        members = "".join(_run("ipset", "list", s) for s in sets)
        seen.append(_one([k for k, (_, port, net) in MARKS.items() if port in rules and
                          (tool == "ip6tables-save" or net in members)]))
    return seen[0] if len(set(seen)) == 1 else "mix"


def _one(found: list[str]) -> str:
    return found[0] if len(found) == 1 else "mix"
