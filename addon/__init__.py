"""The Blender side. Importing this package needs no bpy: ``core`` is pure
Python + numpy; ``blender`` holds the thin bpy layer, loaded on register()."""


def register() -> None:
    from .blender import registration

    registration.register()


def unregister() -> None:
    from .blender import registration

    registration.unregister()
