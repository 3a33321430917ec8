"""``pfc decide POLICY``: the user-space decider of the policy's ``queue`` rules.

Serve NFQUEUE queue ``--queue N`` (default: the policy's only queue number) in
the current network namespace (``--netns NS`` to enter one): decide each packet
with ``--decider`` (``pattern:TEXT``: seed 002's application firewall, drop a
flow whose payload holds TEXT; ``pass``; ``drop``; ``module:callable``: your own
Python decider), answer in batches, and with ``first K`` keep each decided
flow's verdict in its connection's mark. A watchdog process kills a decider
that answers nothing for ``--stall`` seconds while packets wait (a stuck one
fails like a killed one: closed, or open with ``bypass``). Prints its counters
as one JSON line at the end (Ctrl-C, SIGTERM, ``--timeout``). docs/queue.md
explains it all."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import time

from pfc.cli.common import Command, UsageError, load, print_diagnostics
from pfc.frontend import ir


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("policy", help="the policy file whose queue rules this decider serves")
    p.add_argument("--queue", type=int, metavar="N", help="the queue number (default: the "
                   "policy's, when it uses one)")
    p.add_argument("--decider", default="pass", metavar="SPEC",
                   help="pattern:TEXT | pass | drop | module:callable (default: pass)")
    p.add_argument("--netns", metavar="NAME", help="run in this network namespace")
    p.add_argument("--timeout", type=float, metavar="S", help="stop after S seconds")
    p.add_argument("--segment", action="store_true",
                   help="have the kernel segment GSO packets: the decider sees wire-size "
                   "packets (slower; default: whole GSO packets, NFQA_CFG_F_GSO)")
    p.add_argument("--stall", type=float, default=2.0, metavar="S",
                   help="the watchdog: when packets have waited S seconds with no answer, "
                   "kill the decider, and the queue fails as with none (closed, or open "
                   "with bypass); exit 3 (default: 2; 0: no watchdog, one process)")


def queue_action(policy: ir.Policy, num: int | None) -> ir.Queue:
    """The policy's queue rules for queue ``num``: one ``first``/``bypass`` between
    them (UsageError otherwise, or when there is no such rule)."""
    rules = list(policy.rules) + [r for c in policy.chains for r in c.rules]
    actions = {r.action for r in rules if isinstance(r.action, ir.Queue)}
    nums = sorted({a.num for a in actions})
    if num is None and len(nums) != 1:
        raise UsageError("the policy has no `queue` rule" if not nums else
                         f"the policy uses queues {', '.join(map(str, nums))}: pass --queue N")
    num = nums[0] if num is None else num
    kinds = {(a.first, a.bypass) for a in actions if a.num == num}
    if not kinds:
        raise UsageError(f"the policy has no `queue ... num {num}` rule")
    if len(kinds) > 1:
        raise UsageError(f"the queue rules of queue {num} differ in `first`/`bypass`; one "
                         "decider serves them: give them one setting")
    first, bypass = kinds.pop()
    return ir.Queue(num, first, bypass)


def _policy(path: str) -> ir.Policy | None:
    """The policy's rules (every block's, for a whole firewall); None after printing
    its errors."""
    compiled = load(path)
    if not compiled.ok:
        print_diagnostics(compiled.diagnostics, compiled.sources)
        return None
    if compiled.ruleset is not None:
        return ir.Policy(tuple(r for p in compiled.ruleset.lists for r in p.rules),
                         chains=compiled.ruleset.chains)
    return compiled.policy


def _decide(args: argparse.Namespace) -> int:
    from pfc.decide.analyse import load
    from pfc.decide.loop import Loop
    from pfc.decide.nfqueue import Queue
    from pfc.decide.watch import supervise
    from pfc.kernel import netns

    policy = _policy(args.policy)
    if policy is None:
        return 1
    action = queue_action(policy, args.queue)
    try:
        decider = load(args.decider)
    except (ValueError, ImportError, AttributeError) as exc:
        raise UsageError(f"--decider: {exc}") from exc
    if args.stall < 0:
        raise UsageError("--stall: a number of seconds, 0 or more")
    with netns.inside(args.netns) if args.netns else contextlib.nullcontext():
        try:  # bound here, served by the worker: a refusal is a usage error
            loop = Loop(Queue(action.num, fail_open=action.bypass, gso=not args.segment),
                        action, decider)  # (its ctnetlink socket: the same netns)
        except OSError as exc:
            raise UsageError(f"cannot serve queue {action.num}: {exc.strerror or exc} (root "
                             "is needed; one decider per queue)") from exc
        if not args.stall:
            return _serve(loop, action, args)

        def work(heart) -> int:
            loop.beat = heart.beat
            return _serve(loop, action, args)
        # the watchdog's copies of the sockets closed: the worker's death unbinds the queue
        return supervise(work, action.num, args.stall, release=_closer(loop))


def _closer(loop):
    def close() -> None:
        loop.queue.close()
        if loop.marks is not None:
            loop.marks.close()
    return close


def _serve(loop, action: ir.Queue, args: argparse.Namespace) -> int:
    """The loop until SIGTERM, Ctrl-C or --timeout; its counters as one JSON line."""
    end = None if args.timeout is None else time.monotonic() + args.timeout
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    seen = f"first {action.first} packets of each flow" if action.first else "every packet"
    print(f"pfc decide: queue {action.num}, {seen}, "
          f"{'bypass' if action.bypass else 'fail closed'}, decider {args.decider}, "
          f"pid {os.getpid()}", file=sys.stderr, flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        loop.run(lambda: bool(stopping) or (end is not None and time.monotonic() > end))
    print(json.dumps(loop.stats.as_dict()), flush=True)
    return 0


DECIDE = Command("decide", "the user-space decider of a policy's `queue` rules",
                 __doc__.split("\n\n", 1)[1].replace("``", "`"), _args, _decide)
