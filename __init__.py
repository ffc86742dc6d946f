"""Painted Skin: the repository root is both the Blender extension and the
``painted_skin`` Python package. Blender calls ``register``/``unregister``;
plain Python (CLI, tests, backend) imports submodules without touching bpy."""


def register() -> None:
    from .addon import register as _register

    _register()


def unregister() -> None:
    from .addon import unregister as _unregister

    _unregister()
