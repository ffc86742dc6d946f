"""Export a restyling model to ONNX, cached by (weights, shapes, precision, onnxruntime).

Graphs (static shapes for one frame size and batch; ``manifest.json`` lists
their inputs and outputs):

- ``unet_controlnets.onnx``: every ControlNet and the UNet as ONE graph (the
  pattern of diffusers' ``convert_stable_diffusion_controlnet_to_onnx.py``,
  onnxruntime's and NVIDIA's SD demos): inputs ``sample`` (B, 4, h, w),
  ``timestep`` (1,) float32, ``encoder_hidden_states`` (B, 77, D), ``scales``
  (n,) one conditioning scale per net, ``cond_emb_0`` … ``cond_emb_{n-1}`` the
  nets' conditioning embeddings (``control_embed``'s outputs); inside, each
  net's residuals are scaled and summed (in the order of diffusers'
  ``MultiControlNetModel``) and fed to the UNet; output ``noise_pred`` (B, 4,
  h, w). With an IP-Adapter (``ExportSpec.ip_images`` > 0) also
  ``image_embeds`` (B, images, D_img) and ``ip_scale`` (1,): the adapter's
  scale is an input, not a constant. A ControlNet-Union (SDXL) instead of
  several nets: one slot per control kind, ``scales`` per slot and also
  ``out_scale`` (1,), ``control_type`` (B, types) and ``control_idx`` (slots,)
  int64 (see ``UNetControlNets._union`` in :mod:`.export_wrappers`). The cross-frame variant
  (``ExportSpec.cross_frame``, its own cache folder ``…-xf-…``) adds the anchor
  frame's self-attention keys/values as inputs and the frame's own as outputs
  (:mod:`.cross_frame`).
- ``control_embed.onnx``: ``cond_0`` … (B, 3, H, W) control images in [0, 1]
  -> ``cond_emb_0`` …: each ControlNet's conditioning embedding, eight
  convolutions over the full-size image that do not depend on the step — run
  once a frame instead of once a step (about a quarter of a step's work at 256²).
- ``text_encoder.onnx``: ``input_ids`` (1, 77) int64 -> ``last_hidden_state``.
  SDXL (a UNet with ``text_time`` added embeddings): ``text_encoder.onnx`` and
  ``text_encoder_2.onnx`` -> ``output_0`` (hidden states; the second encoder's
  pooled projection) and ``penultimate`` (what SDXL's pipelines use), and the
  UNet graph also takes ``text_embeds`` (B, D) and ``time_ids`` (B, 6), fed to
  the ControlNets too.
- ``vae_encoder.onnx``: ``image`` (1, 3, H, W) in [-1, 1] -> ``moments``
  (1, 2·latent, h, w), the posterior's mean and log-variance (the sampling
  stays in torch, with the pipeline's generator).
- ``vae_decoder.onnx``: ``latent`` (1, 4, h, w) -> ``image`` (1, 3, H, W).
- ``image_encoder.onnx`` (when the components have one, for IP-Adapter):
  ``pixel_values`` -> ``image_embeds``.

Exact rewrites while exporting (the torch modules are restored after):
attention as onnxruntime's ``MultiHeadAttention`` node (:mod:`.attention`;
``ExportSpec.attention="onnx"`` keeps plain ops, for TensorRT), and the
upsampling convolutions on the small grid (:mod:`.rewrites`). The torch modules
the graphs are traced from: :mod:`.export_wrappers`.

Exporter: ``torch.onnx.export(dynamo=True)`` first (torch.export, non-strict),
falling back to the TorchScript exporter (``dynamo=False``, opset 17). Both work
here (torch 2.13, diffusers 0.42.1) and match PyTorch in ORT to ~1e-6; the
dynamo path is about 5–7× slower to export (10–16 s for the tiny UNet +
3 ControlNets against ~2 s), so the tests pass ``dynamo=False``.

Cache: ``<cache_dir>/<key>/`` where key = hash of every exported module's
config and state dict (LoRA weights and adapter scales included), the shapes,
the precision, the graph variant (cross-frame or plain: ``…-xf-…`` folders), the
onnxruntime, torch and format versions. An existing folder is reused without
exporting; a new one is written to a temporary folder and renamed into place
(atomic: a crash never leaves a half-written cache entry).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import os
import shutil
import tempfile
import time
import uuid
import warnings
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ....addon.core.files.atomic import plain_mode
from .export_wrappers import wrapper_modules

FORMAT_VERSION = 4  # 4: the prompt's cross-attention keys/values in their own graph
UNET = "unet_controlnets"
CONTROL = "control_embed"
TEXT = "text_encoder"
TEXT2 = "text_encoder_2"  # SDXL's second text encoder
VAE_ENC = "vae_encoder"
VAE_DEC = "vae_decoder"
IMAGE = "image_encoder"
PROMPT_KV = "prompt_kv"  # the prompt's cross-attention keys/values (.prompt_kv)
stats = {"exports": 0, "graphs": 0}  # folders and graphs exported by this process


@dataclass(frozen=True)
class ExportSpec:
    """Static shapes and precision of one export."""

    height: int
    width: int
    batch: int = 1
    precision: str = "fp32"  # "fp16" needs a CUDA device to export on
    seq_len: int = 77
    attention: str = "mha"  # "mha": MultiHeadAttention nodes (ORT CPU/CUDA); "onnx": plain
    ip_images: int = 0  # IP-Adapter reference images the UNet graph takes (0: no adapter)
    cross_frame: bool = False  # the UNet graph's cross-frame variant (:mod:`.cross_frame`)

    def __post_init__(self) -> None:
        if self.precision not in ("fp32", "fp16"):
            raise ValueError(f"precision is fp32 or fp16, not {self.precision!r}")
        if self.attention not in ("mha", "onnx"):
            raise ValueError(f"attention is mha or onnx, not {self.attention!r}")


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
    from ..components import CONTROL_KINDS

    return [(k, components.controlnets[k]) for k in CONTROL_KINDS if k in components.controlnets]


def model_hash(components: Any) -> str:
    """blake2b of every module that is exported (configs + weights + LoRA scales)."""
    h = hashlib.blake2b(digest_size=16)
    mods = [("unet", components.unet), *_controlnets(components), ("vae", components.vae),
            ("text_encoder", components.text_encoder)]
    if getattr(components, "union", None) is not None:
        mods.append(("controlnet_union", components.union))
    if getattr(components, "text_encoder_2", None) is not None:
        mods.append(("text_encoder_2", components.text_encoder_2))
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
    variant = "-xf" if spec.cross_frame else ""
    return (f"{components.name or 'model'}-{spec.width}x{spec.height}-b{spec.batch}-"
            f"{spec.precision}{variant}-{digest.hexdigest()}")


# ------------------------------------------------------------------ export


def _export_graph(module: Any, args: tuple[Any, ...], path: Path, input_names: list[str],
                  output_names: list[str], dynamo: bool | None) -> str:
    """Export one graph; returns the exporter that worked ("dynamo" or "torchscript")."""
    import torch

    from .external import torchscript_export

    errors = []
    for use_dynamo in ([True, False] if dynamo is None else [bool(dynamo)]):
        try:
            with warnings.catch_warnings(), torch.no_grad():
                warnings.simplefilter("ignore")
                if use_dynamo:
                    prog = torch.onnx.export(module, args, input_names=input_names,
                                             output_names=output_names, dynamo=True,
                                             external_data=True, verbose=False)
                    # Weights always in a side file: writing them inline serialises the
                    # whole protobuf holding the GIL (seconds for a 1 GB graph, during
                    # which the server could not answer heartbeats); external data is
                    # written in chunks (~0.2 s stall) and lifts protobuf's 2 GB limit.
                    prog.save(str(path), external_data=True)
                else:  # weights streamed to a side file, not serialised under the GIL
                    torchscript_export(module, args, path, input_names, output_names)
            stats["graphs"] += 1
            return "dynamo" if use_dynamo else "torchscript"
        except Exception as e:  # noqa: BLE001 - try the other exporter
            errors.append(f"dynamo={use_dynamo}: {type(e).__name__}: {str(e)[:500]}")
            for p in path.parent.glob(path.name + "*"):
                p.unlink()
    raise RuntimeError(f"ONNX export of {path.name} failed:\n  " + "\n  ".join(errors))


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
    with contextlib.suppress(OSError):  # a filesystem without modes: keep what it gave
        os.chmod(tmp, plain_mode(folder=True))  # a shared cache: readable per the umask
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

    from .attention import IPScale, fused_attention
    from .cross_frame import CrossFrameIO
    from .prompt_kv import PromptKVIO
    from .rewrites import subpixel_upsampling

    embed_cls, unet_cls, text_cls, enc_cls, dec_cls, img_cls = wrapper_modules()
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
    union = getattr(comps, "union", None)
    if union is not None:
        union = prep(union)
        kinds = _union_slots(union)
    unet = prep(comps.unet)
    vae = prep(comps.vae)
    f = 2 ** (len(vae.config.block_out_channels) - 1)
    if spec.height % f or spec.width % f:
        raise ValueError(f"size {spec.width}x{spec.height} is not a multiple of {f}")
    b, h, w = spec.batch, spec.height // f, spec.width // f
    g = torch.Generator().manual_seed(0)

    def rnd(*shape: int) -> Any:
        return torch.randn(*shape, generator=g).to(dev, dtype)

    graphs: dict[str, Any] = {}
    exporter: dict[str, str] = {}
    ip_scale = IPScale()
    fused = spec.attention == "mha"

    def run(name: str, module: Any, args: tuple[Any, ...], ins: list[str], outs: list[str],
            *modules: Any) -> None:
        module.eval()
        with (fused_attention(*modules, ip_scale=ip_scale, fused=fused),
              subpixel_upsampling(*modules)):
            exporter[name] = _export_graph(module, args, folder / f"{name}.onnx", ins, outs,
                                           dynamo)
        graphs[name] = {"file": f"{name}.onnx", "inputs": ins, "outputs": outs,
                        "shapes": {n: list(a.shape) for n, a in zip(ins, args, strict=True)}}

    embed_nets = [union] * len(kinds) if union is not None else nets
    conds = [torch.rand(b, 3, spec.height, spec.width, generator=g).to(dev, dtype)
             for _ in embed_nets]
    embed = embed_cls(embed_nets)
    with torch.no_grad():
        embs = embed(*conds)
    n = len(embed_nets)
    run(CONTROL, embed, tuple(conds), [f"cond_{i}" for i in range(n)],
        [f"cond_emb_{i}" for i in range(n)])
    args, names = _unet_inputs(comps, unet, union, spec, embs, (h, w), rnd, dev, dtype)
    xl = "time_ids" in names
    xf = CrossFrameIO() if spec.cross_frame else None
    pkv = PromptKVIO()
    wrapper = unet_cls(unet, nets, names, ip_scale, xl, union, xf, pkv)
    mods = [unet, *nets, *([] if union is None else [union])]
    with _unet_io(wrapper, args, mods, xf, pkv, fused, rnd) as (args, outs, kv, kv_args):
        run(UNET, wrapper, tuple(args), wrapper.names, outs, *mods)
        if kv_args:
            run(PROMPT_KV, kv, (args[wrapper.names.index("encoder_hidden_states")],),
                ["encoder_hidden_states"], [n for n, _ in kv_args])
    te = prep(comps.text_encoder)
    ids = torch.randint(0, te.config.vocab_size, (1, spec.seq_len), generator=g).to(dev)
    if xl:
        run(TEXT, text_cls(te, xl=True), (ids,), ["input_ids"], ["output_0", "penultimate"])
        run(TEXT2, text_cls(prep(comps.text_encoder_2), xl=True), (ids,), ["input_ids"],
            ["output_0", "penultimate"])
    else:
        run(TEXT, text_cls(te), (ids,), ["input_ids"], ["last_hidden_state"])
    run(VAE_ENC, enc_cls(vae), (rnd(1, 3, spec.height, spec.width).clamp(-1, 1),),
        ["image"], ["moments"], vae)
    run(VAE_DEC, dec_cls(vae), (rnd(1, vae.config.latent_channels, h, w),), ["latent"],
        ["image"], vae)
    if comps.image_encoder is not None:
        enc = prep(comps.image_encoder)
        size = enc.config.image_size
        run(IMAGE, img_cls(enc), (rnd(1, 3, size, size),), ["pixel_values"], ["image_embeds"])
    manifest = {"spec": asdict(spec), "kinds": kinds, "graphs": graphs, "exporter": exporter,
                "vae_scale_factor": f, "dtype": "float16" if fp16 else "float32", "xl": xl,
                "union": union is not None}
    if xf is not None:
        manifest["cross_frame_layers"] = xf.names
    return manifest


@contextlib.contextmanager
def _unet_io(wrapper: Any, args: list[Any], mods: list[Any], xf: Any, pkv: Any, fused: bool,
             rnd: Any) -> Iterator[tuple[list[Any], list[str], Any, list[tuple[str, Any]]]]:
    """Within: the UNet graph's lookups of the prompt's keys/values
    (:mod:`.prompt_kv`) and, with ``xf``, the cross-frame processors
    (:mod:`.cross_frame`), after a dry run that finds their layers and shapes;
    ``wrapper.names`` the graph's inputs. Yields (example inputs, output names, the
    prompt_kv module, its (output name, example) pairs)."""
    import torch

    from .cross_frame import cross_frame_export
    from .prompt_kv import key_name, prompt_kv_export, prompt_kv_module, settle, value_name

    names = wrapper.names
    ehs = args[names.index("encoder_hidden_states")]
    with contextlib.ExitStack() as stack:
        projections = stack.enter_context(prompt_kv_export(pkv, *mods))
        if xf is not None:
            xf.names = stack.enter_context(cross_frame_export(wrapper.unet, xf, fused))
        with torch.no_grad():
            wrapper.eval()(*args)
        kept = settle(pkv, *mods)
        outs = ["noise_pred"]
        if xf is not None:
            args, names, outs = _cross_frame_io(xf, args, names, rnd)
        kv = prompt_kv_module(projections, kept).eval()
        with torch.no_grad():
            kv_args = list(zip([n for j in kept for n in (key_name(j), value_name(j))],
                               kv(ehs), strict=True))
        at = max(i for i, n in enumerate(names) if n.startswith("cond_emb_")) + 1
        wrapper.names = [*names[:at], *(n for n, _ in kv_args), *names[at:]]
        yield [*args[:at], *(a for _, a in kv_args), *args[at:]], outs, kv, kv_args


def _union_slots(union: Any) -> list[str]:
    """The condition slots of a ControlNet-Union graph (one per control kind);
    refuses what the graph does not take."""
    from ..components import CONTROL_KINDS

    cfg = union.config
    if cfg.global_pool_conditions:
        raise NotImplementedError("ControlNet-Union with global_pool_conditions (guess mode) "
                                  "is not in the onnx graphs: use the torch engine")
    if cfg.controlnet_conditioning_channel_order != "rgb":
        raise ValueError("ControlNet-Union takes rgb conditions only (its config says "
                         f"{cfg.controlnet_conditioning_channel_order!r})")
    return list(CONTROL_KINDS)


def _unet_inputs(comps: Any, unet: Any, union: Any, spec: ExportSpec, embs: tuple[Any, ...],
                 latent_hw: tuple[int, int], rnd: Any, dev: Any, dtype: Any
                 ) -> tuple[list[Any], list[str]]:
    """Example inputs and input names of the UNet graph (see the module doc)."""
    import torch

    b, n = spec.batch, len(embs)
    args = [rnd(b, unet.config.in_channels, *latent_hw), torch.tensor([500.0], device=dev),
            rnd(b, spec.seq_len, unet.config.cross_attention_dim),
            torch.full((n,), 0.8, device=dev, dtype=dtype), *embs]
    names = ["sample", "timestep", "encoder_hidden_states", "scales",
             *[f"cond_emb_{i}" for i in range(n)]]
    if union is not None:  # output scale, control type (multi-hot), task index per slot
        args += [torch.ones(1, device=dev, dtype=dtype),
                 torch.ones(b, union.config.num_control_type, device=dev, dtype=dtype),
                 torch.arange(n, device=dev, dtype=torch.int64)]
        names += ["out_scale", "control_type", "control_idx"]
    if unet.config.addition_embed_type == "text_time":
        # SDXL: pooled text embeddings (text encoder 2's projection) and 6 time ids
        te2 = comps.text_encoder_2
        in_dim = unet.add_embedding.linear_1.in_features
        n_ids = (in_dim - te2.config.projection_dim) // unet.config.addition_time_embed_dim
        args += [rnd(b, te2.config.projection_dim),
                 torch.tensor([[spec.height, spec.width, 0, 0, spec.height, spec.width][:n_ids]]
                              * b, device=dev, dtype=dtype)]
        names += ["text_embeds", "time_ids"]
    if spec.ip_images:
        proj = getattr(unet, "encoder_hid_proj", None)
        if proj is None:
            raise ValueError("ip_images > 0 but the UNet has no IP-Adapter loaded")
        d_img = proj.image_projection_layers[0].image_embeds.in_features
        args += [rnd(b, spec.ip_images, d_img), torch.tensor([0.6], device=dev, dtype=dtype)]
        names += ["image_embeds", "ip_scale"]
    return args, names


def _cross_frame_io(xf: Any, args: list[Any], names: list[str], rnd: Any
                    ) -> tuple[list[Any], list[str], list[str]]:
    """The UNet graph's inputs and outputs with the cross-frame ones added
    (:mod:`.cross_frame`), after a dry run filled ``xf.out``."""

    from . import cross_frame as X

    one = args[0].new_ones(1)
    args = [*args, one]
    names = [*names, X.USE]
    outs = ["noise_pred"]
    for j in range(xf.layers):
        k, _ = xf.out[j]
        args += [rnd(*k.shape), rnd(*k.shape)]
        names += [X.key_in(j), X.value_in(j)]
        outs += [X.key_out(j), X.value_out(j)]
    return args, names, outs
