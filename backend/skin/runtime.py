"""Load a skin model folder and render frames with onnxruntime (numpy only, no torch).

:func:`load_model` checks everything a shot relies on before the first frame:
the folder's files, its format version, and that it was trained for this
character (the fingerprint the caller gives). Each problem is one line naming
the fix (:class:`ModelFolderError`, a ValueError).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from ...wire.passes import VALUES_VERSION, values_age
from . import FORMAT_VERSION, engines, features, sampling, stabilize

CONFIG, REPORT = "config.json", "report.json"
TRAIN_HINT = ("train one with `python -m painted_skin.backend.skin.train --frames DIR "
              "--out FOLDER` (--synthetic 400 instead of --frames: a demo on generated frames)")


#: A multi-look folder keeps each look as a model folder ``looks/NAME``; the folder's
#: own model is the look ``base`` (:mod:`.look` learns them).
LOOKS_DIR, BASE_LOOK = "looks", "base"
LOOK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
MAX_LOOKS = 64

MAX_CONFIG_BYTES = 1024 * 1024
# The config's fields and their JSON types (bool is an int in Python: listed apart).
CONFIG_FIELDS: dict[str, type | tuple[type, ...]] = {
    "fingerprint": dict, "layout": list, "rest_bounds": list, "head": str, "model": dict,
    "graph": str, "weights": str, "required_passes": list, "size_multiple": int,
    "temporal": bool, "diffusion_steps": int, "pass_version": int,
}
REQUIRED_FIELDS = ("layout", "rest_bounds", "graph")


class ModelFolderError(ValueError):
    """A model folder that cannot be used; the message names the fix."""


def read_config(folder: str | os.PathLike) -> dict[str, Any]:
    """The folder's config, checked for version and files (not the character)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ModelFolderError(f"skin model folder {str(folder)!r} does not exist: {TRAIN_HINT}")
    cfg_path = folder / CONFIG
    if not cfg_path.is_file():
        raise ModelFolderError(f"skin model folder {str(folder)!r} has no {CONFIG}: it is not "
                               f"a model folder (or half-copied); {TRAIN_HINT}")
    if cfg_path.stat().st_size > MAX_CONFIG_BYTES:
        raise ModelFolderError(f"{cfg_path} is over {MAX_CONFIG_BYTES // 1024} KiB: not a skin "
                               "model's config; re-export the model")
    try:
        cfg = json.loads(cfg_path.read_text())
    except RecursionError:
        raise ModelFolderError(f"{cfg_path} is nested too deeply: not a skin model's config; "
                               "re-export the model") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModelFolderError(f"{cfg_path} is unreadable ({e}): re-export the model") from None
    version = cfg.get("format_version") if isinstance(cfg, dict) else None
    if version != FORMAT_VERSION:
        raise ModelFolderError(f"skin model {str(folder)!r} has format version {version!r}, "
                               f"this backend reads version {FORMAT_VERSION}: retrain or "
                               "re-export it with this version")
    cfg = {"graph": "model.onnx", **cfg}
    for key, kind in CONFIG_FIELDS.items():
        if key in cfg and not isinstance(cfg[key], kind):
            raise ModelFolderError(f"{cfg_path}: {key!r} is {type(cfg[key]).__name__}, not "
                                   f"{_kind_name(kind)}: the config is damaged; re-export "
                                   "the model")
    missing = [k for k in REQUIRED_FIELDS if k not in cfg]
    if missing:
        raise ModelFolderError(f"{cfg_path} lacks {', '.join(map(repr, missing))}: the config "
                               "is damaged or from an unfinished export; re-export the model")
    if cfg.get("size_multiple", 1) < 1:
        raise ModelFolderError(f"{cfg_path}: 'size_multiple' is {cfg['size_multiple']}, it "
                               "must be 1 or more; re-export the model")
    for key in ("graph", "weights"):
        if key in cfg:
            inside(folder, cfg[key], f"{cfg_path}: {key!r}")
    graph = folder / cfg["graph"]
    if not graph.is_file():
        raise ModelFolderError(f"skin model {str(folder)!r} lacks {graph.name}: copy the whole "
                               "folder, or re-export it")
    return cfg


def inside(folder: Path, name: str, what: str) -> Path:
    """``folder / name``, refused unless it names a file inside the folder (no absolute
    path, no ``..``): a model folder is copied and shared whole, and may not make the
    backend read files elsewhere. A link inside it (a shared store) is the owner's."""
    path = Path(os.path.normpath(folder / name))
    if Path(name).is_absolute() or not path.is_relative_to(os.path.normpath(folder)):
        raise ModelFolderError(f"{what} {name!r} points outside the model folder: name a "
                               "file inside it (e.g. model.onnx)")
    return path


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join({bool: "true/false", int: "a whole number", str: "text",
                        list: "a list", dict: "a table", float: "a number"}[k] for k in kinds)


