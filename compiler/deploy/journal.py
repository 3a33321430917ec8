"""Loads as transactions: the intent of a load is written before the kernel changes.

A load writes an *intent* (``NETNS/DEV/TARGET.intent`` beside the record, atomically)
before it touches the kernel: the target, device and namespace, what the kernel held
before (``old``: program id and tag, nft table handle and rule handles, iptables
chains per family and ipsets) and what the load is putting there (``new``), with the
record to commit. Then it swaps, writes the record and deletes the intent. A load,
unload or status that finds an intent (its writer died: SIGKILL, power, a crash)
looks at the kernel and finishes the load (the kernel holds the new policy: the
record is written and the old policy's leftovers removed) or rolls it back (the
kernel holds the old policy: what the dead load had created is removed), and says
which (:func:`pfc.deploy.load.recover`). Every step runs under the state lock, so an
intent found under the lock is never a load still running.

Every commit point of a load, a ``pfc set`` and an ``apply`` is a named phase boundary
(:func:`point`). For the tests: ``PFC_TEST_KILL_AT=PHASE`` (or ``PHASE#N``, its Nth
passage) makes the process SIGKILL itself there, and ``PFC_TEST_TRACE=FILE`` appends
each boundary passed to FILE, one a line (so a test can kill a command at every point
it has); otherwise one dictionary lookup per boundary.

Room: after writing the intent, a load reserves twice its size in the state directory
(:func:`pfc.deploy.state.reserve`) before it changes the kernel, so a directory that
fills up meanwhile still takes the record of what the kernel holds.
"""

from __future__ import annotations

import collections
import json
import os
import secrets
import signal
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime

from pfc.deploy import state

KILL_ENV, TRACE_ENV = "PFC_TEST_KILL_AT", "PFC_TEST_TRACE"
RESERVE = ".reserve"  # a load's reserved room, beside its intent
_SEED = secrets.token_hex(6)
_passed: collections.Counter = collections.Counter()


def token() -> str:
    """This process (a fork is another one): its own unfinished work is not stale."""
    return f"{os.getpid()}-{_SEED}"


def point(phase: str) -> None:
    """A phase boundary: SIGKILL this process if the tests asked for it here."""
    if kill_requested(phase):
        os.kill(os.getpid(), signal.SIGKILL)


def kill_requested(phase: str) -> bool:
    """Count (and trace) a passage of ``phase``; whether the tests want it killed."""
    want, trace = os.environ.get(KILL_ENV), os.environ.get(TRACE_ENV)
    if not want and not trace:
        return False
    _passed[phase] += 1
    if trace:
        with open(trace, "a") as f:
            f.write(f"{phase}\n")
    name, _, nth = (want or "").partition("#")
    return name == phase and _passed[phase] == int(nth or 1)


@dataclass
class Intent:
    """An unfinished load: enough to finish it or to roll it back from the kernel."""

    target: str
    dev: str
    netns: str
    phase: str  # the last boundary passed: "begun", then each loader's own
    old: dict | None  # what the kernel held before (loader-defined identity)
    new: dict  # what this load puts there (loader-defined identity)
    record: dict  # the record to commit (``attach`` filled when it commits)
    started: str = field(default_factory=lambda: datetime.now(UTC).isoformat(
        timespec="seconds"))
    pid: int = field(default_factory=os.getpid)

    @property
    def policy(self) -> str:
        return str(self.record.get("policy", "?"))


def _path(netns: str, dev: str, target: str):
    return state.path(netns, dev, target, state.INTENT)


def write(intent: Intent) -> None:
    state.write_json(_path(intent.netns, intent.dev, intent.target), asdict(intent))


def read(netns: str, dev: str, target: str) -> Intent | None:
    """The unfinished load of (netns, dev, target), or None. A corrupt intent file
    (cut short by a crash before the rename: impossible; edited by hand) raises
    :class:`pfc.deploy.state.Unreadable`."""
    p = _path(netns, dev, target)
    try:
        data = json.loads(p.read_text())
        intent = Intent(**data)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError) as exc:
        raise state.Unreadable(netns, dev, target, p, str(exc).splitlines()[0][:200]) \
            from None
    if (intent.netns, intent.dev, intent.target) != (netns, dev, target):
        raise state.Unreadable(netns, dev, target, p, "it names another place")
    return intent


def clear(netns: str, dev: str, target: str) -> None:
    state.remove_file(_path(netns, dev, target))


def pending(netns: str | None = None, dev: str | None = None) -> list[tuple[str, str, str]]:
    """(netns, dev, target) of every unfinished load (of one namespace/device)."""
    return state.places(netns, dev, state.INTENT)


class Txn:
    """One load's journal, handed to the target's loader: :meth:`begin` before the
    first change to the kernel, :meth:`step` at each later boundary."""

    def __init__(self, record: state.Record):
        self.record = record
        self.intent: Intent | None = None

    def begin(self, old: dict | None, new: dict) -> None:
        """The intent written and room reserved, before the kernel changes
        (:class:`pfc.deploy.state.Unwritable` then: nothing was changed)."""
        r = self.record
        intent = Intent(r.target, r.dev, r.netns, "begun", old, new, r.to_json())
        p = _path(r.netns, r.dev, r.target)
        write(intent)
        try:
            state.reserve(state.path(r.netns, r.dev, r.target, RESERVE),
                          2 * p.stat().st_size + 16384)
        except OSError:  # (Unwritable): nothing changed yet
            clear(r.netns, r.dev, r.target)
            raise
        self.intent = intent
        point("begun")

    def step(self, phase: str, **new) -> None:
        """Record that ``phase`` was reached (and more of the new identity)."""
        assert self.intent is not None, "step() before begin()"
        self.intent.phase = phase
        self.intent.new.update(new)
        write(self.intent)
        point(phase)

    def clear(self) -> None:
        if self.intent is not None:
            clear(self.intent.netns, self.intent.dev, self.intent.target)
            self.intent = None
        state.release()
