"""The vocabulary of frame generation: what a policy talks about (:class:`Constants`,
one :class:`Aim` per rule), how frames are made (:class:`Options`) and where every random
choice comes from (:class:`Draw`: seeded ``random`` or hypothesis).

:mod:`pfc.oracle.gen` fills these from a policy; :mod:`pfc.oracle.genmix` builds frames
from them. Both import this module; neither imports the other's internals.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv6Address
from typing import Any

from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

DEFAULT_DST = bytes.fromhex("020000000002")  # locally administered unicast
DEFAULT_SRC = bytes.fromhex("020000000001")
BASE_PROTOS = (1, 6, 17, 58)


@dataclass(frozen=True)
class Constants:
    """What a policy talks about, extracted once; every tuple sorted and unique.

    ``aims`` holds one ``Aim`` per rule that has a protocol or matches.
    """

    v4: tuple[IPv4Address, ...] = ()
    v6: tuple[IPv6Address, ...] = ()
    ports: tuple[int, ...] = ()
    protos: tuple[int, ...] = BASE_PROTOS
    ttls: tuple[int, ...] = ()
    lens: tuple[int, ...] = ()
    icmp_types: tuple[int, ...] = ()
    flag_masks: tuple[int, ...] = ()
    payloads: tuple[tuple[int, bytes], ...] = ()
    aims: tuple[Aim, ...] = ()


@dataclass(frozen=True)
class Aim:
    """One rule's target: the IP versions and protocol it needs, and its own constants
    (kinds it does not talk about filled in from the whole policy's)."""

    versions: tuple[int, ...]
    proto: int | None
    constants: Constants


@dataclass(frozen=True)
class Options:
    """How frames are made: ``malformed=False`` gives only frames the kernel's IP input
    accepts (see ``well_formed_frames``); ``fragments=False`` leaves out IP fragments."""

    malformed: bool = True
    eth_dst: bytes = DEFAULT_DST
    eth_src: bytes = DEFAULT_SRC
    fragments: bool = True


# --------------------------------------------------------------------------- drawing

class Draw:
    """Every random choice the recipes make; ``RandomDraw`` and ``HypothesisDraw``."""

    def integer(self, lo: int, hi: int) -> int:
        raise NotImplementedError

    def chance(self, p: float) -> bool:
        raise NotImplementedError

    def blob(self, n: int) -> bytes:
        raise NotImplementedError


class RandomDraw(Draw):
    """Choices from a seeded ``random.Random``: deterministic and fast."""

    def __init__(self, rng: random.Random) -> None:
        self._random, self._bytes = rng.random, rng.randbytes

    def integer(self, lo: int, hi: int) -> int:
        return lo + int(self._random() * (hi - lo + 1))

    def chance(self, p: float) -> bool:
        return self._random() < p

    def blob(self, n: int) -> bytes:
        return self._bytes(n)


class HypothesisDraw(Draw):
    """Choices drawn by hypothesis; each shrinks to its simplest value (0, False,
    zero bytes)."""

    def __init__(self, draw: Callable[[SearchStrategy[Any]], Any]) -> None:
        self._draw = draw

    def integer(self, lo: int, hi: int) -> int:
        return self._draw(st.integers(lo, hi))

    def chance(self, p: float) -> bool:
        return self._draw(st.integers(0, 999)) >= 1000 - round(p * 1000)

    def blob(self, n: int) -> bytes:
        return self._draw(st.binary(min_size=n, max_size=n))
