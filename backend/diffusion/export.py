"""Export a restyling model to ONNX, cached by (weights, shapes, precision, onnxruntime).

Graphs (static shapes for one frame size and batch; ``manifest.json`` lists
their inputs and outputs):

- ``unet_controlnets.onnx``: every ControlNet and the UNet as ONE graph (the
  pattern of diffusers' ``convert_stable_diffusion_controlnet_to_onnx.py``,
  onnxruntime's and NVIDIA's SD demos): inputs ``sample`` (B, 4, h, w),
  ``timestep`` (1,) float32, ``encoder_hidden_states`` (B, 77, D), ``scales``
  (n,) one conditioning scale per net, ``cond_0`` … ``cond_{n-1}`` (B, 3, H, W)
  control images in [0, 1]; inside, each net's residuals are scaled and summed
  (in the order of diffusers' ``MultiControlNetModel``) and fed to the UNet;
  output ``noise_pred`` (B, 4, h, w).
- ``text_encoder.onnx``: ``input_ids`` (1, 77) int64 -> ``last_hidden_state``.
- ``vae_encoder.onnx``: ``image`` (1, 3, H, W) in [-1, 1] -> ``moments``
  (1, 2·latent, h, w), the posterior's mean and log-variance (the sampling
  stays in torch, with the pipeline's generator).
- ``vae_decoder.onnx``: ``latent`` (1, 4, h, w) -> ``image`` (1, 3, H, W).
- ``image_encoder.onnx`` (when the components have one, for IP-Adapter):
  ``pixel_values`` -> ``image_embeds``.

Exporter: ``torch.onnx.export(dynamo=True)`` first (torch.export, non-strict),
falling back to the TorchScript exporter (``dynamo=False``, opset 17). Both work
here (torch 2.13, diffusers 0.42.1) and match PyTorch in ORT to ~5e-7; the
dynamo path is about 5–7× slower to export (10–16 s for the tiny UNet +
3 ControlNets against ~2 s), so the tests pass ``dynamo=False``.

Cache: ``<cache_dir>/<key>/`` where key = hash of every exported module's
config and state dict (LoRA weights and adapter scales included), the shapes,
the precision, the onnxruntime, torch and format versions. An existing folder
is reused without exporting; a new one is written to a temporary folder and
renamed into place (atomic: a crash never leaves a half-written cache entry).
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil
import tempfile
import time
import uuid
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

FORMAT_VERSION = 1
UNET = "unet_controlnets"
TEXT = "text_encoder"
VAE_ENC = "vae_encoder"
VAE_DEC = "vae_decoder"
IMAGE = "image_encoder"
stats = {"exports": 0, "graphs": 0}  # folders and graphs exported by this process


@dataclass(frozen=True)
class ExportSpec:
    """Static shapes and precision of one export."""

    height: int
    width: int
    batch: int = 1
    precision: str = "fp32"  # "fp16" needs a CUDA device to export on
    seq_len: int = 77

    def __post_init__(self) -> None:
        if self.precision not in ("fp32", "fp16"):
            raise ValueError(f"precision is fp32 or fp16, not {self.precision!r}")


def default_cache_dir() -> Path:
    """``$PAINTED_SKIN_ONNX_CACHE`` or ``~/.cache/painted_skin/onnx``."""
    env = os.environ.get("PAINTED_SKIN_ONNX_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "painted_skin" / "onnx"


def parse_size(text: str) -> tuple[int, int]:
    """``"512x512"`` -> (width, height), multiples of 8."""
    try:
        w, h = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise ValueError(f"size is WIDTHxHEIGHT, not {text!r}") from None
    if w <= 0 or h <= 0 or w % 8 or h % 8:
        raise ValueError(f"size {text!r}: width and height must be positive multiples of 8")
    return w, h


# ------------------------------------------------------------------ wrappers


def _modules():
    import torch

    class UNetControlNets(torch.nn.Module):
        """UNet + several ControlNets: residuals scaled per net, summed, fed to the UNet."""

        def __init__(self, unet: Any, controlnets: list[Any]) -> None:
            super().__init__()
            self.unet = unet
            self.controlnets = torch.nn.ModuleList(controlnets)

        def forward(self, sample: Any, timestep: Any, encoder_hidden_states: Any, scales: Any,
                    *conds: Any) -> Any:
            down = mid = None
            for i, (net, cond) in enumerate(zip(self.controlnets, conds, strict=True)):
                d, m = net(sample, timestep, encoder_hidden_states=encoder_hidden_states,
                           controlnet_cond=cond, conditioning_scale=scales[i], return_dict=False)
                if down is None:
                    down, mid = list(d), m
                else:
                    down = [a + b for a, b in zip(down, d, strict=True)]
                    mid = mid + m
            return self.unet(sample, timestep, encoder_hidden_states=encoder_hidden_states,
                             down_block_additional_residuals=down,
                             mid_block_additional_residual=mid, return_dict=False)[0]

    class TextEncoder(torch.nn.Module):
        def __init__(self, enc: Any) -> None:
            super().__init__()
            self.enc = enc

        def forward(self, input_ids: Any) -> Any:
            return self.enc(input_ids)[0]

    class VaeEncoder(torch.nn.Module):
        def __init__(self, vae: Any) -> None:
            super().__init__()
            self.vae = vae

        def forward(self, image: Any) -> Any:
            return self.vae.encode(image).latent_dist.parameters

    class VaeDecoder(torch.nn.Module):
        def __init__(self, vae: Any) -> None:
            super().__init__()
            self.vae = vae

        def forward(self, latent: Any) -> Any:
            return self.vae.decode(latent, return_dict=False)[0]

    class ImageEncoder(torch.nn.Module):
        def __init__(self, enc: Any) -> None:
            super().__init__()
            self.enc = enc

        def forward(self, pixel_values: Any) -> Any:
            return self.enc(pixel_values).image_embeds

    return UNetControlNets, TextEncoder, VaeEncoder, VaeDecoder, ImageEncoder


# ------------------------------------------------------------------ hashing


def _hash_module(h: Any, name: str, module: Any) -> None:
    import torch

    h.update(name.encode())
    cfg = getattr(module, "config", None)
    if cfg is not None:
        d = cfg.to_dict() if hasattr(cfg, "to_dict") else dict(cfg)
        d = {k: v for k, v in d.items() if not k.startswith("_")}  # _use_default_values: a set
        h.update(json.dumps(d, sort_keys=True, default=str).encode())
    h.update(type(module).__name__.encode())
    for key, t in module.state_dict().items():
        h.update(key.encode())
        h.update(str(tuple(t.shape)).encode() + str(t.dtype).encode())
        t = t.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        h.update(t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    # LoRA adapter scales and active adapters are not in the state dict
    for mname, m in module.named_modules():
        sc = getattr(m, "scaling", None)
        if isinstance(sc, dict) and sc:
            h.update(f"{mname}:{sorted(sc.items())}:{getattr(m, 'active_adapters', '')}".encode())


def _controlnets(components: Any) -> list[tuple[str, Any]]:
    from .components import CONTROL_KINDS

    return [(k, components.controlnets[k]) for k in CONTROL_KINDS if k in components.controlnets]


def model_hash(components: Any) -> str:
    """blake2b of every module that is exported (configs + weights + LoRA scales)."""
    h = hashlib.blake2b(digest_size=16)
    mods = [("unet", components.unet), *_controlnets(components), ("vae", components.vae),
            ("text_encoder", components.text_encoder)]
    if components.image_encoder is not None:
        mods.append(("image_encoder", components.image_encoder))
    for name, m in mods:
        _hash_module(h, name, m)
    return h.hexdigest()


def cache_key(components: Any, spec: ExportSpec, weights_hash: str | None = None) -> str:
    """The cache folder name of ``components`` exported at ``spec``."""
    import onnxruntime
    import torch

    parts = {"weights": weights_hash or model_hash(components), "spec": asdict(spec),
             "onnxruntime": onnxruntime.__version__, "torch": torch.__version__,
             "format": FORMAT_VERSION}
    digest = hashlib.blake2b(json.dumps(parts, sort_keys=True).encode(), digest_size=10)
    return (f"{components.name or 'model'}-{spec.width}x{spec.height}-b{spec.batch}-"
            f"{spec.precision}-{digest.hexdigest()}")


# ------------------------------------------------------------------ export


def _export_graph(module: Any, args: tuple[Any, ...], path: Path, input_names: list[str],
                  output_names: list[str], dynamo: bool | None) -> str:
    """Export one graph; returns the exporter that worked ("dynamo" or "torchscript")."""
    import torch

    errors = []
    for use_dynamo in ([True, False] if dynamo is None else [bool(dynamo)]):
        try:
            with warnings.catch_warnings(), torch.no_grad():
                warnings.simplefilter("ignore")
                if use_dynamo:
                    prog = torch.onnx.export(module, args, input_names=input_names,
                                             output_names=output_names, dynamo=True,
                                             external_data=True, verbose=False)
                    prog.save(str(path), external_data=_big(module))
                else:
                    torch.onnx.export(module, args, str(path), input_names=input_names,
                                      output_names=output_names, dynamo=False,
                                      opset_version=17, do_constant_folding=True)
            stats["graphs"] += 1
            return "dynamo" if use_dynamo else "torchscript"
        except Exception as e:  # noqa: BLE001 - try the other exporter
            errors.append(f"dynamo={use_dynamo}: {type(e).__name__}: {str(e)[:500]}")
            for p in path.parent.glob(path.name + "*"):
                p.unlink()
    raise RuntimeError(f"ONNX export of {path.name} failed:\n  " + "\n  ".join(errors))


def _big(module: Any) -> bool:
    """Over ~1.8 GB of weights: external data (protobuf's 2 GB limit)."""
    n = sum(p.numel() * p.element_size() for p in module.parameters())
    return n > 1_800_000_000


def export_components(components: Any, spec: ExportSpec, cache_dir: str | os.PathLike |
                      None = None, *, dynamo: bool | None = None, device: str | None = None,
                      force: bool = False, weights_hash: str | None = None) -> Path:
    """Export ``components`` (a :class:`~.components.Components`) at ``spec``;
    returns the cache folder (reused when it exists, unless ``force``).

    ``dynamo``: None tries the dynamo exporter then the TorchScript one; True or
    False uses only that one. fp16 exports a half copy on ``device`` (CUDA);
    fp32 exports the modules as they are (on their own device).
    """
    import onnxruntime
    import torch

    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    key = cache_key(components, spec, weights_hash)
    final = root / key
    if (final / "manifest.json").is_file() and not force:
        return final
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{key}-", dir=root))
    t0 = time.perf_counter()
    try:
        manifest = _export_into(tmp, components, spec, dynamo, device)
        manifest.update(key=key, onnxruntime=onnxruntime.__version__, torch=torch.__version__,
                        format=FORMAT_VERSION, export_s=round(time.perf_counter() - t0, 2))
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1))
        if final.exists():  # forced, or a half-written folder from an older version
            trash = root / f".old-{key}-{uuid.uuid4().hex[:8]}"
            os.replace(final, trash)
            shutil.rmtree(trash, ignore_errors=True)
        try:
            os.replace(tmp, final)
        except OSError:  # another process renamed its export first: keep that one
            if not (final / "manifest.json").is_file():
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    stats["exports"] += 1
    return final


