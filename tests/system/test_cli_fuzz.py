"""The CLI's value parsers under random input: ``--frames`` (ranges, farm lists such as
``3,5-10`` and steps such as ``1-100x2``), ``--size``, ``--passes``
and ``--options`` (JSON text, .json or .toml file) give a value within bounds or one
line of bad input (exit 2), never an exception of their own. Bounded in the default
suite, more under ``-m slow``."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from painted_skin import cli
from painted_skin.addon.core.files.frame_ranges import (
    MAX_FRAME,
    FrameRangeError,
    describe,
    parse_frames,
)

FAST = settings(max_examples=200, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow])
SLOW = settings(max_examples=5000, deadline=None,
                suppress_health_check=[HealthCheck.too_slow])

_NUM = st.one_of(st.integers(-10**45, 10**45).map(str), st.sampled_from(
    ["", "-", "0", "007", "1e3", "٣", "１", " 1", "nan", "9" * 5000, "0x10"]))
_PART = st.one_of(st.tuples(_NUM, st.sampled_from(["-", " - ", "--", ""]), _NUM)
                  .map("".join),
                  st.tuples(st.integers(-50, 50), st.integers(-50, 50),
                            st.sampled_from(["x", "X", " x ", "x0", "x-", ""]),
                            st.sampled_from(["", "1", "2", "7", "0", "99999999"]))
                  .map(lambda t: f"{t[0]}-{t[1]}{t[2]}{t[3]}"))
frames_text = st.one_of(st.text(max_size=30), _PART,
                        st.lists(_PART, min_size=1, max_size=5).map(",".join),
                        st.text(alphabet="0123456789-,x ", max_size=30))
size_text = st.one_of(st.text(max_size=20),
                      st.tuples(_NUM, st.sampled_from(["x", "X", "×", ""]), _NUM)
                      .map("".join))
json_value = st.recursive(st.none() | st.booleans() | st.floats() | st.integers()
                          | st.text(max_size=10),
                          lambda kids: st.lists(kids, max_size=4)
                          | st.dictionaries(st.text(max_size=5), kids, max_size=4),
                          max_leaves=20)
options_text = st.one_of(st.text(max_size=60), json_value.map(json.dumps),
                         st.integers(1, 5000).map(lambda n: "[" * n + "]" * n),
                         st.integers(1, 5000).map(lambda n: '{"a":' * n + "1" + "}" * n))


def _one_line(e: Exception) -> None:
    assert str(e) and "\n" not in str(e) and len(str(e)) < 400


def check_frames(text: str) -> None:
    try:
        r = parse_frames(text)
    except FrameRangeError as e:
        _one_line(e)
        return
    assert len(r) >= 1 and -MAX_FRAME <= r[0] and r[-1] <= MAX_FRAME
    if len(r) < 10_000:  # increasing, each frame once; and written back, the same frames
        assert all(a < b for a, b in zip(r, r[1:], strict=False))
        assert list(parse_frames(describe(r))) == list(r)


def check_size(text: str) -> None:
    try:
        w, h = cli._parse_size(text)
    except cli.BadInput as e:
        _one_line(e)
        return
    assert cli.MIN_SIZE <= w <= cli.MAX_SIZE and cli.MIN_SIZE <= h <= cli.MAX_SIZE


def check_passes(text: str) -> None:
    try:
        passes = cli._parse_passes(text)
    except cli.BadInput as e:
        _one_line(e)
        return
    assert passes and all(p and p == p.strip() for p in passes)


def check_options(text: str, suffix: str | None = None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        if suffix is not None:  # the same text as a file's contents
            path = Path(tmp) / f"o{suffix}"
            path.write_text(text)
            text = str(path)
        try:
            data = cli._parse_options(text)
        except cli.BadInput as e:
            _one_line(e)
            return
    assert isinstance(data, dict)


@FAST
@given(frames_text)
def test_frames_parser(text: str) -> None:
    check_frames(text)


@FAST
@given(size_text, st.text(max_size=20))
def test_size_and_passes_parsers(size: str, passes: str) -> None:
    check_size(size)
    check_passes(passes)


@FAST
@given(options_text, st.sampled_from([None, ".json", ".toml"]))
def test_options_parser(text: str, suffix: str | None) -> None:
    check_options(text, suffix)


def test_farm_frame_lists() -> None:
    """The lists farm managers hand out: each frame once, in order; evenly spaced ones
    as a range (what --frames gave before lists)."""
    assert parse_frames("3,5-10") == (3, 5, 6, 7, 8, 9, 10)
    assert parse_frames("1-100x2") == range(1, 101, 2) and len(parse_frames("1-100x2")) == 50
    assert parse_frames("4-6,1-3") == range(1, 7) and parse_frames("1-3,2-4") == range(1, 5)
    assert describe(parse_frames("3,5-10")) == "3,5-10" and describe(range(1, 8, 3)) == "1-7x3"
    for text, words in (("1-9x0", "step"), ("1-3,", "FIRST-LAST"), ("1-3;4", "FIRST-LAST"),
                        ("5-1,7", "reversed"), (",".join(["1"] * 1001), "1000 parts"),
                        (",".join(["-1048574-1048574"] * 2), "overlap")):
        with pytest.raises(FrameRangeError, match=words):
            parse_frames(text)


def test_deep_nesting_and_huge_numbers_are_bad_input() -> None:
    for text in ("[" * 100_000, '{"a":' * 100_000, "9" * 5000):
        with pytest.raises(cli.BadInput, match="--options"):
            cli._parse_options(text)
    with pytest.raises(FrameRangeError, match="Blender's limit"):
        parse_frames("1-" + "9" * 5000)


@pytest.mark.slow
@SLOW
@given(frames_text, size_text, options_text, st.sampled_from([None, ".json", ".toml"]))
def test_cli_parsers_fuzz_long(frames: str, size: str, options: str, suffix) -> None:
    check_frames(frames)
    check_size(size)
    check_passes(frames)
    check_options(options, suffix)