def check_fingerprint(cfg: dict[str, Any], fingerprint: dict[str, Any] | None,
                      folder: str | os.PathLike) -> None:
    """Refuse a model trained for another character (any key both give that differs)."""
    if fingerprint is None:
        return
    mine = cfg.get("fingerprint") or {}
    diff = sorted(k for k in set(mine) & set(fingerprint) if mine[k] != fingerprint[k])
    if diff or not set(mine) & set(fingerprint):
        keys = diff or sorted(set(mine) | set(fingerprint))
        what = "; ".join(_differ(k, mine.get(k), fingerprint.get(k)) for k in keys[:2])
        raise ModelFolderError(f"skin model {Path(folder).name!r} was trained for another "
                               f"character ({what}): train this character's model (Skin Model "
                               "> Train Skin Model, or painted-skin train-skin) or pick its own")


def passes_notice(cfg: dict[str, Any], name: str) -> str | None:
    """One line naming a model that learned other values of the passes than this
    version sends (an older add-on's light, gloss or colour), None when they agree.
    Such a model still paints, with some loss where the values moved (a light from
    behind, a rough surface's rim), so it is told, not refused."""
    learned = cfg.get("pass_version")
    age = values_age(learned)
    if age is None:
        return None
    if age == "newer":
        return (f"skin model {name!r} learned version {learned} of the passes, a newer "
                f"add-on's; this one renders version {VALUES_VERSION}, which it paints with "
                "some loss: update the add-on and the backend")
    what = ("an older add-on's passes (it does not record which)" if learned is None
            else f"version {learned} of the passes")
    return (f"skin model {name!r} learned {what}; this version renders version "
            f"{VALUES_VERSION}, which it paints with some loss (the light from behind, the "
            "gloss): retrain it (painted-skin train-skin, or Train Skin Model) for the best "
            "painting")


def _differ(key: str, model: Any, scene: Any) -> str:
    """How one fingerprint entry differs, in a few words (the whole entries ran off the
    screen of a popup): mesh names, or their vertex counts when the names agree."""
    return f"its {key}: {_short(model, scene)}, the scene's: {_short(scene, model)}"


def _short(value: Any, other: Any) -> str:
    def rows(v: Any) -> list | None:
        return v if isinstance(v, list) and v and all(isinstance(r, list) and r for r in v) \
            else None

    mine, theirs = rows(value), rows(other)
    if mine is not None:
        same_names = theirs is not None and [r[0] for r in mine] == [r[0] for r in theirs]
        parts = [f"{r[0]} ({r[1]} vertices)" if same_names and len(r) > 1 else str(r[0])
                 for r in mine]
        return ", ".join(parts[:3]) + (f" and {len(parts) - 3} more" if len(parts) > 3 else "")
    text = "none" if value is None else str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def weights_digest(folder: str | os.PathLike) -> str:
    """The digest of a model folder's weights file: which base a look was learned from."""
    cfg = read_config(folder)
    h = hashlib.blake2b(digest_size=16)
    path = inside(Path(folder), str(cfg.get("weights", "weights.safetensors")), "weights")
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return "blake2b:" + h.hexdigest()


def look_names(folder: str | os.PathLike) -> list[str]:
    """The looks a model folder paints: ``base`` (its own model), then each
    ``looks/NAME`` holding a config, by name."""
    root = Path(folder) / LOOKS_DIR
    names = sorted(p.name for p in root.iterdir() if p.is_dir() and LOOK_NAME.fullmatch(p.name)
                   and (p / CONFIG).is_file()) if root.is_dir() else []
    return [BASE_LOOK] + names[:MAX_LOOKS]


