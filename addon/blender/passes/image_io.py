"""Image files through the OpenImageIO that ships inside bpy.

Every array here has the image's **top row first** (row 0 = top of the picture), which is
OpenImageIO's order for every format; Blender's own ``Image.pixels`` are bottom-up, so
never mix the two without a flip. Writers are atomic: they write a temporary file in the
destination folder (same extension, so the format is right) and ``os.replace`` it into
place; on any error the temporary file is removed and the destination is left untouched.
A symlinked destination is written through to its target; a device, FIFO, socket or
folder there is refused (see ``core.atomic.output_target``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Collection
from pathlib import Path
from types import ModuleType

import numpy as np

from ...core.files.atomic import output_target, replace_atomic, temp_file_for

_OIIO: ModuleType | None = None


class MissingOpenImageIO(OSError):
    """This Blender has no OpenImageIO Python module (the message says how to get one)."""


def oiio() -> ModuleType:
    """The bundled ``OpenImageIO`` module (imported once; adds bpy's site-packages to the
    end of ``sys.path`` only if it is not there yet). blender.org builds and the bpy
    module bundle it; a Linux distribution's Blender may not: one clear error then."""
    global _OIIO
    if _OIIO is None:
        try:
            import OpenImageIO  # noqa: N813 - the module's real name
        except ImportError:
            import bpy

            version = f"python{sys.version_info.major}.{sys.version_info.minor}"
            site = os.path.join(bpy.utils.resource_path("LOCAL"), "python", "lib", version,
                                "site-packages")
            if site not in sys.path:
                sys.path.append(site)
            try:
                import OpenImageIO
            except ImportError:
                raise MissingOpenImageIO(
                    "this Blender has no OpenImageIO Python module, which the passes are "
                    "written with: use a blender.org build (it bundles one), or install "
                    "your distribution's (Debian/Ubuntu: python3-openimageio)") from None
        _OIIO = OpenImageIO
    return _OIIO


def _read_subimage(inp, subimage: int, chbegin: int, chend: int
                   ) -> tuple[tuple[str, ...], np.ndarray]:
    """(channel names, float32 (H, W, C) over the display window) of channels
    ``chbegin:chend`` of one subimage."""
    io = oiio()
    spec = inp.spec()
    nch = chend - chbegin
    px = inp.read_image(subimage, 0, chbegin, chend, io.FLOAT)
    if px is None:
        raise OSError(f"OpenImageIO could not read subimage {subimage}: {io.geterror()}")
    px = np.asarray(px, dtype=np.float32).reshape(spec.height, spec.width, nch)
    fw, fh = spec.full_width or spec.width, spec.full_height or spec.height
    if (spec.x, spec.y, spec.width, spec.height) != (spec.full_x, spec.full_y, fw, fh):
        full = np.zeros((fh, fw, nch), np.float32)  # data window != display
        y0, x0 = spec.y - spec.full_y, spec.x - spec.full_x
        ys = slice(max(y0, 0), min(y0 + spec.height, fh))
        xs = slice(max(x0, 0), min(x0 + spec.width, fw))
        full[ys, xs] = px[ys.start - y0:ys.stop - y0, xs.start - x0:xs.stop - x0]
        px = full
    return tuple(spec.channelnames)[chbegin:chend], px


def read_exr_layers(path: str | os.PathLike, channels: Collection[str] | None = None
                    ) -> dict[str, np.ndarray]:
    """Every channel (or only those named in ``channels``) of a multi-part / multi-layer
    EXR by full name, e.g. ``"ViewLayer.Depth.Z"`` -> float32 (H, W), top row first."""
    io = oiio()
    inp = io.ImageInput.open(os.fspath(path))
    if inp is None:
        raise OSError(f"cannot open {path}: {io.geterror()}")
    out: dict[str, np.ndarray] = {}
    try:
        sub = 0
        while inp.seek_subimage(sub, 0):
            names = tuple(inp.spec().channelnames)
            idx = [k for k, n in enumerate(names) if channels is None or n in channels]
            if idx:
                names, px = _read_subimage(inp, sub, idx[0], idx[-1] + 1)
                for k, name in enumerate(names):
                    if channels is None or name in channels:
                        out[name] = np.ascontiguousarray(px[..., k])
            sub += 1
    finally:
        inp.close()
    return out


