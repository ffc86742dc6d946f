"""The Restyle step's settings (``Scene.painted_skin_restyle``, saved with the .blend so a
farm node paints what the artist set) and how they become :func:`.restyle.restyle_shot`'s
arguments: the same options and reference images the CLI sends for the same settings.

``pipeline`` and ``model`` stay strings (what old .blend files hold, what scripts set);
the panel shows them as dropdowns (``pipeline_menu``, ``model_menu``) whose items come
from the backend's last STATUS reply.
"""

# No ``from __future__ import annotations``: the items callbacks in the annotations must
# be real functions when Blender reads them, not strings it evaluates elsewhere.
import json
import os
from pathlib import Path

import bpy
import numpy as np
from bpy.props import (
    BoolProperty,
    CollectionProperty,
    EnumProperty,
    FloatProperty,
    IntProperty,
    PointerProperty,
    StringProperty,
)

from ....wire.endpoints import DEFAULT_URL
from ...core.backend.status import CUSTOM, DEFAULT_ITEM, DEFAULT_MODEL, model_items, pipeline_items
from ..classes import register_classes, unregister_classes
from ..out_paths import PATH_OPTIONS, output_folder
from ..passes.geometry import ShotError
from ..preferences import preferences
from .backend_status import LIVE, set_source
from .request import RestyleRequest

# Blender keeps only pointers to an items callback's strings: the lists it returned must
# stay referenced from Python, or the dropdown shows freed memory (or crashes).
_ITEMS: dict[str, list] = {}
# ControlNet kinds and the backend's default scales (backend DEFAULT_CONTROL).
CONTROLNETS = {"depth": 0.8, "normal": 0.5, "openpose": 1.0}


def _numbered(triples: list[tuple[str, str, str]]) -> list:
    return [(i, label, tip, "NONE", n) for n, (i, label, tip) in enumerate(triples)]


def _pipelines(s) -> list:
    return _numbered(pipeline_items(LIVE.status, s.pipeline))


def _models(s) -> list:
    return _numbered(model_items(LIVE.status, s.pipeline, s.model))


def _pipeline_enum(s, _context) -> list:
    """The items callback: its list stays referenced until the next call."""
    _ITEMS["pipeline"] = items = _pipelines(s)
    return items


def _model_enum(s, _context) -> list:
    _ITEMS["model"] = items = _models(s)
    return items


def _look_enum(s, context) -> list:
    from ..skin.ui import model_looks

    looks = model_looks(context, s.model) if context is not None else ["base"]
    _ITEMS["look"] = items = _numbered([(n, n, f"Paint the look {n!r}") for n in looks])
    return items


def _mix_enum(s, context) -> list:
    from ..skin.ui import model_looks

    looks = model_looks(context, s.model) if context is not None else ["base"]
    _ITEMS["mix"] = items = _numbered([("none", "None", "No second look")]
                                      + [(n, n, f"Mix in the look {n!r}") for n in looks])
    return items


def _menu_get(items: list, custom: bool, value: str) -> int:
    wanted = CUSTOM if custom else value
    return next((n for i, _, _, _, n in items if i == wanted), len(items) - 1)


def _pipeline_get(self) -> int:
    return _menu_get(_pipelines(self), self.pipeline_custom, self.pipeline)


def _pipeline_set(self, value: int) -> None:
    ident = _pipelines(self)[value][0]
    self.pipeline_custom = ident == CUSTOM
    if ident != CUSTOM and ident != self.pipeline:
        self.pipeline = ident
        if self.model not in [i for i, *_ in model_items(LIVE.status, ident, "")]:
            self.model = ""  # another pipeline's model would be refused on OPEN


def _model_get(self) -> int:
    return _menu_get(_models(self), self.model_custom, self.model or DEFAULT_ITEM)


def _model_set(self, value: int) -> None:
    ident = _models(self)[value][0]
    self.model_custom = ident == CUSTOM
    if ident != CUSTOM:
        self.model = DEFAULT_MODEL if ident == DEFAULT_ITEM else ident


