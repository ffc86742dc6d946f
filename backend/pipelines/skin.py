"""The ``skin`` pipeline: a character's own skin model paints its passes (no torch).

Options::

    model: "demo"        a name of the skin-model registry (backend.skin.registry:
                         $PAINTED_SKIN_SKIN_MODELS or the example beside it; a client
                         cannot make the backend read a path of its choosing)
    character: {...}     the scene character's fingerprint (mesh names, vertex counts):
                         a model trained for another character is refused on OPEN
    temporal: true|false with a temporal model (default true): feed the previous
                         output warped by the motion pass; false paints every frame fresh
    engine: "onnx"|"torch"  what runs the network (default onnx: onnxruntime, its best
                         provider for the backend's device -- TensorRT, CUDA, CPU);
                         torch needs torch and the folder's weights.safetensors
    look: "ill" | {"young": 0.3, "old": 0.7}
                         a look of a multi-look model folder (painted-skin learn-look
                         --look NAME), or a mix of looks by weight; default the base
    stabilize: 0..<1     with the temporal chain: how strongly each pixel keeps the
                         previous output where the two nearly agree (default 0: the
                         network's own frames; true: 0.5) -- for a model that flickers;
                         it lags the light on a turning body
                         (:mod:`painted_skin.backend.skin.stabilize`)

A temporal model keeps the previous frame's output and depth in the session
state; a client that resumes a shot carries them back (``carry_rgb``,
``carry_depth``) and the chain continues exactly as if uninterrupted.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from ..diffusion.options import device_problem
from ..skin import engines, features, registry, runtime, stabilize
from .base import Cancelled, StepCallback, files_identity

LOAD_KEYS = ("model", "engine")
LOAD_DEFAULTS = {"model": registry.DEFAULT_MODEL, "engine": "onnx"}
_RUNTIME = {"onnx": "onnxruntime", "torch": "torch"}  # what device_problem checks
log = logging.getLogger(__name__)


class DeviceUnavailable(ValueError):
    """The backend's device cannot run the skin model; the message names the fix."""


def _folder(options: dict[str, Any]):
    return registry.resolve(options.get("model", registry.DEFAULT_MODEL))


def model_names() -> list[str]:
    """The skin models the backend serves by name (its registry)."""
    return list(registry.load_registry())


def check(options: dict[str, Any]) -> list[str]:
    """What keeps ``options`` from serving (empty when they can): told on OPEN."""
    for key in ("path", "registry", "folder"):
        if key in options:
            return [f"option {key!r} is not accepted from clients: name a model of the "
                    f"registry (set {registry.ENV} where the backend runs)"]
    character = options.get("character")
    if character is not None and not isinstance(character, dict):
        return ["option 'character' must be the character's fingerprint (an object)"]
    temporal = options.get("temporal")
    if temporal not in (None, True, False):
        return [f"temporal {temporal!r} must be true or false"]
    try:
        stabilize.check_strength(options.get("stabilize"))
    except ValueError as e:
        return [str(e)]
    try:
        folder = _folder(options)
        cfg = runtime.read_config(folder)
        runtime.check_fingerprint(cfg, character, folder)
        engines.check_engine(options.get("engine"), cfg, folder)
    except ValueError as e:
        return [str(e)]
    try:
        runtime.look_weights(options.get("look"), runtime.look_names(folder))
    except ValueError as e:
        return [str(e)]
    if temporal is True and not cfg.get("temporal"):
        return [f"skin model {options.get('model', registry.DEFAULT_MODEL)!r} was trained "
                "without the temporal input: retrain it with --temporal, or drop 'temporal'"]
    return []


def model_identity(folder) -> str:
    """The digest of what a model folder paints with: its config, ONNX graph and
    safetensors weights, and its looks' (:func:`.base.files_identity`: their bytes,
    sampled above 8 MiB)."""
    files = []
    for look in runtime.look_names(folder):
        sub = folder if look == runtime.BASE_LOOK else folder / runtime.LOOKS_DIR / look
        graph = str(runtime.read_config(sub).get("graph", "model.onnx"))
        files += [sub / runtime.CONFIG, sub / graph, sub / "weights.safetensors"]
    return files_identity(files, prefix="skin", root=folder)


class SkinPipeline:
    """``__call__`` as in :mod:`painted_skin.backend.pipelines`."""

    name = "skin"

    def __init__(self, options: dict[str, Any], device: str = "cpu") -> None:
        engine = options.get("engine") or "onnx"
        # not a CPU run that looks like a GPU one
        problem = device_problem(device, _RUNTIME.get(engine, "onnxruntime"))
        if problem:
            raise DeviceUnavailable(f"the skin model cannot run on {problem}")
        folder = _folder(options)
        # What OPENED tells the client: the bytes the model paints with (read before the
        # load, so a folder retrained meanwhile is never mistaken for the loaded one).
        self.model_id = model_identity(folder)
        self.model = runtime.load_model(folder, options.get("character"), device,
                                        engine=engine)
        # the looks this session paints, loaded now: a broken one fails the OPEN, not a frame
        for look in runtime.look_weights(options.get("look"), self.model.looks):
            self.model.look_engine(look)
        # the server keeps a session state (and skips its cache) only for stateful pipelines
        self.stateful = self.model.temporal
        # what OPENED tells the client beside the model: one that learned other passes
        self.notice = runtime.passes_notice(self.model.config,
                                            str(options.get("model", registry.DEFAULT_MODEL)))
        if self.notice:
            log.warning("%s", self.notice)

    def _previous(self, passes: dict[str, np.ndarray], options: dict[str, Any],
                  frame: int | None, state: dict[str, Any] | None, shape: tuple[int, int]
                  ) -> tuple[np.ndarray, np.ndarray] | None:
        if (not self.stateful or state is None or frame is None
                or options.get("temporal", True) is False):
            return None
        prev, depth = state.get("rgb"), state.get("depth")
        if (state.get("frame") != frame - 1 or prev is None or depth is None
                or prev.shape != shape + (3,) or "motion" not in passes):
            return None
        return features.warp_previous_output(prev, passes["motion"], passes["depth"], depth)

    def __call__(self, passes: dict[str, np.ndarray], *, prompt: str = "",
                 negative_prompt: str = "", seed: int = 0, width: int, height: int,
                 refs: list[np.ndarray] | None = None, options: dict[str, Any] | None = None,
                 callback: StepCallback | None = None, frame: int | None = None,
                 state: dict[str, Any] | None = None) -> np.ndarray:
        options = options or {}
        if "mask" in passes and np.asarray(passes["mask"]).shape[:2] != (height, width):
            raise features.FeatureError(f"passes are {list(passes['mask'].shape[:2])}, the "
                                        f"session {height}x{width}: send passes of its size")
        prev = self._previous(passes, options, frame, state, (height, width))
        rgb = self.model.render(passes, prev, seed,
                                stabilize.check_strength(options.get("stabilize")),
                                look=options.get("look"))
        if "mask" in passes:  # the model paints the character; off it, Cycles' black film
            rgb = np.where(np.asarray(passes["mask"])[..., None] > 0, rgb, np.uint8(0))
        if callback is not None and not callback(1, 1):
            raise Cancelled("cancelled at step 1/1")
        if state is not None and self.stateful:
            state.update(frame=frame, rgb=rgb, depth=np.array(passes["depth"], np.float32))
        return rgb


def skin_factory(options: dict[str, Any], device: str) -> SkinPipeline:
    return SkinPipeline(options, device)
