"""The iptables tools as pfc's iptables loader (:mod:`pfc.deploy.iptables`) uses them:
``iptables-save``/``-restore`` of the system's flavour, ``ipset``, and the switch of
both families in one child process.

Every function acts on the calling thread's network namespace (the tools are child
processes, which start in it). Failures of a tool are :class:`Failed` with the line of
its stderr that names the cause.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass

from pfc.deploy import ipt_text as tx
from pfc.deploy import journal, state
from pfc.deploy.base import LoadError
from pfc.kernel import nftlib

TOOLS = {4: "iptables", 6: "ip6tables"}
NAMES = {4: "IPv4", 6: "IPv6"}
_NFT_FAMILY = {4: "ip", 6: "ip6"}
FILES = {4: "ipv4", 6: "ipv6"}
HOOKS = (("raw", "PREROUTING"), ("filter", "INPUT"))  # pfc's hooks (backend HOOKS)
_COUNTER = re.compile(r"^\[(\d+):(\d+)\] (-A (\S+).*)$")
CHANGED = "changed outside pfc: "


class Failed(Exception):
    """A tool exited non-zero: its command and stderr."""


def call(argv: list[str], text: str | None = None) -> str:
    try:
        proc = subprocess.run(argv, input=text, capture_output=True, text=True)
    except FileNotFoundError:
        raise Failed(f"`{argv[0]}` is not installed") from None
    if proc.returncode:
        raise Failed(f"`{' '.join(argv[:3])}` failed: {last_line(proc.stderr)}")
    return proc.stdout


def last_line(stderr: str) -> str:
    """The line of a tool's stderr that names the cause (not the usage hint)."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip() and
             not ln.startswith("Try `")]
    return lines[-1] if lines else "(no message)"


def system_flavour() -> str:
    """``nft`` or ``legacy``: what the system's ``iptables`` is (``iptables -V``)."""
    if shutil.which("iptables") is None:
        raise LoadError("iptables is not installed", hint="apt install iptables")
    out = subprocess.run(["iptables", "-V"], capture_output=True, text=True).stdout
    return "legacy" if "legacy" in out else "nft"


def tool(family: int, flavour: str, what: str = "") -> str:
    return f"{TOOLS[family]}-{flavour}" + (f"-{what}" if what else "")


def restore_argv(family: int, flavour: str, *args: str) -> list[str]:
    """``iptables-restore`` with ``-w``: iptables-legacy waits for the xtables lock
    another tool (Docker, fail2ban, a second pfc) holds instead of failing at once;
    iptables-nft takes and ignores it."""
    return [tool(family, flavour, "restore"), "-w", *args]


def restore(family: int, flavour: str, text: str) -> None:
    call(restore_argv(family, flavour, "--noflush"), text)


# ------------------------------------------------------------------- what is there

@dataclass
class Family:
    """One family's table as ``iptables-save -c`` shows it, seen from pfc's chains."""

    chains: set[str]
    switch: bool  # the switch chain exists
    jump: bool  # the base chain jumps to it
    target: str | None  # where it goes (its one ``-g``/``-j`` rule)
    rules: dict[str, list[tuple[int, int, str]]]  # chain → (packets, bytes, line)


def family_state(family: int, where: dict) -> Family:
    try:
        text = call([tool(family, where["flavour"], "save"), "-c", "-t", where["table"]])
    except Failed:
        text = ""
    chains = set(re.findall(r"^:(\S+) ", text, re.MULTILINE))
    rules: dict[str, list[tuple[int, int, str]]] = {}
    for m in map(_COUNTER.match, text.splitlines()):
        if m:
            rules.setdefault(m.group(4), []).append((int(m.group(1)), int(m.group(2)),
                                                     m.group(3)))
    spec = f"-A {where['base']} {tx.jump(where)}"
    own = [line.split() for _, _, line in rules.get(where["chain"], [])]
    target = own[0][3] if len(own) == 1 and len(own[0]) == 4 and own[0][2] in ("-g", "-j") \
        else None
    return Family(chains, where["chain"] in chains,
                  any(line == spec for _, _, line in rules.get(where["base"], [])),
                  target, rules)


def states(where: dict) -> dict[int, Family]:
    return {f: family_state(f, where) for f in TOOLS}


def sets_present() -> set[str]:
    with contextlib.suppress(Failed):
        return set(call(["ipset", "list", "-n"]).split())
    return set()