class PS_RestyleReference(bpy.types.PropertyGroup):
    """One reference image of the character (sent as the backend's ``ref`` arrays)."""

    image: PointerProperty(name="Image", type=bpy.types.Image,
                           description="An image in this .blend (used before the file path)")
    filepath: StringProperty(name="File", subtype="FILE_PATH", options=PATH_OPTIONS,
                             description="An image file, used when no Image is picked")
    use: BoolProperty(name="Use", default=True,
                      description="Send this reference (off: keep the row, send nothing)")
    weight: FloatProperty(name="Weight", default=1.0, min=0.0, max=2.0,
                          description="How much this reference counts in the look, against "
                                      "the others (their image embeddings are averaged with "
                                      "these weights: 1 front, 0.5 side view)")


class PS_RestyleSettings(bpy.types.PropertyGroup):
    """The panel's fields (``Scene.painted_skin_restyle``), saved with the .blend."""

    url: StringProperty(name="URL", default="",
                        description="Backend address (empty: the add-on preferences' URL)")
    pipeline: StringProperty(name="Pipeline Name", default="echo",
                             description="The pipeline the backend runs (a name it serves)")
    pipeline_custom: BoolProperty(name="Custom Pipeline", default=False,
                                  description="Type the pipeline name instead of choosing it")
    pipeline_menu: EnumProperty(name="Pipeline", items=_pipeline_enum,
                                get=_pipeline_get, set=_pipeline_set,
                                description="What paints the frames: the pipelines the "
                                            "backend reports (Custom…: type a name)")
    look: EnumProperty(name="Look", items=_look_enum,
                       description="The skin model's look to paint (Skin Model ▸ Looks "
                                   "learns them; base: the character as trained)")
    look_mix_with: EnumProperty(name="Mix With", items=_mix_enum,
                                description="A second look mixed into the first")
    look_mix: FloatProperty(name="Mix", default=0.0, min=0.0, max=1.0, subtype="FACTOR",
                            description="How much of the second look (0: the first only, "
                                        "1: the second only); keyframe it to change state "
                                        "over the shot")
    last_report: StringProperty(name="Last result", description="What the last Restyle "
                                "Shot painted, or why it stopped")
    model: StringProperty(name="Model Name", default="",
                          description="Model registry name (empty: the pipeline's default)")
    model_custom: BoolProperty(name="Custom Model", default=False,
                               description="Type the model name instead of choosing it")
    model_menu: EnumProperty(name="Model", items=_model_enum,
                             get=_model_get, set=_model_set,
                             description="The pipeline's model: its registry names and those "
                                         "the backend has loaded (Custom…: type a name)")
    steps: IntProperty(name="Steps", default=4, min=1, max=100,
                       description="Denoising steps (4-8 with a few-step scheduler)")
    temporal: BoolProperty(name="Temporal", default=True,
                           description="Start each frame from the previous one warped by the "
                                       "motion vectors (steadier frames)")
    cross_frame: EnumProperty(name="Cross-Frame", default="off", items=[
        ("off", "Off", "Plain attention"),
        ("first", "First Frame", "Every frame also attends to the shot's first frame"),
        ("previous", "Previous Frame", "Every frame also attends to the frame before")],
        description="Cross-frame attention: frames share the look of an anchor frame")
    use_guidance: BoolProperty(name="Guidance", default=False,
                               description="Send a guidance scale (off: the scheduler's "
                                           "default, 1.0 for lcm/tcd, else 7.0)")
    guidance_scale: FloatProperty(name="Guidance Scale", default=7.0, min=0.0, max=30.0,
                                  description="How closely the picture follows the prompt")
    use_strength: BoolProperty(name="Strength", default=False,
                               description="Send a temporal strength (off: the backend's 0.5)")
    strength: FloatProperty(name="Temporal Strength", default=0.5, min=0.0, max=1.0,
                            description="How much of a warped previous frame is repainted "
                                        "(0: kept, 1: painted afresh)")
    use_controlnet_scales: BoolProperty(name="ControlNet Scales", default=False,
                                        description="Send ControlNet scales (off: the "
                                                    "backend's depth 0.8, normal 0.5, "
                                                    "openpose 1.0)")
    depth_scale: FloatProperty(name="Depth", default=CONTROLNETS["depth"], min=0.0, max=2.0,
                               description="Weight of the depth ControlNet")
    normal_scale: FloatProperty(name="Normal", default=CONTROLNETS["normal"], min=0.0, max=2.0,
                                description="Weight of the normal-map ControlNet")
    openpose_scale: FloatProperty(name="OpenPose", default=CONTROLNETS["openpose"], min=0.0,
                                  max=2.0, description="Weight of the OpenPose ControlNet")
    references: CollectionProperty(type=PS_RestyleReference, name="References",
                                   description="Reference images of the character "
                                               "(IP-Adapter identity)")
    references_index: IntProperty(name="Active Reference", default=0, min=0,
                                  description="The reference row selected in the list")
    use_ref_strength: BoolProperty(name="Reference Strength", default=False,
                                   description="Send a reference strength (off: the "
                                               "backend's 0.6 with references)")
    ref_strength: FloatProperty(name="Reference Strength", default=0.6, min=0.0, max=2.0,
                                description="How strongly the references steer the look "
                                            "(the IP-Adapter scale)")
    extra_options: StringProperty(name="Extra Options", default="",
                                  description='More pipeline options as a JSON object, e.g. '
                                              '{"scheduler": "lcm", "controlnets": ["depth"]}; '
                                              "they override the fields above")
    prompt: StringProperty(name="Prompt", default="",
                           description="What the restyled frames should look like")
    negative_prompt: StringProperty(name="Negative", default="",
                                    description="What the restyled frames should avoid")
    seed: IntProperty(name="Seed", default=0, min=0,
                      description="Random seed: the same seed repaints the same frames")
    width: IntProperty(name="Width", default=512, min=16, max=8192,
                       description="Width of the restyled frames in pixels")
    height: IntProperty(name="Height", default=512, min=16, max=8192,
                        description="Height of the restyled frames in pixels")
    out_dir: StringProperty(name="Output", subtype="DIR_PATH", default="//restyle/",
                            options=PATH_OPTIONS,
                            description="Folder of the restyled frames (// : beside the "
                                        ".blend); a re-run resumes what is missing")
    use_vse: BoolProperty(name="Add VSE Strip", default=False,
                          description="Also put the result in the Sequencer")


