"""The render engine's settings (``Scene.painted_skin_engine``, saved with the .blend so
``blender -b shot.blend -E PAINTED_SKIN -a`` on a farm paints what the artist set), and
the paint they ask for: which backend, pipeline and options.

The model defaults to the Skin Model panel's choice and the backend to the Restyle
panel's, so an animator who restyled a shot presses F12 and gets the same painting."""

import json
from dataclasses import dataclass, field

import bpy
from bpy.props import BoolProperty, FloatProperty, StringProperty

from ....wire.endpoints import DEFAULT_URL, is_local_endpoint
from ..passes.geometry import ShotError
from ..preferences import preferences


class PS_EngineSettings(bpy.types.PropertyGroup):
    """Render Properties ▸ Painted Skin (``Scene.painted_skin_engine``)."""

    model: StringProperty(name="Model", default="",
                          description="Skin model registry name (empty: the Skin Model "
                                      "panel's choice: the model trained for this character)")
    url: StringProperty(name="Backend URL", default="",
                        description="Backend address (empty: the Restyle panel's, else the "
                                    "add-on preferences')")
    keys: StringProperty(name="Keys Folder", default="", subtype="DIR_PATH",
                         description="CurveZMQ keys folder for a backend on another machine "
                                     "(empty: the add-on preferences')")
    start_local: BoolProperty(name="Start Local Backend", default=True,
                              description="When nothing answers at a loopback address, start "
                                          "a backend on this machine (the add-on "
                                          "preferences' Backend Python) and keep it for the "
                                          "next frames")
    temporal: BoolProperty(name="Stabilise", default=True,
                           description="In an animation render each frame continues the one "
                                       "before, warped by the motion vectors (steadier "
                                       "frames; a still or the viewport paints each fresh)")
    stabilize: FloatProperty(name="Blend", default=0.0, min=0.0, max=0.99,
                             description="How strongly a pixel keeps the previous frame where "
                                         "the two nearly agree, for a model that flickers "
                                         "(0: the model's own frames, the default; more "
                                         "lags the light on a turning body)")
    viewport_scale: FloatProperty(name="Viewport Resolution", default=0.25, min=0.05,
                                  max=1.0, subtype="FACTOR",
                                  description="The Rendered viewport paints at this share of "
                                              "the region's size while the view moves")
    viewport_refine: BoolProperty(name="Refine When Still", default=True,
                                  description="Once the view stops, paint again at the "
                                              "region's full size")


@dataclass(frozen=True)
class PaintSettings:
    """What a painted frame is asked of: the backend, the pipeline and its options (the
    scene character's fingerprint is added per shot, as Restyle does)."""

    url: str
    pipeline: str = "skin"
    options: dict = field(default_factory=dict)
    start_local: bool = True
    keys: str | None = None

    def key(self, width: int, height: int) -> str:
        """What a backend session is opened for: a change reopens it."""
        return json.dumps([self.url, self.pipeline, width, height, self.options],
                          sort_keys=True, default=str)

    @property
    def local(self) -> bool:
        return is_local_endpoint(self.url)


STANDARD = "Standard"


def view_transform_hint(scene: bpy.types.Scene) -> str | None:
    """Why the saved frames will not show the painting's colours, or None."""
    vs = scene.view_settings
    if vs.view_transform == STANDARD and vs.look in ("None", ""):
        return None
    return (f"View Transform is {vs.view_transform}: the painting is already display-ready, "
            "so its colours change when saved. Use Standard to keep them.")


def engine_settings(scene: bpy.types.Scene) -> PS_EngineSettings | None:
    return getattr(scene, "painted_skin_engine", None)


def _model(scene: bpy.types.Scene, s: PS_EngineSettings) -> str:
    if s.model.strip():
        return s.model.strip()
    from ..skin.ui import SkinModelError, chosen_skin_model

    context = bpy.context
    try:
        if getattr(context, "scene", None) is scene:
            return chosen_skin_model(context)
        with context.temp_override(scene=scene):
            return chosen_skin_model(bpy.context)
    except SkinModelError as e:
        raise ShotError(str(e)) from None


def backend_url(scene: bpy.types.Scene, s: PS_EngineSettings) -> str:
    """The URL the engine paints through: its own, else the Restyle panel's, else the
    add-on preferences', else the default."""
    restyle = getattr(scene, "painted_skin_restyle", None)
    prefs = preferences(bpy.context)
    return (s.url.strip() or (restyle.url.strip() if restyle is not None else "")
            or (prefs.url if prefs is not None else "") or DEFAULT_URL)


def default_model(scene: bpy.types.Scene) -> tuple[str | None, str | None]:
    """(the model an empty Skin Model field paints with, or None; why there is none)."""
    s = engine_settings(scene)
    try:
        return _model(scene, s) if s is not None else None, None
    except ShotError as e:
        return None, str(e)


def paint_settings(scene: bpy.types.Scene, *, animation: bool = True) -> PaintSettings:
    """The scene's engine settings as a paint request. ``animation``: frames rendered in
    order continue each other (off: every frame painted fresh, as the viewport does).
    Raises :class:`ShotError` naming the fix when no model is set for this character."""
    s = engine_settings(scene)
    if s is None:
        raise ShotError("the Painted Skin settings are not registered: enable the add-on")
    prefs = preferences(bpy.context)
    url = backend_url(scene, s)
    keys_dir = s.keys.strip() or (prefs.keys_dir if prefs is not None else "")
    keys = bpy.path.abspath(keys_dir) if keys_dir else None
    options = {"model": _model(scene, s), "temporal": bool(s.temporal and animation),
               "stabilize": round(float(s.stabilize), 4)}
    return PaintSettings(url=url, options=options, start_local=s.start_local, keys=keys)


CLASSES = (PS_EngineSettings,)
SCENE_SETTINGS = {"painted_skin_engine": PS_EngineSettings}
