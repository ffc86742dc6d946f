"""Single-file checkpoints (A1111 / ComfyUI ``*.safetensors``): a tiny random SD1.x
pipeline saved as a diffusers folder and as one original-layout file loads to the
same model, from local files only; local paths are told from hub ids."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("diffusers")

from painted_skin.backend.diffusion import components as C  # noqa: E402

# ---- diffusers -> original (LDM) key layout, SD1.x: what A1111 and ComfyUI save ------

UNET_TOP = {"time_embedding.linear_1.": "time_embed.0.", "time_embedding.linear_2.":
            "time_embed.2.", "conv_in.": "input_blocks.0.0.", "conv_norm_out.": "out.0.",
            "conv_out.": "out.2."}
RESNET = [("norm1", "in_layers.0"), ("conv1", "in_layers.2"), ("norm2", "out_layers.0"),
          ("conv2", "out_layers.3"), ("time_emb_proj", "emb_layers.1"),
          ("conv_shortcut", "skip_connection")]
VAE_ATTN = {"group_norm.": "norm.", "to_q.": "q.", "to_k.": "k.", "to_v.": "v.",
            "to_out.0.": "proj_out."}


def unet_blocks() -> list[tuple[str, str]]:
    """(diffusers prefix, LDM prefix) of the SD1.x UNet: 4 levels of 2 resnets."""
    pairs = [("mid_block.attentions.0.", "middle_block.1."),
             *((f"mid_block.resnets.{j}.", f"middle_block.{2 * j}.") for j in range(2))]
    for i in range(4):
        for j in range(2):
            pairs.append((f"down_blocks.{i}.resnets.{j}.", f"input_blocks.{3 * i + j + 1}.0."))
            if i < 3:
                pairs.append((f"down_blocks.{i}.attentions.{j}.",
                              f"input_blocks.{3 * i + j + 1}.1."))
        for j in range(3):
            pairs.append((f"up_blocks.{i}.resnets.{j}.", f"output_blocks.{3 * i + j}.0."))
            if i > 0:
                pairs.append((f"up_blocks.{i}.attentions.{j}.", f"output_blocks.{3 * i + j}.1."))
        if i < 3:
            pairs.append((f"down_blocks.{i}.downsamplers.0.conv.",
                          f"input_blocks.{3 * (i + 1)}.0.op."))
            pairs.append((f"up_blocks.{i}.upsamplers.0.",
                          f"output_blocks.{3 * i + 2}.{1 if i == 0 else 2}."))
    return pairs


def vae_blocks() -> list[tuple[str, str]]:
    pairs = [("mid_block.attentions.0.", "mid.attn_1."),
             *((f"mid_block.resnets.{i}.", f"mid.block_{i + 1}.") for i in range(2))]
    for i in range(4):
        pairs += [(f"encoder.down_blocks.{i}.resnets.{j}.", f"encoder.down.{i}.block.{j}.")
                  for j in range(2)]
        pairs += [(f"decoder.up_blocks.{i}.resnets.{j}.", f"decoder.up.{3 - i}.block.{j}.")
                  for j in range(3)]
        if i < 3:
            pairs.append((f"encoder.down_blocks.{i}.downsamplers.0.",
                          f"encoder.down.{i}.downsample."))
            pairs.append((f"decoder.up_blocks.{i}.upsamplers.0.", f"decoder.up.{3 - i}.upsample."))
    return pairs


def renamed(key: str, pairs: list[tuple[str, str]]) -> str:
    for hf, ldm in pairs:
        if hf in key:
            return key.replace(hf, ldm)
    return key


def to_original_layout(unet: dict, vae: dict, text_encoder: dict) -> dict:
    """One state dict in the original layout, as ``from_single_file`` reads it."""
    out, ublocks, vblocks = {}, unet_blocks(), vae_blocks()
    for key, value in unet.items():
        for hf, ldm in UNET_TOP.items():
            key = ldm + key[len(hf):] if key.startswith(hf) else key
        if "resnets" in key:
            for hf, ldm in RESNET:
                key = key.replace(hf, ldm)
        out["model.diffusion_model." + renamed(key, ublocks)] = value
    for key, value in vae.items():
        key = renamed(key.replace("conv_shortcut", "nin_shortcut")
                      .replace("conv_norm_out", "norm_out"), vblocks)
        if ".attn_1." in key:
            for hf, ldm in VAE_ATTN.items():
                key = key.replace(hf, ldm)
            value = value[:, :, None, None] if value.ndim == 2 else value  # 1x1 convs
        out["first_stage_model." + key] = value
    for key, value in text_encoder.items():
        inner = key if key.startswith("text_model.") else "text_model." + key
        out["cond_stage_model.transformer." + inner] = value
    return {k: v.contiguous() for k, v in out.items()}


# ---- a tiny random SD1.x-shaped pipeline, as a folder and as one file ----------------

@pytest.fixture(scope="module")
def saved_model(tmp_path_factory) -> dict[str, Path]:
    import torch
    from diffusers import AutoencoderKL, StableDiffusionPipeline, UNet2DConditionModel
    from painted_skin.backend.diffusion.tiny import (
        tiny_components,
        tiny_tokenizer,
    )
    from safetensors.torch import save_file
    from transformers import CLIPTextConfig, CLIPTextModel

    root = tmp_path_factory.mktemp("single_file")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        unet = UNet2DConditionModel(block_out_channels=(8, 8, 16, 16), layers_per_block=2,
                                    sample_size=8, cross_attention_dim=32, norm_num_groups=4,
                                    attention_head_dim=2)
        vae = AutoencoderKL(block_out_channels=[4, 4, 8, 8], layers_per_block=2,
                            down_block_types=["DownEncoderBlock2D"] * 4,
                            up_block_types=["UpDecoderBlock2D"] * 4, latent_channels=4,
                            norm_num_groups=2)
        text_encoder = CLIPTextModel(CLIPTextConfig(
            bos_token_id=0, eos_token_id=2, hidden_size=32, intermediate_size=37,
            num_attention_heads=4, num_hidden_layers=2, pad_token_id=1, vocab_size=1000))
    pipe = StableDiffusionPipeline(unet=unet, vae=vae, text_encoder=text_encoder,
                                   tokenizer=tiny_tokenizer(),
                                   scheduler=tiny_components(n_controlnets=0,
                                                             image_encoder=False).scheduler,
                                   safety_checker=None, feature_extractor=None,
                                   requires_safety_checker=False)
    pipe.save_pretrained(root / "folder")
    config = root / "config"  # the configs only: the weights must come from the file
    shutil.copytree(root / "folder", config)
    for weights in config.rglob("*.safetensors"):
        weights.unlink()
    checkpoint = root / "ckpt" / "tiny-sd15.safetensors"
    checkpoint.parent.mkdir()
    save_file(to_original_layout(unet.state_dict(), vae.state_dict(),
                                 text_encoder.state_dict()), str(checkpoint))
    return {"root": root, "folder": root / "folder", "config": config,
            "checkpoint": checkpoint}


@pytest.fixture
def no_hub(monkeypatch):
    """Any hub access fails: offline, and an endpoint nobody answers."""
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")


def write_registry(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def paint(components: C.Components):
    """A 2-step 64² image from the loaded components (fixed seed)."""
    import torch
    from diffusers import StableDiffusionPipeline

    pipe = StableDiffusionPipeline(unet=components.unet, vae=components.vae,
                                   text_encoder=components.text_encoder,
                                   tokenizer=components.tokenizer,
                                   scheduler=components.scheduler, safety_checker=None,
                                   feature_extractor=None, requires_safety_checker=False)
    return pipe("a knight", num_inference_steps=2, height=64, width=64, output_type="np",
                generator=torch.Generator().manual_seed(5)).images


@pytest.mark.slow  # ~15 s on 2 cores: two loads and two 2-step paints
def test_a_single_file_loads_the_same_model_as_its_folder(saved_model, tmp_path, no_hub,
                                                          monkeypatch):
    import numpy as np
    import torch

    reg = write_registry(tmp_path / "models.toml", f"""
