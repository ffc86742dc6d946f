"""Per-reference weights (``ref_weights``): the IP-Adapter sees the references' weighted
mean embedding, one image's tokens however many references (tiny random models, CPU)."""

from __future__ import annotations

import numpy as np
import pytest
from painted_skin.backend.diffusion.options import option_problems
from painted_skin.cli_commands import cli_ref_weights, merged_ref_weights
from painted_skin.wire.options import (
    MAX_REFS,
    RefWeightsError,
    normalized_ref_weights,
    ref_weights_problem,
)

H = W = 64
BAD = [("0.5", "not a list"), ([1, "a"], r"ref_weights\[1\] 'a' is not a number"),
       ([1, True], "is not a number"), ([1, float("nan")], "is not a number"),
       ([1, -0.5], "below 0"), ([0, 0.0], "all 0"),
       ([1.0] * (MAX_REFS + 1), f"at most {MAX_REFS}")]


@pytest.mark.parametrize("value, message", BAD)
def test_bad_weights_are_refused_in_one_line_on_open(value, message) -> None:
    (problem,) = option_problems({"ref_weights": value})
    assert "ref_weights" in problem and "\n" not in problem
    with pytest.raises(RefWeightsError, match=message):
        normalized_ref_weights(value, len(value) if isinstance(value, list) else 1)
    assert issubclass(RefWeightsError, ValueError)


def test_weights_must_match_the_references_count() -> None:
    assert option_problems({"ref_weights": [1, 0.5]}) == []
    assert ref_weights_problem({"ref_weights": [1, 0.5]}, 2) is None
    assert ref_weights_problem({}, 3) is None  # absent: equal weights
    problem = ref_weights_problem({"ref_weights": [1, 0.5]}, 3)
    assert problem is not None and "2 weights for 3 reference images" in problem


def test_normalised_weights_sum_to_one_and_default_to_equal() -> None:
    assert normalized_ref_weights([2, 1, 1], 3) == [0.5, 0.25, 0.25]
    assert normalized_ref_weights(None, 4) == [0.25] * 4
    assert normalized_ref_weights(None, 0) == []


def test_cli_weights_follow_the_ref_order() -> None:
    assert cli_ref_weights(None, 2) is None
    assert cli_ref_weights(["1", "0.5"], 2) == [1.0, 0.5]
    with pytest.raises(RefWeightsError, match="one --ref-weight per --ref"):
        cli_ref_weights(["1"], 2)
    with pytest.raises(RefWeightsError, match="--ref-weight 'heavy' is not a number"):
        cli_ref_weights(["heavy", "1"], 2)
    with pytest.raises(RefWeightsError, match="--ref-weight: .*below 0"):
        cli_ref_weights(["-1", "1"], 2)
    # a shot's saved references come first, the command line's after
    assert merged_ref_weights(None, 2, None, 1) is None
    assert merged_ref_weights(None, 2, [0.5], 1) == [1.0, 1.0, 0.5]
    assert merged_ref_weights([0.2], 1, None, 2) == [0.2, 1.0, 1.0]


# ---------------------------------------------------------------- the pipelines

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")

from painted_skin.backend.diffusion import temporal as T  # noqa: E402
from painted_skin.backend.diffusion.controlnet_pipeline import RestylePipeline  # noqa: E402
from painted_skin.backend.diffusion.tiny import random_ip_adapter, tiny_components  # noqa: E402

SHOT = T.synthetic_shot(1, H, W, speed=2)


def _comps():
    c = tiny_components(0)
    c.ip_adapter = (random_ip_adapter(c.unet, 32, seed=1, std=1.0), 1.0)  # a strong one
    return c


@pytest.fixture(scope="module")
def pipe() -> RestylePipeline:
    return RestylePipeline(_comps())


@pytest.fixture(scope="module")
def refs() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.integers(0, 256, (40, 40, 3), dtype=np.uint8) for _ in range(3)]


def _run(p, refs, **options):
    return p.run(SHOT[0], prompt="a knight", seed=3, width=W, height=H, refs=refs,
                 options={"steps": 2, **options}).image


def _encoded(p: RestylePipeline, refs) -> torch.Tensor:
    """Each reference's own image embedding, through the pipeline's encoder."""
    return torch.cat([p.image_embeds([r], cfg=False)[0][0] for r in refs])  # (n, D)


def test_a_zero_weight_drops_that_reference(pipe, refs) -> None:
    alone = _run(pipe, refs[:1])
    np.testing.assert_array_equal(_run(pipe, refs[:2], ref_weights=[1, 0]), alone)
    assert np.abs(_run(pipe, refs[:2]).astype(int) - alone).max() > 0  # the second counts


def test_the_embedding_is_the_weighted_mean_in_one_image_of_tokens(pipe, refs) -> None:
    each = _encoded(pipe, refs)
    assert float((each[0] - each[1]).abs().max()) > 1e-3  # distinct references
    (same,) = pipe.image_embeds(refs[:2], cfg=False, weights=[1, 1])
    assert same.shape == (1, 1, each.shape[1])
    torch.testing.assert_close(same[0, 0], each[:2].mean(0))
    (default,) = pipe.image_embeds(refs, cfg=False)  # absent: equal weights
    torch.testing.assert_close(default[0, 0], each.mean(0))
    (weighted,) = pipe.image_embeds(refs, cfg=False, weights=[2, 1, 0])
    torch.testing.assert_close(weighted[0, 0], (2 * each[0] + each[1]) / 3)
    (cfg,) = pipe.image_embeds(refs, cfg=True, weights=[2, 1, 0])
    assert cfg.shape == (2, 1, each.shape[1]) and not cfg[0].any()  # the unconditional half


def test_more_weight_moves_the_frame_toward_that_reference(pipe, refs) -> None:
    a, b = _run(pipe, refs[:1]).astype(int), _run(pipe, refs[1:2]).astype(int)
    toward_a = _run(pipe, refs[:2], ref_weights=[1, 0.1]).astype(int)
    assert np.abs(toward_a - a).mean() < np.abs(toward_a - b).mean()


def test_the_pipeline_refuses_weights_that_do_not_fit(pipe, refs) -> None:
    with pytest.raises(RefWeightsError, match="2 weights for 3 reference images"):
        _run(pipe, refs, ref_weights=[1, 1])
    with pytest.raises(RefWeightsError, match="below 0"):
        _run(pipe, refs[:2], ref_weights=[1, -1])


@pytest.mark.slow  # exports the graphs (~15 s on 2 cores)
def test_onnx_engine_takes_three_references_with_one_graph(refs, tmp_path) -> None:
    pytest.importorskip("onnxruntime")
    from painted_skin.backend.diffusion.onnx import pipeline as OP

    op = OP.OnnxRestylePipeline(_comps(), cache_dir=tmp_path, dynamo=False)
    tp = RestylePipeline(_comps())
    with pytest.raises(RefWeightsError, match="2 weights for 3"):  # told on OPEN
        op.prepare(width=W, height=H, options={"ref_weights": [1, 1]}, refs=refs)
    opts = {"ref_weights": [1, 0.5, 0.25]}
    op.prepare(width=W, height=H, options=opts, refs=refs)
    assert op.prepared(width=W, height=H, options=opts, refs=refs[:1])  # one graph for all
    a = _run(op, refs, **opts)
    b = _run(tp, refs, **opts)
    assert np.abs(a.astype(int) - b).max() <= 2  # the onnx engine's parity with torch
    assert [k[2] for k in op.onnx.engines] == [1]
