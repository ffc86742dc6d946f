"""The BVH reader under random and mutated input: it returns a clip or raises its own
:class:`BvhError` (one line), never anything else. A bounded run in the default suite;
``-m slow`` tries many more."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from painted_skin.addon.core.bvh import BvhClip, BvhError, bvh_to_skeleton_motion, parse_bvh
from test_bvh import SMALL

FAST = settings(max_examples=150, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow])
SLOW = settings(max_examples=4000, deadline=None,
                suppress_health_check=[HealthCheck.too_slow])

_TOKENS = ["{", "}", "ROOT", "JOINT", "End", "Site", "OFFSET", "CHANNELS", "MOTION",
           "HIERARCHY", "Frames:", "Frame", "Time:", "3", "6", "-1", "0", "1e300", "nan",
           "inf", "1e-300", "Xrotation", "Yrotation", "Zrotation", "Xposition", "9" * 40,
           "\ufeff", "\x00", "é", ""]


def _parse(data: str | bytes) -> None:
    try:
        clip = parse_bvh(data)
    except BvhError as e:
        assert "\n" not in str(e) and str(e)
        return
    assert isinstance(clip, BvhClip)
    assert clip.num_joints >= 1 and clip.frames.shape == (clip.num_frames, clip.num_channels)
    assert np.all(np.isfinite(clip.frames)) and np.all(np.isfinite(clip.offsets))
    assert 1.0 <= clip.fps <= 1000.0
    # Whatever the reader accepts, the retarget can read: Blender's bones, finite poses.
    skel, motion = bvh_to_skeleton_motion(clip)
    assert np.all(np.isfinite(skel.rest)) and np.all(np.isfinite(motion.pose))
    assert np.all(np.linalg.norm(skel.tails - skel.heads, axis=-1) > 0)


@st.composite
def mutated(draw) -> str:
    """SMALL with a few lines deleted, duplicated, truncated or given a stray token."""
    lines = SMALL.splitlines()
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(lines) - 1))
        op = draw(st.sampled_from(["delete", "dup", "cut", "token", "swap"]))
        if op == "delete" and len(lines) > 1:
            del lines[i]
        elif op == "dup":
            lines.insert(i, lines[i])
        elif op == "cut":
            lines[i] = lines[i][: draw(st.integers(0, max(0, len(lines[i]) - 1)))]
        elif op == "token":
            toks = lines[i].split() or [""]
            toks[draw(st.integers(0, len(toks) - 1))] = draw(
                st.sampled_from(_TOKENS) | st.text(max_size=8))
            lines[i] = " ".join(toks)
        else:
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
    return "\n".join(lines) + draw(st.sampled_from(["\n", "", "\r\n"]))


def _token_soup() -> st.SearchStrategy[str]:
    line = st.lists(st.sampled_from(_TOKENS), max_size=8).map(" ".join)
    return st.lists(line, max_size=30).map(lambda ls: "HIERARCHY\n" + "\n".join(ls))


@FAST
@given(mutated())
def test_mutated_bvh_returns_or_raises_bvh_error(text: str) -> None:
    _parse(text)


@FAST
@given(st.binary(max_size=300) | st.text(max_size=300) | _token_soup()
       | st.text(alphabet="ab/.\ufeff", min_size=200, max_size=600))
def test_random_input_returns_or_raises_bvh_error(data) -> None:
    _parse(data)


@pytest.mark.slow
@SLOW
@given(mutated() | _token_soup() | st.binary(max_size=2000) | st.text(max_size=2000)
       | st.text(alphabet="ab/.\ufeff", min_size=200, max_size=2000))
def test_bvh_reader_fuzz_long(data) -> None:
    _parse(data)
