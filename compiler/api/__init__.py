"""pfc as a library: the functions the ``pfc`` command is built on.

Every function takes a policy as text, as a file, or as the front end's result:

- a ``str`` is policy text (``"drop udp dport 53"``), except a one-line ``str`` ending in
  ``.pf``, which is a file path;
- a :class:`pathlib.Path` (any ``os.PathLike``) is a file;
- a :class:`~pfc.frontend.pipeline.Compiled` (from :func:`front`) is used as it is, so
  a caller that checks first does not parse twice.

Errors in the policy raise :class:`~pfc.frontend.diagnostics.CompileError` carrying the
diagnostics (``exc.render()`` prints them as ``pfc check`` does); bad options raise
:class:`~pfc.build.OptionError`; a host that refuses a load raises
:class:`~pfc.deploy.base.LoadError`. docs/api.md has a walk-through.

This module imports only the front end, the oracle and the backends at import time; the
verifier and the deploy layer load when :func:`verify`, :func:`load`, :func:`unload` or
:func:`status` is first called. Nothing here imports the CLI.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from pfc import backends
from pfc.api.common import DryRun, PolicyInput, front, set_file_changes
from pfc.backends.base import Artifact
from pfc.build import OptionError, build_artifact, check_ruleset
from pfc.frontend import ir
from pfc.frontend.diagnostics import CompileError, Diagnostic
from pfc.frontend.pipeline import Compiled
from pfc.oracle import interp
from pfc.oracle.events import LogEvent

if TYPE_CHECKING:
    from pfc.deploy.apply import Outcome
    from pfc.deploy.load import Result, Status
    from pfc.deploy.sets import Change as SetChange
    from pfc.verifier.run import TargetResult
    from pfc.verifier.whole import FirewallResult

def check(policy: PolicyInput, *, targets: Iterable[str] = (),
          dev: str | None = None) -> list[Diagnostic]:
    """Every diagnostic of ``pfc check``: syntax, types, shadowed rules, and for each of
    ``targets`` what ``pfc compile --target`` refuses. For one rule list each target is
    ``T``, ``T:HOOK`` or a comma list of those, each checked alone: the policy is built
    for it, with compile's default hook, so check never passes what compile refuses.
    For a whole firewall each target is a list (``"xdp,nft"``) as ``pfc compile`` takes
    it: the blocks none of it carries and the rules the carrying target cannot express.
    Errors have ``severity == "error"``; OptionError for an unknown target or hook, or a
    hook that needs ``dev``."""
    compiled = front(policy)
    diags = list(compiled.diagnostics)
    if compiled.policy is not None:
        for spec in (s.strip() for t in targets for s in t.split(",")):
            target, _, hook = spec.partition(":")
            artifact, refused = build_artifact(compiled, target, hook=hook or None,
                                               dev=dev)
            diags += refused if artifact is None else [
                d for d in artifact.diagnostics if d.severity != "note"]
    elif compiled.ruleset is not None:
        for target in targets:
            names = [s.strip().partition(":")[0] for s in target.split(",")]
            diags += check_ruleset(compiled.ruleset, names)
    return diags


def compile(policy: PolicyInput, target: str, *, format: str | None = None,  # noqa: A002
            hook: str | None = None, dev: str | None = None, table: str = "pfc",
            notrack: bool = False, audit: bool = False,
            kernel: str | None = None) -> Artifact:
    """The policy compiled for ``target`` (see ``pfc targets``). ``artifact.text`` is the
    printable form, ``artifact.files`` what ``pfc compile -o`` writes; the front end's
    warnings are in ``artifact.diagnostics``, then the backend's notes (e.g. an eBPF
    object whose maps must be filled at load time). CompileError if the policy has errors or
    the target cannot express a rule; OptionError for a bad format, hook or name.
    ``audit``: every drop a would-be drop (docs/language.md "Audit mode").
    ``kernel``: the kernel the artifact must load on (``5.10``, ``6.1``, ``host``):
    eBPF lowerings it has, an error per feature it lacks (docs/kernels.md)."""
    compiled = front(policy)
    compiled.require()
    extra = {"kernel": _kernel(kernel)} if kernel else {}
    artifact, diags = build_artifact(compiled, target, format, hook=hook, dev=dev,
                                     table=table, notrack=notrack, audit=audit, extra=extra)
    if artifact is None:
        raise CompileError(diags, compiled.sources)
    artifact.diagnostics = list(compiled.diagnostics) + artifact.diagnostics  # backend notes last
    return artifact


def _kernel(text: str) -> tuple[int, int]:
    from pfc.backends.ebpf import kernels

    try:
        return kernels.running() if text == "host" else kernels.parse_kernel(text)
    except ValueError as exc:
        raise OptionError(str(exc)) from exc


def frames(policy: PolicyInput | ir.Policy, n: int, *, seed: int = 0,
           malformed: bool = True) -> list[bytes]:
    """``pfc frames``: ``n`` raw Ethernet frames biased to the policy's constants (its
    addresses, prefix edges, ports, flags, payloads), deterministic for a ``seed``;
    ``malformed=False`` keeps only frames the kernel's IP input accepts."""
    from pfc.oracle.gen import sample

    checked = policy if isinstance(policy, ir.Policy) else front(policy).require()
    return sample(checked, n, seed=seed, malformed=malformed)


