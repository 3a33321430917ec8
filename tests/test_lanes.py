"""scripts/test's two lanes (tests/conftest.py SIDE_LANE)."""

from __future__ import annotations

from tests.conftest import SIDE_LANE
from tests.paths import ROOT


def test_side_lane_names_existing_test_files():
    """A renamed file must not fall out of its lane silently."""
    assert [f for f in SIDE_LANE if not (ROOT / f).is_file()] == []
