"""Random input on what was added last: ``train-skin``'s arguments are judged before any
frame renders (each bad one a line naming it, never an exception of its own), and a
skin-model config of random field values loads or is one line of ModelFolderError,
never a traceback. Bounded in the default suite."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

FAST = settings(max_examples=80, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow,
                                       HealthCheck.function_scoped_fixture])

_FLOAT = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True),
                   st.sampled_from([0.0, -1.0, 0.01, 20.0]))
_INT = st.one_of(st.integers(-10**6, 10**6), st.sampled_from([0, 1, -5, 48, 4096, 4097]))


@FAST
@given(minutes=_FLOAT, steps=st.one_of(st.none(), _INT), samples=_INT, frames=_INT,
       size=st.sampled_from([0, 64, 100, 128, 256, 512, 1024]),
       device=st.one_of(st.sampled_from(["cpu", "cuda", "cuda:1", "mps", "xyz", "cuda:",
                                         "CPU", ""]), st.text(max_size=12)),
       resume=st.booleans())
def test_train_skin_arguments_are_judged_before_rendering(tmp_path_factory, minutes, steps,
                                                          samples, frames, size, device,
                                                          resume) -> None:
    pytest.importorskip("bpy")
    from painted_skin.addon.blender.skin.train import (
        MAX_FRAMES_PER_CLIP,
        MAX_SAMPLES,
        TrainRequest,
    )

    out = tmp_path_factory.mktemp("m") / "model"
    req = TrainRequest("demo", out, minutes=minutes, steps=steps, samples=samples,
                       frames_per_clip=frames, size=size, device=device, resume=resume)
    problems = req.problems()
    assert all(isinstance(p, str) and p and "\n" not in p for p in problems)
    good = ((minutes is None or (math.isfinite(minutes) and minutes > 0))
            and (steps is None or steps >= 1) and 1 <= samples <= MAX_SAMPLES
            and 1 <= frames <= MAX_FRAMES_PER_CLIP and size in (64, 128, 256, 512)
            and device in ("cpu", "cuda", "cuda:1", "mps") and not resume)
    assert (problems == []) == good, (problems, locals())


_VALUE = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-5, 5),
                                st.floats(allow_nan=False), st.text(max_size=8)),
                      lambda inner: st.one_of(st.lists(inner, max_size=3),
                                              st.dictionaries(st.text(max_size=4), inner,
                                                              max_size=3)), max_leaves=8)
_FIELDS = ["fingerprint", "layout", "rest_bounds", "head", "model", "graph", "weights",
           "required_passes", "size_multiple", "temporal", "diffusion_steps"]


@FAST
@given(changes=st.dictionaries(st.sampled_from(_FIELDS),
                               st.one_of(_VALUE, st.just("__drop__")), max_size=4))
def test_a_config_of_random_fields_loads_or_is_one_line(tmp_path_factory, changes) -> None:
    from painted_skin.backend.skin import runtime

    demo = Path(__file__).resolve().parents[2] / "rigs" / "skin_models" / "demo"
    folder = tmp_path_factory.mktemp("model")
    cfg = json.loads((demo / "config.json").read_text())
    for k, v in changes.items():
        if v == "__drop__":
            cfg.pop(k, None)
        else:
            cfg[k] = v
    (folder / "config.json").write_text(json.dumps(cfg))
    (folder / "model.onnx").write_bytes(b"x")  # read_config checks it is there, not ONNX
    try:
        got = runtime.read_config(folder)
    except runtime.ModelFolderError as e:
        assert "\n" not in str(e) and str(e)
        return
    assert isinstance(got, dict) and isinstance(got["layout"], list)
    assert (folder / got["graph"]).resolve().is_relative_to(folder.resolve())