def settings(context) -> PS_RestyleSettings:
    return context.scene.painted_skin_restyle


def backend_url(context) -> str:
    s, p = settings(context), preferences(context)
    return s.url or (p.url if p is not None else "") or DEFAULT_URL


def keys_folder(context) -> str | None:
    p = preferences(context)
    return bpy.path.abspath(p.keys_dir) if p is not None and p.keys_dir else None


def out_folder(context) -> Path:
    return output_folder(settings(context).out_dir, "restyle")


def ping_target() -> tuple[str, str | None] | None:
    """What the live status pings: the current scene's backend (None: no scene)."""
    context = bpy.context
    if not hasattr(getattr(context, "scene", None), "painted_skin_restyle"):
        return None
    return backend_url(context), keys_folder(context)


set_source(ping_target)


def _merge(base: dict, over: dict) -> dict:
    """``over`` on ``base``; objects in both are merged key by key (so Extra Options'
    ``{"controlnet": {"depth": {"end": 0.8}}}`` keeps the panel's scales)."""
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) \
            else v
    return out


def _extra(s: PS_RestyleSettings) -> dict:
    if not s.extra_options.strip():
        return {}
    try:
        extra = json.loads(s.extra_options)
    except ValueError as e:
        raise ShotError(f"Extra Options is not valid JSON ({e}): write an object, e.g. "
                        '{"scheduler": "lcm"}') from None
    if not isinstance(extra, dict):
        raise ShotError('Extra Options must be a JSON object, e.g. {"scheduler": "lcm"}')
    return extra


