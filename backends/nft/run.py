"""Run an ``nft`` artifact in the kernel: a throw-away namespace (``iplab.configure``),
the ruleset loaded through python-nftables created inside it, frames injected on the
veth peer, verdicts and bytes observed after the hook, named counters read back.

Observer (table ``pfc_observer`` of the hook's family, loaded after the artifact):

- chain ``early`` at priority -1000 on the same hook logs every packet entering the
  hook (NFLOG prefix ``in``), and logs and drops batch markers (IPv4 frames from
  ``iplab.MARK_MAC``); it logs and lets through only what arrived (on the lab's
  device) from ``iplab.SEND_MAC`` and drops the rest, so pfc's chain sees only what the
  runner injected (what the lab's own stack produces or loops back would move pfc's
  counters: see ``pfc.backends.iptables.run``);
- chain ``late`` at priority 1000 logs every packet that left pfc's chain without a
  drop (prefix ``pass``): nft's ``accept`` ends one base chain only, a ``drop`` ends the
  packet. Its bytes are the packet as pfc left it (rewritten by ``redirect``);
- NFLOG messages of one group arrive in processing order, one packet after the other,
  frames being sent from one CPU (``iplab.pinned``): a ``pass`` belongs to the ``in``
  before it, so no byte matching is needed, and each ``in`` is checked against the
  frame injected (a frame the hook did not see is an error: ``view`` was wrong);
- an inet table drops every locally generated packet (output hook, priority -400:
  before conntrack), so replies to delivered packets never come back into the hooks
  and never move a connection's state (``ct state`` tests inject both directions).

NFLOG carries the packet from ``skb->data``: the network header at every hook,
netdev ingress included (``eth_type_trans`` pulled the Ethernet header). The frame
leaving the hook is the injected Ethernet header + the logged bytes.

``session()`` keeps one lab for many runs (each ``run`` flushes the namespace's
ruleset and loads afresh); ``run`` outside a session makes a lab per call.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass

from pfc.backends.base import DEFAULT_COUNTER, Artifact, counters_since
from pfc.frontend import ir
from pfc.kernel import iplab, netns, nftlib
from pfc.kernel.nflog import flush_conntrack
from pfc.kernel.observation import KernelUnavailable, Observation

NFLOG_GROUP = 4712
CHUNK = 200  # frames per marker: bounds what waits in the netlink socket
PRIORITY_EARLY, PRIORITY_LATE = -1000, 1000
HOOK_FAMILY = {"ingress": "netdev", "prerouting": "inet", "input": "inet"}


class NftError(RuntimeError):
    """libnftables refused a command; the message is nft's."""


def _nft():
    """A libnftables context, in the current namespace (its netlink socket binds to
    the namespace it is created in)."""
    ctx = nftlib.load().Nftables()
    ctx.set_handle_output(False)
    return ctx


def nft_cmd(ctx, text: str) -> str:
    rc, out, err = ctx.cmd(text)
    if rc:
        raise NftError(f"nft: {err.strip()}")
    return out


def nft_json(ctx, doc: dict) -> object:
    rc, out, err = ctx.json_cmd(doc)
    if rc:
        raise NftError(f"nft: {str(err).strip()}")
    return out


def _queues(artifact: Artifact) -> bool:
    rules = artifact.policy.rules if artifact.policy is not None else ()
    return any(isinstance(r.action, ir.Queue) for r in rules)


def observer(hook: str, dev: str) -> str:
    """The observer ruleset for ``hook`` (module doc)."""
    family = HOOKS_OBS[hook]
    where = f'ingress device "{dev}"' if hook == "ingress" else hook
    only = "" if hook == "ingress" else f'iifname "{dev}" '
    sent = f"{only}ether saddr {iplab.mac_text(iplab.SEND_MAC)}"
    log = f"log group {NFLOG_GROUP} prefix"
    mark = f"ether saddr {iplab.mac_text(iplab.MARK_MAC)}"
    return (f"table {family} pfc_observer {{\n"
            f"  chain early {{ type filter hook {where} priority {PRIORITY_EARLY}; "
            f"policy accept;\n"
            f'    {only}{mark} {log} "mark" drop\n'
            f'    {sent} {log} "in" return\n'
            "    drop\n  }\n"
            f"  chain late {{ type filter hook {where} priority {PRIORITY_LATE}; "
            f"policy accept;\n"
            f'    {only}{log} "pass"\n  }}\n}}\n'
            "table inet pfc_quiet {\n"
            "  chain out { type filter hook output priority -400; policy drop; }\n}\n")


