"""Painted Skin as a Blender render engine (``PAINTED_SKIN``): F12, Render Animation and
``blender -b -E PAINTED_SKIN -a`` paint each frame through the same passes and backend
session as Restyle (``frame_painter``), written by Blender's own output settings
(``engine``, ``render_result``); the 3D Viewport's Rendered mode paints on a worker thread
and draws the last finished frame (``viewport``); the engine's settings in Render
Properties (``settings``, ``panel``). May import bpy, ``core``, ``wire`` and the rooms
beside it."""


def register() -> None:
    """The engine, its settings (``Scene.painted_skin_engine``) and its panel."""
    from ..classes import register_classes
    from . import engine, panel, settings

    register_classes(settings.CLASSES + panel.CLASSES, **settings.SCENE_SETTINGS)
    engine.register()


def unregister() -> None:
    from ..classes import unregister_classes
    from . import engine, panel, settings

    engine.unregister()
    unregister_classes(settings.CLASSES + panel.CLASSES, *settings.SCENE_SETTINGS)
