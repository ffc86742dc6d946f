"""Model registry (TOML), weight checks before a shot, loading (tiny random
components for tests: :mod:`.tiny`).

A registry file names, per model, where each component comes from: a hub id
(``owner/name``, read from the Hugging Face cache; downloaded only when online)
or a local folder/file. Example (``registry.toml`` beside this file)::

    [models.sd15]
    base = "stable-diffusion-v1-5/stable-diffusion-v1-5"   # unet, vae, text encoder, tokenizer
    scheduler = "lcm"
    controlnets = { depth = "lllyasviel/control_v11f1p_sd15_depth" }
    vae = "/models/my-vae"                                  # optional override
    loras = [{ source = "latent-consistency/lcm-lora-sdv1-5", scale = 1.0 }]
    ip_adapter = { source = "h94/IP-Adapter", subfolder = "models",
                   weight_name = "ip-adapter_sd15.safetensors",
                   image_encoder = "h94/IP-Adapter/models/image_encoder", scale = 0.6 }

    [models.my-finetune]                  # one A1111 / ComfyUI / Civitai checkpoint file
    base = "~/models/dreamshaper_8.safetensors"
    config = "~/models/sd15-config"       # a diffusers folder of the same architecture

A single-file base is read with diffusers' ``from_single_file``; ``config`` gives it
the component configs, tokenizer and scheduler (weights not needed), so nothing is
asked of the hub. SD 1.x and SDXL files are told apart by their key names
(:func:`single_file_arch`); an SDXL one needs an SDXL config folder (``text_encoder_2/``,
``tokenizer_2/``) and is loaded by :mod:`.sdxl_pipeline`.

:func:`check_weights` lists what is missing (which component, where it looked,
how to provide it) without loading anything; the backend calls it before a
shot starts. ``HF_HUB_OFFLINE=1`` or ``local_files_only = true`` in the entry
make every hub id resolve from the cache only.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CONTROL_KINDS = ("depth", "normal", "openpose")
PASS_OF_CONTROL = {"depth": "depth", "normal": "normal", "openpose": "skeleton"}
DEFAULT_REGISTRY = Path(__file__).with_name("registry.toml")
_PIPELINE_PARTS = ("unet", "vae", "text_encoder", "tokenizer", "scheduler")
#: A base that is one checkpoint file (A1111 / ComfyUI), not a diffusers folder.
SINGLE_FILE_TYPES = (".safetensors",)
_WEIGHT_FILE = re.compile(r"\.(safetensors|ckpt|bin|pt|pth)$", re.IGNORECASE)
_DRIVE = re.compile(r"^[A-Za-z]:[\\/]")  # C:\models\x, D:/models/x


class MissingWeights(RuntimeError):
    """Some component's weights cannot be found; ``problems`` lists them."""

    def __init__(self, model: str, problems: list[str]) -> None:
        self.problems = problems
        super().__init__(f"model {model!r} cannot load:\n  - " + "\n  - ".join(problems))


@dataclass(frozen=True)
class Source:
    """Where one component comes from: ``ref`` a hub id or a local path;
    ``subfolder`` inside it; ``weight_name`` a file inside (LoRA, IP-Adapter)."""

    ref: str
    subfolder: str | None = None
    weight_name: str | None = None

    @property
    def is_local(self) -> bool:
        """A path, not a hub id: absolute, ``~``, ``./``, a drive letter or a UNC path,
        a weight file's name, or anything that exists here (``models/sd15``)."""
        r = self.ref
        return (r.startswith(("/", ".", "~", "\\")) or bool(_DRIVE.match(r))
                or bool(_WEIGHT_FILE.search(r)) or os.path.exists(os.path.expanduser(r)))

    @property
    def is_single_file(self) -> bool:
        """A local single-file checkpoint (``*.safetensors``), loaded with
        ``from_single_file`` rather than ``from_pretrained``."""
        return self.is_local and not self.subfolder and \
            self.ref.lower().endswith(SINGLE_FILE_TYPES)

    @classmethod
    def parse(cls, value: Any) -> Source:
        if isinstance(value, str):
            return cls(value)
        if isinstance(value, dict) and isinstance(value.get("source"), str):
            return cls(value["source"], value.get("subfolder"), value.get("weight_name"))
        raise ValueError(f"a component is a string or a table with 'source', not {value!r}")


