"""The ``cross_frame`` vocabulary is the wire's: the add-on's chain rule and the backend's
OPEN check read the same values, so a shot the backend anchors is never painted by the
add-on as independent frames (out of order, or resumed mid-chain)."""

from __future__ import annotations

import pytest
from painted_skin.wire.options import CrossFrameError, cross_frame_mode

OFF = [None, False, "", "off", "none", 0]
ON = [(True, "first"), ("first", "first"), ("previous", "previous")]
BAD = ["sideways", "First", 3, ["first"], "true"]


@pytest.mark.parametrize("value", OFF)
def test_off_values(value) -> None:
    assert cross_frame_mode(value) is None


@pytest.mark.parametrize("value, mode", ON)
def test_anchor_values(value, mode) -> None:
    assert cross_frame_mode(value) == mode


def test_true_takes_the_callers_default() -> None:
    assert cross_frame_mode(True, default="previous") == "previous"


@pytest.mark.parametrize("value", BAD)
def test_a_bad_value_names_the_accepted_ones(value) -> None:
    with pytest.raises(CrossFrameError, match=r"cross_frame .*first, previous.*off"):
        cross_frame_mode(value)
    assert issubclass(CrossFrameError, ValueError)


@pytest.mark.parametrize("value", [*OFF, *(v for v, _ in ON), *BAD])
def test_add_on_and_backend_agree(value) -> None:
    """The add-on's chain rule follows what the backend's OPEN check accepts."""
    from painted_skin.addon.blender.restyle.output import cross_frame_mode as addon_mode
    from painted_skin.addon.blender.restyle.output import is_chained
    from painted_skin.backend.diffusion.options import option_problems

    options = {"cross_frame": value, "temporal": False}
    problems = option_problems(options)
    if value in BAD:
        assert problems and "cross_frame" in problems[0]
        assert is_chained("sd15", options)  # refused on OPEN; never painted as independent
        return
    assert problems == []
    assert addon_mode(options) == cross_frame_mode(value)
    assert is_chained("sd15", options) is (cross_frame_mode(value) is not None)
