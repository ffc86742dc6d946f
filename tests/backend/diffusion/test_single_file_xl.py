"""Single-file SDXL checkpoints (A1111 / ComfyUI ``*.safetensors``): a tiny random SDXL
saved as a diffusers folder and as one original-layout file (UNet, VAE, CLIP-L, OpenCLIP
bigG with fused q/k/v) loads to the same model and paints the same frame, from local
files only; a missing or SD 1.x config folder, or an SD 1.x file, is named in one line."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("diffusers")

from painted_skin.backend.diffusion import components as C  # noqa: E402
from painted_skin.backend.diffusion import sdxl_pipeline as X  # noqa: E402
from test_single_file import RESNET, UNET_TOP, VAE_ATTN  # noqa: E402
from test_single_file import no_hub as no_hub  # noqa: E402  (a fixture)

pytestmark = pytest.mark.usefixtures("no_hub")  # every test: any hub access fails

OPEN_CLIP = "conditioner.embedders.1.model."
CLIP_L = "conditioner.embedders.0.transformer."

# ---- diffusers -> original (LDM) key layout, SDXL: what A1111 and ComfyUI save -------


def unet_pairs(config: dict) -> list[tuple[str, str]]:
    """(diffusers prefix, LDM prefix) of an SDXL-style UNet of any depth (the numbering
    diffusers' ``convert_ldm_unet_checkpoint`` reads back)."""
    n, per = len(config["block_out_channels"]), config["layers_per_block"]
    down_attn = ["CrossAttn" in t for t in config["down_block_types"]]
    up_attn = ["CrossAttn" in t for t in config["up_block_types"]]
    pairs = [("mid_block.resnets.0.", "middle_block.0."),
             ("mid_block.attentions.0.", "middle_block.1."),
             ("mid_block.resnets.1.", "middle_block.2."),
             ("add_embedding.linear_1.", "label_emb.0.0."),
             ("add_embedding.linear_2.", "label_emb.0.2."),
             *UNET_TOP.items()]
    for i in range(n):
        for j in range(per):
            ldm = f"input_blocks.{i * (per + 1) + j + 1}."
            pairs.append((f"down_blocks.{i}.resnets.{j}.", ldm + "0."))
            if down_attn[i]:
                pairs.append((f"down_blocks.{i}.attentions.{j}.", ldm + "1."))
        for j in range(per + 1):
            ldm = f"output_blocks.{i * (per + 1) + j}."
            pairs.append((f"up_blocks.{i}.resnets.{j}.", ldm + "0."))
            if up_attn[i]:
                pairs.append((f"up_blocks.{i}.attentions.{j}.", ldm + "1."))
        if i < n - 1:
            pairs.append((f"down_blocks.{i}.downsamplers.0.conv.",
                          f"input_blocks.{(i + 1) * (per + 1)}.0.op."))
            pairs.append((f"up_blocks.{i}.upsamplers.0.",
                          f"output_blocks.{i * (per + 1) + per}.{2 if up_attn[i] else 1}."))
    return pairs


def vae_pairs(config: dict) -> list[tuple[str, str]]:
    n, per = len(config["block_out_channels"]), config["layers_per_block"]
    pairs = []
    for side in ("encoder", "decoder"):
        pairs += [(f"{side}.mid_block.attentions.0.", f"{side}.mid.attn_1."),
                  *((f"{side}.mid_block.resnets.{k}.", f"{side}.mid.block_{k + 1}.")
                    for k in range(2))]
    for i in range(n):
        pairs += [(f"encoder.down_blocks.{i}.resnets.{j}.", f"encoder.down.{i}.block.{j}.")
                  for j in range(per)]
        pairs += [(f"decoder.up_blocks.{i}.resnets.{j}.", f"decoder.up.{n - 1 - i}.block.{j}.")
                  for j in range(per + 1)]
        if i < n - 1:
            pairs += [(f"encoder.down_blocks.{i}.downsamplers.0.", f"encoder.down.{i}.downsample."),
                      (f"decoder.up_blocks.{i}.upsamplers.0.", f"decoder.up.{n - 1 - i}.upsample.")]
    return pairs


def prefixed(key: str, pairs: list[tuple[str, str]]) -> str:
    for hf, ldm in pairs:
        if key.startswith(hf):
            return ldm + key[len(hf):]
    return key


def open_clip_layout(text_encoder_2) -> dict:
    """CLIPTextModelWithProjection -> OpenCLIP bigG keys: fused ``in_proj`` q/k/v,
    ``ln_*``, ``mlp.c_fc``/``c_proj``, a transposed ``text_projection``."""
    import torch

    sd = {k.removeprefix("text_model."): v for k, v in text_encoder_2.state_dict().items()}
    out = {"token_embedding.weight": sd.pop("embeddings.token_embedding.weight"),
           "positional_embedding": sd.pop("embeddings.position_embedding.weight"),
           "ln_final.weight": sd.pop("final_layer_norm.weight"),
           "ln_final.bias": sd.pop("final_layer_norm.bias"),
           "text_projection": sd.pop("text_projection.weight").T}
    for n in range(text_encoder_2.config.num_hidden_layers):
        hf, ldm = f"encoder.layers.{n}.", f"transformer.resblocks.{n}."
        for kind in ("weight", "bias"):
            out[f"{ldm}attn.in_proj_{kind}"] = torch.cat(
                [sd.pop(f"{hf}self_attn.{p}_proj.{kind}") for p in "qkv"])
            for a, b in (("self_attn.out_proj", "attn.out_proj"), ("layer_norm1", "ln_1"),
                         ("layer_norm2", "ln_2"), ("mlp.fc1", "mlp.c_fc"),
                         ("mlp.fc2", "mlp.c_proj")):
                out[f"{ldm}{b}.{kind}"] = sd.pop(f"{hf}{a}.{kind}")
    sd.pop("embeddings.position_ids", None)
    assert not sd, f"unmapped OpenCLIP keys: {sorted(sd)}"
    return {OPEN_CLIP + k: v for k, v in out.items()}


def to_xl_original_layout(unet, vae, text_encoder, text_encoder_2) -> dict:
    """One SDXL state dict in the original layout, as ``from_single_file`` reads it."""
    out = {}
    upairs, vpairs = unet_pairs(unet.config), vae_pairs(vae.config)
    for key, value in unet.state_dict().items():
        if "resnets" in key:
            for hf, ldm in RESNET:
                key = key.replace(hf, ldm)
        out["model.diffusion_model." + prefixed(key, upairs)] = value
    for key, value in vae.state_dict().items():
        key = prefixed(key.replace("conv_shortcut", "nin_shortcut")
                       .replace("conv_norm_out", "norm_out"), vpairs)
        if ".attn_1." in key:
            for hf, ldm in VAE_ATTN.items():
                key = key.replace(hf, ldm)
            value = value[:, :, None, None] if value.ndim == 2 else value  # 1x1 convs
        out["first_stage_model." + key] = value
    for key, value in text_encoder.state_dict().items():
        out[CLIP_L + (key if key.startswith("text_model.") else "text_model." + key)] = value
    out.update(open_clip_layout(text_encoder_2))
    return {k: v.contiguous() for k, v in out.items()}


# ---- a tiny random SDXL, as a folder, as its configs and as one file -----------------

@pytest.fixture(scope="module")
def saved_xl(tmp_path_factory) -> dict[str, Path]:
    from diffusers import StableDiffusionXLPipeline
    from safetensors.torch import save_file

    root = tmp_path_factory.mktemp("single_file_xl")
    # the file tells its two text encoders apart by width (SDXL: 768 and 1280)
    comps = X.tiny_xl_components(0, n_controlnets=1, text_encoder_2_width=48)
    pipe = StableDiffusionXLPipeline(vae=comps.vae, text_encoder=comps.text_encoder,
                                     text_encoder_2=comps.text_encoder_2,
                                     tokenizer=comps.tokenizer, tokenizer_2=comps.tokenizer_2,
                                     unet=comps.unet, scheduler=comps.scheduler,
                                     add_watermarker=False)
    pipe.save_pretrained(root / "folder")
    comps.controlnets["depth"].save_pretrained(root / "cn-depth")
    config = root / "config"  # the configs only: the weights must come from the file
    shutil.copytree(root / "folder", config)
    for weights in config.rglob("*.safetensors"):
        weights.unlink()
    checkpoint = root / "ckpt" / "tiny-sdxl.safetensors"
    checkpoint.parent.mkdir()
    save_file(to_xl_original_layout(comps.unet, comps.vae, comps.text_encoder,
                                    comps.text_encoder_2), str(checkpoint))
    return {"root": root, "folder": root / "folder", "config": config,
            "checkpoint": checkpoint, "cn": root / "cn-depth"}


def registry(path: Path, saved: dict[str, Path], **file_entry: str) -> Path:
    """A registry with the folder model and the single-file one (``file_entry``
    overrides its keys; an empty value drops one)."""
    entry = {"base": saved["checkpoint"].as_posix(), "config": saved["config"].as_posix(),
             **file_entry}
    lines = [f'{k} = "{v}"' for k, v in entry.items() if v]
    cn = f'controlnets = {{ depth = "{saved["cn"].as_posix()}" }}'
    path.write_text(f'[models.folder]\nbase = "{saved["folder"].as_posix()}"\n'
                    f'local_files_only = true\n{cn}\n\n'
                    f'[models.file]\n' + "\n".join(lines) + f'\n{cn}\n')
    return path


def test_a_single_sdxl_file_loads_the_same_model_as_its_folder(saved_xl, tmp_path,
                                                               monkeypatch):
    import numpy as np
    import torch
    from painted_skin.backend.diffusion import temporal as T

    monkeypatch.setenv("PAINTED_SKIN_MODELS", str(registry(tmp_path / "m.toml", saved_xl)))
    assert X.check_xl({"model": "file"}) == []
    a, b = X.load_xl_components("folder"), X.load_xl_components("file")
    for part in ("unet", "vae", "text_encoder", "text_encoder_2"):
        sa, sb = getattr(a, part).state_dict(), getattr(b, part).state_dict()
        assert sa.keys() == sb.keys(), part
        assert all(torch.equal(sa[k], sb[k]) for k in sa), part
    assert b.tokenizer("a knight").input_ids == a.tokenizer("a knight").input_ids
    assert type(b.scheduler) is type(a.scheduler)
    shot = T.synthetic_shot(1, 64, 64)[0]
    frames = [X.RestyleXLPipeline(c, "cpu").run(shot, prompt="a painted knight", seed=3,
                                               width=64, height=64, options={"steps": 1}).image
              for c in (a, b)]
    np.testing.assert_array_equal(*frames)


def fake_checkpoint(path: Path, key: str) -> Path:
    """A checkpoint file holding one tensor named ``key``: the architecture is read
    from the key names."""
    import torch
    from safetensors.torch import save_file

    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({key: torch.zeros(1)}, str(path))
    return path


def test_a_single_sdxl_file_without_config_names_the_sdxl_configs(tmp_path):
    ckpt = fake_checkpoint(tmp_path / "juggernaut-xl.safetensors",
                           OPEN_CLIP + "positional_embedding")
    entry = C.parse_entry("mine", {"base": str(ckpt), "controlnets": {"depth": str(tmp_path)}})
    (line, *_) = X.check_xl_weights(entry, None)
    assert "config = " in line and "stabilityai/stable-diffusion-xl-base-1.0" in line
    assert "text_encoder_2/" in line and "\n" not in line
    assert C.check_weights(entry)[0] == line  # `painted-skin doctor`: from the file's keys


def test_an_sd15_config_for_an_sdxl_file_is_named(saved_xl, tmp_path, monkeypatch):
    sd15 = tmp_path / "sd15-config"
    shutil.copytree(saved_xl["config"], sd15)
    shutil.rmtree(sd15 / "text_encoder_2")
    shutil.rmtree(sd15 / "tokenizer_2")
    monkeypatch.setenv("PAINTED_SKIN_MODELS", str(registry(tmp_path / "m.toml", saved_xl,
                                                           config=sd15.as_posix())))
    (line,) = X.check_xl({"model": "file"})
    assert "lacks text_encoder_2/config.json, tokenizer_2" in line and "\n" not in line
    assert "stabilityai/stable-diffusion-xl-base-1.0" in line
    with pytest.raises(C.MissingWeights, match="lacks text_encoder_2"):
        X.load_xl_components("file")  # refused before diffusers is asked
    monkeypatch.setenv("PAINTED_SKIN_MODELS", str(registry(
        tmp_path / "m.toml", saved_xl, config=(tmp_path / "nowhere").as_posix())))
    (line,) = X.check_xl({"model": "file"})
    assert line.startswith("config: not found") and "nowhere" in line and "\n" not in line


def test_an_sd15_file_as_sdxl_and_an_sdxl_file_as_sd15_are_named(saved_xl, tmp_path):
    sd15 = fake_checkpoint(tmp_path / "dreamshaper_8.safetensors",
                           CLIP_L.replace("conditioner.embedders.0", "cond_stage_model")
                           + "text_model.embeddings.position_embedding.weight")
    cn = {"depth": saved_xl["cn"].as_posix()}
    entry = C.parse_entry("mine", {"base": str(sd15), "config": str(saved_xl["config"]),
                                   "controlnets": cn})
    (line,) = X.check_xl_weights(entry, None)
    assert "is an SD 1.x checkpoint, not SDXL" in line
    entry = C.parse_entry("mine", {"base": str(saved_xl["checkpoint"]),
                                   "config": str(saved_xl["config"]), "controlnets": cn})
    assert X.check_xl_weights(entry, None) == []
    (line,) = C.check_weights(entry, arch="sd1")
    assert "is an SDXL checkpoint, not SD 1.x" in line and "sdxl-controlnet" in line
    with pytest.raises(C.MissingWeights, match="is an SDXL checkpoint"):
        C.load_components(entry)  # the SD 1.5 pipeline's loader