HOOKS_OBS = HOOK_FAMILY


@dataclass
class Session:
    """One lab, reused for many loads."""

    lab: netns.Lab
    log: iplab.Nflog
    inj: netns.Injector
    ctx: object
    seq: int = 0

    def load(self, artifact: Artifact) -> None:
        """Flush the lab's ruleset, load the artifact (text or JSON), then the observer."""
        dev = artifact.meta.get("dev")
        if artifact.hook == "ingress" and dev != self.lab.dut:
            raise ValueError(f"compile the artifact with dev={self.lab.dut!r} (it has {dev!r})")
        nft_cmd(self.ctx, "flush ruleset")
        flush_conntrack()  # a previous run's connections must not decide this one's
        try:
            if artifact.format == "json":
                nft_json(self.ctx, json.loads(artifact.text))
            else:
                nft_cmd(self.ctx, artifact.text)
        except NftError as exc:
            if _queues(artifact) and "No such file or directory" in str(exc):
                raise KernelUnavailable("this kernel has no nft_queue (CONFIG_NFT_QUEUE): "
                                        "it cannot load `queue` rules") from exc
            raise
        nft_cmd(self.ctx, observer(artifact.hook, self.lab.dut))

    def judge(self, frames: list[bytes]) -> list[bytes | None]:
        """For each frame (as the hook sees it), the packet logged after the hook (from
        the network header on), or None when it was dropped."""
        out: list[bytes | None] = []
        for i in range(0, len(frames), CHUNK):
            out += self._batch(frames[i:i + CHUNK])
        return out

    def _batch(self, frames: list[bytes]) -> list[bytes | None]:
        for frame in frames:
            self.inj.send(wire(self.lab.dut_mac, frame))
        self.seq += 1
        self.inj.send(iplab.ip_marker(self.seq, self.lab.dut_mac))
        return pair(frames, self._until_marker())

    def _until_marker(self) -> list[tuple[str, bytes]]:
        logged = []
        while True:
            for prefix, packet in self.log.packets(timeout=5.0):
                if prefix == "mark" and iplab.marker_seq(packet) == self.seq:
                    return logged
                if prefix in ("in", "pass"):
                    logged.append((prefix, packet))

    def counters(self, artifact: Artifact) -> dict[int | str, tuple[int, int]]:
        """(packets, bytes) of every rule and of the default: a count rule's named
        counter, a terminal rule's the sum of the anonymous counters of the nft rules
        commented ``pfc rule INDEX`` (its per-family halves, redirect variants), the
        default's the rule commented ``pfc default``."""
        family, table = artifact.meta["family"], artifact.meta["table"]
        doc = nft_json(self.ctx, {"nftables": [{"list": {"table": {
            "family": family, "name": table}}}]})
        named, by_comment = listed_counters(doc["nftables"], table)
        out: dict[int | str, tuple[int, int]] = {}
        names = artifact.meta.get("counters", {})
        for rule in artifact.policy.rules:
            if rule.action.name == "log":
                continue  # a log rule has no counter
            if rule.terminal:
                out[rule.index] = by_comment.get(f"pfc rule {rule.index}", (0, 0))
                continue
            name = names.get(rule.index, f"rule_{rule.index}")
            if name not in named:
                raise RuntimeError(f"counter {name} of rule {rule.index} is not loaded")
            out[rule.index] = named[name]
        if "pfc default" not in by_comment:
            raise RuntimeError("the default rule (comment `pfc default`) is not loaded")
        out[DEFAULT_COUNTER] = by_comment["pfc default"]
        return out


