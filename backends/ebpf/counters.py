"""The eBPF programs' counters: one entry per rule and for the default in the per-CPU
array ``pfc_counters``, and the ready map of objects whose maps are filled at load time.

Layout (the contract with the loader, docs/ebpf.md "Counters"):

- ``pfc_counters``: ``BPF_MAP_TYPE_PERCPU_ARRAY``, key ``u32`` slot, value ``struct
  pfc_counter { u64 packets; u64 bytes; }``; sum the values over the possible CPUs.
  Slot ``n`` is the ``n``-th rule of the lowered policy (rule order), then the
  default, then, if the object has the ready map, ``not_ready``. A terminal rule counts
  the packets it decided, a ``count`` rule those it held on, the default the packets no
  terminal rule decided, ``not_ready`` the packets dropped before the maps were filled.
  Bytes are the frame's length after the Ethernet header (and a skipped tag) as the hook
  sees it, as the interpreter counts them (``packets.counted_bytes``).
- ``artifact.meta["counter_slots"]`` = ``{"rules": {"<rule index>": slot, ...},
  "default": slot, "not_ready": slot}`` (``not_ready`` only with the ready map); rule
  indexes are the lowered policy's (a run merged by ``group_runs`` keeps its first
  rule's index).
- ``pfc_ready`` (``READY_MAP``): ``BPF_MAP_TYPE_ARRAY``, one entry, key ``u32`` 0, value
  ``u32``; present exactly when the object has maps filled at load time
  (``meta["ready_map"]``). Until the value is 1 the program drops every packet
  (``XDP_DROP``, ``TC_ACT_SHOT``, socket 0) and counts it in ``not_ready``: an object
  attached without its maps filled (``ip link set dev D xdp obj F``) fails closed.
  :func:`pfc.backends.ebpf.maps.open_filled` sets it last.
- ``log`` rules have no slot (their output is the ring buffer ``pfc_events``), nor have
  ``mark ... to N`` rules (the interpreter counts neither); a program
  that sends events (``log`` rules, audited drops) has a ``lost`` slot after the others:
  the events the ring buffer had no room for (packets; bytes 0).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pfc.backends.base import DEFAULT_COUNTER
from pfc.frontend import ir

if TYPE_CHECKING:
    from pfc.kernel import bpf

COUNTERS_MAP = "pfc_counters"
READY_MAP = "pfc_ready"
DEFAULT = DEFAULT_COUNTER  # the key of the default's counter in what ``read`` returns
NOT_READY = "not_ready"
LOST = "lost"


@dataclass(frozen=True)
class Slots:
    """Where each counter lives in ``pfc_counters`` (module doc)."""

    rules: dict[int, int]  # rule index -> slot
    default: int
    not_ready: int | None  # None: no ready map
    lost: int | None = None  # None: the program sends no events

    @property
    def entries(self) -> int:
        """``max_entries`` of the array."""
        return self.default + 1 + (self.not_ready is not None) + (self.lost is not None)

    def meta(self) -> dict:
        """``artifact.meta["counter_slots"]`` (rule indexes as strings: it is JSON)."""
        out: dict = {"rules": {str(i): s for i, s in self.rules.items()},
                     "default": self.default}
        if self.not_ready is not None:
            out[NOT_READY] = self.not_ready
        if self.lost is not None:
            out[LOST] = self.lost
        return out


def slots(policy: ir.Policy, ready: bool, events: bool = False) -> Slots:
    """One slot per terminal or ``count`` rule in rule order (``log`` and ``mark ... to
    N`` rules apart: they count nothing), then the default, then ``not_ready``, then
    ``lost`` (a program that sends events)."""
    counted = (r for r in policy.rules if r.terminal or isinstance(r.action, ir.Count))
    rules = {r.index: n for n, r in enumerate(counted)}
    after = len(rules) + 1 + ready
    return Slots(rules, len(rules), len(rules) + 1 if ready else None,
                 after if events else None)


def read(meta: dict, table: bpf.Map) -> dict[int | str, tuple[int, int]]:
    """(packets, bytes) summed over CPUs for every rule (by rule index), the default
    (``DEFAULT``) and ``NOT_READY``, ``LOST`` when the object has them, from ``pfc_counters``."""
    where = meta["counter_slots"]
    out: dict[int | str, tuple[int, int]] = {
        int(index): _pair(table, slot) for index, slot in where["rules"].items()}
    out[DEFAULT] = _pair(table, where["default"])
    for extra in (NOT_READY, LOST):
        if extra in where:
            out[extra] = _pair(table, where[extra])
    return out


def _pair(table: bpf.Map, slot: int) -> tuple[int, int]:
    packets, nbytes = table.sum_u64(slot)
    return packets, nbytes