def restyle_options(s: PS_RestyleSettings) -> dict:
    """The pipeline options: the panel's fields, then the Extra Options JSON over them
    (what ``--options`` carries on the command line)."""
    options: dict = {"steps": s.steps, "temporal": s.temporal}
    if s.model:
        options["model"] = s.model
    if s.cross_frame != "off":
        options["cross_frame"] = s.cross_frame
    if s.use_guidance:
        options["guidance_scale"] = round(s.guidance_scale, 4)
    if s.use_strength:
        options["temporal_strength"] = round(s.strength, 4)
    if s.use_controlnet_scales:
        options["controlnet"] = {k: {"scale": round(getattr(s, f"{k}_scale"), 4)}
                                 for k in CONTROLNETS}
    if s.use_ref_strength and any(r.use for r in s.references):
        options["ip_adapter_scale"] = round(s.ref_strength, 4)
    weights = reference_weights(s)
    if weights is not None:
        options["ref_weights"] = weights
    if s.pipeline.strip() == "skin":
        from ..skin.ui import look_option

        look = look_option(s.look, s.look_mix_with, s.look_mix)
        if look is not None:
            options["look"] = look
    return _merge(options, _extra(s))


def reference_weights(s: PS_RestyleSettings) -> list[float] | None:
    """The used reference rows' weights, in :func:`reference_images`' order, as the
    ``ref_weights`` option; None when all are 1 (the backend's equal weights). Raises
    :class:`ShotError` when every used row weighs 0 (the backend would refuse it)."""
    weights = [round(r.weight, 4) for r in s.references if r.use]
    if all(w == 1.0 for w in weights):
        return None
    if not any(weights):
        raise ShotError("every used reference has weight 0: give one a weight above 0, "
                        "or turn the references off")
    return weights


def restyle_args(s: PS_RestyleSettings) -> dict:
    """The panel's settings as :func:`restyle_shot` arguments (the reference images
    apart: :func:`reference_images`)."""
    pipeline = s.pipeline.strip()
    if not pipeline:
        raise ShotError("no pipeline is set: choose one in the Pipeline menu")
    return {"pipeline": pipeline, "prompt": s.prompt, "negative_prompt": s.negative_prompt,
            "seed": s.seed, "options": restyle_options(s)}


def panel_request(context) -> RestyleRequest:
    """The Restyle panel's settings as one request, the reference images read now: what
    *Restyle Shot* paints, headless or in a window. Raises :class:`RequestError` (a bad
    value), :class:`ShotError` (no pipeline), ``UnwritableOutput`` or ``OSError`` (an
    output folder or reference image that cannot be used)."""
    s = settings(context)
    return RestyleRequest.make(out_folder(context), url=backend_url(context),
                               keys=keys_folder(context), size=(s.width, s.height),
                               refs=reference_images(s), **restyle_args(s))


def _rgb8(img: np.ndarray) -> np.ndarray:
    """An image as uint8 RGB, as the CLI's ``--ref`` turns a file into one."""
    return img[..., :3] if img.ndim == 3 else img[..., None].repeat(3, -1)


def _image_pixels(image: bpy.types.Image) -> np.ndarray:
    """An image datablock's pixels, top row first, uint8 RGBA."""
    w, h = image.size
    if not w or not h:
        raise OSError("it has no pixels (a missing file?)")
    px = np.empty(w * h * image.channels, np.float32)
    image.pixels.foreach_get(px)
    px = px.reshape(h, w, image.channels)[::-1]
    return np.clip(np.rint(px * 255), 0, 255).astype(np.uint8)


