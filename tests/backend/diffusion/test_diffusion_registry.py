"""The model registry: parsing, weight checks before a shot, local loading."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("diffusers")

from painted_skin.backend.diffusion import components as C  # noqa: E402
from painted_skin.backend.diffusion import temporal as T  # noqa: E402
from painted_skin.backend.diffusion.tiny import tiny_components  # noqa: E402


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    from huggingface_hub import constants

    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


def test_example_registry_parses() -> None:
    reg = C.load_registry()
    sd = reg["sd15"]
    assert sd.base.ref == "stable-diffusion-v1-5/stable-diffusion-v1-5"
    assert set(sd.controlnets) == {"depth", "normal", "openpose"}
    assert sd.loras[0].name == "lcm" and sd.ip_adapter is not None
    assert sd.ip_adapter.source.weight_name == "ip-adapter_sd15.safetensors"
    assert reg["local-example"].local_files_only and reg["local-example"].scheduler == "tcd"


def test_missing_hub_weights_name_component_place_and_fix(empty_cache) -> None:
    problems = C.check_weights(C.load_registry()["sd15"])
    text = "\n".join(problems)
    for comp in ("base", "controlnet depth", "controlnet normal", "controlnet openpose",
                 "lora lcm", "ip_adapter", "ip_adapter image_encoder"):
        assert any(p.startswith(comp + ":") for p in problems), comp
    assert str(empty_cache) in text and "hf download lllyasviel/control_v11f1p_sd15_depth" in text
    with pytest.raises(C.MissingWeights, match="controlnet depth"):
        C.load_components(C.load_registry()["sd15"])


def test_online_hub_ids_are_not_problems(empty_cache, monkeypatch) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(C, "hub_reachable", lambda: True)
    assert C.check_weights(C.load_registry()["sd15"]) == []


def test_an_unreachable_hub_fails_at_once_naming_what_is_missing(empty_cache,
                                                                  monkeypatch) -> None:
    """Not told to be offline, but no network: no download retries for tens of
    seconds, the same clear list of missing components as offline."""
    import socket
    import time

    monkeypatch.delenv("HF_HUB_OFFLINE")
    for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "https://hub.invalid")
    C._REACH.clear()

    def no_network(*a, **k):
        raise OSError("unreachable")

    monkeypatch.setattr(socket, "create_connection", no_network)
    entry = C.load_registry()["sd15"]
    assert C.check_weights(entry) == []  # the OPEN's check on the I/O thread: no probe
    t0 = time.monotonic()
    problems = C.check_weights(entry, probe_hub=True)  # the load, on the compute thread
    assert time.monotonic() - t0 < 5
    assert any(p.startswith("controlnet depth:") and "cannot be reached" in p for p in problems)
    with pytest.raises(C.MissingWeights, match="cannot be reached"):
        C.load_components(entry)
    C._REACH.clear()


def test_bad_registry_entries(tmp_path) -> None:
    with pytest.raises(ValueError, match="no 'base'"):
        C.parse_entry("m", {})
    with pytest.raises(ValueError, match="unknown controlnet"):
        C.parse_entry("m", {"base": "a/b", "controlnets": {"canny": "x/y"}})


def test_local_folders_load_and_missing_files_are_named(tmp_path) -> None:
    from diffusers import StableDiffusionPipeline

    comps = tiny_components(3, n_controlnets=2, image_encoder=False)
    StableDiffusionPipeline(comps.vae, comps.text_encoder, comps.tokenizer, comps.unet,
                            comps.scheduler, None, None, requires_safety_checker=False
                            ).save_pretrained(tmp_path / "base")
    comps.controlnets["depth"].save_pretrained(tmp_path / "cn-depth")
    comps.controlnets["normal"].save_pretrained(tmp_path / "cn-normal")
    reg = tmp_path / "models.toml"
    reg.write_text(f"""