@dataclass(frozen=True)
class Lora:
    source: Source
    scale: float = 1.0
    name: str = ""


@dataclass(frozen=True)
class IPAdapter:
    source: Source
    image_encoder: Source | None = None
    scale: float = 0.6


@dataclass
class ModelEntry:
    """One model of the registry."""

    name: str
    base: Source
    controlnets: dict[str, Source] = field(default_factory=dict)
    vae: Source | None = None
    loras: list[Lora] = field(default_factory=list)
    ip_adapter: IPAdapter | None = None
    scheduler: str = "lcm"
    local_files_only: bool = False
    #: a diffusers folder with the configs of a single-file ``base`` (no weights needed)
    config: Source | None = None


def parse_entry(name: str, table: dict[str, Any]) -> ModelEntry:
    """A :class:`ModelEntry` from one ``[models.NAME]`` table."""
    if "base" not in table:
        raise ValueError(f"model {name!r} has no 'base'")
    cns = {}
    for kind, v in (table.get("controlnets") or {}).items():
        if kind not in CONTROL_KINDS:
            raise ValueError(f"model {name!r}: unknown controlnet {kind!r} "
                             f"(known: {', '.join(CONTROL_KINDS)})")
        cns[kind] = Source.parse(v)
    loras = []
    for i, lv in enumerate(table.get("loras") or []):
        src = Source.parse(lv)
        scale = float(lv.get("scale", 1.0)) if isinstance(lv, dict) else 1.0
        lname = lv.get("name", f"lora{i}") if isinstance(lv, dict) else f"lora{i}"
        loras.append(Lora(src, scale, lname))
    ip = table.get("ip_adapter")
    ipa = None
    if ip:
        enc = ip.get("image_encoder")
        ipa = IPAdapter(Source.parse(ip), Source.parse(enc) if enc else None,
                        float(ip.get("scale", 0.6)))
    return ModelEntry(name, Source.parse(table["base"]), cns,
                      Source.parse(table["vae"]) if table.get("vae") else None, loras, ipa,
                      str(table.get("scheduler", "lcm")), bool(table.get("local_files_only")),
                      Source.parse(table["config"]) if table.get("config") else None)


def load_registry(path: str | os.PathLike | None = None) -> dict[str, ModelEntry]:
    """Models of a registry file (default: ``$PAINTED_SKIN_MODELS`` or the
    example ``registry.toml`` beside this module)."""
    p = Path(path or os.environ.get("PAINTED_SKIN_MODELS") or DEFAULT_REGISTRY)
    with open(p, "rb") as f:
        data = tomllib.load(f)
    return {n: parse_entry(n, t) for n, t in (data.get("models") or {}).items()}


_REACH: dict[str, tuple[float, bool]] = {}  # endpoint -> (when probed, reachable)