def run(policy: PolicyInput | ir.Policy,
        frames: Iterable[bytes] | str | os.PathLike,
        times: Iterable[int] | None = None,
        outgoing: Iterable[int] = (), decider=None) -> tuple[list[interp.Outcome], dict]:
    """The reference interpreter (``pfc run``): every frame (raw Ethernet bytes, or a
    pcap file) judged in order. Returns one :class:`~pfc.oracle.interp.Outcome` per
    frame (verdict, deciding rule, counted rules, the frame as it leaves, log events)
    and the count rules' ``{rule index: (packets, bytes)}``. ``times`` (ns, one per
    frame; a pcap's own timestamps) drive ``limit`` and ``log ... rate``; ``outgoing``
    (positions of frames the host sent) go through conntrack as sent; ``decider``: the
    user-space decider of ``queue`` rules (``pfc.oracle.queue``; None: none listens)."""
    checked = policy if isinstance(policy, ir.Policy) else front(policy).require()
    if isinstance(frames, str | os.PathLike):
        from pfc.oracle.pcap import read_capture

        capture = read_capture(frames)
        frames, times, outgoing = capture.frames, capture.times, capture.outgoing
    return interp.run(checked, frames, times=times, outgoing=set(outgoing), decider=decider)


def verify(policy: PolicyInput, targets: Iterable[str] | None = None, *,
           frames: int | None = None, seed: int = 0,
           pcap_dir: str | os.PathLike | None = None,
           progress: Callable[[str], None] | None = None,
           pcap: str | os.PathLike | Iterable[bytes] | None = None
           ) -> list[TargetResult] | list[FirewallResult]:
    """``pfc verify``: each target (default: every target; ``TARGET:HOOK`` for one hook)
    compiled and run in the kernel on the frames of ``pcap`` (a capture file, or raw
    Ethernet frames; pfc.oracle.pcap reads Linux cooked and raw IP captures too)
    followed by ``frames`` generated frames (default 2000; ``frames=0``: the capture
    only), compared with the interpreter. A target named in ``targets`` that cannot
    express the policy fails; with the default, it is reported as ``not-expressible``.
    Without privileges each target is compiled only (``status == "compiled-only"``).
    ``progress(target)`` is called as each target starts; a failing frame is written to
    a pcap in ``pcap_dir`` (default ``./pfc-verify``). ValueError when there are no
    frames at all; PcapError for a capture that cannot be read.

    A whole firewall (v2) goes to :func:`verify_firewall` (``targets``: its lists)."""
    from pfc.verifier.run import Request
    from pfc.verifier.run import verify as verify_all

    compiled = front(policy)
    if compiled.ruleset is not None:
        if pcap is not None:
            raise ValueError("a whole firewall is verified on traffic built for its host; "
                             "a capture goes through `pfc run --iif`")
        return verify_firewall(compiled, targets or (), packets=frames or 300, seed=seed,
                               progress=progress)
    compiled.require()
    frames = 2000 if frames is None else frames
    explicit = targets is not None
    chosen = list(targets) if explicit else [t for t in backends.registry() if t != "ir"]
    user = _frames_of(pcap)
    if frames < 0 or not (frames or user):
        raise ValueError("verify needs frames: frames >= 1, or a capture with frames")
    request = Request(compiled, compiled.source.name, chosen, explicit, frames, seed,
                      Path(pcap_dir) if pcap_dir else Path("pfc-verify"), user_frames=user)
    return verify_all(request, progress or (lambda _: None))