def _nftables():
    """libnftables' binding (iptables-nft keeps its tables in nftables)."""
    try:
        return nftlib.load()
    except nftlib.NftablesMissing as exc:
        raise LoadError(str(exc), hint=exc.hint) from None


def has_table(family: int, where: dict) -> bool:
    """iptables-nft keeps each table as an nftables table (``ip raw``, ``ip6 raw``),
    created by the first rule; legacy tables always exist (kernel modules)."""
    if where["flavour"] != "nft":
        return True
    nftables = _nftables()

    # `list chains FAMILY`: `list table T` and even `list tables` fetch every rule
    # (measured: 5-7 s each with the 65k lines of an 8k-rule policy's tree,
    # backends/iptables/ipt_tree.py); this takes 2 ms and lists empty tables too
    rc, out, _ = nftables.Nftables().cmd(f"list chains {_NFT_FAMILY[family]}")
    return rc == 0 and f"table {_NFT_FAMILY[family]} {where['table']} {{" in out.splitlines()


def has_base(family: int, where: dict) -> bool:
    """Whether the base chain exists: iptables-nft creates a built-in chain (``ip raw
    PREROUTING``) on its first use, also in a table that exists already."""
    if where["flavour"] != "nft":
        return True
    return _nft(f"list chain {_NFT_FAMILY[family]} {where['table']} {where['base']}")


def _nft(command: str) -> bool:
    nftables = _nftables()

    rc, _, _ = nftables.Nftables().cmd(command)
    return rc == 0


def switch(flavour: str, texts: dict[int, str]) -> None:
    """Run the restores ``texts`` (family → text, IPv4 first) in one child process in
    its own session that inherits the state lock: once started, neither a SIGKILL of
    pfc nor a Ctrl-C stops it between the families (pfc waits for it, Ctrl-C or not).
    The tests' kill point ``families`` kills it and pfc after the first one."""
    tools = [tool(f, flavour, "restore") for f in texts]
    steps = [f'printf %s "${i + 1}" | "${len(texts) + i + 1}" -w --noflush || exit {i + 3}'
             for i in range(len(texts))]
    if journal.kill_requested("families"):
        steps.insert(1, "kill -9 $PPID $$")
    lock = state.lock_fd()
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(["sh", "-c", "; ".join(steps), "pfc-switch",
                                 *texts.values(), *tools],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=err, start_new_session=True,
                                pass_fds=(lock,) if lock is not None else ())
        interrupted = False
        while True:
            try:
                code = proc.wait()
                break
            except KeyboardInterrupt:
                interrupted = True
        err.seek(0)
        message = last_line(err.read())
    if code:
        failed = list(texts)[code - 3] if 3 <= code < 3 + len(texts) else None
        raise Failed(f"`{tools[list(texts).index(failed)] if failed else 'sh'}` failed: "
                      f"{message}")
    if interrupted:
        raise KeyboardInterrupt


def destroy_sets(names: list[str]) -> list[str]:
    present, out = sets_present(), []
    for name in [n for n in names if n in present]:
        try:
            call(["ipset", "destroy", name])
            out.append(f"destroyed ipset {name}")
        except Failed as exc:
            out.append(f"kept ipset {name}: {exc} (still referenced?)")
    return out


def drop_table(family: int, where: dict) -> str | None:
    """Delete an iptables-nft table pfc's first load created, if nothing but empty
    built-in chains with policy ACCEPT is left in it."""
    text = call([tool(family, where["flavour"], "save"), "-t", where["table"]])
    chains = re.findall(r"^:(\S+) (\S+)", text, re.MULTILINE)
    if any(line.startswith("-A ") for line in text.splitlines()) or \
            any(policy != "ACCEPT" for _, policy in chains):
        return None
    if _nft(f"delete table {_NFT_FAMILY[family]} {where['table']}"):
        return f"deleted the empty {NAMES[family]} table {where['table']} pfc's load created"
    return None


def drop_base(family: int, where: dict) -> str | None:
    """Delete an iptables-nft built-in chain pfc's first load created, if it is empty
    with policy ACCEPT (the table was there before: another chain of the user's)."""
    text = call([tool(family, where["flavour"], "save"), "-t", where["table"]])
    if re.search(rf"^-A {re.escape(where['base'])} ", text, re.MULTILINE) or \
            f":{where['base']} ACCEPT" not in text:
        return None
    if _nft(f"delete chain {_NFT_FAMILY[family]} {where['table']} {where['base']}"):
        return (f"deleted the empty {NAMES[family]} chain {where['table']} {where['base']} "
                "pfc's load created")
    return None