def _export_into(folder: Path, comps: Any, spec: ExportSpec, dynamo: bool | None,
                 device: str | None) -> dict[str, Any]:
    import torch

    unet_cls, text_cls, enc_cls, dec_cls, img_cls = _modules()
    fp16 = spec.precision == "fp16"
    dev = torch.device(device or ("cuda" if fp16 else comps.unet.device.type))
    if fp16 and dev.type != "cuda":
        raise ValueError("fp16 export needs a CUDA device (ORT's CPU EP runs fp32)")
    dtype = torch.float16 if fp16 else torch.float32

    def prep(m: Any) -> Any:
        if m.dtype == dtype and m.device == dev:
            return m
        return copy.deepcopy(m).to(dev, dtype)

    kinds = [k for k, _ in _controlnets(comps)]
    nets = [prep(n) for _, n in _controlnets(comps)]
    unet = prep(comps.unet)
    vae = prep(comps.vae)
    f = 2 ** (len(vae.config.block_out_channels) - 1)
    if spec.height % f or spec.width % f:
        raise ValueError(f"size {spec.width}x{spec.height} is not a multiple of {f}")
    b, h, w = spec.batch, spec.height // f, spec.width // f
    lat_c = unet.config.in_channels
    dim = unet.config.cross_attention_dim
    g = torch.Generator().manual_seed(0)

    def rnd(*shape: int) -> Any:
        return torch.randn(*shape, generator=g).to(dev, dtype)

    graphs: dict[str, Any] = {}
    exporter: dict[str, str] = {}

    def run(name: str, module: Any, args: tuple[Any, ...], ins: list[str], outs: list[str]
            ) -> None:
        module.eval()
        exporter[name] = _export_graph(module, args, folder / f"{name}.onnx", ins, outs, dynamo)
        graphs[name] = {"file": f"{name}.onnx", "inputs": ins, "outputs": outs,
                        "shapes": {n: list(a.shape) for n, a in zip(ins, args, strict=True)}}

    cond_names = [f"cond_{i}" for i in range(len(nets))]
    run(UNET, unet_cls(unet, nets),
        (rnd(b, lat_c, h, w), torch.tensor([500.0], device=dev), rnd(b, spec.seq_len, dim),
         torch.full((len(nets),), 0.8, device=dev, dtype=dtype),
         *[torch.rand(b, 3, spec.height, spec.width, generator=g).to(dev, dtype)
           for _ in nets]),
        ["sample", "timestep", "encoder_hidden_states", "scales", *cond_names], ["noise_pred"])
    te = prep(comps.text_encoder)
    ids = torch.randint(0, te.config.vocab_size, (1, spec.seq_len), generator=g).to(dev)
    run(TEXT, text_cls(te), (ids,), ["input_ids"], ["last_hidden_state"])
    run(VAE_ENC, enc_cls(vae), (rnd(1, 3, spec.height, spec.width).clamp(-1, 1),),
        ["image"], ["moments"])
    run(VAE_DEC, dec_cls(vae), (rnd(1, vae.config.latent_channels, h, w),), ["latent"],
        ["image"])
    if comps.image_encoder is not None:
        enc = prep(comps.image_encoder)
        size = enc.config.image_size
        run(IMAGE, img_cls(enc), (rnd(1, 3, size, size),), ["pixel_values"], ["image_embeds"])
    return {"spec": asdict(spec), "kinds": kinds, "graphs": graphs, "exporter": exporter,
            "vae_scale_factor": f, "dtype": "float16" if fp16 else "float32"}