def _frames_of(pcap: str | os.PathLike | Iterable[bytes] | None) -> list[bytes]:
    if pcap is None:
        return []
    if isinstance(pcap, str | os.PathLike):
        from pfc.oracle.pcap import read_pcap

        return read_pcap(pcap)
    return [bytes(f) for f in pcap]


def load(policy: PolicyInput, target: str, dev: str, *, netns: str | None = None,
         force: bool = False, mode: str | None = None, hook: str | None = None,
         table: str = "pfc", audit: bool = False) -> Result:
    """``pfc load``: compile for ``target`` (xdp, tc, nft, iptables) and attach to
    ``dev`` (in namespace ``netns``), replacing pfc's previous policy there atomically.
    All or nothing: LoadError leaves the host as it was. ``audit``: nothing is dropped;
    would-be drops are counted and logged."""
    from pfc.deploy.preview import load_compiled

    compiled = front(policy)
    artifact = compile(compiled, target, hook=hook, dev=dev, table=table, audit=audit)
    return load_compiled(compiled, target, dev, netns, force, mode, hook, table, artifact)


def dry_run(policy: PolicyInput, target: str, dev: str, *, netns: str | None = None,
            force: bool = False, mode: str | None = None, hook: str | None = None,
            table: str = "pfc", limit: int = 8, progress=None) -> DryRun:
    """``pfc load --dry-run``: compile, have the kernel check what ``load`` would send
    (verifier load without attach, ``nft -c``, ``iptables-restore --test`` in a scratch
    namespace), compare with what is loaded there (rules, lists, ``diff``'s regions:
    ``limit``, ``progress``). Changes nothing; CompileError, LoadError as :func:`load`."""
    from pfc.deploy.preview import preview
    from pfc.deploy.snapshot import compile_copy
    from pfc.prove.diff import align, diff
    from pfc.prove.sets import changes as set_changes

    compiled = front(policy)
    artifact = compile(compiled, target, hook=hook, dev=dev, table=table)
    seen = preview(artifact, dev, netns, force, mode, {"hook": hook, "dev": dev,
                                                       "table": table})
    if seen.previous is None:
        return DryRun(seen, "nothing loaded")
    old = compile_copy(seen.loaded) if seen.loaded else None
    if old is None or old.policy is None:
        return DryRun(seen, "no copy")
    new = compiled.require()
    alignment = align(old.policy, new)
    removed = [(old.policy.rules[i].line, old.rule_text(old.policy.rules[i]))
               for i in sorted(alignment.changed_old)]
    added = [(new.rules[j].line, compiled.rule_text(new.rules[j]))
             for j in sorted(alignment.changed_new)]
    stateless = not (ir.flow_features(old.policy) or ir.flow_features(new))
    regions = diff(old.policy, new, limit=limit, progress=progress) if stateless else None
    return DryRun(seen, "compared", removed, added, regions,
                  set_file_changes(old, compiled), set_changes(old.policy, new))


def apply(config: str | os.PathLike | None = None, *,
          dry_run: bool = False) -> list[Outcome]:
    """``pfc apply``: make the host hold what the config (default ``PFC_CONFIG`` or
    /etc/pfc/pfc.conf) lists, and no other policy of pfc's (docs/operate.md). One
    :class:`~pfc.deploy.apply.Outcome` per place; ``dry_run``: what would be done, each
    load with its :func:`dry_run`. ConfigError for a config that cannot be read (then
    nothing is done: :func:`pfc.deploy.apply.fallback_all` is the CLI's answer)."""
    from pfc.deploy import apply as applying

    conf = applying.read_config(applying.config_path(None if config is None
                                                     else os.fspath(config)))

    def preview(compiled: Compiled, e: applying.Entry) -> DryRun:
        if e.parts:  # a whole firewall
            return dry_run_firewall(compiled, e.parts, netns=e.netns, force=True,
                                    mode=e.mode, table=e.table)
        return dry_run_(compiled, e.target, e.dev, netns=e.netns, force=True, mode=e.mode,
                        hook=e.hook, table=e.table)
    return applying.apply(conf, preview if dry_run else None)