def look_weights(look: object, names: list[str]) -> dict[str, float]:
    """The ``look`` option as weights that sum to 1: a name (``"ill"``), or a mix of
    names and weights (``{"young": 0.3, "old": 0.7}``; scaled to sum 1); None is the
    base. Raises ValueError naming the fix."""
    if look is None:
        return {BASE_LOOK: 1.0}
    known = ", ".join(names)
    if isinstance(look, str):
        look = {look: 1.0}
    if not isinstance(look, dict) or not look:
        raise ValueError(f"look {look!r} must be a look's name or a mix of names and "
                         f"weights, e.g. {{\"{names[-1]}\": 1.0}} (this model has: {known})")
    out: dict[str, float] = {}
    for name, w in look.items():
        if name not in names:
            raise ValueError(f"look {name!r} is not in this skin model (it has: {known}): "
                             "learn it with painted-skin learn-look --look NAME")
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w) \
                or w < 0:
            raise ValueError(f"look {name!r}: weight {w!r} must be a number of 0 or more")
        if w > 0:
            out[name] = float(w)
    total = sum(out.values())
    if total <= 0:
        raise ValueError("the look's weights are all 0: give at least one above 0")
    return {k: v / total for k, v in out.items()}


class SkinModel:
    """A loaded model folder: ``render(passes, ...)`` -> uint8 (H, W, 3)."""

    def __init__(self, folder: str | os.PathLike, fingerprint: dict[str, Any] | None = None,
                 device: str = "cpu", threads: int | None = None,
                 engine: str | None = None) -> None:
        self.folder = Path(folder)
        self.config = read_config(self.folder)
        check_fingerprint(self.config, fingerprint, self.folder)
        self.layout = self.config["layout"]
        self.bounds = self.config["rest_bounds"]
        self.temporal = bool(self.config.get("temporal"))
        self.multiple = int(self.config.get("size_multiple", 1))
        self.engine = engines.load_engine(engine or "onnx", self.folder, self.config, device,
                                          threads)
        self._load_args = (engine or "onnx", device, threads)
        self.looks = look_names(self.folder)
        self._engines = {BASE_LOOK: self.engine}

    def look_engine(self, name: str) -> engines.OnnxEngine | engines.TorchEngine:
        """The engine of look ``name``, loaded on first use and checked to paint from
        the same inputs as the base (a look learned from another base is refused)."""
        if name not in self._engines:
            folder = self.folder / LOOKS_DIR / name
            cfg = read_config(folder)
            same = ("layout", "rest_bounds", "head", "fingerprint")
            if any(cfg.get(k) != self.config.get(k) for k in same):
                raise ModelFolderError(f"look {name!r} of {str(self.folder)!r} was learned from "
                                       "another base model: learn it again from this one "
                                       "(painted-skin learn-look --base FOLDER --look NAME)")
            kind, device, threads = self._load_args
            self._engines[name] = engines.load_engine(kind, folder, cfg, device, threads)
        return self._engines[name]

    def check_passes(self, passes: dict[str, np.ndarray]) -> None:
        missing = [p for p in self.config.get("required_passes", []) if p not in passes
                   and not (p == "motion" and self.temporal)]
        if missing:
            raise features.FeatureError(f"the skin model needs pass(es) {', '.join(missing)}: "
                                        "enable them in the render passes")
        h, w = np.asarray(passes["mask"]).shape[:2]
        if h % self.multiple or w % self.multiple:
            raise features.FeatureError(f"frame size {w}x{h} must be a multiple of "
                                        f"{self.multiple} for this skin model")

    def render(self, passes: dict[str, np.ndarray],
               previous: tuple[np.ndarray, np.ndarray] | None = None,
               seed: int = 0, stabilize_strength: float = stabilize.DEFAULT_STRENGTH,
               look: object = None) -> np.ndarray:
        """One frame. ``previous``: the warped previous output and its validity
        (:func:`features.warp_previous_output`), or None for a shot's first frame; a
        temporal model takes it as input, and the painted frame is blended with it by
        :func:`stabilize.stabilize` (``stabilize_strength`` 0: not blended).
        ``seed``: the diffusion head's starting noise. The network runs on the
        character's box (:func:`character_box`); the film around it is black.
        ``look``: a look's name or a mix of looks (:func:`look_weights`): each look's
        network paints and the paintings are mixed by weight (linear: a mix moves
        smoothly from one look to the other)."""
        self.check_passes(passes)
        weights = look_weights(look, self.looks)
        nets = [(self.look_engine(n), w) for n, w in weights.items()]
        mask = np.asarray(passes["mask"]) > 0
        box = character_box(mask, self.multiple)
        if box is None:  # nothing of the character in view: the film's black
            return np.zeros(mask.shape + (3,), np.uint8)
        # The diffusion head's noise is drawn for the whole frame, then cut with it: a
        # seed paints the same character wherever the box falls.
        noise = (np.random.default_rng(seed).standard_normal((1, 3) + mask.shape)
                 if self.config["head"] == "diffusion" else None)
        if box == (0, mask.shape[0], 0, mask.shape[1]):
            return self._paint(passes, previous, noise, stabilize_strength, nets)
        y0, y1, x0, x1 = box
        out = np.zeros(mask.shape + (3,), np.uint8)
        out[y0:y1, x0:x1] = self._paint(
            _cropped(passes, box, mask.shape),
            None if previous is None else _cropped(previous, box, mask.shape),
            None if noise is None else noise[:, :, y0:y1, x0:x1], stabilize_strength, nets)
        return out

    def _paint(self, passes: dict[str, np.ndarray],
               previous: tuple[np.ndarray, np.ndarray] | None, noise: np.ndarray | None,
               stabilize_strength: float, nets: list | None = None) -> np.ndarray:
        """The networks ``nets`` ((engine, weight) pairs; None: the base alone) over the
        whole of ``passes`` (see :meth:`render`), mixed; ``noise``: the diffusion head's
        start, (1, 3, H, W)."""
        nets = nets if nets is not None else [(self.engine, 1.0)]
        x = features.frame_features(passes, self.layout, self.bounds,
                                    previous if self.temporal else None)[None]
        out = 0.0
        for engine, weight in nets:
            if self.config["head"] == "diffusion":

                def f(x_t: np.ndarray, t: float, engine=engine) -> np.ndarray:
                    feeds = {"features": x, "x_t": x_t.astype(np.float32),
                             "t": np.full((1,), t, np.float32)}
                    return engine.run(feeds)

                one = (sampling.ddim_sample(f, noise, int(self.config["diffusion_steps"]))
                       + 1) / 2
            else:
                one = engine.run({"features": x})
            out = out + weight * np.clip(one, 0.0, 1.0)
        rgb = np.moveaxis(out[0], 0, -1)
        if previous is not None:
            rgb = stabilize.stabilize(np.clip(rgb, 0.0, 1.0), previous[0], previous[1],
                                      stabilize_strength)
        return np.clip(np.rint(rgb * 255), 0, 255).astype(np.uint8)

    def report(self) -> dict[str, Any]:
        p = self.folder / REPORT
        return json.loads(p.read_text()) if p.is_file() else {}


