"""What a kernel run of a compiled policy observed, and the error for "cannot run here".

Every runner (``Backend.run``: the eBPF test runs, the packet-socket and netfilter labs)
returns an :class:`Observation`; :mod:`pfc.verifier.equiv` compares it with the reference
interpreter.
"""

from __future__ import annotations

from dataclasses import dataclass

from pfc.frontend import ir


@dataclass
class Observation:
    """What a target did with a list of frames, as a kernel run observed it.

    ``verdicts[i]`` is the verdict on ``frames[i]``; ``frames_out[i]`` the bytes that
    left the hook for a passed frame (None where not observed); ``counters`` the
    per-rule (packets, bytes) of every count rule after the run (None: not observable).
    """

    verdicts: list[ir.Verdict]
    frames_out: list[bytes | None]
    counters: dict[int, tuple[int, int]] | None = None
    # whole firewalls (v2): per frame, the reply a `reject` sent back out of the device
    # (None: none) and the packet's mark as it left the hook; None: not observed
    replies: list[bytes | None] | None = None
    marks: list[int] | None = None


class KernelUnavailable(RuntimeError):
    """A runner cannot run here (privileges, kernel feature); the message says which."""