def set_entries(op: str, name: str, entries: Iterable[str], dev: str, *,
                target: str | None = None, netns: str | None = None,
                label: str = "<entries>") -> list[SetChange]:
    """``pfc set OP NAME``: ``add``, ``del`` or ``replace`` the entries (addresses,
    prefixes; set-file lines) of the loaded policy's ``set NAME = file`` on ``dev``, for
    ``target`` or every policy pfc loaded there, atomically (docs/operate.md).
    LoadError when it cannot (nothing is changed then)."""
    from pfc.deploy import sets
    from pfc.deploy.base import LoadError, current_netns, in_netns
    from pfc.deploy.state import records
    from pfc.frontend.pipeline import paused_gc

    with paused_gc():  # 100k entries are 100k tuples, none in a cycle
        nets = sets.parse_entries(name, list(entries), label)
    if target is None:
        with in_netns(netns):
            found = [r.target for r in records(netns or current_netns(), dev)]
        if not found:
            raise LoadError(f"pfc loaded nothing on {dev}", hint="`pfc status`")
        return [sets.change(op, name, nets, dev, t, netns) for t in found]
    return [sets.change(op, name, nets, dev, target, netns)]


def unload(target: str, dev: str, *, netns: str | None = None,
           force: bool = False) -> Result:
    """``pfc unload``: remove exactly what ``load`` attached; idempotent. ``force``: also
    what sits at pfc's place (program, filter, table, chain) without pfc's record."""
    from pfc.deploy import load as deploying

    return deploying.unload(target, dev, netns, force)


def status(dev: str | None = None, netns: str | None = None) -> list[Status]:
    """``pfc status``: every policy pfc loaded (on ``dev``, in ``netns``), with what the
    kernel holds now and the per-rule counters."""
    from pfc.deploy import load as deploying

    return deploying.status(dev, netns)


dry_run_ = dry_run  # apply's keyword ``dry_run`` shadows the function


def log_events(dev: str, *, netns: str | None = None,
               targets: tuple[str, ...] = ("xdp", "tc", "nft", "iptables"),
               group: int = 20, timeout: float | None = None,
               ready: Callable[[], None] | None = None) -> Iterator[LogEvent]:
    """``pfc log``: the log events (docs/language.md "Log events") of pfc's rules on
    ``targets`` for packets that came in on ``dev`` (in namespace ``netns``), as they
    happen, for ``timeout`` seconds (None: until the caller stops): the XDP and tc
    programs' ring buffers and NFLOG ``group`` (nft, iptables). ``ready`` is called once
    everything listens (events before that are lost). LoadError: no such device, or
    only eBPF hooks asked for and none has a program with events; OSError when the
    NFLOG group cannot be bound (EBUSY: another listener has it; EPERM: not root)."""
    from pfc.backends.base import check_dev
    from pfc.deploy.events import stream

    check_dev(dev)
    return stream.events(dev, netns=netns, targets=targets, group=group, timeout=timeout,
                         ready=ready)


# Whole firewalls and imports live in modules of their own, re-exported here (they import
# ``front`` and ``PolicyInput`` from this module, defined above).
from pfc.api.firewall import (  # noqa: E402
    dry_run_firewall as dry_run_firewall,
)
from pfc.api.firewall import (  # noqa: E402
    load_firewall as load_firewall,
)
from pfc.api.firewall import (  # noqa: E402
    unload_firewall as unload_firewall,
)
from pfc.api.firewall import (  # noqa: E402
    verify_firewall,
)
from pfc.api.firewall import (  # noqa: E402
    walk as walk,
)
from pfc.api.importing import extension_header as extension_header  # noqa: E402
from pfc.api.importing import import_ as import_  # noqa: E402
from pfc.api.importing import verify_against as verify_against  # noqa: E402
