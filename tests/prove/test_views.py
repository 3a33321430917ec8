"""What each hook sees (``pfc.prove.views``): the IPv4 header checksum as the hooks
that check it take it, and the witness repair the search relies on."""

from __future__ import annotations

import random

import z3

from pfc.oracle import packets
from pfc.prove import views
from pfc.prove.frame import Frame, concrete, solver, u32
from pfc.prove.rewrite import fold


def test_the_checksum_solved_for_its_word_is_the_sum_to_0xffff() -> None:
    """``checksum_word_ok`` is ``fold(S + c) == 0xffff`` for every S a header's other
    words can sum to (the version word makes S >= 0x4000) and every c: proved."""
    others, c = z3.BitVec("others", 32), u32(z3.BitVec("c", 16))
    check = solver()
    check.add(z3.UGE(others, 1), z3.ULE(others, 29 * 0xFFFF),
              (fold(others + c) == 0xFFFF) != views.checksum_word_ok(others, c))
    assert check.check() == z3.unsat


def test_a_repaired_header_verifies_and_a_broken_one_does_not() -> None:
    rng = random.Random(7)
    frame = Frame.fresh()
    seen = views.constraint("ip", frame)
    for _ in range(16):
        ihl = rng.randrange(5, 16)
        total = 4 * ihl + rng.randrange(0, 30)
        header = bytes([0x40 | ihl]) + bytes(rng.randrange(256) for _ in range(total - 1))
        header = header[:2] + total.to_bytes(2, "big") + header[4:6] + b"\0\0" + header[8:]
        data = views.repair("ip", bytes(12) + b"\x08\x00" + header)
        assert packets.ip_input_view(data) is not None  # the reference takes it too
        assert z3.is_true(z3.simplify(z3.substitute(seen, *concrete(frame, data))))
        broken = data[:24] + bytes([data[24] ^ 1]) + data[25:]
        assert z3.is_false(z3.simplify(z3.substitute(seen, *concrete(frame, broken))))
        assert packets.ip_input_view(broken) is None