[models.folder]
base = "{saved_model['folder'].as_posix()}"
local_files_only = true

[models.file]
base = "ckpt/tiny-sd15.safetensors"       # relative to where the backend runs
config = "{saved_model['config'].as_posix()}"
""")
    monkeypatch.setenv("PAINTED_SKIN_MODELS", str(reg))
    monkeypatch.chdir(saved_model["root"])
    models = C.load_registry()  # $PAINTED_SKIN_MODELS
    assert models["file"].base.is_single_file and not models["folder"].base.is_single_file
    assert C.check_weights(models["file"]) == []
    a, b = C.load_components(models["folder"]), C.load_components(models["file"])
    for part in ("unet", "vae", "text_encoder"):
        sa, sb = getattr(a, part).state_dict(), getattr(b, part).state_dict()
        assert sa.keys() == sb.keys(), part
        assert all(torch.equal(sa[k], sb[k]) for k in sa), part
    np.testing.assert_array_equal(paint(a), paint(b))


@pytest.mark.parametrize("ref, local, single", [
    ("~/models/dreamshaper_8.safetensors", True, True),
    ("models/dreamshaper_8.safetensors", True, True),    # relative, not there (yet)
    ("C:\\models\\dreamshaper_8.safetensors", True, True),
    ("D:/models/sd15", True, False),
    ("\\\\nas\\models\\sd15", True, False),
    ("./sd15", True, False),
    ("stable-diffusion-v1-5/stable-diffusion-v1-5", False, False),
    ("owner/name/sub/folder", False, False),
])
def test_local_paths_are_told_from_hub_ids(ref, local, single):
    src = C.Source(ref)
    assert (src.is_local, src.is_single_file) == (local, single)


def test_a_single_file_without_config_names_the_option(tmp_path, no_hub):
    checkpoint = tmp_path / "dreamshaper_8.safetensors"
    checkpoint.write_bytes(b"{}")
    entry = C.parse_entry("mine", {"base": str(checkpoint)})
    (line,) = C.check_weights(entry)
    assert "single-file checkpoint" in line and "config = " in line and "\n" not in line
    with pytest.raises(C.MissingWeights, match="config = "):
        C.load_components(entry)  # refused before diffusers is asked (it would go online)


def test_a_missing_file_or_incomplete_config_is_named(tmp_path):
    bare = tmp_path / "bare-config"  # a config folder without its tokenizer/
    for part in ("unet", "vae", "text_encoder", "scheduler"):
        (bare / part).mkdir(parents=True)
        (bare / part / "config.json").write_text("{}")
    (bare / "model_index.json").write_text("{}")
    entry = C.parse_entry("mine", {"base": str(tmp_path / "gone.safetensors"),
                                   "config": str(bare)})
    problems = C.check_weights(entry)
    assert len(problems) == 2
    assert "gone.safetensors" in problems[0] and "is not there" in problems[0]
    assert "lacks tokenizer" in problems[1]