def hub_reachable(timeout_s: float = 3.0) -> bool:
    """Whether the Hugging Face endpoint ($HF_ENDPOINT) answers a TCP connect (probed
    at most once a minute). Not online and not told so (HF_HUB_OFFLINE unset), the
    hub client retries each download for tens of seconds before failing: an OPEN
    then fails at once with the missing components instead. Behind a proxy (the
    *_PROXY variables) the hub is taken as reachable."""
    import socket
    import time
    from urllib.parse import urlsplit

    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY",
                                        "http_proxy", "ALL_PROXY", "all_proxy")):
        return True
    url = urlsplit(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host, port = url.hostname or "huggingface.co", url.port or (80 if url.scheme == "http"
                                                               else 443)
    seen = _REACH.get(f"{host}:{port}")
    if seen is not None and time.monotonic() - seen[0] < 60.0:
        return seen[1]
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
        ok = True
    except OSError:
        ok = False
    _REACH[f"{host}:{port}"] = (time.monotonic(), ok)
    return ok


def offline(entry: ModelEntry | None = None) -> bool:
    """True when hub ids must come from the cache (HF_HUB_OFFLINE or the entry)."""
    env = os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")
    return env or bool(entry and entry.local_files_only)


def _hub_cache() -> str:
    from huggingface_hub import constants

    return str(constants.HF_HUB_CACHE)


def resolve(src: Source) -> Path | None:
    """The local folder (or file) of ``src``: the path itself, or the hub
    cache's snapshot; None when not present locally. Never downloads."""
    if src.is_local:
        p = Path(os.path.expanduser(src.ref))
        return p if p.exists() else None
    parts = src.ref.split("/")
    repo, sub = "/".join(parts[:2]), "/".join(parts[2:])  # "owner/name/sub/dir" allowed
    try:
        from huggingface_hub import snapshot_download

        root = Path(snapshot_download(repo, local_files_only=True))
    except Exception:
        return None
    return root / sub if sub else root


def _has_weights(folder: Path) -> bool:
    return any(folder.glob("*.safetensors")) or any(folder.glob("*.bin"))


def check_source(kind: str, src: Source, need: str, entry: ModelEntry,
           probe_hub: bool = False) -> list[str]:
    """Problems of one component. ``need``: 'pipeline', 'model' or 'file';
    ``probe_hub``: a hub id to download counts as missing when the hub cannot be
    reached (a network probe: only off the server's I/O thread, i.e. when loading)."""
    root = resolve(src)
    where, how = _where_how(src)
    if root is None:
        if not src.is_local and not offline(entry):
            if not probe_hub or hub_reachable():
                return []  # downloaded when the model loads: when the session opens
            return [f"{kind}: not in the cache, and the Hugging Face hub cannot be reached "
                    f"from here to download it; looked in {where}; {how}"]
        return [f"{kind}: not found; looked in {where}; {how}"]
    folder = root / src.subfolder if src.subfolder else root
    missing: list[str] = []
    if need == "pipeline":
        for part in _PIPELINE_PARTS:
            sub = folder / part
            if not sub.is_dir():
                missing.append(f"{part}/")
            elif part in ("unet", "vae", "text_encoder") and not (
                    (sub / "config.json").is_file() and _has_weights(sub)):
                missing.append(f"{part}/ config.json or weights")
    elif need == "model":
        if not (folder / "config.json").is_file():
            missing.append("config.json")
        if not _has_weights(folder):
            missing.append("*.safetensors / *.bin weights")
    else:  # a weight file, or a folder holding it
        target = folder / src.weight_name if src.weight_name else folder
        if target.is_dir():
            ok = _has_weights(target)
        else:
            ok = target.is_file()
        if not ok:
            missing.append(str(src.weight_name or "*.safetensors"))
    if missing:
        return [f"{kind}: {folder} lacks {', '.join(missing)}; looked in {where}; {how}"]
    return []


#: What a single file's ``config`` folder must hold, per architecture, and where to get one.
_CONFIG_PARTS = {
    "sd1": ("model_index.json", "unet/config.json", "vae/config.json",
            "text_encoder/config.json", "tokenizer", "scheduler"),
    "sdxl": ("model_index.json", "unet/config.json", "vae/config.json",
             "text_encoder/config.json", "text_encoder_2/config.json", "tokenizer",
             "tokenizer_2", "scheduler"),
}
_ARCH_NAMES = {"sd1": "SD 1.x", "sdxl": "SDXL"}
_CONFIG_EXAMPLES = {
    "sd1": "`hf download stable-diffusion-v1-5/stable-diffusion-v1-5 --exclude '*.safetensors' "
           "'*.bin' '*.ckpt' --local-dir ~/models/sd15-config`",
    "sdxl": "`hf download stabilityai/stable-diffusion-xl-base-1.0 --exclude '*.safetensors' "
            "'*.bin' '*.onnx*' --local-dir ~/models/sdxl-config`",
}
#: A key only that architecture's original-layout checkpoints have (SDXL: the OpenCLIP
#: bigG encoder; SD 1.x: the CLIP-L encoder under ``cond_stage_model``).
_ARCH_KEY_PREFIXES = {"sdxl": "conditioner.embedders.1.model.",
                      "sd1": "cond_stage_model.transformer."}


def single_file_arch(path: str | os.PathLike) -> str | None:
    """``"sdxl"`` or ``"sd1"`` from a checkpoint's key names (its header only, not its
    tensors); None when the file cannot be read or is neither."""
    try:
        from safetensors import safe_open

        with safe_open(os.fspath(path), framework="numpy") as f:
            keys = list(f.keys())
    except Exception:
        return None
    for arch, prefix in _ARCH_KEY_PREFIXES.items():
        if any(k.startswith(prefix) for k in keys):
            return arch
    return None


def check_single_file(entry: ModelEntry, arch: str | None = None) -> list[str]:
    """Problems of a single-file base: the file, its architecture (``arch``: the one the
    pipeline paints with, ``"sd1"`` or ``"sdxl"``; None: whatever the file is), and the
    local ``config`` folder of that architecture that keeps ``from_single_file`` off the
    hub (without one it downloads the configs)."""
    path = Path(os.path.expanduser(entry.base.ref))
    problems = [] if path.is_file() else [
        f"base: the checkpoint file {entry.base.ref!r} is not there: put it there or "
        "point the registry's base at it"]
    found = single_file_arch(path) if path.is_file() else None
    if arch is not None and found is not None and found != arch:
        problems.append(f"base: {entry.base.ref!r} is an {_ARCH_NAMES[found]} checkpoint, not "
                        f"{_ARCH_NAMES[arch]}: paint it with the "
                        f"{'sdxl-controlnet' if found == 'sdxl' else 'sd15-controlnet'} "
                        "pipeline or point the registry's base at an "
                        f"{_ARCH_NAMES[arch]} checkpoint")
    arch = arch or found or "sd1"
    parts = _CONFIG_PARTS[arch]
    cfg = entry.config
    if cfg is None:
        listed = ", ".join(p.removesuffix("/config.json") + "/" for p in parts[1:])
        return [*problems, f"base: {entry.base.ref!r} is a single-file checkpoint: set "
                "config = \"<folder>\" in the registry entry to a local diffusers folder of "
                f"the same architecture ({_ARCH_NAMES[arch]}: model_index.json, {listed} "
                f"configs; weights not needed), e.g. {_CONFIG_EXAMPLES[arch]} once, online"]
    folder = resolve(cfg)
    if folder is None:
        return [*problems, f"config: not found; looked in {_where_how(cfg)[0]}; "
                           f"{_where_how(cfg)[1]}"]
    folder = folder / cfg.subfolder if cfg.subfolder else folder
    missing = [part for part in parts if not (folder / part).exists()]
    if missing:
        problems.append(f"config: {folder} lacks {', '.join(missing)} (the diffusers "
                        f"{_ARCH_NAMES[arch]} configs {entry.base.ref!r} is loaded with; "
                        f"make one with {_CONFIG_EXAMPLES[arch]})")
    return problems


def single_file_config(entry: ModelEntry, arch: str) -> str:
    """The local ``config`` folder of a single-file base (raises :class:`MissingWeights`
    when :func:`check_single_file` finds a problem: a folder removed since the check)."""
    cfg = entry.config
    folder = resolve(cfg) if cfg is not None else None
    if cfg is None or folder is None:
        raise MissingWeights(entry.name, check_single_file(entry, arch))
    return str(folder / cfg.subfolder if cfg.subfolder else folder)


def check_weights(entry: ModelEntry, probe_hub: bool = False,
                  arch: str | None = None) -> list[str]:
    """What keeps ``entry`` from loading — one line per missing component,
    naming it, where it looked and how to provide it. Empty when all is there
    (or will be downloaded, when online; ``probe_hub``: and the hub answers — a
    network probe of up to a few seconds, for the loading thread). ``arch``: the
    pipeline's architecture (``"sd1"``, ``"sdxl"``) a single-file base must be; None:
    whatever it is. Loads nothing."""
    def check(kind: str, src: Source, need: str) -> list[str]:
        return check_source(kind, src, need, entry, probe_hub)

    problems = check_single_file(entry, arch) if entry.base.is_single_file else \
        check("base", entry.base, "pipeline")
    for kind, src in entry.controlnets.items():
        problems += check(f"controlnet {kind}", src, "model")
    if entry.vae is not None:
        problems += check("vae", entry.vae, "model")
    for lora in entry.loras:
        problems += check(f"lora {lora.name}", lora.source, "file")
    if entry.ip_adapter is not None:
        problems += check("ip_adapter", entry.ip_adapter.source, "file")
        if entry.ip_adapter.image_encoder is not None:
            problems += check("ip_adapter image_encoder", entry.ip_adapter.image_encoder,
                              "model")
    return problems


@dataclass
class Components:
    """Everything a :class:`RestylePipeline` needs, built outside it.

    ``controlnets`` maps a kind of :data:`CONTROL_KINDS` to its model (their
    order is :data:`CONTROL_KINDS`'). ``loras``/``ip_adapter`` are loaded into
    the UNet by the pipeline. ``ip_adapter.source`` may be a state dict
    (``{"image_proj": ..., "ip_adapter": ...}``) instead of a :class:`Source`.
    """

    unet: Any
    vae: Any
    text_encoder: Any
    tokenizer: Any
    scheduler: Any
    controlnets: dict[str, Any]
    image_encoder: Any = None
    feature_extractor: Any = None
    loras: list[Lora] = field(default_factory=list)
    ip_adapter: Any = None  # IPAdapter, or (state_dict, scale)
    scheduler_name: str = "lcm"
    name: str = ""


def source_ref(src: Source) -> tuple[str, dict[str, Any]]:
    """(path or repo id, kwargs) for from_pretrained."""
    if src.is_local:
        return os.path.expanduser(src.ref), ({"subfolder": src.subfolder} if src.subfolder else {})
    parts = src.ref.split("/")
    sub = "/".join([*parts[2:], *([src.subfolder] if src.subfolder else [])])
    return "/".join(parts[:2]), ({"subfolder": sub} if sub else {})


def _where_how(src: Source) -> tuple[str, str]:
    """(where a component was looked for, how to provide it)."""
    if src.is_local:
        return (f"the path {src.ref!r}",
                f"put the files at {src.ref!r} or point the registry at another folder")
    return (f"the Hugging Face cache {_hub_cache()!r} for {src.ref!r}",
            f"run `hf download {src.ref}` on a machine online (or unset HF_HUB_OFFLINE), "
            "or set a local folder in the registry")


def load_named(model: str, kind: str, src: Any, fn: Any, *args: Any, **kw: Any) -> Any:
    """``fn(*args, **kw)``; a failure (a corrupt file, no network for a download...)
    becomes :class:`MissingWeights` naming the component ``kind``, where and how
    (``src``: a :class:`Source`, or anything else, e.g. a state dict)."""
    try:
        return fn(*args, **kw)
    except Exception as e:
        if isinstance(src, Source):
            where, how = _where_how(src)
            tail = f"; looked in {where}; {how}"
        else:
            tail = ""
        raise MissingWeights(model, [f"{kind}: could not load ({type(e).__name__}: "
                                     f"{str(e)[:400]}){tail}"]) from e


def load_components(entry: ModelEntry, dtype: Any = None) -> Components:
    """Load ``entry``'s components (raises :class:`MissingWeights` first, listing
    every problem, when some cannot be found; and naming the component when one
    fails to load). Hub ids not in the cache are downloaded unless offline."""
    import torch
    from diffusers import AutoencoderKL, ControlNetModel, DDIMScheduler, UNet2DConditionModel
    from transformers import CLIPTextModel, CLIPTokenizer

    problems = check_weights(entry, probe_hub=True, arch="sd1")
    if problems:
        raise MissingWeights(entry.name, problems)
    dtype = dtype or torch.float32
    lfo = {"local_files_only": offline(entry)}
    base, kw = source_ref(entry.base)

    def sub(name: str) -> dict[str, Any]:
        s = f"{kw['subfolder']}/{name}" if kw else name
        return {"subfolder": s, **lfo}

    def part(cls: Any, name: str, **extra: Any) -> Any:
        return load_named(entry.name, f"base {name}", entry.base, cls.from_pretrained, base,
                          **sub(name), **extra)

    if entry.base.is_single_file:
        unet, vae, text_encoder, tokenizer, scheduler = load_single_file(entry, dtype)
    else:
        unet = part(UNet2DConditionModel, "unet", torch_dtype=dtype)
        vae = None if entry.vae is not None else part(AutoencoderKL, "vae", torch_dtype=dtype)
        text_encoder = part(CLIPTextModel, "text_encoder", torch_dtype=dtype)
        tokenizer = part(CLIPTokenizer, "tokenizer")
        scheduler = part(DDIMScheduler, "scheduler")
    if entry.vae is not None:
        vref, vkw = source_ref(entry.vae)
        vae = load_named(entry.name, "vae", entry.vae, AutoencoderKL.from_pretrained, vref,
                         torch_dtype=dtype, **vkw, **lfo)
    cns = {}
    for kind in CONTROL_KINDS:
        if kind in entry.controlnets:
            src = entry.controlnets[kind]
            cref, ckw = source_ref(src)
            cns[kind] = load_named(entry.name, f"controlnet {kind}", src,
                                   ControlNetModel.from_pretrained, cref, torch_dtype=dtype,
                                   **ckw, **lfo)
    image_encoder = feature_extractor = None
    if entry.ip_adapter is not None and entry.ip_adapter.image_encoder is not None:
        from transformers import CLIPVisionModelWithProjection

        src = entry.ip_adapter.image_encoder
        eref, ekw = source_ref(src)
        image_encoder = load_named(entry.name, "ip_adapter image_encoder", src,
                                   CLIPVisionModelWithProjection.from_pretrained, eref,
                                   torch_dtype=dtype, **ekw, **lfo)
        feature_extractor = image_processor(224)
    return Components(unet, vae, text_encoder, tokenizer, scheduler, cns, image_encoder,
                      feature_extractor, list(entry.loras), entry.ip_adapter, entry.scheduler,
                      entry.name)


def load_single_file(entry: ModelEntry, dtype: Any) -> tuple[Any, Any, Any, Any, Any]:
    """(unet, vae, text_encoder, tokenizer, scheduler) of a single-file base, read
    with its local ``config`` folder only (:func:`check_single_file` has passed)."""
    from diffusers import DDIMScheduler, StableDiffusionPipeline

    config = single_file_config(entry, "sd1")
    pipe = load_named(entry.name, "base (single file)", entry.base,
                      StableDiffusionPipeline.from_single_file,
                      os.path.expanduser(entry.base.ref), config=config,
                      local_files_only=True, torch_dtype=dtype, safety_checker=None,
                      requires_safety_checker=False)
    scheduler = DDIMScheduler.from_config(pipe.scheduler.config)
    return pipe.unet, pipe.vae, pipe.text_encoder, pipe.tokenizer, scheduler


def image_processor(size: int) -> Any:
    try:
        from transformers import CLIPImageProcessorPil as Proc  # no torchvision needed
    except ImportError:  # pragma: no cover - older transformers
        from transformers import CLIPImageProcessor as Proc
    return Proc(size={"shortest_edge": size}, crop_size={"height": size, "width": size})