def read_motion(path: str | os.PathLike) -> np.ndarray:
    """A motion pass EXR as float32 (H, W, 4): (u, v) to the previous frame, then to
    the next, whether its channels have today's names or the older R, G, B, A."""
    from .output import MOTION_CHANNELS, MOTION_CHANNELS_OLD

    layers = read_exr_layers(path)
    for names in (MOTION_CHANNELS, MOTION_CHANNELS_OLD):
        if all(n in layers for n in names):
            return np.stack([layers[n] for n in names], axis=-1)
    raise ValueError(f"{path} is not a motion pass (channels {', '.join(sorted(layers))}; "
                     f"expected {', '.join(MOTION_CHANNELS)}): re-render the motion pass")


def read_image(path: str | os.PathLike) -> np.ndarray:
    """First subimage of any image: (H, W) for one channel else (H, W, C), top row first,
    in the file's own type (uint8, uint16; float32 for half/float). Alpha comes back
    unassociated (as stored in PNG), never premultiplied."""
    io = oiio()
    config = io.ImageSpec()
    config.attribute("oiio:UnassociatedAlpha", 1)
    inp = io.ImageInput.open(os.fspath(path), config)
    if inp is None:
        raise OSError(f"cannot open {path}: {io.geterror()}")
    try:
        spec = inp.spec()
        base = spec.format.basetype
        fmt = {io.UINT8: io.UINT8, io.UINT16: io.UINT16}.get(base, io.FLOAT)
        px = inp.read_image(0, 0, 0, spec.nchannels, fmt)
        if px is None:
            raise OSError(f"cannot read {path}: {io.geterror()}")
    finally:
        inp.close()
    px = np.asarray(px).reshape(spec.height, spec.width, spec.nchannels)
    return px[..., 0] if spec.nchannels == 1 else px


def _default_names(n: int) -> tuple[str, ...]:
    return {1: ("Y",), 2: ("Y", "A"), 3: ("R", "G", "B"), 4: ("R", "G", "B", "A")}.get(
        n, tuple(f"C{i}" for i in range(n)))


def _write(path: str | os.PathLike, array: np.ndarray, typedesc, names, attrs: dict) -> Path:
    """Write ``array`` (H, W[, C]) atomically with OpenImageIO."""
    io = oiio()
    path = Path(path)
    if array.ndim not in (2, 3) or array.shape[0] < 1 or array.shape[1] < 1:
        raise ValueError(f"expected an (H, W) or (H, W, C) array, got shape {array.shape}")
    arr = np.ascontiguousarray(array if array.ndim == 3 else array[..., None])
    h, w, c = arr.shape
    names = tuple(names) if names is not None else _default_names(c)
    if len(names) != c:
        raise ValueError(f"{len(names)} channel names for {c} channels")
    spec = io.ImageSpec(w, h, c, typedesc)
    spec.channelnames = names
    if "A" in names:
        spec.alpha_channel = names.index("A")
    for key, value in attrs.items():
        spec.attribute(key, value)
    target = output_target(path, "image file")
    tmp = temp_file_for(target, path.suffix)  # the suffix picks OIIO's writer
    try:
        out = io.ImageOutput.create(tmp)
        if out is None:
            raise OSError(f"no image writer for {path.suffix!r}: {io.geterror()}")
        try:
            if not out.open(tmp, spec):
                raise OSError(f"cannot write {path}: {out.geterror()}")
            ok = out.write_image(arr)
            if not out.close() or not ok:
                raise OSError(f"cannot write {path}: {out.geterror()}")
        finally:
            del out
        replace_atomic(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path


def write_exr(path: str | os.PathLike, array: np.ndarray,
              channel_names: list[str] | tuple[str, ...] | None = None) -> Path:
    """Float32 EXR (ZIP-compressed), atomically. ``array`` is (H, W) or (H, W, C), top row
    first; default channel names Y / Y,A / R,G,B / R,G,B,A."""
    io = oiio()
    return _write(path, np.asarray(array, dtype=np.float32), io.FLOAT, channel_names,
                  {"compression": "zip"})


def write_png(path: str | os.PathLike, array: np.ndarray) -> Path:
    """8- or 16-bit PNG (by the array's dtype, uint8 or uint16), atomically. ``array`` is
    (H, W), (H, W, 2) grey+alpha, (H, W, 3) or (H, W, 4) with unassociated alpha."""
    io = oiio()
    array = np.asarray(array)
    if array.dtype == np.uint8:
        td = io.UINT8
    elif array.dtype == np.uint16:
        td = io.UINT16
    else:
        raise ValueError(f"write_png needs uint8 or uint16, got {array.dtype}")
    c = 1 if array.ndim == 2 else array.shape[-1]
    if c not in (1, 2, 3, 4):
        raise ValueError(f"a PNG holds 1-4 channels, got {c}")
    return _write(path, array, td, None, {"oiio:UnassociatedAlpha": 1, "png:compressionLevel": 3})