def reference_images(s: PS_RestyleSettings) -> list[np.ndarray]:
    """The used reference rows as uint8 RGB arrays. An image datablock backed by an
    unchanged file is read from that file (exactly what ``--ref FILE`` sends); a packed,
    generated or edited one from its pixels."""
    from ..passes.image_io import read_image

    refs = []
    for n, r in enumerate(s.references, 1):
        if not r.use:
            continue
        what = f"reference {n}"
        try:
            if r.image is not None:
                what = f"reference {n} (image {r.image.name!r})"
                path = bpy.path.abspath(r.image.filepath) if r.image.filepath else ""
                if r.image.packed_file is None and not r.image.is_dirty and path \
                        and os.path.isfile(path):
                    refs.append(_rgb8(read_image(path)))
                else:
                    refs.append(_rgb8(_image_pixels(r.image)))
            elif r.filepath:
                path = bpy.path.abspath(r.filepath)
                what = f"reference {n} ({path})"
                refs.append(_rgb8(read_image(path)))
            else:
                raise OSError("it names no image or file")
        except OSError as e:
            raise ShotError(f"{what}: {e}: pick an image or file, or remove the row") from None
    return refs


# The panel's presets: what each sets (the frame size keeps the scene's aspect, its long
# side as given, both sides multiples of 8 as the diffusion pipelines need).
PRESETS: dict[str, dict] = {
    "FAST": {"label": "Fast Preview", "long_side": 384, "steps": 4, "temporal": True,
             "cross_frame": "off", "use_guidance": False},
    "FINAL": {"label": "Final Quality", "long_side": 768, "steps": 12, "temporal": True,
              "cross_frame": "first", "use_guidance": False},
}


def preset_size(scene: bpy.types.Scene, long_side: int) -> tuple[int, int]:
    """(width, height) with the scene's render aspect and ``long_side`` pixels."""
    r = scene.render
    w, h = r.resolution_x * r.pixel_aspect_x, r.resolution_y * r.pixel_aspect_y
    short = max(8, int(round(long_side * min(w, h) / max(w, h) / 8)) * 8)
    return (long_side, short) if w >= h else (short, long_side)


def apply_preset(scene: bpy.types.Scene, name: str) -> None:
    """Set the scene's restyle settings to preset ``name`` (a key of :data:`PRESETS`)."""
    s = scene.painted_skin_restyle
    values = dict(PRESETS[name])
    s.width, s.height = preset_size(scene, values.pop("long_side"))
    values.pop("label")
    for k, v in values.items():
        setattr(s, k, v)


SCENE_KEY = "painted_skin_restyle"  # the Scene pointer the panel's fields are saved under


class NoSavedSettings(ShotError):
    """The shot was saved without Restyle settings; the message names the fix."""


def saved_settings(scene: bpy.types.Scene) -> dict:
    """The Restyle panel's settings saved in ``scene`` as :func:`restyle_shot` arguments
    (``pipeline``, ``prompt``, ``negative_prompt``, ``seed``, ``options``, ``size``,
    ``refs``): what a farm node renders when told to render what the artist set.

    Works whether or not the add-on is enabled in this Blender: without it, the settings
    classes are registered for the read and unregistered after, so the saved values are
    read typed (enum and pointer fields included) and the process is left as found."""
    # Blender 5.0 keeps add-on properties apart from custom ones (ID.keys() lacks them);
    # a field never set is not in the file, a group never touched not at all
    saved = scene.bl_system_properties_get()
    if saved is None or SCENE_KEY not in saved.keys():
        raise NoSavedSettings(f"the shot {bpy.data.filepath or '(unsaved)'} holds no Restyle "
                              "settings: set them in the Restyle panel and save the .blend, "
                              "or give --pipeline/--options here instead of --from-scene")
    registered = hasattr(bpy.types.Scene, SCENE_KEY)
    if not registered:
        register_classes((PS_RestyleReference, PS_RestyleSettings),
                         **{SCENE_KEY: PS_RestyleSettings})
    try:
        s = getattr(scene, SCENE_KEY)
        return {**restyle_args(s), "size": (s.width, s.height), "refs": reference_images(s)}
    finally:
        if not registered:
            unregister_classes((PS_RestyleReference, PS_RestyleSettings), SCENE_KEY)