def listed_counters(items: list[dict], table: str) -> tuple[dict[str, tuple[int, int]],
                                                            dict[str, tuple[int, int]]]:
    """From ``nft -j list table``: the named counters by name, and the anonymous
    counters of the rules by comment (summed over the rules sharing one)."""
    named: dict[str, tuple[int, int]] = {}
    by_comment: dict[str, tuple[int, int]] = {}
    for item in items:
        if "counter" in item and item["counter"].get("table") == table:
            c = item["counter"]
            named[c["name"]] = (c["packets"], c["bytes"])
        rule = item.get("rule")
        if not rule or rule.get("table") != table or "comment" not in rule:
            continue
        for term in rule["expr"]:
            c = term.get("counter") if isinstance(term, dict) else None
            if isinstance(c, dict) and "packets" in c:
                p, b = by_comment.get(rule["comment"], (0, 0))
                by_comment[rule["comment"]] = (p + c["packets"], b + c["bytes"])
    return named, by_comment


TPIDS = (b"\x81\x00", b"\x88\xa8")
PRIORITY_TAG = b"\x81\x00\x00\x00"  # 802.1Q, VLAN id 0


def wire(dst_mac: bytes, frame: bytes) -> bytes:
    """The bytes to inject so the hook sees ``frame``: to the device's MAC (IP input
    drops other hosts' frames) from ``iplab.SEND_MAC``; a frame that still starts with
    a tag (the inner one of a double-tagged frame) gets an outer priority tag back,
    which the kernel removes before the hook, as it removed the original outer tag."""
    body = frame[12:]
    if body[:2] in TPIDS:
        body = PRIORITY_TAG + body
    return dst_mac + iplab.SEND_MAC + body


def pair(frames: list[bytes], logged: list[tuple[str, bytes]]) -> list[bytes | None]:
    """Each ``in`` message with the ``pass`` after it, if any, in order."""
    out: list[bytes | None] = []
    i = 0
    for n, frame in enumerate(frames):
        if i >= len(logged) or logged[i][0] != "in":
            raise RuntimeError(f"frame {n} of the batch never reached the hook: "
                               f"{frame.hex()}")
        if logged[i][1] != frame[14:]:
            raise RuntimeError(f"frame {n}: the hook saw {logged[i][1].hex()}, "
                               f"not {frame[14:].hex()}")
        i += 1
        if i < len(logged) and logged[i][0] == "pass":
            out.append(logged[i][1])
            i += 1
        else:
            out.append(None)
    if i != len(logged):
        raise RuntimeError(f"{len(logged) - i} messages after the last frame of a batch")
    return out


_current: Session | None = None


@contextlib.contextmanager
def session(dut: str | None = None) -> Iterator[Session]:
    """A lab for the nft runner; ``run`` uses it while the block lasts. ``dut`` renames
    the device under test (an artifact compiled with ``--dev eth0`` runs as it is)."""
    global _current
    reason = netns.missing_privileges()
    if reason:
        raise KernelUnavailable(reason)
    previous = _current
    with netns.lab() as lab, netns.one_cpu():
        if dut is not None:
            lab = netns.rename_dut(lab, dut)
        iplab.configure(lab)
        log, inj = iplab.Nflog(NFLOG_GROUP), netns.Injector(lab.inj)
        _current = Session(lab, log, inj, _nft())
        try:
            yield _current
        finally:
            _current = previous
            log.close()
            inj.close()


def run(artifact: Artifact, frames: list[bytes]) -> Observation:
    """``Backend.run`` for nft: in the current ``session()``, or a fresh one."""
    if _current is None:
        with session():
            return run(artifact, frames)
    _current.load(artifact)
    before = _current.counters(artifact)  # what arrived before the observer was in place
    verdicts = _current.judge(frames)
    return iplab.observation(frames, verdicts,
                             counters_since(_current.counters(artifact), before))