#: Pixels kept around the character when the network runs on its box only. Measured on
#: the demo model and shot: the character's pixels within 1/255 of the network over the
#: whole frame (≥ 67 dB at 128², the box on the network's pooling grid; 8 to 32 px
#: margins alike), the network on 29% of a 128² frame, a third of the time.
CROP_MARGIN = 8


def character_box(mask: np.ndarray, multiple: int = 1, margin: int = CROP_MARGIN
                  ) -> tuple[int, int, int, int] | None:
    """The rows and columns ``(y0, y1, x0, x1)`` the network paints: the mask's bounding
    box grown by ``margin`` and to sides that are multiples of ``multiple`` (the
    network's), inside the frame; None when the mask is empty."""
    rows, cols = np.flatnonzero(mask.any(axis=1)), np.flatnonzero(mask.any(axis=0))
    if rows.size == 0:
        return None
    h, w = mask.shape

    def side(lo: int, hi: int, n: int) -> tuple[int, int]:
        lo, hi = max(0, lo - margin), min(n, hi + 1 + margin)
        lo -= lo % multiple  # on the whole frame's pooling grid: the same sums as there
        length = min(n, -(-(hi - lo) // multiple) * multiple)
        lo = max(0, min(lo, n - length))
        return lo, lo + length

    return (*side(int(rows[0]), int(rows[-1]), h), *side(int(cols[0]), int(cols[-1]), w))


def _cropped(arrays, box: tuple[int, int, int, int], shape: tuple[int, int]):
    """``arrays`` (a dict of passes, or a tuple) cut to ``box`` where they are images
    of the frame's ``shape``; other values as they are."""
    y0, y1, x0, x1 = box

    def cut(v):
        a = np.asarray(v) if isinstance(v, np.ndarray) else v
        if isinstance(a, np.ndarray) and a.ndim >= 2 and a.shape[:2] == shape:
            return a[y0:y1, x0:x1]
        return v

    if isinstance(arrays, dict):
        return {k: cut(v) for k, v in arrays.items()}
    return tuple(cut(v) for v in arrays)


def load_model(folder: str | os.PathLike, fingerprint: dict[str, Any] | None = None,
               device: str = "cpu", threads: int | None = None,
               engine: str | None = None) -> SkinModel:
    """Load and check a model folder (raises :class:`ModelFolderError`, or
    :class:`engines.EngineError` for an engine that cannot run it here)."""
    return SkinModel(folder, fingerprint, device, threads, engine)