[models.tiny]
base = "{tmp_path / 'base'}"
scheduler = "lcm"
local_files_only = true
controlnets = {{ depth = "{tmp_path / 'cn-depth'}", normal = "{tmp_path / 'cn-normal'}" }}
""")
    entry = C.load_registry(reg)["tiny"]
    assert C.check_weights(entry) == []
    loaded = C.load_components(entry)
    from painted_skin.backend.diffusion.controlnet_pipeline import RestylePipeline

    shot = T.synthetic_shot(1, 32, 32)
    out = RestylePipeline(loaded).run(shot[0], seed=1, width=32, height=32)
    ref = RestylePipeline(comps).run(shot[0], seed=1, width=32, height=32)
    np.testing.assert_array_equal(out.image, ref.image)
    for f in (tmp_path / "cn-normal").glob("*.safetensors"):
        f.unlink()
    (tmp_path / "base" / "vae").rename(tmp_path / "base" / "vae-moved")
    problems = C.check_weights(entry)
    assert len(problems) == 2
    assert problems[0].startswith("base:") and "vae/" in problems[0]
    assert problems[1].startswith("controlnet normal:") and "weights" in problems[1]
    assert str(tmp_path / "cn-normal") in problems[1]


def test_factory_and_check_report_missing_models(tmp_path, empty_cache, monkeypatch) -> None:
    from painted_skin.backend.pipelines import diffusion

    reg = tmp_path / "r.toml"
    reg.write_text('[models.m]\nbase = "nobody/nothing"\n')
    monkeypatch.setenv("PAINTED_SKIN_MODELS", str(reg))  # the backend's own registry
    assert diffusion.check({"model": "other"})[0].startswith(
        "model 'other' is not in the registry")
    problems = diffusion.check({"model": "m"})
    assert problems and problems[0].startswith("base:") and "nobody/nothing" in problems[0]
    with pytest.raises(C.MissingWeights, match="base"):
        diffusion.sd15_controlnet({"model": "m"}, "cpu")
    # A client cannot point the backend at a file of its choosing, nor ask absurd work.
    assert "not accepted" in diffusion.check({"registry": "/etc/passwd"})[0]
    assert "1 to 100" in diffusion.check({"tiny": True, "steps": 10_000})[0]


@pytest.mark.parametrize("first", ["painted_skin.backend.diffusion.controlnet_pipeline",
                                   "painted_skin.backend.diffusion.sdxl_pipeline",
                                   "painted_skin.backend.pipelines",
                                   "painted_skin.bench.diffusion"])
def test_modules_import_in_any_order(first) -> None:
    """A fresh process importing any entry point first must not hit a circular import."""
    import subprocess
    import sys

    code = (f"import {first}; from painted_skin.backend import pipelines; "
            "print(pipelines.register_builtin())")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "sdxl-controlnet" in done.stdout


def test_importing_the_pipelines_registers_nothing_and_loads_no_torch() -> None:
    """The registry is filled by the server's (or the CLI's) explicit call: importing the
    package has no side effect, and costs no torch import (the echo backend in a stock
    Blender, and the server's start, stay light)."""
    import subprocess
    import sys

    code = ("import sys; from painted_skin.backend import pipelines; "
            "print(pipelines.names(), 'torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["[]", "False"]


@pytest.mark.parametrize("value, mode", [(None, None), (False, None), ("", None),
                                         ("off", None), ("none", None), (True, "first"),
                                         ("first", "first"), ("previous", "previous")])
def test_every_cross_frame_reader_agrees_on_its_values(value, mode) -> None:
    """The OPEN check, the parser the pipelines run and the server's cache rule read one
    vocabulary: what the check accepts the pipeline runs, and "off" is cacheable."""
    from painted_skin.backend.diffusion.options import option_problems, parse_cross_frame
    from painted_skin.backend.pipelines import may_cache

    assert option_problems({"cross_frame": value}) == []
    assert parse_cross_frame(value) == mode

    class Stateful:
        stateful = True

    assert may_cache(Stateful(), {"temporal": False, "cross_frame": value}) is (mode is None)


@pytest.mark.parametrize("value", ["sideways", 3, ["first"]])
def test_a_bad_cross_frame_is_told_on_open(value) -> None:
    from painted_skin.backend.diffusion.options import option_problems, parse_cross_frame

    (problem,) = option_problems({"cross_frame": value})
    assert "cross_frame" in problem and "first" in problem
    with pytest.raises(ValueError):
        parse_cross_frame(value)


@pytest.mark.parametrize("engine", ["torch", "onnx"])
def test_a_gpu_this_backend_cannot_use_is_refused_before_loading(engine) -> None:
    """``serve --device cuda`` on a machine whose torch (or onnxruntime) has no CUDA: the
    factory refuses with the fix in one line, before any weight loads (this machine has
    the CPU builds)."""
    import torch
    from painted_skin.backend.pipelines import diffusion

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    for factory in (diffusion.sd15_controlnet, diffusion.sdxl_controlnet):
        with pytest.raises(ValueError, match="--device cpu"):
            factory({"tiny": True, "engine": engine}, "cuda")
